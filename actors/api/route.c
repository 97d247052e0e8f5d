/*  actors/api/route.c: the route table and the request target (see
    api_int.h and docs/api.md "Paths").

    The target is split as sent: the path at '/', then each segment is
    percent-decoded exactly once. A segment that is empty (a trailing
    slash too, but after a path inside the home), "." or "..", or that
    decodes to something holding
    '/', a NUL or a control character, is a 400: it never becomes another
    route. The query is split at '&' and each key and value decoded once
    ('+' stays a '+'); a key the route does not take, or one given twice,
    is a 400 naming it.

    A JSON body is checked here too, against the fields its route states
    (route_t.body), before the route's handler runs: unknown, empty and
    wrongly typed keys, and numbers off their bound (common/bounds.h), are
    a 400 naming the key (a key given twice: api_body_object).         */
#include "actors/api/api_int.h"
#include "common/bounds.h"
#include "web/assets.h"

#include <errno.h>
#include <string.h>

#define MAX_SEGMENTS 64

static void s_healthz (req_t *r)
{
    api_respond (r, 200, json_pack ("{s:b}", "ok", 1));
}

//  GET /api/v1/openapi.json: docs/openapi.json as built in (web/assets.h),
//  every route of these tables described; no secret in it (a test says so).
static void s_openapi (req_t *r)
{
    const ah_web_asset_t *doc = ah_web_doc ("openapi.json");
    if (!doc) {
        api_respond_error (r, 404, "this server was built without its OpenAPI document");
        return;
    }
    api_respond_bytes (r, 200, doc->type, doc->data, doc->size);
}

static const route_t s_public_routes [] = {
    { M_GET, "/healthz", s_healthz, R_PUBLIC, "", NULL },
    { M_GET, "/api/v1/openapi.json", s_openapi, R_PUBLIC, "", NULL },
    { 0 }
};

static const route_t *const s_tables [] = {
    s_public_routes, api_agent_routes, api_runtime_routes, api_turn_routes, api_audit_routes,
    api_exec_routes, api_file_routes, api_event_routes, api_terminal_routes, api_tenant_routes,
    api_session_routes, api_console_routes, api_login_routes, api_host_routes, api_tree_routes, api_allfiles_routes,
    api_port_routes, api_tombstone_routes, api_metrics_routes, api_conversation_routes, api_proxy_routes,
    api_terms_routes, api_pool_routes, api_mcp_routes, api_secret_routes, NULL
};

typedef struct {
    char *seg [MAX_SEGMENTS];       //  decoded
    size_t n;
    bool trailing;                  //  the path ended in '/'
} segments_t;

static void s_segments_free (segments_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        free (s->seg [i]);
    s->n = 0;
}

//  A printable copy of at most 64 bytes of s for a message.
const char *api_show (const char *s, size_t n, char *out, size_t size)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 4 < size && i < 64; i++)
        out [k++] = (unsigned char) s [i] < 0x20 || s [i] == 0x7f ? '?' : s [i];
    if (n > 64 && k + 4 < size) {
        memcpy (out + k, "...", 3);
        k += 3;
    }
    out [k] = 0;
    return out;
}

static int s_split (const char *path, size_t plen, segments_t *s, char *why, size_t why_size)
{
    memset (s, 0, sizeof *s);
    if (plen == 0 || path [0] != '/') {
        snprintf (why, why_size, "the request path must start with '/'");
        return 400;
    }
    if (plen > 1 && path [plen - 1] == '/') {
        s->trailing = true;
        plen--;
        if (plen == 1) {
            snprintf (why, why_size, "an empty segment ('//') in the request path");
            return 400;
        }
    }
    size_t i = 1;
    while (i <= plen && plen > 1) {
        size_t j = i;
        while (j < plen && path [j] != '/')
            j++;
        char shown [80];
        if (j == i) {
            snprintf (why, why_size, "an empty segment ('//') in the request path");
            return 400;
        }
        if (s->n == MAX_SEGMENTS) {
            snprintf (why, why_size, "more than %d segments in the request path", MAX_SEGMENTS);
            return 400;
        }
        char *seg = malloc (j - i + 1);
        const char *bad = NULL;
        if (!seg || ah_http_decode (path + i, j - i, seg, j - i + 1, &bad) < 0) {
            free (seg);
            snprintf (why, why_size, "request path segment '%s': %s",
                      api_show (path + i, j - i, shown, sizeof shown), bad ? bad : "out of memory");
            return 400;
        }
        s->seg [s->n++] = seg;
        if (streq (seg, ".") || streq (seg, "..")) {
            snprintf (why, why_size, "a '%s' segment in the request path (paths are taken as sent, "
                      "never resolved)", seg);
            return 400;
        }
        if (strchr (seg, '/')) {
            snprintf (why, why_size, "request path segment '%s' holds an encoded '/'",
                      api_show (path + i, j - i, shown, sizeof shown));
            return 400;
        }
        i = j + 1;
    }
    return 0;
}

//  Does the pattern match the segments? Captures into params when set.
static bool s_match (const char *pattern, const segments_t *s, char **params)
{
    size_t k = 0, p = 0;
    const char *c = pattern + 1;
    if (streq (pattern, "/"))
        return s->n == 0;
    while (*c) {
        const char *end = strchr (c, '/');
        size_t len = end ? (size_t) (end - c) : strlen (c);
        bool rest = len > 2 && c [0] == '{' && c [len - 2] == '*' && c [len - 1] == '}';
        bool capture = len > 1 && c [0] == '{' && c [len - 1] == '}';
        if (rest) {
            if (k >= s->n)
                return false;
            if (params) {
                size_t total = 1 + (s->trailing ? 1 : 0);
                for (size_t i = k; i < s->n; i++)
                    total += strlen (s->seg [i]) + 1;
                char *joined = malloc (total);
                if (!joined)
                    return false;
                joined [0] = 0;
                for (size_t i = k; i < s->n; i++) {
                    strcat (joined, s->seg [i]);
                    if (i + 1 < s->n)
                        strcat (joined, "/");
                }
                if (s->trailing)
                    strcat (joined, "/");
                params [p++] = joined;
            }
            return true;
        }
        if (k >= s->n)
            return false;
        if (capture) {
            if (params)
                params [p++] = strdup (s->seg [k]);
        }
        else if (strlen (s->seg [k]) != len || strncmp (s->seg [k], c, len))
            return false;
        k++;
        c += len;
        if (*c == '/')
            c++;
    }
    return k == s->n;
}

static bool s_takes (const route_t *route, const char *key)
{
    //  Every route but the public ones takes ?tenant= (an admin acting
    //  within one tenant; auth.c judges it).
    if (streq (key, "tenant") && !(route->flags & R_PUBLIC))
        return true;
    const char *p = route->query ? route->query : "";
    size_t n = strlen (key);
    while (*p) {
        while (*p == ' ')
            p++;
        const char *e = p;
        while (*e && *e != ' ')
            e++;
        if ((size_t) (e - p) == n && strncmp (p, key, n) == 0)
            return true;
        p = e;
    }
    return false;
}

static int s_query (req_t *r, const char *query, char *why, size_t why_size)
{
    const char *p = query;
    while (p && *p) {
        const char *amp = strchr (p, '&');
        size_t len = amp ? (size_t) (amp - p) : strlen (p);
        if (len > 0) {
            const char *eq = memchr (p, '=', len);
            size_t klen = eq ? (size_t) (eq - p) : len;
            size_t vlen = eq ? len - klen - 1 : 0;
            char *key = malloc (klen + 1), *value = malloc (vlen + 1);
            const char *bad = NULL;
            char shown [80];
            if (!key || !value || ah_http_decode (p, klen, key, klen + 1, &bad) < 0
            ||  (eq && ah_http_decode (eq + 1, vlen, value, vlen + 1, &bad) < 0)) {
                snprintf (why, why_size, "query argument '%s': %s", api_show (p, klen, shown, sizeof shown),
                          bad ? bad : "out of memory");
                free (key);
                free (value);
                return 400;
            }
            if (!eq)
                value [0] = 0;
            if (!s_takes (r->route, key)) {
                snprintf (why, why_size, "unknown query argument '%s'", api_show (key, strlen (key), shown, sizeof shown));
                free (key);
                free (value);
                return 400;
            }
            if (api_query (r, key)) {
                snprintf (why, why_size, "query argument '%s' given twice", key);
                free (key);
                free (value);
                return 400;
            }
            if (r->nquery == API_MAX_QUERY) {
                snprintf (why, why_size, "more than %d query arguments", API_MAX_QUERY);
                free (key);
                free (value);
                return 400;
            }
            r->qkey [r->nquery] = key;
            r->qval [r->nquery++] = value;
        }
        p = amp ? amp + 1 : NULL;
    }
    return 0;
}

int api_route (req_t *r, char *why, size_t why_size, unsigned *allowed)
{
    const char *target = r->head.target;
    const char *q = strchr (target, '?');
    size_t plen = q ? (size_t) (q - target) : strlen (target);
    *allowed = 0;
    segments_t s;
    int status = s_split (target, plen, &s, why, why_size);
    if (status) {
        s_segments_free (&s);
        return status;
    }
    const route_t *found = NULL;
    for (size_t t = 0; s_tables [t] && !found; t++)
        for (const route_t *route = s_tables [t]; route->pattern && !found; route++)
            if (s_match (route->pattern, &s, NULL)) {
                *allowed |= route->methods;
                if (route->methods & r->method)
                    found = route;
            }
    bool rest = found && (strstr (found->pattern, "*}") != NULL || (found->flags & R_RAW));
    if (s.trailing && !rest) {
        //  Only a path inside the home may end in '/' (a directory).
        s_segments_free (&s);
        snprintf (why, why_size, "an empty segment (a trailing '/') in the request path");
        return 400;
    }
    if (!found) {
        s_segments_free (&s);
        char shown [80];
        snprintf (why, why_size, *allowed ? "%s takes another method" : "no route %s",
                  api_show (target, plen, shown, sizeof shown));
        return *allowed ? 405 : 404;
    }
    //  Other routes on the same path may take other methods (for Allow).
    for (size_t t = 0; s_tables [t]; t++)
        for (const route_t *route = s_tables [t]; route->pattern; route++)
            if (s_match (route->pattern, &s, NULL))
                *allowed |= route->methods;
    r->route = found;
    s_match (found->pattern, &s, r->params);
    s_segments_free (&s);
    return q && !(found->flags & R_RAW) ? s_query (r, q + 1, why, why_size) : 0;
}

//  --------------------------------------------------------------------
//  Bodies

const body_field_t api_no_body [] = { { NULL, 0, NULL } };

static const char *s_type_name (json_t *v)
{
    switch (json_typeof (v)) {
        case JSON_OBJECT:  return "an object";
        case JSON_ARRAY:   return "an array";
        case JSON_STRING:  return "a string";
        case JSON_INTEGER:
        case JSON_REAL:    return "a number";
        case JSON_TRUE:
        case JSON_FALSE:   return "a boolean";
        default:           return "null";
    }
}

//  "a string or null" for a person.
static void s_types_text (unsigned types, char *out, size_t size)
{
    static const struct { unsigned bit; const char *text; } names [] = {
        { B_STR, "a string" }, { B_NUM, "a number" }, { B_BOOL, "true or false" },
        { B_OBJ, "an object" }, { B_NULL, "null" }, { B_ARR, "an array" },
    };
    size_t k = 0;
    out [0] = 0;
    for (size_t i = 0; i < sizeof names / sizeof names [0]; i++)
        if (types & names [i].bit)
            k += snprintf (out + k, k < size ? size - k : 0, "%s%s", k ? " or " : "", names [i].text);
}

static void s_fields_text (const body_field_t *fields, char *out, size_t size)
{
    size_t k = 0;
    out [0] = 0;
    for (const body_field_t *f = fields; f->name; f++)
        if (f->types && k < size)
            k += snprintf (out + k, size - k, "%s%s", k ? ", " : "", f->name);
    if (!k)
        snprintf (out, size, "no field");
}

int api_body_check (req_t *r, json_t *obj)
{
    const body_field_t *fields = r->route->body ? r->route->body : api_no_body;
    const char *key;
    json_t *v;
    char shown [80], rule [300];
    json_object_foreach (obj, key, v) {
        const body_field_t *f = NULL;
        for (const body_field_t *g = fields; g->name && !f; g++)
            if (streq (g->name, key))
                f = g;
        if (!*key) {
            api_respond_error (r, 400, "an empty field name ('') in the body");
            return -1;
        }
        if (!f) {
            s_fields_text (fields, rule, sizeof rule);
            api_respond_error (r, 400, "unknown field '%s' (this route takes %s)",
                               api_show (key, strlen (key), shown, sizeof shown), rule);
            return -1;
        }
        if (!f->types) {
            api_respond_error (r, 400, "field '%s': %s", f->name, f->why);
            return -1;
        }
        unsigned type = json_is_string (v) ? B_STR : json_is_number (v) ? B_NUM : json_is_boolean (v) ? B_BOOL
                      : json_is_object (v) ? B_OBJ : json_is_null (v) ? B_NULL : json_is_array (v) ? B_ARR : 0;
        if (!(f->types & type)) {
            s_types_text (f->types, rule, sizeof rule);
            api_respond_error (r, 400, "field '%s' must be %s, not %s", f->name, rule, s_type_name (v));
            return -1;
        }
        if (type == B_STR && !(f->types & B_NUL) && strlen (json_string_value (v)) != json_string_length (v)) {
            api_respond_error (r, 400, "field '%s' holds a NUL character", f->name);
            return -1;
        }
        const ah_bound_t *b = type == B_NUM ? ah_bound (f->name) : NULL;
        if (type == B_NUM && !b) {
            api_respond_error (r, 500, "field '%s' has no stated bound (common/bounds.c)", f->name);
            return -1;
        }
        if (b && b->whole && !json_is_integer (v)) {
            //  5.0 or 5e3 where a whole number is meant: a real is not one.
            char got [40];
            api_respond_error (r, 400, "field '%s' must be %s (got %s, not written as a whole number)",
                               f->name, ah_bound_rule (b, rule, sizeof rule),
                               ah_bound_number (json_number_value (v), got, sizeof got));
            return -1;
        }
        if (b && ah_bound_check (b, json_number_value (v), rule, sizeof rule)) {
            api_respond_error (r, 400, "%s", rule);
            return -1;
        }
    }
    return 0;
}

char *ah_api_routes (void)
{
    static const struct { unsigned bit; const char *name; } methods [] = {
        { M_GET, "GET" }, { M_HEAD, "HEAD" }, { M_POST, "POST" }, { M_PUT, "PUT" }, { M_PATCH, "PATCH" },
        { M_DELETE, "DELETE" }, { M_OPTIONS, "OPTIONS" },
    };
    static const struct { unsigned bit; const char *name; } types [] = {
        { B_STR, "string" }, { B_NUM, "number" }, { B_BOOL, "boolean" }, { B_OBJ, "object" }, { B_NULL, "null" },
        { B_ARR, "array" },
    };
    json_t *list = json_array ();
    for (size_t t = 0; s_tables [t]; t++)
        for (const route_t *route = s_tables [t]; route->pattern; route++) {
            json_t *fields = route->body ? json_array () : json_null ();
            for (const body_field_t *f = route->body; f && f->name; f++) {
                json_t *tl = json_array ();
                for (size_t i = 0; i < sizeof types / sizeof types [0]; i++)
                    if (f->types & types [i].bit)
                        json_array_append_new (tl, json_string (types [i].name));
                json_array_append_new (fields, json_pack ("{s:s s:o s:s?}", "name", f->name, "types", tl,
                                                          "why", f->why));
            }
            //  The query keys it takes (?tenant= aside: every route but the
            //  public ones takes it, s_takes).
            json_t *query = json_array ();
            for (const char *p = route->query ? route->query : ""; *p; ) {
                size_t n = strcspn (p, " ");
                if (n)
                    json_array_append_new (query, json_stringn (p, n));
                p += n + (p [n] == ' ');
            }
            for (size_t i = 0; i < sizeof methods / sizeof methods [0]; i++)
                if (route->methods & methods [i].bit)
                    json_array_append_new (list, json_pack ("{s:s s:s s:b s:b s:b s:O s:O s:b s:b s:b s:b s:b}",
                        "method", methods [i].name, "pattern", route->pattern, "admin", (route->flags & R_ADMIN) != 0,
                        "public", (route->flags & R_PUBLIC) != 0, "body", (route->flags & R_BODY) != 0,
                        "fields", fields, "query", query, "raw", (route->flags & R_RAW) != 0,
                        "stream", (route->flags & R_STREAM) != 0, "upgrade", (route->flags & R_UPGRADE) != 0,
                        "metrics", (route->flags & R_METRICS) != 0, "rpc", (route->flags & R_RPC) != 0));
            json_decref (fields);
            json_decref (query);
        }
    char *text = json_dumps (list, JSON_COMPACT);
    json_decref (list);
    return text;
}

//  --------------------------------------------------------------------
//  Queries

const char *api_query (req_t *r, const char *key)
{
    for (size_t i = 0; i < r->nquery; i++)
        if (streq (r->qkey [i], key))
            return r->qval [i];
    return NULL;
}

int api_query_bool (req_t *r, const char *key, bool *out)
{
    const char *v = api_query (r, key);
    if (!v)
        return 0;
    if (streq (v, "1") || streq (v, "true") || streq (v, ""))
        *out = true;
    else if (streq (v, "0") || streq (v, "false"))
        *out = false;
    else {
        api_respond_error (r, 400, "query '%s' must be 0 or 1, got '%.40s'", key, v);
        return -1;
    }
    return 0;
}

int api_query_int (req_t *r, const char *key, int64_t min, int64_t max, int64_t *out)
{
    const char *v = api_query (r, key);
    if (!v)
        return 0;
    char *end = NULL;
    errno = 0;
    long long n = strtoll (v, &end, 10);
    if (errno || end == v || *end || n < min || n > max) {
        api_respond_error (r, 400, "query '%s' must be a whole number from %lld to %lld, got '%.40s'",
                           key, (long long) min, (long long) max, v);
        return -1;
    }
    *out = n;
    return 0;
}

int api_home_path (req_t *r, const char *path, bool dir, bool home, char clean [AH_HOMEPATH_MAX + 1])
{
    size_t n = strlen (path);
    if (dir)
        n = ah_homepath_trim (path, n);
    const char *why;
    if (ah_homepath_check (path, n, home ? AH_HOMEPATH_HOME : 0, &why)) {
        char shown [80];
        api_respond_error (r, 400, "path '%s' %s", api_show (path, strlen (path), shown, sizeof shown), why);
        return -1;
    }
    memcpy (clean, path, n);
    clean [n] = 0;
    return 0;
}
