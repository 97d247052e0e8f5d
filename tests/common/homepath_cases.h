/*  tests/common/homepath_cases.h: one table of home paths, good and
    hostile, fed through every entry point that takes one (the grammar
    itself, the API's files, tree and exec routes, sandboxd's walk and
    its fs.* channels, hostd's HOSTD_HOME). A path is good or refused the
    same way everywhere, or the test that sees it otherwise fails.

    want_dir is the answer where the home itself may be named (a listing,
    a tree, a cwd: AH_HOMEPATH_HOME), want_file where it may not; 0 good,
    else -EINVAL or -EACCES (one that would leave the home). len 0: the
    path is a C string. The long cases (a component of 256 bytes, a path
    of 4096) are made by homepath_long_case.                           */
#ifndef AH_TEST_HOMEPATH_CASES_H
#define AH_TEST_HOMEPATH_CASES_H

#include "common/homepath.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *path;
    size_t len;
    int want_dir, want_file;
} homepath_case_t;

static const homepath_case_t homepath_cases [] = {
    //  good
    { "a", 0, 0, 0 },
    { "a/b/c.txt", 0, 0, 0 },
    { ".hidden/.x", 0, 0, 0 },
    { "..a/b..", 0, 0, 0 },
    { "...", 0, 0, 0 },
    { "a./.b", 0, 0, 0 },
    { "uploads/n", 0, 0, 0 },
    { "sp ace/\xc3\xa9t\xc3\xa9", 0, 0, 0 },
    { "%2e%2e", 0, 0, 0 },                       //  a name, once decoded
    { "a%2fb", 0, 0, 0 },
    { ".", 0, 0, -EINVAL },                     //  the home itself
    //  empty, '.', '//' and trailing '/': never normalised
    { "", 0, -EINVAL, -EINVAL },
    { "./a", 0, -EINVAL, -EINVAL },
    { "a/./b", 0, -EINVAL, -EINVAL },
    { "a/.", 0, -EINVAL, -EINVAL },
    { "./", 0, -EINVAL, -EINVAL },
    { "a//b", 0, -EINVAL, -EINVAL },
    { "a/", 0, -EINVAL, -EINVAL },
    { "a//", 0, -EINVAL, -EINVAL },
    //  out of the home
    { "..", 0, -EACCES, -EACCES },
    { "../x", 0, -EACCES, -EACCES },
    { "a/../b", 0, -EACCES, -EACCES },
    { "a/..", 0, -EACCES, -EACCES },
    { "../../../etc/passwd", 0, -EACCES, -EACCES },
    { "/", 0, -EACCES, -EACCES },
    { "/etc/passwd", 0, -EACCES, -EACCES },
    { "//etc", 0, -EACCES, -EACCES },
    //  NUL and control characters
    { "a\0b", 3, -EINVAL, -EINVAL },
    { "a\0", 2, -EINVAL, -EINVAL },
    { "a\nb", 0, -EINVAL, -EINVAL },
    { "a\rb", 0, -EINVAL, -EINVAL },
    { "a\tb", 0, -EINVAL, -EINVAL },
    { "\x1b[31mred", 0, -EINVAL, -EINVAL },
    { "a\x7f", 0, -EINVAL, -EINVAL },
    { "..\n", 0, -EINVAL, -EINVAL },
    { NULL, 0, 0, 0 }
};

//  The case's length.
static inline size_t homepath_case_len (const homepath_case_t *c)
{
    return c->len ? c->len : strlen (c->path);
}

//  The long cases, i 0..3 (NULL after): a component of 255 bytes (good),
//  of 256 (-EINVAL), a path of 4095 bytes (good), of 4096 (-EINVAL).
//  Caller frees.
static inline char *homepath_long_case (int i, int *want)
{
    size_t n = i == 0 ? 255 : i == 1 ? 256 : i == 2 ? 4095 : i == 3 ? 4096 : 0;
    if (!n)
        return NULL;
    char *p = malloc (n + 1);
    if (!p)
        return NULL;
    memset (p, 'a', n);
    p [n] = 0;
    if (n > 256)
        for (size_t k = 100; k < n; k += 101)
            p [k] = '/';                        //  components of 100 bytes
    *want = (i & 1) ? -EINVAL : 0;
    return p;
}

#endif
