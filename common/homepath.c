/*  common/homepath.c: see homepath.h.                                  */
#include "common/homepath.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

int ah_homepath_check (const char *path, size_t len, unsigned flags, const char **why)
{
    const char *dummy;
    if (!why)
        why = &dummy;
    if (!path || len == 0) {
        *why = "is empty (\".\" is the home)";
        return -EINVAL;
    }
    if (len > AH_HOMEPATH_MAX) {
        *why = "is longer than 4095 bytes";
        return -EINVAL;
    }
    if (memchr (path, 0, len)) {
        *why = "holds a NUL byte";
        return -EINVAL;
    }
    for (size_t i = 0; i < len; i++)
        if ((unsigned char) path [i] < 0x20 || path [i] == 0x7f) {
            *why = "holds a control character";
            return -EINVAL;
        }
    if (path [0] == '/') {
        *why = "is absolute: it escapes the home directory (paths are relative to /home/agent)";
        return -EACCES;
    }
    if (len == 1 && path [0] == '.') {
        if (flags & AH_HOMEPATH_HOME)
            return 0;
        *why = "names the home directory itself ('.'), not an entry in it";
        return -EINVAL;
    }
    //  Components: each ends at a '/' or at the end; the '/' after the
    //  last one would leave an empty component (a trailing '/').
    size_t i = 0;
    while (true) {
        size_t start = i;
        while (i < len && path [i] != '/')
            i++;
        size_t n = i - start;
        if (n == 0) {
            *why = i == len ? "ends in '/'" : "has an empty component ('//')";
            return -EINVAL;
        }
        if (n == 1 && path [start] == '.') {
            *why = "has a '.' component (paths are taken as sent, never resolved)";
            return -EINVAL;
        }
        if (n == 2 && path [start] == '.' && path [start + 1] == '.') {
            *why = "has a '..' component: it escapes the home directory (paths are taken as sent, "
                   "never resolved)";
            return -EACCES;
        }
        if (n > AH_HOMEPATH_NAME_MAX) {
            *why = "has a component longer than 255 bytes";
            return -EINVAL;
        }
        if (i == len)
            return 0;
        i++;                                //  the '/'
    }
}

size_t ah_homepath_trim (const char *path, size_t len)
{
    if (path && len > 1 && path [len - 1] == '/' && path [len - 2] != '/')
        return len - 1;
    return len;
}
