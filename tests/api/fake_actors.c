/*  tests/api/fake_actors.c: the actors the API talks to, faked for
    tests/api/test_api.c (see fake_actors.h).                           */
#include "tests/api/fake_actors.h"
#include "common/bus.h"
#include "common/msg.h"
#include "store/store.h"
#include "common/token.h"

#include <msgpack.h>
#include <stdarg.h>
#include <string.h>

//  --------------------------------------------------------------------
//  Fake lifecycle: its own thread, its own connection.

typedef struct {
    int64_t due;
    char agent_id [32];
    char state [16];                //  "" = delete the agent
} later_t;

typedef struct {
    ah_store_t *store;
    zsock_t *bus;
    zlistx_t *later;
    int policy_reloads;
    char *last_create;              //  JSON of the last AGENT_CREATE
    //  The other actors the API asks: recorder, builder, sleeper.
    zsock_t *recorder, *builder, *sleeper, *tunnel;
    int64_t acked;                  //  CHAN_ACK bytes from the api
    int eofs, closes;               //  CHAN_EOF, CHAN_CLOSE from the api
    char stdin_seen [64];           //  CHAN_DATA from the api, as hex
    int records;
    char *last_record;              //  JSON of the last OP_RECORD
    char *last_other;               //  JSON of the last OP_LIST / TURN_* / BRIEFING
    char egress_changed [256];      //  "tenant;" per EGRESS_CHANGED to the tunnel, in order
} fake_t;

//  One msgpack array of maps, {k: v} given as "k", type, value triples:
//  's' string, 'i' integer, 'b' bool, 'n' nil. For the fake answers.
static void s_set_raw_list (ah_msg_t *m, const char *key, int n_maps, int n_fields, ...)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init (&sb);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array (&pk, n_maps);
    va_list ap;
    va_start (ap, n_fields);
    for (int i = 0; i < n_maps; i++) {
        msgpack_pack_map (&pk, n_fields);
        for (int f = 0; f < n_fields; f++) {
            const char *k = va_arg (ap, const char *);
            int type = va_arg (ap, int);
            msgpack_pack_str_with_body (&pk, k, strlen (k));
            if (type == 's') {
                const char *v = va_arg (ap, const char *);
                msgpack_pack_str_with_body (&pk, v, strlen (v));
            }
            else if (type == 'i')
                msgpack_pack_int64 (&pk, va_arg (ap, int64_t));
            else if (type == 'b') {
                if (va_arg (ap, int)) msgpack_pack_true (&pk); else msgpack_pack_false (&pk);
            }
            else
                msgpack_pack_nil (&pk);
        }
    }
    va_end (ap);
    ah_msg_set_raw (m, key, sb.data, sb.size);
    msgpack_sbuffer_destroy (&sb);
}

//  The record stream of an exec (docs/tunnel.md): u8 kind, u32 length, bytes.
static size_t s_record_put (uint8_t *out, uint8_t kind, const void *data, size_t size)
{
    out [0] = kind;
    out [1] = (uint8_t) (size >> 24);
    out [2] = (uint8_t) (size >> 16);
    out [3] = (uint8_t) (size >> 8);
    out [4] = (uint8_t) size;
    memcpy (out + 5, data, size);
    return size + 5;
}

static void s_chan_msg (zsock_t *sock, const char *type, int64_t chan, const void *data, size_t size)
{
    ah_msg_t *m = ah_msg_new (type);
    ah_msg_set_int (m, "chan", chan);
    if (data)
        ah_msg_set_bin (m, "data", data, size);
    ah_msg_send (&m, sock, "api");
}

//  fs.tree's body as a hostile or an honest sandboxd might send it: by
//  the request's path, "t-ok" (two entries, one name not UTF-8),
//  "t-bad" (an entry at depth 0), "t-more" (more bytes than announced),
//  "t-short" (the stream ends early), "t-big" (a size over the cap);
//  "t-old" is refused as a sandboxd without the channel refuses it.
static void s_tree_body (const char *path, msgpack_sbuffer *b)
{
    msgpack_packer pk;
    msgpack_packer_init (&pk, b, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, 6);
    msgpack_pack_str_with_body (&pk, "entries", 7);
    msgpack_pack_array (&pk, 2);
    const char *names [] = { "uploads", "n\xff" };
    const char *paths [] = { "uploads", "uploads/n\xff" };
    for (int i = 0; i < 2; i++) {
        msgpack_pack_map (&pk, 7);
        msgpack_pack_str_with_body (&pk, "path", 4);
        msgpack_pack_str_with_body (&pk, paths [i], strlen (paths [i]));
        msgpack_pack_str_with_body (&pk, "name", 4);
        msgpack_pack_str_with_body (&pk, names [i], strlen (names [i]));
        msgpack_pack_str_with_body (&pk, "type", 4);
        msgpack_pack_str_with_body (&pk, i ? "file" : "dir", i ? 4 : 3);
        msgpack_pack_str_with_body (&pk, "size", 4);
        msgpack_pack_int64 (&pk, 5);
        msgpack_pack_str_with_body (&pk, "mode", 4);
        msgpack_pack_int64 (&pk, 0644);
        msgpack_pack_str_with_body (&pk, "mtime", 5);
        msgpack_pack_int64 (&pk, 1764406800);
        msgpack_pack_str_with_body (&pk, "depth", 5);
        msgpack_pack_int64 (&pk, streq (path, "t-bad") ? 0 : i + 1);
    }
    msgpack_pack_str_with_body (&pk, "count", 5);
    msgpack_pack_int64 (&pk, 2);
    msgpack_pack_str_with_body (&pk, "depth_limit_reached", 19);
    msgpack_pack_true (&pk);
    msgpack_pack_str_with_body (&pk, "entries_limit_reached", 21);
    msgpack_pack_false (&pk);
    msgpack_pack_str_with_body (&pk, "incomplete", 10);
    msgpack_pack_false (&pk);
    msgpack_pack_str_with_body (&pk, "skipped", 7);
    msgpack_pack_array (&pk, 0);
}

//  The tunnel as the API sees it: CHAN_OPEN for exec and fs.*, then the
//  stream, in awkward pieces.
static void s_fake_tunnel (fake_t *f, zsock_t *sock, ah_msg_t *m)
{
    const char *type = ah_msg_type (m);
    if (streq (type, "EGRESS_CHANGED")) {
        const char *t = ah_msg_str (m, "tenant");
        size_t n = strlen (f->egress_changed);
        snprintf (f->egress_changed + n, sizeof f->egress_changed - n, "%s;", t ? t : "?");
        return;
    }
    if (streq (type, "CHAN_ACK")) {
        f->acked += ah_msg_int (m, "bytes", 0);
        return;
    }
    if (streq (type, "CHAN_DATA")) {
        size_t n = 0;
        const uint8_t *d = ah_msg_bin (m, "data", &n);
        for (size_t i = 0; d && i < n && strlen (f->stdin_seen) + 3 < sizeof f->stdin_seen; i++)
            sprintf (f->stdin_seen + strlen (f->stdin_seen), "%02x", d [i]);
        return;
    }
    if (streq (type, "CHAN_EOF") || streq (type, "CHAN_CLOSE")) {
        if (streq (type, "CHAN_EOF"))
            f->eofs++;
        else
            f->closes++;
        return;
    }
    if (!streq (type, "CHAN_OPEN"))
        return;
    size_t hsize = 0;
    const void *raw = ah_msg_raw (m, "header", &hsize);
    ah_msg_t *h = raw ? ah_msg_decode ("HEADER", raw, hsize, NULL) : NULL;
    free (f->last_other);
    f->last_other = h ? ah_msg_to_json (h, "sandboxd") : strdup ("");
    const char *ch = h ? ah_msg_str (h, "ch") : "";
    const char *path = h && ah_msg_str (h, "path") ? ah_msg_str (h, "path") : "";
    ah_msg_t *reply;
    if (streq (path, "t-old")) {
        //  A sandboxd from before fs.tree.
        reply = ah_msg_reply_error (m, 502, "unknown channel \"%s\"", ch);
        ah_msg_send (&reply, sock, "api");
        ah_msg_destroy (&h);
        return;
    }
    if (streq (path, "nope")) {
        reply = ah_msg_reply_error (m, 404, "%s \"nope\": No such file or directory", ch);
        ah_msg_send (&reply, sock, "api");
        ah_msg_destroy (&h);
        return;
    }
    int64_t chan = streq (ch, "exec") ? 7 : 8;
    reply = ah_msg_reply_ok (m);
    ah_msg_set_int (reply, "chan", chan);
    ah_msg_t *rh = ah_msg_new ("R");
    ah_msg_set_bool (rh, "ok", true);
    int64_t size = streq (path, "short") ? 1000 : 100000;
    if (streq (ch, "fs.read"))
        ah_msg_set_int (rh, "size", size);
    msgpack_sbuffer tree;
    msgpack_sbuffer_init (&tree);
    if (streq (ch, "fs.tree")) {
        s_tree_body (path, &tree);
        ah_msg_set_int (rh, "size", streq (path, "t-big") ? (int64_t) 17 << 20
                                  : streq (path, "t-more") ? (int64_t) tree.size - 5 : (int64_t) tree.size);
    }
    uint8_t *enc;
    size_t enc_size;
    ah_msg_encode (rh, &enc, &enc_size);
    ah_msg_set_raw (reply, "reply", enc, enc_size);
    free (enc);
    ah_msg_destroy (&rh);
    ah_msg_send (&reply, sock, "api");
    if (streq (ch, "exec")) {
        uint8_t stream [512];
        size_t n = 0;
        if (streq (ah_msg_str (h, "cmd"), "bad-record"))
            n += s_record_put (stream + n, 9, "x", 1);
        n += s_record_put (stream + n, 1, "hello", 5);
        n += s_record_put (stream + n, 2, "oops", 4);
        ah_msg_t *exit = ah_msg_new ("EXIT");
        ah_msg_set_int (exit, "status", 2);
        ah_msg_set_int (exit, "signal", 0);
        ah_msg_set_bool (exit, "timed_out", false);
        ah_msg_encode (exit, &enc, &enc_size);
        n += s_record_put (stream + n, 4, enc, enc_size);
        free (enc);
        ah_msg_destroy (&exit);
        for (size_t off = 0; off < n; off += 3)      //  records straddle every message
            s_chan_msg (sock, "CHAN_DATA", chan, stream + off, n - off < 3 ? n - off : 3);
        s_chan_msg (sock, "CHAN_EOF", chan, NULL, 0);
        s_chan_msg (sock, "CHAN_CLOSE", chan, NULL, 0);
    }
    else if (streq (ch, "fs.read")) {
        uint8_t *data = malloc (100000);
        for (int i = 0; i < 100000; i++)
            data [i] = (uint8_t) (i % 251);
        if (streq (path, "short")) {
            s_chan_msg (sock, "CHAN_DATA", chan, data, 500);
            ah_msg_t *c = ah_msg_new ("CHAN_CLOSE");
            ah_msg_set_int (c, "chan", chan);
            ah_msg_set_str (c, "error", "sandbox connection lost");
            ah_msg_send (&c, sock, "api");
        }
        else {
            s_chan_msg (sock, "CHAN_DATA", chan, data, 65536);
            s_chan_msg (sock, "CHAN_DATA", chan, data + 65536, 100000 - 65536);
            s_chan_msg (sock, "CHAN_EOF", chan, NULL, 0);
            s_chan_msg (sock, "CHAN_CLOSE", chan, NULL, 0);
        }
        free (data);
    }
    else if (streq (ch, "fs.tree")) {
        size_t n = streq (path, "t-short") ? tree.size / 2 : tree.size;
        for (size_t off = 0; off < n; off += 7)      //  in awkward pieces
            s_chan_msg (sock, "CHAN_DATA", chan, tree.data + off, n - off < 7 ? n - off : 7);
        s_chan_msg (sock, "CHAN_EOF", chan, NULL, 0);
        s_chan_msg (sock, "CHAN_CLOSE", chan, NULL, 0);
    }
    msgpack_sbuffer_destroy (&tree);
    ah_msg_destroy (&h);
}

//  recorder, builder and sleeper as the API sees them.
static void s_fake_other (fake_t *f, zsock_t *sock, ah_msg_t *m)
{
    const char *type = ah_msg_type (m);
    ah_msg_t *reply = NULL;
    if (streq (type, "OP_RECORD")) {
        f->records++;
        free (f->last_record);
        f->last_record = ah_msg_to_json (m, "recorder");
        return;
    }
    free (f->last_other);
    f->last_other = ah_msg_to_json (m, "");
    if (streq (type, "OP_LIST")) {
        reply = ah_msg_reply_ok (m);
        s_set_raw_list (reply, "operations", 1, 8, "id", 'i', (int64_t) 1, "at", 'i', (int64_t) 1764406800000,
                        "agent_id", 's', ah_msg_str (m, "agent_id") ? ah_msg_str (m, "agent_id") : "x",
                        "actor", 's', "api:admin", "kind", 's', "create", "detail", 's', "alice",
                        "ok", 'b', 1, "error", 'n');
    }
    else if (streq (type, "CATALOG_LIST")) {
        reply = ah_msg_reply_ok (m);
        s_set_raw_list (reply, "runtimes", 1, 2, "name", 's', "debian", "image", 's', "debian:bookworm-slim");
    }
    else if (streq (type, "BRIEFING")) {
        if (streq (ah_msg_str (m, "runtime"), "debian")) {
            reply = ah_msg_reply_ok (m);
            ah_msg_set_str (reply, "runtime", "debian");
            ah_msg_set_str (reply, "text", "You run on Debian.");
        }
        else
            reply = ah_msg_reply_error (m, 404, "no runtime '%s' in the catalog", ah_msg_str (m, "runtime"));
    }
    else if (streq (type, "TURN_START") || streq (type, "TURN_RENEW") || streq (type, "TURN_END")) {
        const char *turn = ah_msg_str (m, "turn_id");
        if (turn && !streq (turn, "00112233aabbccdd"))
            reply = ah_msg_reply_error (m, 404, "no turn '%s'", turn);
        else {
            reply = ah_msg_reply_ok (m);
            ah_msg_set_str (reply, "turn_id", "00112233aabbccdd");
            ah_msg_set_str (reply, "agent_id", "aaaaaaaaaaaa");
            ah_msg_set_int (reply, "expires_at", 1764406860000);
        }
    }
    else
        reply = ah_msg_reply_error (m, 400, "fake: unknown %s", type);
    ah_msg_send (&reply, sock, ah_msg_peer (m));
}

static const char *s_state (fake_t *f, const char *id)
{
    static __thread char state [32];
    sqlite3_stmt *st = ah_store_prepare (f->store, "SELECT state FROM sandboxes WHERE agent_id = :id");
    ah_store_bind_text (st, ":id", id);
    state [0] = 0;
    if (ah_store_step (f->store, st) == SQLITE_ROW)
        snprintf (state, sizeof state, "%s", (const char *) sqlite3_column_text (st, 0));
    sqlite3_reset (st);
    return state [0] ? state : NULL;
}

static void s_set_state (fake_t *f, const char *id, const char *state)
{
    sqlite3_stmt *st = ah_store_prepare (f->store,
        "UPDATE sandboxes SET state = :s, updated_at = :now WHERE agent_id = :id");
    ah_store_bind_text (st, ":s", state);
    ah_store_bind_int64 (st, ":now", ah_store_now_ms ());
    ah_store_bind_text (st, ":id", id);
    ah_store_step (f->store, st);
    sqlite3_reset (st);
}

static void s_later (fake_t *f, const char *id, const char *state, int ms)
{
    later_t *l = calloc (1, sizeof *l);
    l->due = zclock_mono () + ms;
    snprintf (l->agent_id, sizeof l->agent_id, "%s", id);
    snprintf (l->state, sizeof l->state, "%s", state);
    zlistx_add_end (f->later, l);
}

static void s_fake_handle (fake_t *f, ah_msg_t *m)
{
    const char *type = ah_msg_type (m);
    ah_msg_t *reply = NULL;
    if (streq (type, "POLICY_RELOAD")) {
        f->policy_reloads++;
        return;
    }
    if (streq (type, "AGENT_CREATE")) {
        free (f->last_create);
        f->last_create = ah_msg_to_json (m, "lifecycle");
        const char *name = ah_msg_str (m, "name");
        if (streq (name, "mute"))
            return;                 //  never answers: the API must time out
        if (ah_msg_double (m, "cpus", 1) > 8) {
            reply = ah_msg_reply_error (m, 422, "cpus %g is over the limit of 8 (policy limits.lua)",
                                        ah_msg_double (m, "cpus", 1));
            goto send;
        }
        char id [13];
        ah_token_id (id, sizeof id, 12);
        ah_store_begin (f->store);
        sqlite3_stmt *st = ah_store_prepare (f->store,
            "INSERT INTO agents (id, name, image, cpus, memory_mb, idle_minutes, created_at)"
            " VALUES (:id, :name, :image, :cpus, :mem, :idle, :now)");
        ah_store_bind_text (st, ":id", id);
        ah_store_bind_text (st, ":name", name);
        ah_store_bind_text (st, ":image", ah_msg_str (m, "image") ? ah_msg_str (m, "image") : "debian:bookworm-slim");
        ah_store_bind_double (st, ":cpus", ah_msg_double (m, "cpus", 2));
        ah_store_bind_int64 (st, ":mem", ah_msg_int (m, "memory_mb", 4096));
        ah_store_bind_double (st, ":idle", ah_msg_double (m, "idle_minutes", 15));
        ah_store_bind_int64 (st, ":now", ah_store_now_ms ());
        int rc = ah_store_step (f->store, st);
        sqlite3_reset (st);
        if (rc != SQLITE_DONE) {
            ah_store_rollback (f->store);
            reply = ah_msg_reply_error (m, 409, "an agent named '%s' exists", name);
            goto send;
        }
        st = ah_store_prepare (f->store,
            "INSERT INTO sandboxes (agent_id, state, image, cpus, memory_mb, updated_at)"
            " VALUES (:id, 'sleeping', 'img', 2, 4096, :now)");
        ah_store_bind_text (st, ":id", id);
        ah_store_bind_int64 (st, ":now", ah_store_now_ms ());
        ah_store_step (f->store, st);
        sqlite3_reset (st);
        ah_store_commit (f->store);
        reply = ah_msg_reply_ok (m);
        ah_msg_set_int (reply, "status", 201);
        ah_msg_set_str (reply, "agent_id", id);
        goto send;
    }
    const char *id = ah_msg_str (m, "agent");
    const char *state = id ? s_state (f, id) : NULL;
    if (!state) {
        reply = ah_msg_reply_error (m, 404, "no agent '%s'", id ? id : "?");
        goto send;
    }
    if (streq (type, "AGENT_UPDATE")) {
        sqlite3_stmt *st = ah_store_prepare (f->store,
            "UPDATE agents SET cpus = :cpus WHERE id = :id");
        ah_store_bind_double (st, ":cpus", ah_msg_double (m, "cpus", 2));
        ah_store_bind_text (st, ":id", id);
        ah_store_step (f->store, st);
        sqlite3_reset (st);
        st = ah_store_prepare (f->store, "UPDATE sandboxes SET needs_rebuild = 1 WHERE agent_id = :id");
        ah_store_bind_text (st, ":id", id);
        ah_store_step (f->store, st);
        sqlite3_reset (st);
        reply = ah_msg_reply_ok (m);
        ah_msg_set_int (reply, "status", 200);
        goto send;
    }
    const char *from = NULL, *mid = NULL, *to = NULL;
    if (streq (type, "SANDBOX_START"))
        from = "sleeping", mid = "starting", to = "running";
    else if (streq (type, "SANDBOX_STOP"))
        from = "running", mid = "stopping", to = "sleeping";
    else if (streq (type, "SANDBOX_REBUILD"))
        from = "*", mid = "rebuilding", to = "sleeping";
    else if (streq (type, "SANDBOX_DESTROY"))
        from = "*", mid = "destroying", to = "";
    else {
        reply = ah_msg_reply_error (m, 400, "fake lifecycle: unknown %s", type);
        goto send;
    }
    if (!streq (from, "*") && !streq (from, state)) {
        reply = ah_msg_reply_error (m, 409, "agent is %s", state);
        ah_msg_set_str (reply, "state", state);
        goto send;
    }
    s_set_state (f, id, mid);
    s_later (f, id, to, 150);
    reply = ah_msg_reply_ok (m);
    ah_msg_set_int (reply, "status", 202);
    ah_msg_set_str (reply, "state", mid);
send:
    ah_msg_send (&reply, f->bus, ah_msg_peer (m));
}

void fake_actors (zsock_t *pipe, void *args)
{
    fake_t f = { 0 };
    f.store = ah_store_open ((const char *) args, false, NULL);
    f.bus = ah_bus_connect ("lifecycle");
    f.recorder = ah_bus_connect ("recorder");
    f.builder = ah_bus_connect ("builder");
    f.sleeper = ah_bus_connect ("sleeper");
    f.tunnel = ah_bus_connect ("tunnel");
    f.later = zlistx_new ();
    zlistx_set_destructor (f.later, NULL);
    zsock_signal (pipe, 0);
    zpoller_t *poller = zpoller_new (pipe, f.bus, f.recorder, f.builder, f.sleeper, f.tunnel, NULL);
    while (true) {
        void *which = zpoller_wait (poller, 20);
        if (which == pipe) {
            char *cmd = zstr_recv (pipe);
            bool term = !cmd || streq (cmd, "$TERM");
            if (cmd && streq (cmd, "RELOADS"))
                zstr_sendf (pipe, "%d", f.policy_reloads);
            else if (cmd && streq (cmd, "LAST"))
                zstr_send (pipe, f.last_create ? f.last_create : "");
            else if (cmd && streq (cmd, "RECORDS"))
                zstr_sendf (pipe, "%d %s", f.records, f.last_record ? f.last_record : "");
            else if (cmd && streq (cmd, "TUNNEL"))
                zstr_sendf (pipe, "%lld %d %d %s", (long long) f.acked, f.eofs, f.closes, f.stdin_seen);
            else if (cmd && streq (cmd, "EGRESS")) {
                zstr_send (pipe, f.egress_changed);
                f.egress_changed [0] = 0;
            }
            else if (cmd && streq (cmd, "OTHER"))
                zstr_send (pipe, f.last_other ? f.last_other : "");
            zstr_free (&cmd);
            if (term)
                break;
        }
        else if (which == f.bus) {
            ah_msg_t *m = ah_msg_recv (f.bus, true, NULL);
            if (m)
                s_fake_handle (&f, m);
            ah_msg_destroy (&m);
        }
        else if (which == f.tunnel) {
            ah_msg_t *m = ah_msg_recv (f.tunnel, true, NULL);
            if (m)
                s_fake_tunnel (&f, f.tunnel, m);
            ah_msg_destroy (&m);
        }
        else if (which) {
            ah_msg_t *m = ah_msg_recv (which, true, NULL);
            if (m)
                s_fake_other (&f, which, m);
            ah_msg_destroy (&m);
        }
        else if (zpoller_terminated (poller))
            break;
        int64_t now = zclock_mono ();
        later_t *l = zlistx_first (f.later);
        while (l) {
            if (l->due <= now) {
                if (l->state [0])
                    s_set_state (&f, l->agent_id, l->state);
                else {
                    sqlite3_stmt *st = ah_store_prepare (f.store, "DELETE FROM agents WHERE id = :id");
                    ah_store_bind_text (st, ":id", l->agent_id);
                    ah_store_step (f.store, st);
                    sqlite3_reset (st);
                }
                ah_msg_t *ev = ah_msg_new ("SANDBOX_STATE");
                ah_msg_set_str (ev, "agent_id", l->agent_id);
                ah_msg_set_str (ev, "state", l->state [0] ? l->state : "destroyed");
                ah_msg_send (&ev, f.bus, "api");
                zlistx_delete (f.later, zlistx_cursor (f.later));
                free (l);
                l = zlistx_first (f.later);
            }
            else
                l = zlistx_next (f.later);
        }
    }
    zpoller_destroy (&poller);
    later_t *l;
    while ((l = zlistx_first (f.later))) {
        zlistx_delete (f.later, zlistx_cursor (f.later));
        free (l);
    }
    zlistx_destroy (&f.later);
    free (f.last_create);
    free (f.last_record);
    free (f.last_other);
    zsock_destroy (&f.recorder);
    zsock_destroy (&f.builder);
    zsock_destroy (&f.sleeper);
    zsock_destroy (&f.tunnel);
    zsock_destroy (&f.bus);
    ah_store_close (&f.store);
}

