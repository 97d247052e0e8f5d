/*  common/file.c: see file.h.                                          */
#include "common/file.h"
#include "common/str.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
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

int ah_keyfile_load (const char *path, uint8_t *key, size_t size, bool create, char **why)
{
    *why = NULL;
    int fd = open (path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno == ENOENT && !create)
        return 1;
    if (fd < 0 && errno == ENOENT) {
        uint8_t *fresh = malloc (size);
        if (!fresh || getrandom (fresh, size, 0) != (ssize_t) size) {
            *why = ah_strf ("no entropy for the key %s: %s", path, fresh ? strerror (errno) : "out of memory");
            free (fresh);
            return -1;
        }
        fd = open (path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        bool ok = fd >= 0 && fchmod (fd, 0600) == 0 && write (fd, fresh, size) == (ssize_t) size && fsync (fd) == 0;
        int e = errno;
        if (fd >= 0)
            close (fd);
        explicit_bzero (fresh, size);
        free (fresh);
        if (!ok && e != EEXIST) {
            *why = ah_strf ("cannot write %s: %s", path, strerror (e));
            if (fd >= 0)
                unlink (path);
            return -1;
        }
        fd = open (path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    }
    struct stat st;
    bool ok = fd >= 0 && fstat (fd, &st) == 0 && S_ISREG (st.st_mode) && st.st_size == (off_t) size
           && !(st.st_mode & 077) && read (fd, key, size) == (ssize_t) size;
    if (!ok) {
        if (fd < 0)
            *why = ah_strf ("cannot read %s: %s", path, strerror (errno));
        else if (S_ISREG (st.st_mode) && (st.st_mode & 077))
            *why = ah_strf ("%s has mode %04o: a key others may read is not used (chmod 600 %s; and if "
                            "someone else may have read it, change what it protects)", path,
                            (unsigned) (st.st_mode & 07777), path);
        else
            *why = ah_strf ("%s must be a file of %zu bytes readable by its owner only (mode 0600)", path, size);
        explicit_bzero (key, size);
    }
    if (fd >= 0)
        close (fd);
    return ok ? 0 : -1;
}
