/*  common/file.c: see file.h.                                          */
#include "common/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int ah_file_put (const char *path, const void *data, size_t len, mode_t mode, bool sync)
{
    char *tmp = NULL;
    if (asprintf (&tmp, "%s.XXXXXX", path) < 0) {
        errno = ENOMEM;
        return -1;
    }
    int fd = mkostemp (tmp, O_CLOEXEC);     //  created 0600
    if (fd < 0) {
        int e = errno;
        free (tmp);
        errno = e;
        return -1;
    }
    bool ok = fchmod (fd, mode) == 0;
    for (size_t done = 0; ok && done < len; ) {
        ssize_t n = write (fd, (const char *) data + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0)
            errno = EIO;
        ok = n > 0;
        done += n > 0 ? (size_t) n : 0;
    }
    ok = ok && (!sync || fsync (fd) == 0);
    int e = ok ? 0 : errno;
    if (close (fd) != 0 && ok)
        ok = false, e = errno;
    if (ok && rename (tmp, path) != 0)
        ok = false, e = errno;
    if (!ok)
        unlink (tmp);
    free (tmp);
    errno = e;
    return ok ? 0 : -1;
}
