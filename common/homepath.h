/*  common/homepath.h: the grammar of a path in a sandbox's home, one rule
    for every entry point that takes one: the API's file routes, its tree
    and exec's cwd (actors/api), the server's own home reader
    (actors/api/home_read.c, common/homefs), hostd's HOSTD_HOME
    (hostd/hostd_home.c) and sandboxd's fs.* channels and exec cwd
    (sandboxd/path.c). docs/api.md "Names and paths" and docs/tunnel.md
    "Paths" state it for clients.

    A home path is relative to /home/agent and is taken as sent:
      - components joined by single '/' (no leading, trailing or doubled
        '/'), each 1..255 bytes (NAME_MAX), none of them "." or "..";
      - no NUL and no control character (C0, DEL);
      - 1..4095 bytes in all (PATH_MAX less its NUL).
    "." alone names the home itself, and only where a directory is meant
    (AH_HOMEPATH_HOME). "" is no path.

    Refused, never normalised. A path that would mean the same file once
    its "." and "//" were folded is a 400 (the API) or EINVAL (sandboxd),
    so each file has one spelling: the path the API logs, audits, marks as
    uploaded (uploads/...) or hides by name is the path sandboxd opens.
    A normaliser would have to be the same on both sides of the tunnel
    and re-run before every comparison; a refusal cannot drift. ".." is
    refused even where it would stay inside: nothing resolves a path by
    rewriting its string; symlinks are followed by sandboxd's walk and the
    kernel (openat2 RESOLVE_BENEATH), each refusing what leads out.

    The API lets a directory be named with one trailing '/' (listing,
    mkdir, tree: `files/src/`); ah_homepath_trim takes it off before the
    check, so no '/'-ended path travels further.

    A plain function, no state, no dependency (sandboxd links it).      */
#ifndef AH_HOMEPATH_H
#define AH_HOMEPATH_H

#include <stddef.h>

#define AH_HOMEPATH_MAX       4095      //  bytes in a path, at most
#define AH_HOMEPATH_NAME_MAX  255       //  bytes in a component, at most

//  Flags of ah_homepath_check.
#define AH_HOMEPATH_HOME      1u        //  "." (the home itself) is a path

//  0 when path (len bytes; it may hold a NUL, which is refused) is a home
//  path, else -EINVAL, or -EACCES for one that would leave the home (an
//  absolute path, a ".." component), with *why: a static sentence that
//  completes "path 'x' ...", e.g. "has a '..' component (paths are taken
//  as sent, never resolved)". path NULL is "is empty".
int ah_homepath_check (const char *path, size_t len, unsigned flags, const char **why);

//  The length of path (len bytes) without one trailing '/' after
//  something else: how the API takes a directory named "src/" (never
//  "/" alone, nor the second '/' of "a//").
size_t ah_homepath_trim (const char *path, size_t len);

#endif
