/*  common/file.h: a small file written whole or not at all.           */
#ifndef AH_FILE_H
#define AH_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

//  data (len bytes) into path with mode mode, whole or not at all: a new
//  file beside it (mkstemp: created, never followed through a link),
//  written, fsync'd when sync, renamed over path. Nobody ever reads half
//  of it or a looser mode. 0, or -1 with errno set (the temporary removed).
int ah_file_put (const char *path, const void *data, size_t len, mode_t mode, bool sync);

#endif
