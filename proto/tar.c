/*  proto/tar.c: the tar writer (see tar.h).  */
#include "proto/tar.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BLOCK   512

static size_t s_padded (size_t size) { return (size + BLOCK - 1) / BLOCK * BLOCK; }

//  Room for an entry of size data bytes, within the limit. NULL with errno.
static uint8_t *
s_reserve (ah_tar_t *self, size_t size)
{
    size_t entry = BLOCK + s_padded (size);
    if (size > SIZE_MAX / 2
    ||  (self->max && ah_buf_size (&self->buf) + entry + 2 * BLOCK > self->max)) {
        errno = EFBIG;
        return NULL;
    }
    uint8_t *p = ah_buf_reserve (&self->buf, entry);
    if (!p)
        errno = ENOMEM;
    return p;
}

//  The 512-byte header, checksum last (it covers the link name too).
static void
s_header (uint8_t *h, const char *name, char type, unsigned mode, size_t size, const char *link)
{
    memset (h, 0, BLOCK);
    snprintf ((char *) h, 100, "%s", name);
    snprintf ((char *) h + 100, 8, "%07o", mode & 07777);
    snprintf ((char *) h + 108, 8, "%07o", 0);
    snprintf ((char *) h + 116, 8, "%07o", 0);
    snprintf ((char *) h + 124, 12, "%011zo", size);
    snprintf ((char *) h + 136, 12, "%011lo", (unsigned long) time (NULL));
    h [156] = type;
    if (link)
        snprintf ((char *) h + 157, 100, "%s", link);
    memcpy (h + 257, "ustar", 6);
    memcpy (h + 263, "00", 2);
    snprintf ((char *) h + 265, 32, "root");
    snprintf ((char *) h + 297, 32, "root");
    memset (h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < BLOCK; i++)
        sum += h [i];
    snprintf ((char *) h + 148, 8, "%06o", sum);
    h [155] = ' ';
}

static int
s_check_names (const char *name, const char *link)
{
    if (!name || !*name || strlen (name) > AH_TAR_NAME_MAX || (link && strlen (link) > AH_TAR_NAME_MAX)) {
        errno = name && *name ? ENAMETOOLONG : EINVAL;
        return -1;
    }
    return 0;
}

int
ah_tar_add (ah_tar_t *self, const char *name, ah_tar_type_t type, unsigned mode,
            const void *data, size_t size, const char *link)
{
    if (s_check_names (name, link))
        return -1;
    if (type != AH_TAR_FILE)
        size = 0;
    uint8_t *p = s_reserve (self, size);
    if (!p)
        return -1;
    s_header (p, name, (char) type, mode, size, type == AH_TAR_SYMLINK ? link : NULL);
    if (size)
        memcpy (p + BLOCK, data, size);
    memset (p + BLOCK + size, 0, s_padded (size) - size);
    ah_buf_commit (&self->buf, BLOCK + s_padded (size));
    return 0;
}

int
ah_tar_add_file (ah_tar_t *self, const char *name, const char *path, unsigned mode,
                 size_t *size_p)
{
    if (s_check_names (name, NULL))
        return -1;
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat sb;
    int rc = -1;
    uint8_t *p = NULL;
    if (fstat (fd, &sb))
        goto out;
    if (!S_ISREG (sb.st_mode)) {
        errno = EINVAL;
        goto out;
    }
    size_t size = (size_t) sb.st_size;
    if (!(p = s_reserve (self, size)))
        goto out;
    //  Read straight into the archive; counted only once all of it came.
    size_t got = 0;
    while (got < size) {
        ssize_t n = read (fd, p + BLOCK + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = EIO;            //  the file shrank while read
            goto out;
        }
        got += (size_t) n;
    }
    s_header (p, name, AH_TAR_FILE, mode ? mode : (unsigned) (sb.st_mode & 0777), size, NULL);
    memset (p + BLOCK + size, 0, s_padded (size) - size);
    ah_buf_commit (&self->buf, BLOCK + s_padded (size));
    if (size_p)
        *size_p = size;
    rc = 0;
out:;
    int saved = errno;
    close (fd);
    errno = saved;
    return rc;
}

int
ah_tar_finish (ah_tar_t *self)
{
    uint8_t *p = ah_buf_reserve (&self->buf, 2 * BLOCK);
    if (!p) {
        errno = ENOMEM;
        return -1;
    }
    memset (p, 0, 2 * BLOCK);
    ah_buf_commit (&self->buf, 2 * BLOCK);
    return 0;
}

void
ah_tar_free (ah_tar_t *self)
{
    ah_buf_free (&self->buf);
}
