/*  sandboxd/fs.c: the fs.* channels (docs/tunnel.md): list, read, write,
    mkdir, remove. Every path goes through sandboxd/path.c; reads stream
    in window-sized chunks; writes land by fsync + rename or not at all.  */
#include "sandboxd/chan_int.h"
#include "sandboxd/path.h"
#include "common/homepath.h"
#include "proto/channel.h"
#include "common/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

//  ---------------------------------------------------------------------
//  fs.list

static int s_name_cmp (const void *a, const void *b)
{
    return strcmp (*(char * const *) a, *(char * const *) b);
}

void ah_sbd_fs_list (ah_sbd_session_t *self, chan_t *ch, const char *path, size_t plen)
{
    const char *err = NULL;
    int fd = ah_path_open (self->env.home_fd, path, plen, O_RDONLY | O_DIRECTORY, &err);
    if (fd < 0) {
        ah_sbd_refuse (self, ch, ah_sbd_code (-fd), "fs.list \"%.200s\": %s", path, err);
        return;
    }
    DIR *d = fdopendir (fd);
    if (!d) {
        int e = errno;
        close (fd);
        ah_sbd_refuse (self, ch, ah_sbd_code (e), "fs.list \"%.200s\": %s", path, strerror (e));
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    bool truncated = false;
    struct dirent *de;
    while ((de = readdir (d))) {
        if (strcmp (de->d_name, ".") == 0 || strcmp (de->d_name, "..") == 0)
            continue;
        if (n == S_LIST_NAMES) {
            truncated = true;
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **p = realloc (names, cap * sizeof *names);
            if (!p)
                break;
            names = p;
        }
        names [n] = strdup (de->d_name);
        if (names [n])
            n++;
    }
    if (n > 1)
        qsort (names, n, sizeof *names, s_name_cmp);
    msgpack_sbuffer items;
    msgpack_sbuffer_init (&items);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &items, msgpack_sbuffer_write);
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (fstatat (dirfd (d), names [i], &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;       //  vanished meanwhile
        size_t before = items.size;
        const char *type = S_ISREG (st.st_mode) ? "file" : S_ISDIR (st.st_mode) ? "dir"
                         : S_ISLNK (st.st_mode) ? "link" : "other";
        size_t nl = strlen (names [i]);
        msgpack_pack_map (&pk, 5);
        msgpack_pack_str_with_body (&pk, "name", 4);
        msgpack_pack_str_with_body (&pk, names [i], nl);
        msgpack_pack_str_with_body (&pk, "type", 4);
        msgpack_pack_str_with_body (&pk, type, strlen (type));
        msgpack_pack_str_with_body (&pk, "size", 4);
        msgpack_pack_int64 (&pk, (int64_t) st.st_size);
        msgpack_pack_str_with_body (&pk, "mode", 4);
        msgpack_pack_int64 (&pk, (int64_t) (st.st_mode & 07777));
        msgpack_pack_str_with_body (&pk, "mtime", 5);
        msgpack_pack_int64 (&pk, (int64_t) st.st_mtime);
        if (items.size > S_LIST_BYTES) {
            items.size = before;        //  drop the entry that did not fit
            truncated = true;
            break;
        }
        count++;
    }
    for (size_t i = 0; i < n; i++)
        free (names [i]);
    free (names);
    closedir (d);

    msgpack_sbuffer arr;
    msgpack_sbuffer_init (&arr);
    msgpack_packer pa;
    msgpack_packer_init (&pa, &arr, msgpack_sbuffer_write);
    msgpack_pack_array (&pa, count);
    msgpack_sbuffer_write (&arr, items.data ? items.data : "", items.size);
    ah_msg_t *map = ah_msg_new ("");
    ah_msg_set_bool (map, "ok", true);
    if (ah_msg_set_raw (map, "entries", arr.data, arr.size) != 0)
        ah_warn ("sandboxd", "fs.list: entries did not encode");
    ah_msg_set_bool (map, "truncated", truncated);
    ah_sbd_finish (self, ch, &map);
    msgpack_sbuffer_destroy (&items);
    msgpack_sbuffer_destroy (&arr);
}

//  ---------------------------------------------------------------------
//  fs.read

void ah_sbd_fs_read (ah_sbd_session_t *self, chan_t *ch, const char *path, size_t plen)
{
    const char *err = NULL;
    //  O_NONBLOCK: a FIFO planted in the home must not hang the loop.
    int fd = ah_path_open (self->env.home_fd, path, plen, O_RDONLY | O_NONBLOCK, &err);
    if (fd < 0) {
        ah_sbd_refuse (self, ch, ah_sbd_code (-fd), "fs.read \"%.200s\": %s", path, err);
        return;
    }
    struct stat st;
    if (fstat (fd, &st) != 0 || !S_ISREG (st.st_mode)) {
        bool dir = S_ISDIR (st.st_mode);
        close (fd);
        ah_sbd_refuse (self, ch, dir ? "EISDIR" : "EINVAL", "fs.read \"%.200s\": %s", path,
                  dir ? "is a directory" : "not a regular file");
        return;
    }
    fcntl (fd, F_SETFL, 0);
    ch->file = fd;
    ch->size = (uint64_t) st.st_size;
    ch->done = 0;
    ch->kind = K_FS_READ;
    ah_msg_t *map = ah_msg_new ("");
    ah_msg_set_bool (map, "ok", true);
    ah_msg_set_int (map, "size", (int64_t) ch->size);
    ah_sbd_send_header (self, ch, map);
    ah_msg_destroy (&map);
}

//  Send file bytes while the window and the transport allow.
void ah_sbd_fs_read_pump (ah_sbd_session_t *self, chan_t *ch)
{
    int rounds = 16;
    while (!ch->gone && ah_sbd_out_idle (ch) && ch->file >= 0 && rounds-- > 0
           && self->env.backlog (self->env.ud) < AH_SBD_BACKLOG_MAX) {
        if (ch->done == ch->size) {
            close (ch->file);
            ch->file = -1;
            ch->want_fin = true;
            ah_sbd_flush (self, ch);
            return;
        }
        uint32_t win = ah_yamux_send_window (self->yamux, ch->id);
        if (win == 0)
            return;
        size_t want = S_FILE_CHUNK;
        if (want > win)
            want = win;
        if (want > ch->size - ch->done)
            want = (size_t) (ch->size - ch->done);
        //  Read straight into the channel's output (no bounce buffer).
        uint8_t *p = ah_buf_reserve (&ch->out, want);
        if (!p) {
            ah_sbd_reset (self, ch, "out of memory");
            return;
        }
        ssize_t r = read (ch->file, p, want);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            ah_sbd_reset (self, ch, r == 0 ? "file shrank while being read" : strerror (errno));
            return;
        }
        ah_buf_commit (&ch->out, (size_t) r);
        ch->done += (uint64_t) r;
        ah_sbd_flush (self, ch);
    }
}

//  ---------------------------------------------------------------------
//  fs.write

void ah_sbd_fs_write (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req,
                        const char *path, size_t plen)
{
    const char *err = NULL;
    int64_t mode = ah_msg_int (req, "mode", 0644);             //  its type: s_args_ok (chan.c)
    if (mode < 0 || mode > 07777) {
        ah_sbd_refuse (self, ch, "EINVAL", "fs.write: mode must be an integer 0..07777");
        return;
    }
    int dir = ah_path_open_parent (self->env.home_fd, path, plen, ch->leaf, &err);
    if (dir < 0) {
        ah_sbd_refuse (self, ch, dir == -EINVAL && err && strstr (err, "itself") ? "EISDIR" : ah_sbd_code (-dir),
                  "fs.write \"%.200s\": %s", path, err);
        return;
    }
    struct stat st;
    if (fstatat (dir, ch->leaf, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR (st.st_mode)) {
        close (dir);
        ah_sbd_refuse (self, ch, "EISDIR", "fs.write \"%.200s\": is a directory", path);
        return;
    }
    //  A hidden temporary next to the target: same file system, so the
    //  rename at the end is atomic.
    int fd = -1;
    for (int attempt = 0; attempt < 16 && fd < 0; attempt++) {
        uint32_t r = 0;
        if (getrandom (&r, sizeof r, GRND_NONBLOCK) != sizeof r)
            r = (uint32_t) ah_sbd_now () ^ (uint32_t) attempt * 2654435761u;
        snprintf (ch->tmp, sizeof ch->tmp, ".%.200s.ah-%08x", ch->leaf, r);
        fd = openat (dir, ch->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                     (mode_t) mode & 0777);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        int e = errno;
        ch->tmp [0] = 0;
        close (dir);
        ah_sbd_refuse (self, ch, ah_sbd_code (e), "fs.write \"%.200s\": %s", path, strerror (e));
        return;
    }
    fchmod (fd, (mode_t) mode);
    if (self->user.switch_to)
        if (fchown (fd, self->user.uid, self->user.gid) != 0)
            ah_warn ("sandboxd", "fs.write: chown: %s", strerror (errno));
    ch->dir = dir;
    ch->file = fd;
    ch->done = ch->flushed = 0;
    ch->kind = K_FS_WRITE;
    ah_msg_t *map = ah_msg_new ("");
    ah_msg_set_bool (map, "ok", true);
    ah_sbd_send_header (self, ch, map);
    ah_msg_destroy (&map);
}

//  The opener's FIN: the bytes are all here. Land the file or report why not.
void ah_sbd_fs_write_finish (ah_sbd_session_t *self, chan_t *ch)
{
    int e = ch->write_errno;
    if (!e && fsync (ch->file) != 0)
        e = errno;
    if (!e && close (ch->file) != 0)
        e = errno;
    else if (e)
        close (ch->file);
    ch->file = -1;
    if (!e && renameat (ch->dir, ch->tmp, ch->dir, ch->leaf) != 0)
        e = errno;
    if (!e) {
        ch->tmp [0] = 0;
        fsync (ch->dir);        //  the rename itself survives a crash
    }
    ah_msg_t *map = ah_msg_new ("");
    if (e) {
        ah_msg_set_bool (map, "ok", false);
        ah_msg_set_str (map, "code", ah_sbd_code (e));
        ah_msg_set_strf (map, "error", "fs.write \"%s\": %s", ch->leaf, strerror (e));
    }
    else {
        ah_msg_set_bool (map, "ok", true);
        ah_msg_set_int (map, "size", (int64_t) ch->done);
    }
    ah_sbd_release (self, ch);       //  removes the temporary if it is still there
    ah_sbd_finish (self, ch, &map);
}

//  ---------------------------------------------------------------------
//  fs.mkdir, fs.remove

static int s_mkdir_one (ah_sbd_session_t *self, const char *path, size_t plen, mode_t mode,
                        bool exist_ok, const char **err)
{
    char leaf [NAME_MAX + 1];
    int dir = ah_path_open_parent (self->env.home_fd, path, plen, leaf, err);
    if (dir < 0)
        return dir;
    int rc = 0;
    if (mkdirat (dir, leaf, mode) != 0) {
        rc = -errno;
        struct stat st;
        if (rc == -EEXIST && exist_ok) {
            //  Existing is fine if it is a directory (or a link to one;
            //  the next step's walk decides whether that link may be used).
            if (fstatat (dir, leaf, &st, 0) != 0)
                rc = -errno;
            else if (S_ISDIR (st.st_mode))
                rc = 0;
        }
        if (rc)
            *err = strerror (-rc);
    }
    else if (self->user.switch_to) {
        if (fchownat (dir, leaf, self->user.uid, self->user.gid, AT_SYMLINK_NOFOLLOW) != 0)
            ah_warn ("sandboxd", "fs.mkdir: chown: %s", strerror (errno));
    }
    close (dir);
    return rc;
}

void ah_sbd_fs_mkdir (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req,
                        const char *path, size_t plen)
{
    bool parents = ah_msg_bool (req, "parents", false);        //  types: s_args_ok (chan.c)
    int64_t mode_arg = ah_msg_int (req, "mode", 0755);
    if (mode_arg < 0 || mode_arg > 07777) {
        ah_sbd_refuse (self, ch, "EINVAL", "fs.mkdir: mode must be an integer 0..07777");
        return;
    }
    mode_t mode = (mode_t) mode_arg;
    const char *err = NULL;
    int rc = ah_homepath_check (path, plen, AH_HOMEPATH_HOME, &err);
    if (rc == 0 && parents) {
        //  Each prefix in turn, through the same safe walk.
        for (size_t i = 1; i < plen && rc == 0; i++)
            if (path [i] == '/')
                rc = s_mkdir_one (self, path, i, mode, true, &err);
    }
    if (rc == 0)
        rc = s_mkdir_one (self, path, plen, mode, parents, &err);
    if (rc == -EINVAL && err && strstr (err, "itself")) {
        rc = parents ? 0 : -EEXIST;         //  the home exists
        err = "the home directory exists";
    }
    if (rc)
        ah_sbd_refuse (self, ch, ah_sbd_code (-rc), "fs.mkdir \"%.200s\": %s", path, err);
    else
        ah_sbd_ok (self, ch);
}

//  Remove leaf in dir and everything below it, never following symlinks.
static int s_rmtree (int dir, const char *leaf, int depth)
{
    if (depth > AH_PATH_MAX_DEPTH)
        return -ELOOP;
    int fd = openat (dir, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    DIR *d = fdopendir (fd);
    if (!d) {
        close (fd);
        return -errno;
    }
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir (d))) {
        if (strcmp (de->d_name, ".") == 0 || strcmp (de->d_name, "..") == 0)
            continue;
        struct stat st;
        if (fstatat (fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (S_ISDIR (st.st_mode))
            rc = s_rmtree (fd, de->d_name, depth + 1);
        else if (unlinkat (fd, de->d_name, 0) != 0 && errno != ENOENT)
            rc = -errno;
    }
    closedir (d);
    if (rc == 0 && unlinkat (dir, leaf, AT_REMOVEDIR) != 0)
        rc = -errno;
    return rc;
}

void ah_sbd_fs_remove (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req,
                         const char *path, size_t plen)
{
    bool recursive = ah_msg_bool (req, "recursive", false);
    const char *err = NULL;
    char leaf [NAME_MAX + 1];
    int dir = ah_path_open_parent (self->env.home_fd, path, plen, leaf, &err);
    if (dir < 0) {
        if (dir == -EINVAL && err && strstr (err, "itself"))
            ah_sbd_refuse (self, ch, "EACCES", "fs.remove \"%.200s\": removing the home directory is refused", path);
        else
            ah_sbd_refuse (self, ch, ah_sbd_code (-dir), "fs.remove \"%.200s\": %s", path, err);
        return;
    }
    struct stat st;
    int rc = 0;
    if (fstatat (dir, leaf, &st, AT_SYMLINK_NOFOLLOW) != 0)
        rc = -errno;
    else if (S_ISDIR (st.st_mode))
        rc = recursive ? s_rmtree (dir, leaf, 0)
           : unlinkat (dir, leaf, AT_REMOVEDIR) == 0 ? 0 : -errno;
    else
        rc = unlinkat (dir, leaf, 0) == 0 ? 0 : -errno;
    close (dir);
    if (rc == -EEXIST)
        rc = -ENOTEMPTY;
    if (rc)
        ah_sbd_refuse (self, ch, ah_sbd_code (-rc), "fs.remove \"%.200s\": %s", path, strerror (-rc));
    else
        ah_sbd_ok (self, ch);
}
