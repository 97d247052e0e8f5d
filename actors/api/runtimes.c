/*  actors/api/runtimes.c: the runtime catalog and its briefings, from
    the builder (docs/api.md "Runtimes").                                */
#include "actors/api/api_int.h"

static void s_list_reply (req_t *r, ah_msg_t *msg)
{
    json_t *list = api_json_raw (msg, "runtimes");
    if (!json_is_array (list)) {
        json_decref (list);
        api_respond_error (r, 502, "the builder answered without runtimes");
        return;
    }
    api_respond (r, 200, json_pack ("{s:o}", "runtimes", list));
}

static void s_list (req_t *r)
{
    ah_msg_t *msg = ah_msg_new ("CATALOG_LIST");
    api_ask (r, "builder", &msg, s_list_reply);
}

static void s_briefing_reply (req_t *r, ah_msg_t *msg)
{
    const char *runtime = ah_msg_str (msg, "runtime");
    const char *text = ah_msg_str (msg, "text");
    json_t *body = json_object ();
    json_object_set_new (body, "runtime", api_json_text (runtime ? runtime : r->params [0]));
    json_object_set_new (body, "text", text ? api_json_text (text) : json_null ());
    api_respond (r, 200, body);
}

static void s_briefing (req_t *r)
{
    const char *name = r->params [0];
    const char *why = ah_ident_check (AH_IDENT_RUNTIME, name);
    if (why) {
        api_respond_error (r, 400, "runtime name '%s' %s", name, why);
        return;
    }
    ah_msg_t *msg = ah_msg_new ("BRIEFING");
    ah_msg_set_str (msg, "runtime", name);
    api_ask (r, "builder", &msg, s_briefing_reply);
}

const route_t api_runtime_routes [] = {
    { M_GET, "/api/v1/runtimes", s_list, 0, "", NULL },
    { M_GET, "/api/v1/runtimes/{runtime}/briefing", s_briefing, 0, "", NULL },
    { 0 }
};
