/*  sandboxd/fs_tree.c: the fs.tree channel (docs/tunnel.md): the home
    walked breadth first from a directory by proto/hometree.c, the walk
    the server runs itself when it reads a home directly (common/homefs.c,
    ah_homefs_tree), for a home only the sandbox reaches (a claim on a
    Kubernetes cluster).

    Bounded on every axis: max_depth levels (1..64), max_entries entries
    (1..1000000), S_TREE_BYTES of encoded entries, 200000 names read from
    one directory, S_TREE_SKIPPED directories named as skipped. The root
    is resolved like every fs.* path (sandboxd/path.c: symlinks inside
    the home followed, nothing outside it); below it the walk follows
    nothing (proto/hometree.h).

    The whole reply is built before it is sent (one synchronous walk on
    the loop, as the server's own tree is one call on its thread), then
    streams out as the window allows: header {"ok", "size"}, then size
    bytes of one msgpack map, then FIN.                                 */
#include "sandboxd/chan_int.h"
#include "sandboxd/path.h"
#include "proto/channel.h"
#include "proto/hometree.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_TREE_BYTES     (8u << 20)         //  encoded entries at most
#define S_TREE_SKIPPED   256                //  skipped directories named at most
#define S_TREE_DEPTH_MAX 64
#define S_TREE_ENTRIES_MAX 1000000

typedef struct {
    msgpack_sbuffer items;          //  the entries, encoded
    msgpack_packer pk;
    int64_t count;
    msgpack_sbuffer skipped;        //  the skipped directories, encoded
    msgpack_packer ps;
    int64_t nskipped;
} tree_t;

static void s_pack_str (msgpack_packer *pk, const char *s)
{
    msgpack_pack_str_with_body (pk, s, strlen (s));
}

static void s_pack_bool (msgpack_packer *pk, bool b)
{
    if (b)
        msgpack_pack_true (pk);
    else
        msgpack_pack_false (pk);
}

static void s_skip (void *arg, const char *path, int error)
{
    tree_t *t = arg;
    if (t->nskipped >= S_TREE_SKIPPED)
        return;
    msgpack_pack_map (&t->ps, 2);
    s_pack_str (&t->ps, "path");
    s_pack_str (&t->ps, path);
    s_pack_str (&t->ps, "error");
    s_pack_str (&t->ps, error ? strerror (error) : "more entries than one listing reads");
    t->nskipped++;
}

static const char *s_type (mode_t mode)
{
    return S_ISREG (mode) ? "file" : S_ISDIR (mode) ? "dir" : S_ISLNK (mode) ? "link" : "other";
}

//  One entry (fs.list's fields, plus path and depth); 1 when it does not
//  fit S_TREE_BYTES (nothing added: the walk stops there).
static int s_entry (void *arg, const char *name, const char *path, const struct stat *st, int depth)
{
    tree_t *t = arg;
    size_t before = t->items.size;
    msgpack_pack_map (&t->pk, 7);
    s_pack_str (&t->pk, "path");
    s_pack_str (&t->pk, path);
    s_pack_str (&t->pk, "name");
    s_pack_str (&t->pk, name);
    s_pack_str (&t->pk, "type");
    s_pack_str (&t->pk, s_type (st->st_mode));
    s_pack_str (&t->pk, "size");
    msgpack_pack_int64 (&t->pk, (int64_t) st->st_size);
    s_pack_str (&t->pk, "mode");
    msgpack_pack_int64 (&t->pk, (int64_t) (st->st_mode & 07777));
    s_pack_str (&t->pk, "mtime");
    msgpack_pack_int64 (&t->pk, (int64_t) st->st_mtime);
    s_pack_str (&t->pk, "depth");
    msgpack_pack_int64 (&t->pk, depth);
    if (t->items.size > S_TREE_BYTES) {
        t->items.size = before;
        return 1;
    }
    t->count++;
    return 0;
}

static const ah_hometree_ops_t s_ops = { .entry = s_entry, .skip = s_skip };

//  The reply's body: one map, in b.
static void s_body (tree_t *t, const ah_hometree_result_t *res, msgpack_sbuffer *b)
{
    msgpack_packer pb;
    msgpack_packer_init (&pb, b, msgpack_sbuffer_write);
    msgpack_pack_map (&pb, 6);
    s_pack_str (&pb, "entries");
    msgpack_pack_array (&pb, (size_t) t->count);
    msgpack_sbuffer_write (b, t->items.data ? t->items.data : "", t->items.size);
    s_pack_str (&pb, "count");
    msgpack_pack_int64 (&pb, t->count);
    s_pack_str (&pb, "depth_limit_reached");
    s_pack_bool (&pb, res->depth_limit_reached);
    s_pack_str (&pb, "entries_limit_reached");
    s_pack_bool (&pb, res->entries_limit_reached);
    s_pack_str (&pb, "incomplete");
    s_pack_bool (&pb, res->incomplete);
    s_pack_str (&pb, "skipped");
    msgpack_pack_array (&pb, (size_t) t->nskipped);
    msgpack_sbuffer_write (b, t->skipped.data ? t->skipped.data : "", t->skipped.size);
}

void ah_sbd_fs_tree (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req,
                     const char *path, size_t plen)
{
    int64_t max_depth = ah_msg_int (req, "max_depth", 6);
    int64_t max_entries = ah_msg_int (req, "max_entries", 2000);
    if (max_depth < 1 || max_depth > S_TREE_DEPTH_MAX || max_entries < 1
    ||  max_entries > S_TREE_ENTRIES_MAX) {
        ah_sbd_refuse (self, ch, "EINVAL", "fs.tree: max_depth must be 1..%d and max_entries 1..%d",
                       S_TREE_DEPTH_MAX, S_TREE_ENTRIES_MAX);
        return;
    }
    const char *err = NULL;
    int root = ah_path_open (self->env.home_fd, path, plen, O_RDONLY | O_DIRECTORY, &err);
    if (root < 0) {
        ah_sbd_refuse (self, ch, ah_sbd_code (-root), "fs.tree \"%.200s\": %s", path, err);
        return;
    }
    char shown [AH_PATH_MAX + 1];
    snprintf (shown, sizeof shown, "%.*s", (int) plen, path);
    ah_hometree_opts_t opts = { .max_depth = (int) max_depth, .max_entries = max_entries,
                                .all = ah_msg_bool (req, "all", false) };
    tree_t t = { .count = 0 };
    msgpack_sbuffer_init (&t.items);
    msgpack_packer_init (&t.pk, &t.items, msgpack_sbuffer_write);
    msgpack_sbuffer_init (&t.skipped);
    msgpack_packer_init (&t.ps, &t.skipped, msgpack_sbuffer_write);
    ah_hometree_result_t res;
    int walked = ah_hometree_walk (root, shown, &opts, &s_ops, &t, &res);
    close (root);
    msgpack_sbuffer body;
    msgpack_sbuffer_init (&body);
    if (walked == 0)
        s_body (&t, &res, &body);
    msgpack_sbuffer_destroy (&t.items);
    msgpack_sbuffer_destroy (&t.skipped);
    if (walked != 0 || !body.data) {
        msgpack_sbuffer_destroy (&body);
        ah_sbd_refuse (self, ch, "EIO", "fs.tree \"%.200s\": out of memory", path);
        return;
    }
    //  Header and body queued together, FIN once both have gone.
    ah_msg_t *map = ah_msg_new ("");
    ah_msg_set_bool (map, "ok", true);
    ah_msg_set_int (map, "size", (int64_t) body.size);
    uint8_t *hdr = NULL;
    size_t hsize = 0;
    int rc = ah_chan_header_encode (map, &hdr, &hsize);
    ah_msg_destroy (&map);
    if (rc == 0)
        rc = ah_buf_append (&ch->out, hdr, hsize);
    if (rc == 0)
        rc = ah_buf_append (&ch->out, body.data, body.size);
    free (hdr);
    msgpack_sbuffer_destroy (&body);
    if (rc != 0) {
        ah_sbd_reset (self, ch, "out of memory");
        return;
    }
    ch->kind = K_DONE;
    ch->want_fin = true;
    ah_sbd_flush (self, ch);
}
