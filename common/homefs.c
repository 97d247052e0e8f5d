/*  common/homefs.c: see homefs.h. Every path resolved from the home goes
    through s_beneath (openat2, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    glibc 2.36 has no wrapper, so it is the raw system call); the tree
    below its root is proto/hometree.c's walk, which follows nothing
    (sandboxd's fs.tree runs the same walk).                            */
#include "common/homefs.h"
#include "proto/homename.h"
#include "proto/hometree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define S_LIST_ENTRIES  10000       //  entries one listing answers at most

static int s_beneath (int dir, const char *path, int flags, uint64_t extra)
{
    struct open_how how = {
        .flags = (uint64_t) (flags | O_CLOEXEC),
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | extra
    };
    for (int attempt = 0; attempt < 8; attempt++) {
        long fd = syscall (SYS_openat2, dir, path, &how, sizeof how);
        if (fd >= 0)
            return (int) fd;
        //  EAGAIN: a rename somewhere raced the walk; the kernel asks again.
        if (errno != EAGAIN && errno != EINTR)
            break;
    }
    return -errno;
}

static const char *s_why (int e)
{
    switch (e) {
        case EXDEV:
        case ELOOP:     return "the path escapes the home directory (\"..\", or a symlink out of it)";
        case ENOENT:    return "no such file or directory";
        case EACCES:
        case EPERM:     return "permission denied";
        case ENOTDIR:   return "not a directory";
        case EISDIR:    return "is a directory";
        case EINVAL:    return "not a regular file";
        case ENAMETOOLONG: return "path too long";
        case ENOSYS:    return "this kernel cannot resolve paths beneath a directory (openat2)";
        default:        return strerror (e);
    }
}

int ah_homefs_open_home (const char *dir)
{
    int fd = open (dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

int ah_homefs_open_file (int home, const char *path, struct stat *st, const char **why)
{
    //  O_PATH opens nothing: a device or FIFO is looked at, never opened.
    int p = s_beneath (home, path, O_PATH, 0);
    if (p < 0) {
        *why = s_why (-p);
        return p;
    }
    int rc;
    if (fstat (p, st) != 0)
        rc = -errno;
    else
    if (S_ISDIR (st->st_mode))
        rc = -EISDIR;
    else
    if (!S_ISREG (st->st_mode))
        rc = -EINVAL;
    else {
        //  The same inode, reopened for reading (no second walk to race).
        char self [64];
        snprintf (self, sizeof self, "/proc/self/fd/%d", p);
        rc = open (self, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (rc < 0)
            rc = -errno;
        else {
            struct stat again;
            if (fstat (rc, &again) != 0 || again.st_ino != st->st_ino || again.st_dev != st->st_dev
            ||  !S_ISREG (again.st_mode)) {
                close (rc);
                rc = -EINVAL;
            }
            else
                fcntl (rc, F_SETFL, 0);
        }
    }
    close (p);
    if (rc < 0)
        *why = s_why (-rc);
    return rc;
}

bool ah_homefs_hidden (const char *name)
{
    return ah_homename_hidden (name);
}

bool ah_homefs_uploaded (const char *path)
{
    return strncmp (path, "uploads/", 8) == 0 && path [8];
}

//  --------------------------------------------------------------------
//  Reading a directory

static const char *s_type (mode_t mode)
{
    return S_ISREG (mode) ? "file" : S_ISDIR (mode) ? "dir" : S_ISLNK (mode) ? "link" : "other";
}

//  A name as JSON text: bytes that are not UTF-8 become '?' (a name is
//  the agent's bytes, not necessarily text).
static json_t *s_text (const char *text)
{
    json_t *j = json_string (text);
    if (j)
        return j;
    char *copy = strdup (text);
    if (!copy)
        return NULL;
    for (char *c = copy; *c; c++)
        if ((unsigned char) *c >= 0x80)
            *c = '?';
    j = json_string (copy);
    free (copy);
    return j;
}

//  The entry's fields (sandboxd's fs.list entry, plus uploaded).
static json_t *s_entry (const char *name, const char *path, const struct stat *st)
{
    json_t *e = json_pack ("{s:o s:s s:I s:I s:I}", "name", s_text (name), "type", s_type (st->st_mode),
                           "size", (json_int_t) st->st_size, "mode", (json_int_t) (st->st_mode & 07777),
                           "mtime", (json_int_t) st->st_mtime);
    if (e && ah_homefs_uploaded (path))
        json_object_set_new (e, "uploaded", json_true ());
    return e;
}

json_t *ah_homefs_list (int home, const char *path, bool all, int *error, const char **why)
{
    int fd = s_beneath (home, path, O_RDONLY | O_DIRECTORY, 0);
    ah_hometree_names_t ns;
    int rc = fd < 0 ? fd : ah_hometree_names (fd, &ns);
    if (rc < 0) {
        if (fd >= 0)
            close (fd);
        *error = rc;
        *why = s_why (-rc);
        return NULL;
    }
    json_t *entries = json_array ();
    bool truncated = ns.over;
    for (size_t i = 0; i < ns.n; i++) {
        struct stat st;
        if (!all && ah_homefs_hidden (ns.names [i]))
            continue;
        if (fstatat (fd, ns.names [i], &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;               //  vanished meanwhile
        if (json_array_size (entries) == S_LIST_ENTRIES) {
            truncated = true;
            break;
        }
        char *full = ah_hometree_join (path, ns.names [i]);
        json_t *e = full ? s_entry (ns.names [i], full, &st) : NULL;
        free (full);
        if (e)
            json_array_append_new (entries, e);
    }
    close (fd);
    ah_hometree_names_free (&ns);
    return json_pack ("{s:o s:b}", "entries", entries, "truncated", truncated);
}

//  --------------------------------------------------------------------
//  The tree, breadth first

typedef struct {
    json_t *entries, *skipped;
} s_tree_t;

static int s_tree_entry (void *arg, const char *name, const char *path, const struct stat *st, int depth)
{
    s_tree_t *t = arg;
    json_t *e = s_entry (name, path, st);
    if (!e)
        return -1;
    json_object_set_new (e, "path", s_text (path));
    json_object_set_new (e, "depth", json_integer (depth));
    return json_array_append_new (t->entries, e) == 0 ? 0 : -1;
}

static void s_tree_skip (void *arg, const char *path, int error)
{
    s_tree_t *t = arg;
    json_array_append_new (t->skipped, json_pack ("{s:o s:s}", "path", s_text (path), "error",
                           error ? s_why (error) : "more entries than one listing reads"));
}

static const ah_hometree_ops_t s_tree_ops = { .entry = s_tree_entry, .skip = s_tree_skip };

json_t *ah_homefs_tree (int home, const char *path, const ah_homefs_tree_opts_t *opts,
                        int *error, const char **why)
{
    int root = s_beneath (home, path, O_PATH | O_DIRECTORY, 0);
    if (root < 0) {
        *error = root;
        *why = s_why (-root);
        return NULL;
    }
    //  The root must be readable itself: only its refusal is an error.
    int probe = s_beneath (root, ".", O_RDONLY | O_DIRECTORY, 0);
    close (root);
    if (probe < 0) {
        *error = probe;
        *why = s_why (-probe);
        return NULL;
    }
    s_tree_t t = { json_array (), json_array () };
    ah_hometree_opts_t wopts = { .max_depth = opts->max_depth, .max_entries = opts->max_entries,
                                 .all = opts->all };
    ah_hometree_result_t res;
    int rc = ah_hometree_walk (probe, path, &wopts, &s_tree_ops, &t, &res);
    close (probe);
    if (rc != 0) {
        json_decref (t.entries);
        json_decref (t.skipped);
        *error = -ENOMEM;
        *why = "out of memory";
        return NULL;
    }
    return json_pack ("{s:o s:o s:I s:i s:i s:b s:b s:b s:o}", "path", s_text (path), "entries", t.entries,
                      "count", (json_int_t) res.count, "max_depth", opts->max_depth,
                      "max_entries", opts->max_entries, "depth_limit_reached", res.depth_limit_reached,
                      "entries_limit_reached", res.entries_limit_reached, "incomplete", res.incomplete,
                      "skipped", t.skipped);
}

//  --------------------------------------------------------------------
//  Removal

static int s_rm_one (const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void) st;
    (void) ftw;
    int rc = (type == FTW_DP) ? rmdir (path) : unlink (path);
    return rc != 0 && errno != ENOENT ? -1 : 0;
}

int ah_homefs_remove (const char *dir)
{
    struct stat st;
    if (lstat (dir, &st) != 0)
        return errno == ENOENT ? 0 : -errno;
    //  FTW_PHYS: symlinks are removed, never followed.
    if (nftw (dir, s_rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return errno ? -errno : -EIO;
    return 0;
}
