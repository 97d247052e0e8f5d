/*  actors/api/pool.c: the warm pools (docs/api.md "Warm pools", issue
    31), as lifecycle has them (POOL_LIST): each runtime's size (from
    lua/pool.lua within sandbox.warm_pool_max), its ready and making
    counts and the oldest ready one's age, and the hits and misses since
    the server started. For admins: warm sandboxes are no tenant's.   */
#include "actors/api/api_int.h"

static void s_pools (req_t *r, ah_msg_t *reply)
{
    json_t *pools = api_json_raw (reply, "pools");
    if (!json_is_array (pools)) {
        json_decref (pools);
        api_respond_error (r, 500, "lifecycle did not say what its pools hold");
        return;
    }
    api_respond (r, 200, json_pack ("{s:o, s:I, s:I, s:I, s:I}", "pools", pools,
                                    "max", (json_int_t) ah_msg_int (reply, "max", 0),
                                    "hits", (json_int_t) ah_msg_int (reply, "hits", 0),
                                    "misses", (json_int_t) ah_msg_int (reply, "misses", 0),
                                    "drained", (json_int_t) ah_msg_int (reply, "drained", 0)));
}

static void s_list (req_t *r)
{
    ah_msg_t *msg = ah_msg_new ("POOL_LIST");
    api_ask (r, "lifecycle", &msg, s_pools);
}

const route_t api_pool_routes [] = {
    { M_GET, "/api/v1/pool", s_list, R_ADMIN, "", NULL },
    { 0 }
};
