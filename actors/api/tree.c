/*  actors/api/tree.c: GET /api/v1/agents/{agent}/tree for a running
    agent whose home the server does not reach itself (a claim on a
    Kubernetes cluster, a home on a remote host, a volume made before
    homes were bound under the data directory): sandboxd walks it (the
    fs.tree channel, docs/tunnel.md) and the answer has the shape of the
    server's own tree (common/homefs.c, ah_homefs_tree), so the console's
    file browser cannot tell them apart.

    sandboxd's reply is {"ok", "size"} and then size bytes of one msgpack
    map; they are gathered here (at most TREE_MAX: sandboxd bounds its
    own at 8 MiB of entries and 256 skipped directories) and decoded once
    the channel ends. Every field is checked: a sandbox is not trusted to
    say anything well formed; names that are not UTF-8 become '?' as the
    server's own tree does.                                             */
#include "actors/api/api_int.h"
#include "common/homefs.h"
#include "proto/buf.h"

#include <msgpack.h>
#include <string.h>

#define TREE_MAX    (16u << 20)     //  the reply body accepted at most

typedef struct {
    req_t *r;
    api_chan_t chan;
    char path [4096];
    int max_depth, max_entries;
    uint64_t size;                  //  announced
    ah_buf_t body;
    bool opened, failed;
    ah_msg_t *header;               //  waiting for the agent's reader (reader.c)
} tree_t;

static void s_free (req_t *r)
{
    tree_t *t = r->ext;
    if (!t)
        return;
    api_chan_close (&t->chan);
    ah_buf_free (&t->body);
    ah_msg_destroy (&t->header);
    free (t);
}

static const ext_ops_t s_ext_ops = { .free = s_free };

static void s_fail (tree_t *t, int status, const char *why)
{
    t->failed = true;
    api_chan_close (&t->chan);
    api_record (t->r, false, why);
    api_respond_error (t->r, status, "%s", why);
}

static void s_refused (void *owner, int status, const char *error, ah_msg_t *reply)
{
    tree_t *t = owner;
    t->failed = true;
    api_record (t->r, false, error);
    if (error && strstr (error, "unknown channel"))
        //  A sandboxd from before fs.tree: it answers the files routes only.
        api_respond_error (t->r, 502, "agent '%s' runs a sandboxd without the fs.tree channel "
                           "(%s): restart it so it mounts this server's sandboxd", t->r->name, error);
    else
        api_respond_error (t->r, status, "%s", error ? error : "sandboxd refused the tree");
}

static void s_opened (void *owner, ah_msg_t *reply)
{
    tree_t *t = owner;
    json_t *header = api_json_raw (reply, "reply");
    json_t *size = json_object_get (header, "size");
    json_int_t n = json_is_integer (size) ? json_integer_value (size) : -1;
    json_decref (header);
    api_chan_eof (&t->chan);        //  the opener sends nothing more
    if (n < 0 || (uint64_t) n > TREE_MAX) {
        s_fail (t, 502, "sandboxd's fs.tree reply carries no size, or one over 16 MiB");
        return;
    }
    t->size = (uint64_t) n;
    t->opened = true;
}

static void s_data (void *owner, const uint8_t *data, size_t size)
{
    tree_t *t = owner;
    if (t->failed)
        return;
    api_chan_ack (&t->chan, size);
    if (!t->opened || ah_buf_size (&t->body) + size > t->size) {
        s_fail (t, 502, "sandboxd sent more of the tree than it announced");
        return;
    }
    if (ah_buf_append (&t->body, data, size))
        s_fail (t, 503, "out of memory");
}

//  --------------------------------------------------------------------
//  The body, decoded

static const msgpack_object *s_get (const msgpack_object *map, const char *key)
{
    if (map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    size_t n = strlen (key);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr [i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n && memcmp (k->via.str.ptr, key, n) == 0)
            return &map->via.map.ptr [i].val;
    }
    return NULL;
}

static json_t *s_text (const msgpack_object *map, const char *key)
{
    const msgpack_object *o = s_get (map, key);
    if (!o || o->type != MSGPACK_OBJECT_STR || o->via.str.size == 0
    ||  memchr (o->via.str.ptr, 0, o->via.str.size))
        return NULL;
    return api_json_bytes (o->via.str.ptr, o->via.str.size);
}

static bool s_int (const msgpack_object *map, const char *key, int64_t *v)
{
    const msgpack_object *o = s_get (map, key);
    if (o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX)
        *v = (int64_t) o->via.u64;
    else
    if (o && o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        *v = o->via.i64;
    else
        return false;
    return true;
}

static bool s_bool (const msgpack_object *map, const char *key)
{
    const msgpack_object *o = s_get (map, key);
    return o && o->type == MSGPACK_OBJECT_BOOLEAN && o->via.boolean;
}

static bool s_type_ok (const char *type)
{
    return type && (streq (type, "file") || streq (type, "dir") || streq (type, "link")
                    || streq (type, "other"));
}

//  One entry as the server's tree has it, or NULL when malformed.
static json_t *s_entry (const msgpack_object *e, int max_depth)
{
    int64_t size, mode, mtime, depth;
    json_t *path = s_text (e, "path"), *name = s_text (e, "name"), *type = s_text (e, "type");
    bool ok = path && name && type && s_type_ok (json_string_value (type))
           && s_int (e, "size", &size) && s_int (e, "mode", &mode) && s_int (e, "mtime", &mtime)
           && s_int (e, "depth", &depth) && depth >= 1 && depth <= max_depth
           && mode >= 0 && mode <= 07777 && !strchr (json_string_value (name), '/');
    if (!ok) {
        json_decref (path);
        json_decref (name);
        json_decref (type);
        return NULL;
    }
    json_t *j = json_object ();
    json_object_set_new (j, "name", name);
    json_object_set_new (j, "type", type);
    json_object_set_new (j, "size", json_integer (size));
    json_object_set_new (j, "mode", json_integer (mode));
    json_object_set_new (j, "mtime", json_integer (mtime));
    if (ah_homefs_uploaded (json_string_value (path)))
        json_object_set_new (j, "uploaded", json_true ());
    json_object_set_new (j, "path", path);
    json_object_set_new (j, "depth", json_integer (depth));
    return j;
}

//  The tree's JSON from sandboxd's map, or NULL with *why.
static json_t *s_tree_json (tree_t *t, const msgpack_object *root, const char **why)
{
    const msgpack_object *entries = s_get (root, "entries");
    const msgpack_object *skipped = s_get (root, "skipped");
    if (!entries || entries->type != MSGPACK_OBJECT_ARRAY
    ||  (skipped && skipped->type != MSGPACK_OBJECT_ARRAY)) {
        *why = "sandboxd's tree has no entries array";
        return NULL;
    }
    if (entries->via.array.size > (uint32_t) t->max_entries) {
        *why = "sandboxd's tree holds more entries than asked for";
        return NULL;
    }
    json_t *list = json_array ();
    for (uint32_t i = 0; i < entries->via.array.size; i++) {
        json_t *e = s_entry (&entries->via.array.ptr [i], t->max_depth);
        if (!e) {
            json_decref (list);
            *why = "sandboxd's tree holds a malformed entry";
            return NULL;
        }
        json_array_append_new (list, e);
    }
    json_t *skips = json_array ();
    for (uint32_t i = 0; skipped && i < skipped->via.array.size; i++) {
        json_t *path = s_text (&skipped->via.array.ptr [i], "path");
        json_t *error = s_text (&skipped->via.array.ptr [i], "error");
        if (path && error)
            json_array_append_new (skips, json_pack ("{s:o s:o}", "path", path, "error", error));
        else {
            json_decref (path);
            json_decref (error);
        }
    }
    bool incomplete = s_bool (root, "incomplete") || json_array_size (skips) > 0;
    return json_pack ("{s:o s:o s:I s:i s:i s:b s:b s:b s:o}", "path", api_json_text (t->path),
                      "entries", list, "count", (json_int_t) json_array_size (list),
                      "max_depth", t->max_depth, "max_entries", t->max_entries,
                      "depth_limit_reached", s_bool (root, "depth_limit_reached"),
                      "entries_limit_reached", s_bool (root, "entries_limit_reached"),
                      "incomplete", incomplete, "skipped", skips);
}

static void s_closed (void *owner, const char *error)
{
    tree_t *t = owner;
    req_t *r = t->r;
    if (t->failed || r->responded)
        return;
    if (!t->opened || ah_buf_size (&t->body) != t->size) {
        char why [300];
        snprintf (why, sizeof why, "the tree's stream from the sandbox ended early: %.200s",
                  error ? error : "closed");
        s_fail (t, 502, why);
        return;
    }
    msgpack_unpacked u;
    msgpack_unpacked_init (&u);
    size_t off = 0;
    const char *why = "sandboxd's tree is not one msgpack map";
    json_t *tree = NULL;
    if (msgpack_unpack_next (&u, (const char *) ah_buf_head (&t->body), ah_buf_size (&t->body), &off)
            == MSGPACK_UNPACK_SUCCESS
    &&  off == ah_buf_size (&t->body) && u.data.type == MSGPACK_OBJECT_MAP)
        tree = s_tree_json (t, &u.data, &why);
    msgpack_unpacked_destroy (&u);
    if (!tree) {
        s_fail (t, 502, why);
        return;
    }
    api_record (r, true, NULL);
    api_respond (r, 200, tree);
}

static const chan_ops_t s_ops = {
    .opened = s_opened, .refused = s_refused, .data = s_data, .closed = s_closed
};

//  The sleeping agent's reader is connected: it walks the home.
static void s_reader_ready (req_t *r, ah_msg_t *reply)
{
    tree_t *t = r->ext;
    if (api_chan_open_reader (r->api, &t->chan, r->agent_id, &t->header, &s_ops, t))
        api_respond_error (r, 500, "cannot open a channel to the agent's reader");
}

void api_tree_sandbox (req_t *r, const char *path, bool all, bool reader)
{
    const ah_config_t *c = r->api->config;
    tree_t *t = calloc (1, sizeof *t);
    ah_msg_t *h = ah_msg_new ("HDR");
    if (!t || !h) {
        free (t);
        ah_msg_destroy (&h);
        api_respond_error (r, 503, "out of memory");
        return;
    }
    //  No api_activity: a tree read keeps no agent awake (docs/api.md),
    //  whichever side walks it.
    t->r = r;
    snprintf (t->path, sizeof t->path, "%s", path);
    t->max_depth = (int) c->tree_max_depth;
    t->max_entries = (int) c->tree_max_entries;
    r->ext = t;
    r->ext_ops = &s_ext_ops;
    r->kind = "fs.tree";
    snprintf (r->detail, sizeof r->detail, "%.1000s", path);
    ah_msg_set_str (h, "ch", "fs.tree");
    ah_msg_set_str (h, "path", path);
    ah_msg_set_int (h, "max_depth", t->max_depth);
    ah_msg_set_int (h, "max_entries", t->max_entries);
    ah_msg_set_bool (h, "all", all);
    if (reader) {
        t->header = h;
        api_reader_ask (r, s_reader_ready);
        return;
    }
    if (api_chan_open (r->api, &t->chan, r->agent_id, &h, &s_ops, t))
        api_respond_error (r, 500, "cannot open a channel to the sandbox");
}
