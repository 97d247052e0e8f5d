/*  sandboxd/passwd.c: see passwd.h.  */
#include "sandboxd/passwd.h"

#include <errno.h>
#include <fcntl.h>
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

int ah_passwd_find (const char *file, const char *name, uid_t uid, ah_passwd_t *out)
{
    int fd = open (file ? file : "/etc/passwd", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char *text = malloc (AH_PASSWD_MAX + 1);
    if (!text) {
        close (fd);
        return -1;
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
