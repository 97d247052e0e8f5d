/*  sandboxd/passwd.c: see passwd.h.  */
#include "sandboxd/passwd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

//  Copy field [s, e) into out (cap with NUL); -1 if it does not fit.
static int s_field (const char *s, const char *e, char *out, size_t cap)
{
    size_t n = (size_t) (e - s);
    if (n >= cap)
        return -1;
    memcpy (out, s, n);
    out [n] = 0;
    return 0;
}

static int s_number (const char *s, const char *e, unsigned long *v)
{
    if (s == e || e - s > 10)
        return -1;
    *v = 0;
    for (; s < e; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        *v = *v * 10 + (unsigned long) (*s - '0');
    }
    return 0;
}

//  The file's text (at most AH_PASSWD_MAX bytes), NUL-terminated, its
//  length in *len; NULL when unreadable. Caller frees.
static char *s_slurp (const char *file, size_t *len)
{
    int fd = open (file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    char *text = malloc (AH_PASSWD_MAX + 1);
    if (!text) {
        close (fd);
        return NULL;
    }
    size_t got = 0;
    while (got < AH_PASSWD_MAX) {
        ssize_t r = read (fd, text + got, AH_PASSWD_MAX - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t) r;
    }
    close (fd);
    text [got] = 0;
    *len = got;
    return text;
}

int ah_passwd_find (const char *file, const char *name, uid_t uid, ah_passwd_t *out)
{
    size_t got = 0;
    char *text = s_slurp (file ? file : "/etc/passwd", &got);
    if (!text)
        return -1;
    int rc = -1;
    char *line = text;
    char *end = text + got;
    while (line < end && rc != 0) {
        char *eol = memchr (line, '\n', (size_t) (end - line));
        if (!eol)
            eol = end;
        //  name:passwd:uid:gid:gecos:dir:shell
        const char *f [8];
        int nf = 0;
        f [nf++] = line;
        for (char *p = line; p < eol && nf < 8; p++)
            if (*p == ':')
                f [nf++] = p + 1;
        if (nf == 7 && line [0] != '#') {
            ah_passwd_t e;
            unsigned long u, g;
            if (s_field (f [0], f [1] - 1, e.name, sizeof e.name) == 0
            &&  s_number (f [2], f [3] - 1, &u) == 0
            &&  s_number (f [3], f [4] - 1, &g) == 0
            &&  s_field (f [5], f [6] - 1, e.dir, sizeof e.dir) == 0
            &&  s_field (f [6], eol, e.shell, sizeof e.shell) == 0) {
                e.uid = (uid_t) u;
                e.gid = (gid_t) g;
                if (name ? strcmp (e.name, name) == 0 : e.uid == uid) {
                    *out = e;
                    rc = 0;
                }
            }
        }
        line = eol + 1;
    }
    free (text);
    return rc;
}

//  Calls fn (arg, name, gid, members) for each well-formed line of
//  /etc/group (name:passwd:gid:member,member...).
static void s_groups (const char *file, void (*fn) (void *, const char *, gid_t, const char *),
                      void *arg)
{
    size_t got = 0;
    char *text = s_slurp (file ? file : "/etc/group", &got);
    if (!text)
        return;
    char *line = text;
    char *end = text + got;
    while (line < end) {
        char *eol = memchr (line, '\n', (size_t) (end - line));
        if (!eol)
            eol = end;
        *eol = 0;
        const char *f [5];
        int nf = 0;
        f [nf++] = line;
        for (char *p = line; p < eol && nf < 5; p++)
            if (*p == ':') {
                *p = 0;
                f [nf++] = p + 1;
            }
        unsigned long g;
        if (nf == 4 && line [0] != '#' && s_number (f [2], f [2] + strlen (f [2]), &g) == 0)
            fn (arg, f [0], (gid_t) g, f [3]);
        line = eol + 1;
    }
    free (text);
}

typedef struct {
    const char *name;
    gid_t *gids;
    int n, max;
    bool found;
    gid_t gid;
} s_group_walk_t;

static void s_add (s_group_walk_t *w, gid_t g)
{
    for (int i = 0; i < w->n; i++)
        if (w->gids [i] == g)
            return;
    if (w->n < w->max)
        w->gids [w->n++] = g;
}

static void s_member (void *arg, const char *name, gid_t gid, const char *members)
{
    (void) name;
    s_group_walk_t *w = (s_group_walk_t *) arg;
    size_t nl = strlen (w->name);
    for (const char *m = members; *m; ) {
        size_t ml = strcspn (m, ",");
        if (ml == nl && memcmp (m, w->name, nl) == 0)
            s_add (w, gid);
        m += ml + (m [ml] == ',');
    }
}

int ah_group_list (const char *file, const char *name, gid_t gid, gid_t *gids, int max)
{
    s_group_walk_t w = { .name = name, .gids = gids, .max = max };
    s_add (&w, gid);
    if (name && *name)
        s_groups (file, s_member, &w);
    return w.n;
}

static void s_named (void *arg, const char *name, gid_t gid, const char *members)
{
    (void) members;
    s_group_walk_t *w = (s_group_walk_t *) arg;
    if (!w->found && strcmp (name, w->name) == 0) {
        w->found = true;
        w->gid = gid;
    }
}

int ah_group_find (const char *file, const char *name, gid_t *gid)
{
    s_group_walk_t w = { .name = name };
    s_groups (file, s_named, &w);
    if (w.found)
        *gid = w.gid;
    return w.found ? 0 : -1;
}
