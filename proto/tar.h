/*  proto/tar.h: the one tar writer. Builds a ustar archive in memory, in
    an ah_buf_t: what the Docker driver sends the engine (a build context,
    boot.json and sandboxd through the archive endpoint).

    Every entry is owned by root (uid and gid 0, "root"), stamped with the
    current time; names and link targets are at most 99 bytes (no long-name
    extensions: what the driver sends is short). An archive may be given a
    size limit, end blocks included. Functions return 0, or -1 with errno:
    ENAMETOOLONG (a name or link over 99 bytes), EFBIG (the limit), ENOMEM,
    EINVAL (a file that is not a regular file), or what open/read said.
    Not thread-safe: one owner.                                         */
#ifndef AH_PROTO_TAR_H
#define AH_PROTO_TAR_H

#include "proto/buf.h"

#include <stddef.h>

#define AH_TAR_NAME_MAX     99

typedef enum {
    AH_TAR_FILE    = '0',
    AH_TAR_SYMLINK = '2',
    AH_TAR_DIR     = '5',
} ah_tar_type_t;

typedef struct {
    ah_buf_t buf;                       //  the archive so far
    size_t   max;                       //  0: no limit; else the finished size stays within it
} ah_tar_t;

//  An entry: a file with size bytes of data, a directory (name ending in
//  '/', no data) or a symlink to link (no data). The archive is unchanged
//  on failure.
int  ah_tar_add (ah_tar_t *self, const char *name, ah_tar_type_t type, unsigned mode,
                 const void *data, size_t size, const char *link);
//  A regular file from the host, read whole, under name; mode 0 keeps the
//  file's own permission bits. *size (when wanted) gets its size.
int  ah_tar_add_file (ah_tar_t *self, const char *name, const char *path, unsigned mode,
                      size_t *size);
//  The two zero blocks that end an archive. After it ah_buf_head and
//  ah_buf_size give the archive.
int  ah_tar_finish (ah_tar_t *self);
//  Frees the archive.
void ah_tar_free (ah_tar_t *self);

#endif
