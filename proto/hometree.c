/*  proto/hometree.c: see hometree.h.                                   */
#include "proto/hometree.h"
#include "proto/homename.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int s_name_cmp (const void *a, const void *b)
{
    return strcmp (*(char * const *) a, *(char * const *) b);
}

void ah_hometree_names_free (ah_hometree_names_t *ns)
{
    for (size_t i = 0; i < ns->n; i++)
        free (ns->names [i]);
    free (ns->names);
    memset (ns, 0, sizeof *ns);
}

int ah_hometree_names (int dir, ah_hometree_names_t *ns)
{
    memset (ns, 0, sizeof *ns);
    int fd = dup (dir);
    DIR *d = fd < 0 ? NULL : fdopendir (fd);
    if (!d) {
        int e = errno;
        if (fd >= 0)
            close (fd);
        return -e;
    }
    rewinddir (d);                  //  the dup shares the offset
    struct dirent *de;
    errno = 0;
    while ((de = readdir (d))) {
        if (strcmp (de->d_name, ".") == 0 || strcmp (de->d_name, "..") == 0)
            continue;
        if (ns->n == AH_HOMETREE_DIR_NAMES) {
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
        ah_hometree_names_free (ns);
        return -e;
    }
    if (ns->n > 1)
        qsort (ns->names, ns->n, sizeof *ns->names, s_name_cmp);
    return 0;
}

char *ah_hometree_join (const char *dir, const char *name)
{
    size_t a = strlen (dir), b = strlen (name);
    bool top = a == 0 || strcmp (dir, ".") == 0;
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

//  The directory rel (names this walk read, joined by '/') opened from
//  root one component at a time, following nothing. fd / -errno.
static int s_open_below (int root, const char *rel)
{
    int fd = openat (root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    for (const char *p = rel; *p; ) {
        const char *slash = strchr (p, '/');
        size_t n = slash ? (size_t) (slash - p) : strlen (p);
        char comp [NAME_MAX + 1];
        if (n > NAME_MAX) {
            close (fd);
            return -ENAMETOOLONG;
        }
        memcpy (comp, p, n);
        comp [n] = 0;
        int next = n == 0 || strcmp (comp, ".") == 0 ? dup (fd)
                 : openat (fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        close (fd);
        if (next < 0)
            return -e;
        fd = next;
        p += n;
        if (*p == '/')
            p++;
    }
    return fd;
}

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

//  One directory: its entries given, its subdirectories queued. 0 / -1.
static int s_dir (int root, const char *root_path, const char *dir, int depth, s_queue_t *q,
                  const ah_hometree_opts_t *opts, const ah_hometree_ops_t *ops, void *arg,
                  ah_hometree_result_t *res)
{
    char *shown = ah_hometree_join (root_path, dir);
    if (!shown)
        return -1;
    int fd = s_open_below (root, dir);
    ah_hometree_names_t ns;
    int rc = fd < 0 ? fd : ah_hometree_names (fd, &ns);
    if (rc < 0) {
        res->incomplete = true;
        ops->skip (arg, shown, -rc);
        if (fd >= 0)
            close (fd);
        free (shown);
        return 0;
    }
    if (ns.over) {
        res->incomplete = true;
        ops->skip (arg, shown, 0);
    }
    int out = 0;
    for (size_t i = 0; i < ns.n && out == 0 && !res->entries_limit_reached; i++) {
        const char *name = ns.names [i];
        if (!opts->all && ah_homename_hidden (name))
            continue;
        struct stat st;
        if (fstatat (fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;               //  vanished meanwhile
        if (res->count >= opts->max_entries) {
            res->entries_limit_reached = true;
            break;
        }
        char *rel = ah_hometree_join (dir, name);
        char *full = rel ? ah_hometree_join (root_path, rel) : NULL;
        int given = full ? ops->entry (arg, name, full, &st, depth + 1) : -1;
        if (given == 1)
            res->entries_limit_reached = true;
        else
        if (given < 0)
            out = -1;
        else {
            res->count++;
            if (S_ISDIR (st.st_mode)) {
                if (depth + 1 < opts->max_depth)
                    out = s_push (q, rel, depth + 1);
                else
                    res->depth_limit_reached = true;
            }
        }
        free (rel);
        free (full);
    }
    ah_hometree_names_free (&ns);
    close (fd);
    free (shown);
    return out;
}

int ah_hometree_walk (int root, const char *root_path, const ah_hometree_opts_t *opts,
                      const ah_hometree_ops_t *ops, void *arg, ah_hometree_result_t *res)
{
    memset (res, 0, sizeof *res);
    s_queue_t q = { 0 };
    int rc = s_push (&q, ".", 0);
    while (rc == 0 && !res->entries_limit_reached && q.head < q.n) {
        size_t i = q.head++;
        rc = s_dir (root, root_path, q.paths [i], q.depths [i], &q, opts, ops, arg, res);
    }
    for (size_t i = 0; i < q.n; i++)
        free (q.paths [i]);
    free (q.paths);
    free (q.depths);
    return rc == 0 ? 0 : -ENOMEM;
}
