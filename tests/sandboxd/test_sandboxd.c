/*  tests/sandboxd/test_sandboxd.c: the channel layer of sandboxd, driven
    in-process over a socketpair by a server-side yamux session in the test
    (no WebSocket here: tests/sandboxd/test_ws.py covers that layer).

    A real instance (ah_sandboxd_start with raw_transport) serves a real
    temporary home; the test plays the server: it opens streams, writes
    headers and records, and checks the replies and the file system.   */
#include "tests/sandboxd/sbd_peer.h"
#include "tests/common/homepath_cases.h"

//  ---------------------------------------------------------------------

static void test_hello (peer_t *p)
{
    //  Anything before hello is refused.
    ah_msg_t *r = simple (p, req_new ("ping"));
    CHECK (r && !reply_ok (r));
    CHECK_STR (reply_code (r), "EPROTO");
    ah_msg_destroy (&r);

    //  A hello that names no version (or not as a number) is no hello.
    r = simple (p, req_new ("hello"));
    CHECK_STR (reply_code (r), "EPROTO");
    const char *e = r ? ah_msg_str (r, "error") : NULL;
    CHECK (e && strstr (e, "without a version") && !strstr (e, "-1"));
    ah_msg_destroy (&r);
    ah_msg_t *req = req_new ("hello");
    ah_msg_set_str (req, "version", "1");
    r = simple (p, req);
    CHECK_STR (reply_code (r), "EVERSION");
    ah_msg_destroy (&r);
    r = simple (p, req_new ("ping"));
    CHECK_STR (reply_code (r), "EPROTO");       //  still before hello
    ah_msg_destroy (&r);

    req = req_new ("hello");
    ah_msg_set_int (req, "version", 99);
    r = simple (p, req);
    CHECK_STR (reply_code (r), "EVERSION");
    e = r ? ah_msg_str (r, "error") : NULL;
    CHECK (e && strstr (e, "99") && strstr (e, "protocol 1") && strstr (e, "deploy"));
    ah_msg_destroy (&r);

    req = req_new ("hello");
    ah_msg_set_int (req, "version", AH_PROTOCOL_VERSION);
    r = simple (p, req);
    CHECK (reply_ok (r));
    CHECK (r && ah_msg_int (r, "version", 0) == AH_PROTOCOL_VERSION);
    CHECK_STR (r ? ah_msg_str (r, "agent_id") : NULL, "agent-test");
    CHECK (r && ah_msg_str (r, "user") && *ah_msg_str (r, "user"));
    CHECK_STR (r ? ah_msg_str (r, "mode") : NULL, "sandbox");
    ah_msg_destroy (&r);

    r = simple (p, req_new ("ping"));
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);

    //  Once: a second hello on the connection is refused.
    req = req_new ("hello");
    ah_msg_set_int (req, "version", AH_PROTOCOL_VERSION);
    r = simple (p, req);
    CHECK_STR (reply_code (r), "EPROTO");
    e = r ? ah_msg_str (r, "error") : NULL;
    CHECK (e && strstr (e, "second hello"));
    ah_msg_destroy (&r);

    r = simple (p, req_new ("no.such"));
    CHECK_STR (reply_code (r), "EPROTO");
    ah_msg_destroy (&r);
}

//  fs.write: reply, bytes, FIN, trailer. Returns the trailer.
ah_msg_t *write_file (peer_t *p, const char *path, const uint8_t *data, size_t size,
                             bool *refused)
{
    ah_msg_t *req = req_new ("fs.write");
    ah_msg_set_str (req, "path", path);
    uint32_t id = open_chan (p, &req);
    ah_msg_t *r = wait_header (p, id, 5000);
    *refused = !reply_ok (r);
    if (*refused) {
        ah_yamux_close (p->y, id);
        return r;
    }
    ah_msg_destroy (&r);
    size_t off = 0;
    int64_t until = now_ms () + 30000;
    while (off < size && now_ms () < until && !p->failed) {
        ssize_t w = ah_yamux_write (p->y, id, data + off, size - off);
        if (w < 0)
            break;
        off += (size_t) w;
        if (off < size)
            pump (p, 20);
    }
    CHECK (off == size);
    ah_yamux_close (p->y, id);
    return wait_header (p, id, 10000);
}

//  fs.read: the whole file into *out.
ah_msg_t *read_file (peer_t *p, const char *path, uint8_t **out, size_t *size)
{
    ah_msg_t *req = req_new ("fs.read");
    ah_msg_set_str (req, "path", path);
    uint32_t id = open_chan (p, &req);
    ah_yamux_close (p->y, id);
    ah_msg_t *r = wait_header (p, id, 5000);
    *out = NULL;
    *size = 0;
    if (!reply_ok (r))
        return r;
    tstream_t *s = find (p, id);
    wait_until (p, &s->eof, 30000);
    *out = malloc (s->len + 1);
    memcpy (*out, s->buf, s->len);
    *size = s->len;
    CHECK ((int64_t) s->len == ah_msg_int (r, "size", -1));
    return r;
}

static void test_fs (peer_t *p)
{
    bool refused;
    const char *hello = "hello, file\n";
    ah_msg_t *t = write_file (p, "a.txt", (const uint8_t *) hello, strlen (hello), &refused);
    CHECK (!refused && reply_ok (t));
    CHECK (t && ah_msg_int (t, "size", -1) == (int64_t) strlen (hello));
    ah_msg_destroy (&t);
    char path [PATH_MAX * 2];
    snprintf (path, sizeof path, "%s/a.txt", home);
    FILE *f = fopen (path, "r");
    char got [64] = "";
    if (f) {
        if (!fgets (got, sizeof got, f))
            got [0] = 0;
        fclose (f);
    }
    CHECK_STR (got, hello);

    //  Bigger than several windows, random content, checksum both ways.
    size_t big = 3 * 1024 * 1024 + 12345;
    uint8_t *data = malloc (big);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < big; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        data [i] = (uint8_t) x;
    }
    uint64_t sum = fnv (data, big, 1469598103934665603ull);
    t = write_file (p, "big.bin", data, big, &refused);
    CHECK (!refused && reply_ok (t));
    CHECK (t && ah_msg_int (t, "size", -1) == (int64_t) big);
    ah_msg_destroy (&t);
    uint8_t *back = NULL;
    size_t back_len = 0;
    ah_msg_t *r = read_file (p, "big.bin", &back, &back_len);
    CHECK (reply_ok (r));
    CHECK (back_len == big);
    CHECK (back && fnv (back, back_len, 1469598103934665603ull) == sum);
    ah_msg_destroy (&r);
    free (back);

    //  A half-sent write leaves nothing: neither target nor temporary.
    ah_msg_t *req = req_new ("fs.write");
    ah_msg_set_str (req, "path", "half.bin");
    uint32_t id = open_chan (p, &req);
    r = wait_header (p, id, 5000);
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);
    CHECK (ah_yamux_write (p->y, id, data, 100000) > 0);
    pump (p, 100);
    ah_yamux_reset (p->y, id);
    ah_msg_destroy (&r);
    //  A ping round trip after the reset: sandboxd has handled it.
    r = simple (p, req_new ("ping"));
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);
    DIR *d = opendir (home);
    int leftovers = 0;
    struct dirent *de;
    while (d && (de = readdir (d)))
        if (strstr (de->d_name, "half"))
            leftovers++;
    if (d)
        closedir (d);
    CHECK (leftovers == 0);
    free (data);

    //  mkdir, list, remove
    req = req_new ("fs.mkdir");
    ah_msg_set_str (req, "path", "d1/d2/d3");
    r = simple (p, req);
    CHECK_STR (reply_code (r), "ENOENT");       //  parents missing
    ah_msg_destroy (&r);
    req = req_new ("fs.mkdir");
    ah_msg_set_str (req, "path", "d1/d2/d3");
    ah_msg_set_bool (req, "parents", true);
    r = simple (p, req);
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);
    CHECK (file_exists (home, "d1/d2/d3"));
    req = req_new ("fs.mkdir");
    ah_msg_set_str (req, "path", "d1");
    r = simple (p, req);
    CHECK_STR (reply_code (r), "EEXIST");
    ah_msg_destroy (&r);

    req = req_new ("fs.list");
    ah_msg_set_str (req, "path", ".");
    r = simple (p, req);
    CHECK (reply_ok (r));
    size_t rawlen = 0;
    const void *raw = r ? ah_msg_raw (r, "entries", &rawlen) : NULL;
    CHECK (raw != NULL);
    bool saw_a = false, saw_d1 = false, sorted = true;
    if (raw) {
        msgpack_unpacked u;
        msgpack_unpacked_init (&u);
        if (msgpack_unpack_next (&u, raw, rawlen, NULL) == MSGPACK_UNPACK_SUCCESS
        &&  u.data.type == MSGPACK_OBJECT_ARRAY) {
            char prev [256] = "";
            for (uint32_t i = 0; i < u.data.via.array.size; i++) {
                msgpack_object *e = &u.data.via.array.ptr [i];
                char name [256] = "", type [16] = "";
                int64_t size = -1;
                for (uint32_t k = 0; e->type == MSGPACK_OBJECT_MAP && k < e->via.map.size; k++) {
                    msgpack_object_kv *kv = &e->via.map.ptr [k];
                    if (kv->key.via.str.size == 4 && !memcmp (kv->key.via.str.ptr, "name", 4))
                        snprintf (name, sizeof name, "%.*s", (int) kv->val.via.str.size, kv->val.via.str.ptr);
                    if (kv->key.via.str.size == 4 && !memcmp (kv->key.via.str.ptr, "type", 4))
                        snprintf (type, sizeof type, "%.*s", (int) kv->val.via.str.size, kv->val.via.str.ptr);
                    if (kv->key.via.str.size == 4 && !memcmp (kv->key.via.str.ptr, "size", 4))
                        size = kv->val.via.i64;
                }
                if (strcmp (prev, name) > 0)
                    sorted = false;
                snprintf (prev, sizeof prev, "%s", name);
                if (!strcmp (name, "a.txt") && !strcmp (type, "file") && size == (int64_t) strlen (hello))
                    saw_a = true;
                if (!strcmp (name, "d1") && !strcmp (type, "dir"))
                    saw_d1 = true;
            }
        }
        msgpack_unpacked_destroy (&u);
    }
    CHECK (saw_a && saw_d1 && sorted);
    CHECK (r && !ah_msg_bool (r, "truncated", true));
    ah_msg_destroy (&r);

    req = req_new ("fs.remove");
    ah_msg_set_str (req, "path", "d1");
    r = simple (p, req);
    CHECK_STR (reply_code (r), "ENOTEMPTY");
    ah_msg_destroy (&r);
    req = req_new ("fs.remove");
    ah_msg_set_str (req, "path", "d1");
    ah_msg_set_bool (req, "recursive", true);
    r = simple (p, req);
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);
    CHECK (!file_exists (home, "d1"));
    req = req_new ("fs.remove");
    ah_msg_set_str (req, "path", "a.txt");
    r = simple (p, req);
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);
    CHECK (!file_exists (home, "a.txt"));
    req = req_new ("fs.read");
    ah_msg_set_str (req, "path", "a.txt");
    r = simple (p, req);
    CHECK_STR (reply_code (r), "ENOENT");
    ah_msg_destroy (&r);
    req = req_new ("fs.read");
    ah_msg_set_str (req, "path", ".");
    r = simple (p, req);
    CHECK_STR (reply_code (r), "EISDIR");
    ah_msg_destroy (&r);
}

//  A header with a str "path" holding a NUL byte (ah_msg cannot build one).
static uint32_t open_nul_path (peer_t *p, const char *ch)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init (&sb);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, 2);
    msgpack_pack_str_with_body (&pk, "ch", 2);
    msgpack_pack_str_with_body (&pk, ch, strlen (ch));
    msgpack_pack_str_with_body (&pk, "path", 4);
    msgpack_pack_str_with_body (&pk, "x\0/../../etc", 12);
    uint8_t *hdr = malloc (sb.size + 4);
    hdr [0] = (uint8_t) (sb.size >> 24); hdr [1] = (uint8_t) (sb.size >> 16);
    hdr [2] = (uint8_t) (sb.size >> 8); hdr [3] = (uint8_t) sb.size;
    memcpy (hdr + 4, sb.data, sb.size);
    uint32_t id = open_raw (p, hdr, sb.size + 4);
    free (hdr);
    msgpack_sbuffer_destroy (&sb);
    return id;
}

static int count_entries (const char *dir)
{
    DIR *d = opendir (dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir (d)))
        if (strcmp (de->d_name, ".") && strcmp (de->d_name, ".."))
            n++;
    if (d)
        closedir (d);
    return n;
}

//  --------------------------------------------------------------------
//  fs.tree: the reply's map (in *u) or NULL with the refusal's code.

static const msgpack_object *mp_get (const msgpack_object *map, const char *key)
{
    size_t n = strlen (key);
    for (uint32_t i = 0; map && map->type == MSGPACK_OBJECT_MAP && i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr [i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n && !memcmp (k->via.str.ptr, key, n))
            return &map->via.map.ptr [i].val;
    }
    return NULL;
}

static bool mp_true (const msgpack_object *map, const char *key)
{
    const msgpack_object *o = mp_get (map, key);
    return o && o->type == MSGPACK_OBJECT_BOOLEAN && o->via.boolean;
}

const msgpack_object *tree (peer_t *p, const char *path, int depth, int entries, bool all,
                                   msgpack_unpacked *u, char code [16])
{
    ah_msg_t *req = req_new ("fs.tree");
    ah_msg_set_str (req, "path", path);
    ah_msg_set_int (req, "max_depth", depth);
    ah_msg_set_int (req, "max_entries", entries);
    ah_msg_set_bool (req, "all", all);
    uint32_t id = open_chan (p, &req);
    ah_yamux_close (p->y, id);
    ah_msg_t *r = wait_header (p, id, 5000);
    code [0] = 0;
    if (!reply_ok (r)) {
        snprintf (code, 16, "%s", reply_code (r) ? reply_code (r) : "?");
        ah_msg_destroy (&r);
        return NULL;
    }
    tstream_t *s = find (p, id);
    wait_until (p, &s->eof, 10000);
    CHECK ((int64_t) s->len == ah_msg_int (r, "size", -1));
    ah_msg_destroy (&r);
    msgpack_unpacked_init (u);
    size_t off = 0;
    if (msgpack_unpack_next (u, (const char *) s->buf, s->len, &off) != MSGPACK_UNPACK_SUCCESS
    ||  off != s->len || u->data.type != MSGPACK_OBJECT_MAP)
        return NULL;
    return &u->data;
}

//  The entry of the tree at path ("" when none): its type.
const char *tree_type (const msgpack_object *t, const char *path, int64_t *depth)
{
    const msgpack_object *es = mp_get (t, "entries");
    size_t n = strlen (path);
    for (uint32_t i = 0; es && es->type == MSGPACK_OBJECT_ARRAY && i < es->via.array.size; i++) {
        const msgpack_object *e = &es->via.array.ptr [i];
        const msgpack_object *pa = mp_get (e, "path"), *ty = mp_get (e, "type"), *d = mp_get (e, "depth");
        if (pa && pa->type == MSGPACK_OBJECT_STR && pa->via.str.size == n && !memcmp (pa->via.str.ptr, path, n)) {
            static char type [16];
            snprintf (type, sizeof type, "%.*s", (int) ty->via.str.size, ty->via.str.ptr);
            if (depth)
                *depth = d ? d->via.i64 : -1;
            return type;
        }
    }
    return "";
}

static uint32_t tree_count (const msgpack_object *t)
{
    const msgpack_object *es = mp_get (t, "entries");
    return es && es->type == MSGPACK_OBJECT_ARRAY ? es->via.array.size : 0;
}

void mkfile (const char *rel, const char *text)
{
    char path [PATH_MAX * 2];
    snprintf (path, sizeof path, "%s/%s", home, rel);
    FILE *f = fopen (path, "w");
    CHECK (f != NULL);
    if (f) {
        fputs (text, f);
        fclose (f);
    }
}

static void mkdirs (const char *rel)
{
    char path [PATH_MAX * 2];
    snprintf (path, sizeof path, "%s/%s", home, rel);
    CHECK (mkdir (path, 0755) == 0);
}

//  Every optional argument of every channel, given each type it does
//  not take: EINVAL naming the argument, never its default quietly.
//  (An integer is a number: "timeout": 5 is good.)
static void test_arg_types (peer_t *p)
{
    static const struct { const char *ch, *key, *type; } args [] = {
        { "hello", "release", "str" }, { "pty", "term", "str" }, { "pty", "cols", "int" },
        { "pty", "rows", "int" }, { "exec", "timeout", "num" }, { "exec", "cwd", "str" },
        { "fs.tree", "max_depth", "int" }, { "fs.tree", "max_entries", "int" },
        { "fs.tree", "all", "bool" }, { "fs.write", "mode", "int" }, { "fs.mkdir", "parents", "bool" },
        { "fs.mkdir", "mode", "int" }, { "fs.remove", "recursive", "bool" },
    };
    static const char *types [] = { "int", "double", "bool", "str", "bin", "array" };
    for (size_t a = 0; a < sizeof args / sizeof args [0]; a++)
        for (size_t t = 0; t < sizeof types / sizeof types [0]; t++) {
            const char *type = types [t];
            if (!strcmp (type, args [a].type) || (!strcmp (type, "double") && !strcmp (args [a].type, "num"))
            ||  (!strcmp (type, "int") && !strcmp (args [a].type, "num")))
                continue;
            ah_msg_t *req = req_new (args [a].ch);
            ah_msg_set_str (req, "path", "argtypes");
            ah_msg_set_str (req, "cmd", "true");
            const char *key = args [a].key;
            if (!strcmp (type, "int"))
                ah_msg_set_int (req, key, 6);
            else if (!strcmp (type, "double"))
                ah_msg_set_double (req, key, 6.0);
            else if (!strcmp (type, "bool"))
                ah_msg_set_bool (req, key, true);
            else if (!strcmp (type, "str"))
                ah_msg_set_str (req, key, "6");
            else if (!strcmp (type, "bin"))
                ah_msg_set_bin (req, key, "6", 1);
            else
                ah_msg_set_raw (req, key, "\x91\x06", 2);
            ah_msg_t *r = simple (p, req);
            const char *error = r ? ah_msg_str (r, "error") : NULL;
            bool named = error && strstr (error, key);
            if (!r || !reply_code (r) || strcmp (reply_code (r), "EINVAL") != 0 || !named)
                fprintf (stderr, "%s \"%s\" as %s: %s %s\n", args [a].ch, key, type,
                         r && reply_code (r) ? reply_code (r) : "accepted", error ? error : "");
            CHECK (r && reply_code (r) && !strcmp (reply_code (r), "EINVAL") && named);
            ah_msg_destroy (&r);
        }
    //  nil is "absent": the default.
    ah_msg_t *req = req_new ("fs.tree");
    ah_msg_set_str (req, "path", ".");
    ah_msg_set_nil (req, "max_depth");
    ah_msg_t *r = simple (p, req);
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);
}

static void test_tree (peer_t *p)
{
    //  t/a/b/c/deep.txt, t/x.txt, t/node_modules/m.js, t/.agenthold-x, a
    //  name that is not UTF-8, a link out of the home and one inside.
    mkdirs ("t");
    mkdirs ("t/a");
    mkdirs ("t/a/b");
    mkdirs ("t/a/b/c");
    mkdirs ("t/node_modules");
    mkfile ("t/a/b/c/deep.txt", "deep\n");
    mkfile ("t/x.txt", "x\n");
    mkfile ("t/node_modules/m.js", "m\n");
    mkfile ("t/.agenthold-x", "ah\n");
    mkfile ("t/\xff\xfe", "bytes\n");
    char path [PATH_MAX * 2];
    snprintf (path, sizeof path, "%s/t/out", home);
    CHECK (symlink (outside, path) == 0);
    snprintf (path, sizeof path, "%s/t/in", home);
    CHECK (symlink ("a", path) == 0);

    msgpack_unpacked u;
    char code [16];
    int64_t depth = 0;
    const msgpack_object *t = tree (p, "t", 6, 100, false, &u, code);
    CHECK (t != NULL);
    CHECK_STR (tree_type (t, "t/a", &depth), "dir");
    CHECK (depth == 1);
    CHECK_STR (tree_type (t, "t/a/b/c/deep.txt", &depth), "file");
    CHECK (depth == 4);
    CHECK_STR (tree_type (t, "t/x.txt", NULL), "file");
    CHECK_STR (tree_type (t, "t/\xff\xfe", NULL), "file");
    //  Links are listed, never walked: nothing from outside, nothing twice.
    CHECK_STR (tree_type (t, "t/out", NULL), "link");
    CHECK_STR (tree_type (t, "t/in", NULL), "link");
    CHECK_STR (tree_type (t, "t/out/secret", NULL), "");
    CHECK_STR (tree_type (t, "t/in/b", NULL), "");
    //  The toolchain folders and the product's names are left out.
    CHECK_STR (tree_type (t, "t/node_modules", NULL), "");
    CHECK_STR (tree_type (t, "t/.agenthold-x", NULL), "");
    CHECK (tree_count (t) == 8);
    CHECK (!mp_true (t, "depth_limit_reached") && !mp_true (t, "entries_limit_reached")
           && !mp_true (t, "incomplete"));
    msgpack_unpacked_destroy (&u);

    //  all: the hidden names too.
    t = tree (p, "t", 6, 100, true, &u, code);
    CHECK_STR (tree_type (t, "t/node_modules/m.js", NULL), "file");
    CHECK_STR (tree_type (t, "t/.agenthold-x", NULL), "file");
    msgpack_unpacked_destroy (&u);

    //  The limits: depth 2 stops below t/a/b; 3 entries stop the walk.
    t = tree (p, "t", 2, 100, false, &u, code);
    CHECK_STR (tree_type (t, "t/a/b", &depth), "dir");
    CHECK (depth == 2);
    CHECK_STR (tree_type (t, "t/a/b/c", NULL), "");
    CHECK (mp_true (t, "depth_limit_reached") && !mp_true (t, "entries_limit_reached"));
    msgpack_unpacked_destroy (&u);
    t = tree (p, "t", 6, 3, false, &u, code);
    CHECK (tree_count (t) == 3 && mp_true (t, "entries_limit_reached"));
    msgpack_unpacked_destroy (&u);

    //  The home itself ("."); the root followed when it is a link inside.
    t = tree (p, ".", 1, 1000, false, &u, code);
    CHECK_STR (tree_type (t, "t", NULL), "dir");
    CHECK_STR (tree_type (t, "abs_out", NULL), "link");
    msgpack_unpacked_destroy (&u);
    t = tree (p, "t/in", 6, 100, false, &u, code);
    CHECK_STR (tree_type (t, "t/in/b/c/deep.txt", NULL), "file");
    msgpack_unpacked_destroy (&u);

    //  Refused: out of range, a file, nothing there, out of the home.
    CHECK (tree (p, "t", 0, 100, false, &u, code) == NULL);
    CHECK_STR (code, "EINVAL");
    CHECK (tree (p, "t", 65, 100, false, &u, code) == NULL);
    CHECK_STR (code, "EINVAL");
    CHECK (tree (p, "t", 6, 0, false, &u, code) == NULL);
    CHECK_STR (code, "EINVAL");
    CHECK (tree (p, "t/x.txt", 6, 100, false, &u, code) == NULL);
    CHECK_STR (code, "ENOTDIR");
    CHECK (tree (p, "t/none", 6, 100, false, &u, code) == NULL);
    CHECK_STR (code, "ENOENT");
    CHECK (tree (p, "t/out", 6, 100, false, &u, code) == NULL);
    CHECK_STR (code, "EACCES");

    //  A directory that cannot be read below the root is skipped (root
    //  reads everything: only when not root).
    if (geteuid () != 0) {
        snprintf (path, sizeof path, "%s/t/a", home);
        CHECK (chmod (path, 0) == 0);
        t = tree (p, "t", 6, 100, false, &u, code);
        CHECK (mp_true (t, "incomplete"));
        CHECK_STR (tree_type (t, "t/a", NULL), "dir");
        msgpack_unpacked_destroy (&u);
        CHECK (chmod (path, 0755) == 0);
    }
}

static void test_hostile (peer_t *p)
{
    //  Fixture: outside/secret next to the home, links from inside.
    char path [PATH_MAX * 2], target [PATH_MAX * 2];
    snprintf (path, sizeof path, "%s/secret", outside);
    FILE *f = fopen (path, "w");
    fputs ("top secret\n", f);
    fclose (f);
    snprintf (path, sizeof path, "%s/abs_out", home);
    CHECK (symlink (outside, path) == 0);
    snprintf (path, sizeof path, "%s/rel_out", home);
    CHECK (symlink ("../outside", path) == 0);
    snprintf (path, sizeof path, "%s/chain1", home);
    CHECK (symlink ("chain2", path) == 0);
    snprintf (path, sizeof path, "%s/chain2", home);
    CHECK (symlink ("sub/../rel_out", path) == 0);
    snprintf (path, sizeof path, "%s/sub", home);
    CHECK (mkdir (path, 0755) == 0);
    snprintf (path, sizeof path, "%s/loop", home);
    CHECK (symlink ("loop", path) == 0);
    //  A legitimate inner link still works.
    snprintf (path, sizeof path, "%s/inner", home);
    CHECK (symlink ("sub", path) == 0);

    char longp [6000];
    memset (longp, 'a', sizeof longp - 1);
    longp [sizeof longp - 1] = 0;
    char longname [400];
    memset (longname, 'b', sizeof longname - 1);
    longname [sizeof longname - 1] = 0;
    snprintf (target, sizeof target, "%s/secret", outside);
    const char *bad [] = {
        "..", "../outside/secret", "/etc/passwd", target, "abs_out/secret", "abs_out/new",
        "rel_out/secret", "rel_out/new", "chain1/secret", "chain1/new", "sub/../../outside/x",
        "sub/../..", "./../outside", "inner/../../outside/secret", "loop/x", longp, longname,
    };
    const char *chans [] = { "fs.read", "fs.write", "fs.list", "fs.mkdir", "fs.remove", "fs.tree" };
    int refused = 0, total = 0;
    for (size_t c = 0; c < sizeof chans / sizeof *chans; c++) {
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
            ah_msg_t *req = req_new (chans [c]);
            ah_msg_set_str (req, "path", bad [i]);
            if (!strcmp (chans [c], "fs.mkdir"))
                ah_msg_set_bool (req, "parents", true);
            if (!strcmp (chans [c], "fs.remove"))
                ah_msg_set_bool (req, "recursive", true);
            uint32_t id = open_chan (p, &req);
            ah_msg_t *r = wait_header (p, id, 5000);
            if (reply_ok (r) && !strcmp (chans [c], "fs.write"))
                ah_yamux_write (p->y, id, (const uint8_t *) "pwned", 5);
            ah_yamux_close (p->y, id);
            if (reply_ok (r) && !strcmp (chans [c], "fs.write")) {
                ah_msg_destroy (&r);
                r = wait_header (p, id, 5000);
            }
            const char *code = reply_code (r);
            total++;
            bool ok = code && (!strcmp (code, "EACCES") || !strcmp (code, "EINVAL"));
            if (ok)
                refused++;
            else
                fprintf (stderr, "  %s \"%.40s\" not refused: %s\n", chans [c], bad [i],
                         code ? code : reply_ok (r) ? "ok" : "no reply");
            ah_msg_destroy (&r);
        }
        uint32_t id = open_nul_path (p, chans [c]);
        ah_yamux_close (p->y, id);
        ah_msg_t *r = wait_header (p, id, 5000);
        total++;
        if (r && reply_code (r) && !strcmp (reply_code (r), "EINVAL"))
            refused++;
        else
            fprintf (stderr, "  %s with a NUL not refused: %s\n", chans [c], r && reply_code (r) ? reply_code (r) : "?");
        ah_msg_destroy (&r);
    }
    CHECK (refused == total);
    //  Nothing outside changed: only secret, with its content.
    CHECK (count_entries (outside) == 1);
    snprintf (path, sizeof path, "%s/secret", outside);
    f = fopen (path, "r");
    char got [64] = "";
    if (f) {
        if (!fgets (got, sizeof got, f))
            got [0] = 0;
        fclose (f);
    }
    CHECK_STR (got, "top secret\n");
    //  And nothing appeared next to the home either.
    CHECK (count_entries (root) == 2);

    //  "." is the home: readable as a list, never removable nor written,
    //  and it exists. "" is no path.
    ah_msg_t *req = req_new ("fs.remove");
    ah_msg_set_str (req, "path", ".");
    ah_msg_set_bool (req, "recursive", true);
    ah_msg_t *r = simple (p, req);
    CHECK_STR (reply_code (r), "EACCES");
    ah_msg_destroy (&r);
    req = req_new ("fs.write");
    ah_msg_set_str (req, "path", ".");
    r = simple (p, req);
    CHECK_STR (reply_code (r), "EISDIR");
    ah_msg_destroy (&r);
    req = req_new ("fs.mkdir");
    ah_msg_set_str (req, "path", ".");
    r = simple (p, req);
    CHECK_STR (reply_code (r), "EEXIST");
    ah_msg_destroy (&r);
    req = req_new ("fs.write");
    ah_msg_set_str (req, "path", "");
    r = simple (p, req);
    CHECK_STR (reply_code (r), "EINVAL");
    ah_msg_destroy (&r);
    CHECK (file_exists (home, "sub"));

    //  Inner symlinks resolve inside the home.
    bool rf;
    ah_msg_t *t = write_file (p, "inner/via-link.txt", (const uint8_t *) "x", 1, &rf);
    CHECK (!rf && reply_ok (t));
    ah_msg_destroy (&t);
    CHECK (file_exists (home, "sub/via-link.txt"));
}

//  The shared table of home paths (tests/common/homepath_cases.h): each
//  one the grammar refuses is refused by every fs.* channel and by exec's
//  cwd with the grammar's code, before the file system is asked (a
//  refused fs.mkdir with parents or fs.write would otherwise leave
//  something behind). NULs: open_nul_path.
static void test_grammar (peer_t *p)
{
    const char *chans [] = { "fs.read", "fs.write", "fs.list", "fs.mkdir", "fs.remove", "fs.tree", "exec" };
    int before = count_entries (home);
    for (const homepath_case_t *c = homepath_cases; c->path; c++) {
        if (c->want_dir == 0 || homepath_case_len (c) != strlen (c->path))
            continue;
        const char *want = c->want_dir == -EACCES ? "EACCES" : "EINVAL";
        for (size_t k = 0; k < sizeof chans / sizeof *chans; k++) {
            ah_msg_t *req = req_new (chans [k]);
            bool exec = !strcmp (chans [k], "exec");
            ah_msg_set_str (req, exec ? "cwd" : "path", c->path);
            if (exec)
                ah_msg_set_str (req, "cmd", "touch made-by-a-bad-cwd");
            if (!strcmp (chans [k], "fs.mkdir"))
                ah_msg_set_bool (req, "parents", true);
            ah_msg_t *r = simple (p, req);
            const char *code = reply_code (r);
            bool ok = code && !strcmp (code, want);
            CHECK (ok);
            if (!ok)
                fprintf (stderr, "  %s \"%s\": %s, want %s\n", chans [k], c->path,
                         code ? code : reply_ok (r) ? "ok" : "no reply", want);
            ah_msg_destroy (&r);
        }
    }
    CHECK (count_entries (home) == before);
}

int main (void)
{
    signal (SIGPIPE, SIG_IGN);
    make_tree ("ah-sandboxd-test");

    int sv [2];
    CHECK (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    fcntl (sv [1], F_SETFL, O_NONBLOCK);
    ah_sandboxd_opts_t opts = {
        .agent_id = "agent-test", .home = home, .switch_user = false,
        .raw_transport = true, .raw_fd = sv [1],
    };
    ah_sandboxd_t *sbd = ah_sandboxd_start (&opts);
    CHECK (sbd != NULL);
    peer_t p = { .fd = sv [0] };
    ah_yamux_callbacks_t cb = { .output = cb_output, .on_data = cb_data, .on_eof = cb_eof,
                                .on_closed = cb_closed };
    p.y = ah_yamux_new (true, &cb, &p);

    test_hello (&p);
    test_fs (&p);
    test_hostile (&p);
    test_grammar (&p);
    test_tree (&p);
    test_arg_types (&p);
    test_reader ();
    test_exec (&p);
    test_flow (&p);
    test_flow_read (&p);
    test_pty (&p);
    test_pty_early (&p);
    test_stats (&p);
    test_malformed (&p);
    CHECK (!p.failed);

    //  Stop with a channel running: the process is killed, stop returns.
    ah_msg_t *r;
    uint32_t id = exec_open (&p, "sleep 60", 0, &r);
    pid_t pid = r ? (pid_t) ah_msg_int (r, "pid", 0) : 0;
    ah_msg_destroy (&r);
    (void) id;
    int64_t t0 = now_ms ();
    ah_sandboxd_stop (&sbd);
    CHECK (sbd == NULL);
    CHECK (now_ms () - t0 < 3000);
    CHECK (pid > 0 && kill (pid, 0) != 0);

    ah_yamux_destroy (&p.y);
    for (int i = 0; i < p.n; i++)
        free (p.s [i].buf);
    close (sv [0]);

    //  A lost connection mid-write leaves nothing behind either.
    CHECK (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    fcntl (sv [1], F_SETFL, O_NONBLOCK);
    opts.raw_fd = sv [1];
    sbd = ah_sandboxd_start (&opts);
    peer_t q = { .fd = sv [0] };
    q.y = ah_yamux_new (true, &cb, &q);
    ah_msg_t *req = req_new ("hello");
    ah_msg_set_int (req, "version", AH_PROTOCOL_VERSION);
    r = simple (&q, req);
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);
    req = req_new ("fs.write");
    ah_msg_set_str (req, "path", "lost.bin");
    id = open_chan (&q, &req);
    r = wait_header (&q, id, 5000);
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);
    static uint8_t chunk [100000];
    CHECK (ah_yamux_write (q.y, id, chunk, sizeof chunk) > 0);
    pump (&q, 200);
    CHECK (count_entries (home) > 0);
    int before = count_entries (home);
    close (sv [0]);                 //  the connection drops
    int64_t until = now_ms () + 3000;
    bool any = true;
    while (any && now_ms () < until) {
        usleep (50 * 1000);
        any = false;
        DIR *d = opendir (home);
        struct dirent *de;
        while (d && (de = readdir (d)))
            if (strstr (de->d_name, "lost"))
                any = true;
        if (d)
            closedir (d);
    }
    CHECK (!any);
    CHECK (count_entries (home) == before - 1);     //  the temporary went away
    ah_sandboxd_stop (&sbd);
    ah_yamux_destroy (&q.y);
    for (int i = 0; i < q.n; i++)
        free (q.s [i].buf);
    test_instances ();
    test_stop_while_dialling ();

    char cmd [PATH_MAX + 16];
    snprintf (cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system (cmd) != 0)
        fprintf (stderr, "cleanup of %s failed\n", root);
    return CHECK_DONE ();
}
