/*  proto/hometree.h: a home walked breadth first, the one walk behind
    both trees a person reads: the server's own (common/homefs.c, a home
    it opens itself) and sandboxd's fs.tree channel (sandboxd/fs_tree.c,
    a home only the sandbox reaches). Same order, same limits, same
    hidden names (proto/homename.h), so the two answers cannot drift.

    The caller opens the root however its side must (openat2 beneath the
    home, or sandboxd/path.c's walk); below the root nothing is followed:
    each directory is reopened from the root one component at a time
    with O_NOFOLLOW, so a directory swapped for a symlink after it was
    listed is skipped, never walked. Symlinks are listed, never
    descended. Each directory's names are read sorted, at most
    AH_HOMETREE_DIR_NAMES of them.

    No allocation escapes; no dependency (sandboxd links it). Runs on the
    caller's thread.                                                    */
#ifndef AH_PROTO_HOMETREE_H
#define AH_PROTO_HOMETREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#define AH_HOMETREE_DIR_NAMES   200000      //  names read from one directory at most

typedef struct {
    char **names;
    size_t n, cap;
    bool over;                      //  more names than AH_HOMETREE_DIR_NAMES
} ah_hometree_names_t;

//  The names in the directory dir (borrowed: read through a dup), sorted,
//  without "." and "..". 0 / -errno.
int  ah_hometree_names (int dir, ah_hometree_names_t *ns);
void ah_hometree_names_free (ah_hometree_names_t *ns);

//  "dir/name", or name when dir is the home ("." or ""). Caller frees.
char *ah_hometree_join (const char *dir, const char *name);

typedef struct {
    int  max_depth;                 //  levels below the root listed (1: its entries)
    int64_t max_entries;
    bool all;                       //  the hidden names too (and counted)
} ah_hometree_opts_t;

typedef struct {
    //  One entry: its name, its path from the home (the root's path
    //  joined), its lstat, its depth (1: the root's own entries).
    //  0 goes on; 1 stops the walk as if max_entries were reached (the
    //  caller's own bound); -1 stops it (out of memory).
    int  (*entry) (void *arg, const char *name, const char *path, const struct stat *st, int depth);
    //  A directory below the root not read (error: a positive errno) or
    //  not read whole (error 0: more names than one listing reads).
    void (*skip) (void *arg, const char *path, int error);
} ah_hometree_ops_t;

typedef struct {
    int64_t count;                  //  entries given
    bool depth_limit_reached, entries_limit_reached, incomplete;
} ah_hometree_result_t;

//  Walks the directory root (borrowed), whose path from the home is
//  root_path. 0, or -ENOMEM (or -1 from an entry callback).
int ah_hometree_walk (int root, const char *root_path, const ah_hometree_opts_t *opts,
                      const ah_hometree_ops_t *ops, void *arg, ah_hometree_result_t *result);

#endif
