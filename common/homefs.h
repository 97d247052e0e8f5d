/*  common/homefs.h: a sandbox's home read from the server's side, without
    its container (docs/api.md "Reading without waking").

    The home is a directory the server can reach (the fake driver's, or the
    Docker driver's bind-backed home volume). Everything under it was
    written by the agent, so every path is resolved by the kernel beneath
    the home (openat2 with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS): `..`
    and symlinks that climb out, absolute symlinks and /proc magic links
    are refused (EXDEV, ELOOP), whatever the agent planted. The refusal
    rules are sandboxd's: nothing outside the home, no device files or
    other special files read (a file is opened O_PATH first, checked to be
    regular, and only then reopened for reading), symlinks inside the home
    followed. Writing is not offered: writes go through a running sandbox.

    Plain functions, no state: each call is on the caller's thread.     */
#ifndef AH_HOMEFS_H
#define AH_HOMEFS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

//  The home directory dir itself (O_PATH, never a symlink): fd, or -errno.
int  ah_homefs_open_home (const char *dir);

//  A regular file at path (relative to the home, a common/homepath.h
//  path) opened for reading: fd with *st filled, or -errno and *why (a
//  static sentence): EXDEV/ELOOP "escapes the home", EISDIR, EINVAL "not a
//  regular file" (devices, FIFOs, sockets), ENOENT, EACCES.
int  ah_homefs_open_file (int home, const char *path, struct stat *st, const char **why);

//  The names that a listing a person reads leaves out unless asked
//  (proto/homename.h: the rule sandboxd's fs.tree applies too).
bool ah_homefs_hidden (const char *name);
//  true when path (relative to the home) is under uploads/: put there by
//  a person.
bool ah_homefs_uploaded (const char *path);

//  One directory: {"entries": [{name, type, size, mode, mtime,
//  uploaded?}], "truncated"} sorted by name, the hidden names left out
//  unless all. NULL with -errno in *error and *why when the directory
//  cannot be opened.
json_t *ah_homefs_list (int home, const char *path, bool all, int *error, const char **why);

typedef struct {
    int  max_depth;                 //  levels below the root listed (1: its entries)
    int  max_entries;
    bool all;                       //  the hidden names too (and counted)
} ah_homefs_tree_opts_t;

//  Breadth first from path: {"path", "entries": [{path, name, type, size,
//  mode, mtime, depth, uploaded?}], "count", "max_depth", "max_entries",
//  "depth_limit_reached", "entries_limit_reached", "incomplete",
//  "skipped": [{path, error}]}. Symlinks are listed, never descended. A
//  directory below the root that cannot be read is skipped and the
//  listing marked incomplete; only the root refusing is an error (NULL
//  with -errno in *error and *why).
json_t *ah_homefs_tree (int home, const char *path, const ah_homefs_tree_opts_t *opts,
                        int *error, const char **why);

//  Removes the directory dir and everything in it, following no symlink
//  (a home whose sandbox is destroyed). Absent is success. 0 / -errno.
int  ah_homefs_remove (const char *dir);

#endif
