/*  common/homefs.c: see homefs.h. Every open below the home goes through
    s_beneath (openat2, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS); glibc
    2.36 has no wrapper, so it is the raw system call.                  */
#include "common/homefs.h"

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

#define S_DIR_NAMES     200000      //  names read from one directory at most (as sandboxd)
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

static const char *s_toolchain [] = {
    ".venv", "venv", "node_modules", "__pycache__", ".pytest_cache", ".mypy_cache",
    ".ruff_cache", ".tox", ".git", ".next", ".cache"
};

bool ah_homefs_hidden (const char *name)
{
    for (size_t i = 0; i < sizeof s_toolchain / sizeof s_toolchain [0]; i++)
        if (strcmp (name, s_toolchain [i]) == 0)
            return true;
    if (strncmp (name, ".agenthold", 10) == 0)
        return true;
    //  ".<name>.ah-XXXXXXXX": sandboxd's upload in progress (sandboxd/fs.c)
    size_t n = strlen (name);
    if (n >= 14 && name [0] == '.' && strncmp (name + n - 12, ".ah-", 4) == 0) {
        for (size_t i = n - 8; i < n; i++)
            if (!strchr ("0123456789abcdef", name [i]))
                return false;
        return true;
    }
    return false;
}

bool ah_homefs_uploaded (const char *path)
{
    return strncmp (path, "uploads/", 8) == 0 && path [8];
}

//  --------------------------------------------------------------------
//  Reading a directory

typedef struct {
    char **names;
    size_t n, cap;
    bool over;                      //  more names than S_DIR_NAMES
} s_names_t;

static void s_names_free (s_names_t *ns)
{
    for (size_t i = 0; i < ns->n; i++)
        free (ns->names [i]);
    free (ns->names);
    memset (ns, 0, sizeof *ns);
}

static int s_name_cmp (const void *a, const void *b)
{
    return strcmp (*(char * const *) a, *(char * const *) b);
}

//  The names in the directory fd (taken: closed), sorted. 0 / -errno.
static int s_read_names (int fd, s_names_t *ns)
{
    DIR *d = fdopendir (fd);
    if (!d) {
        int e = errno;
        close (fd);
        return -e;
    }
    memset (ns, 0, sizeof *ns);
    struct dirent *de;
    errno = 0;
    while ((de = readdir (d))) {
        if (strcmp (de->d_name, ".") == 0 || strcmp (de->d_name, "..") == 0)
            continue;
        if (ns->n == S_DIR_NAMES) {
            ns->over = true;
            break;
        }
        if (ns->n == ns->cap) {
            size_t cap = ns->cap ? ns->cap * 2 : 64;
            char **p = realloc (ns->names, cap * sizeof *p);
            if (!p)
                break;
            ns->names = p;
            ns->cap = cap;
        }
        if ((ns->names [ns->n] = strdup (de->d_name)))
            ns->n++;
        errno = 0;
    }
    int e = errno;
    closedir (d);
    if (e && !ns->over) {
        s_names_free (ns);
        return -e;
    }
    if (ns->n > 1)
        qsort (ns->names, ns->n, sizeof *ns->names, s_name_cmp);
    return 0;
}

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

//  "dir/name", or name when dir is the home ("."). Caller frees.
static char *s_join (const char *dir, const char *name)
{
    size_t a = strlen (dir), b = strlen (name);
    bool top = strcmp (dir, ".") == 0;
    char *p = malloc ((top ? 0 : a + 1) + b + 1);
    if (!p)
        return NULL;
    if (top)
        memcpy (p, name, b + 1);
    else {
        memcpy (p, dir, a);
        p [a] = '/';
        memcpy (p + a + 1, name, b + 1);
    }
    return p;
}

json_t *ah_homefs_list (int home, const char *path, bool all, int *error, const char **why)
{
    int fd = s_beneath (home, path, O_RDONLY | O_DIRECTORY, 0);
    s_names_t ns;
    int rc = fd < 0 ? fd : s_read_names (dup (fd), &ns);
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
        char *full = s_join (path, ns.names [i]);
        json_t *e = full ? s_entry (ns.names [i], full, &st) : NULL;
        free (full);
        if (e)
            json_array_append_new (entries, e);
    }
    close (fd);
    s_names_free (&ns);
    return json_pack ("{s:o s:b}", "entries", entries, "truncated", truncated);
}

//  --------------------------------------------------------------------
//  The tree, breadth first

typedef struct {
    char **paths;                   //  directories still to read, relative to the root
    int *depths;
    size_t head, n, cap;
} s_queue_t;

static int s_push (s_queue_t *q, const char *path, int depth)
{
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 64;
        char **p = realloc (q->paths, cap * sizeof *p);
        if (!p)
            return -1;
        q->paths = p;
        int *d = realloc (q->depths, cap * sizeof *d);
        if (!d)
            return -1;
        q->depths = d;
        q->cap = cap;
    }
    if (!(q->paths [q->n] = strdup (path)))
        return -1;
    q->depths [q->n++] = depth;
    return 0;
}

static void s_skip (json_t *skipped, const char *path, const char *error)
{
    json_array_append_new (skipped, json_pack ("{s:o s:s}", "path", s_text (path), "error", error));
}

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
    if (probe < 0) {
        close (root);
        *error = probe;
        *why = s_why (-probe);
        return NULL;
    }
    close (probe);
    json_t *entries = json_array (), *skipped = json_array ();
    bool depth_hit = false, entries_hit = false;
    s_queue_t q = { 0 };
    bool oom = s_push (&q, ".", 0) != 0;
    while (!oom && !entries_hit && q.head < q.n) {
        const char *dir = q.paths [q.head];
        int depth = q.depths [q.head];
        q.head++;
        //  Below the root nothing is followed: a directory swapped for a
        //  symlink after it was listed is refused, not walked.
        int fd = s_beneath (root, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, RESOLVE_NO_SYMLINKS);
        s_names_t ns;
        int rc = fd < 0 ? fd : s_read_names (dup (fd), &ns);
        char *shown = s_join (path, dir);
        if (rc < 0) {
            if (fd >= 0)
                close (fd);
            s_skip (skipped, shown ? shown : dir, s_why (-rc));
            free (shown);
            continue;
        }
        if (ns.over)
            s_skip (skipped, shown ? shown : dir, "more entries than one listing reads");
        for (size_t i = 0; i < ns.n && !oom; i++) {
            if (!opts->all && ah_homefs_hidden (ns.names [i]))
                continue;
            struct stat st;
            if (fstatat (fd, ns.names [i], &st, AT_SYMLINK_NOFOLLOW) != 0)
                continue;           //  vanished meanwhile
            if ((int) json_array_size (entries) >= opts->max_entries) {
                entries_hit = true;
                break;
            }
            char *rel = s_join (dir, ns.names [i]);
            char *full = rel ? s_join (path, rel) : NULL;
            json_t *e = full ? s_entry (ns.names [i], full, &st) : NULL;
            if (e) {
                json_object_set_new (e, "path", s_text (full));
                json_object_set_new (e, "depth", json_integer (depth + 1));
                json_array_append_new (entries, e);
            }
            else
                oom = true;
            if (e && S_ISDIR (st.st_mode)) {
                if (depth + 1 < opts->max_depth)
                    oom = s_push (&q, rel, depth + 1) != 0;
                else
                    depth_hit = true;
            }
            free (rel);
            free (full);
        }
        close (fd);
        s_names_free (&ns);
        free (shown);
    }
    for (size_t i = 0; i < q.n; i++)
        free (q.paths [i]);
    free (q.paths);
    free (q.depths);
    close (root);
    if (oom) {
        json_decref (entries);
        json_decref (skipped);
        *error = -ENOMEM;
        *why = "out of memory";
        return NULL;
    }
    size_t count = json_array_size (entries);
    bool incomplete = json_array_size (skipped) > 0;
    return json_pack ("{s:o s:o s:I s:i s:i s:b s:b s:b s:o}", "path", s_text (path), "entries", entries,
                      "count", (json_int_t) count, "max_depth", opts->max_depth,
                      "max_entries", opts->max_entries, "depth_limit_reached", depth_hit,
                      "entries_limit_reached", entries_hit, "incomplete", incomplete,
                      "skipped", skipped);
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
