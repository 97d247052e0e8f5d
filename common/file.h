/*  common/file.h: a small file written whole or not at all.           */
#ifndef AH_FILE_H
#define AH_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

//  data (len bytes) into path with mode mode, whole or not at all: a new
//  file beside it (mkstemp: created, never followed through a link),
//  written, fsync'd when sync, renamed over path. Nobody ever reads half
//  of it or a looser mode. 0, or -1 with errno set (the temporary removed).
int ah_file_put (const char *path, const void *data, size_t len, mode_t mode, bool sync);

//  A key of size bytes kept in path, readable by its owner only: read
//  into key. When path does not exist and create is set, size random
//  bytes are written there first (O_EXCL, mode 0600, fsync'd). 0; 1
//  when it does not exist and create is not set (key untouched); -1
//  with *why (the caller frees) when it cannot be read or made, or is
//  not a regular file of exactly size bytes with no bit for the group
//  or others (a key that others may have read is refused, not used).
int ah_keyfile_load (const char *path, uint8_t *key, size_t size, bool create, char **why);

#endif
