/*  proto/procchan.c: the opener's side of the proc channel (see
    procchan.h and docs/tunnel.md).                                     */
#include "proto/procchan.h"

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool s_key_ok (const char *key)
{
    size_t n = key ? strlen (key) : 0;
    if (n == 0 || n > AH_PROCCHAN_KEY_MAX)
        return false;
    return strspn (key, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

ah_msg_t *ah_procchan_header (const char *key, const char * const *argv, size_t argc,
                              const char * const *env, size_t nenv, int64_t from)
{
    if (!s_key_ok (key) || (argv && (argc == 0 || argc > AH_PROCCHAN_ARGV_MAX))
    ||  nenv > AH_PROCCHAN_ENV_MAX || (nenv && !env))
        return NULL;
    ah_msg_t *h = ah_msg_new ("");
    ah_msg_set_str (h, "ch", "proc");
    ah_msg_set_str (h, "key", key);
    if (from >= 0)
        ah_msg_set_int (h, "from", from);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init (&sb);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sb, msgpack_sbuffer_write);
    bool bad = false;
    if (argv) {
        msgpack_pack_array (&pk, argc);
        for (size_t i = 0; i < argc; i++) {
            size_t n = argv [i] ? strlen (argv [i]) : 0;
            bad |= !argv [i] || n > AH_PROCCHAN_ARG_MAX || (i == 0 && n == 0);
            msgpack_pack_str_with_body (&pk, argv [i] ? argv [i] : "", n);
        }
        bad |= ah_msg_set_raw (h, "argv", sb.data, sb.size) != 0;
    }
    if (nenv) {
        msgpack_sbuffer_clear (&sb);
        msgpack_pack_map (&pk, nenv);
        for (size_t i = 0; i < nenv; i++) {
            const char *eq = env [i] ? strchr (env [i], '=') : NULL;
            bad |= !eq || eq == env [i];
            size_t kl = eq ? (size_t) (eq - env [i]) : 0;
            msgpack_pack_str_with_body (&pk, env [i] ? env [i] : "", kl);
            msgpack_pack_str_with_body (&pk, eq ? eq + 1 : "", eq ? strlen (eq + 1) : 0);
        }
        bad |= ah_msg_set_raw (h, "env", sb.data, sb.size) != 0;
    }
    msgpack_sbuffer_destroy (&sb);
    if (bad)
        ah_msg_destroy (&h);
    return h;
}

ah_msg_t *ah_ptychan_header (const char *id, bool create, int cols, int rows, int64_t from)
{
    if (!s_key_ok (id))
        return NULL;
    ah_msg_t *h = ah_msg_new ("");
    ah_msg_set_str (h, "ch", "pty");
    ah_msg_set_str (h, "id", id);
    ah_msg_set_bool (h, "create", create);
    ah_msg_set_str (h, "term", "xterm-256color");
    if (cols > 0 && rows > 0) {
        ah_msg_set_int (h, "cols", cols);
        ah_msg_set_int (h, "rows", rows);
    }
    if (from >= 0)
        ah_msg_set_int (h, "from", from);
    return h;
}

int ah_procchan_reply (const ah_msg_t *reply, ah_procchan_reply_t *r)
{
    memset (r, 0, sizeof *r);
    if (!reply || !ah_msg_has (reply, "ok"))
        return -1;
    r->ok = ah_msg_bool (reply, "ok", false);
    if (!r->ok) {
        const char *code = ah_msg_str (reply, "code"), *error = ah_msg_str (reply, "error");
        snprintf (r->code, sizeof r->code, "%s", code ? code : "EPROTO");
        snprintf (r->error, sizeof r->error, "%s", error ? error : "refused without a reason");
        return 0;
    }
    r->pid = ah_msg_int (reply, "pid", 0);
    r->attached = ah_msg_bool (reply, "attached", false);
    r->offset = ah_msg_int (reply, "offset", 0);
    r->buffered = ah_msg_int (reply, "buffered", 0);
    r->lost = ah_msg_int (reply, "lost", 0);
    r->exited = ah_msg_bool (reply, "exited", false);
    return 0;
}

int ah_procchan_exit (const uint8_t *payload, size_t size, int *status, int *signal)
{
    ah_msg_t *m = ah_msg_decode ("EXIT", payload, size, NULL);
    if (!m || !ah_msg_has (m, "status")) {
        ah_msg_destroy (&m);
        return -1;
    }
    int64_t st = ah_msg_int (m, "status", -1), sig = ah_msg_int (m, "signal", 0);
    ah_msg_destroy (&m);
    if (st < -1 || st > 255 || sig < 0 || sig > 128)
        return -1;
    *status = (int) st;
    *signal = (int) sig;
    return 0;
}
