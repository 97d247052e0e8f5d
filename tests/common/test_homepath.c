/*  tests/common/test_homepath.c: the home-path grammar (common/homepath.h)
    against the shared table (homepath_cases.h), both flags, with a
    sentence for every refusal; and the API's trailing '/' trim.       */
#include "tests/common/check.h"
#include "tests/common/homepath_cases.h"

static void s_case (const char *path, size_t len, int want_dir, int want_file)
{
    const char *why = NULL;
    int got = ah_homepath_check (path, len, AH_HOMEPATH_HOME, &why);
    CHECK (got == want_dir && (got == 0 || (why && *why)));
    if (got != want_dir)
        fprintf (stderr, "  dir  \"%.60s\" (%zu bytes): got %d want %d (%s)\n", path, len, got,
                 want_dir, why ? why : "");
    why = NULL;
    got = ah_homepath_check (path, len, 0, &why);
    CHECK (got == want_file && (got == 0 || (why && *why)));
    if (got != want_file)
        fprintf (stderr, "  file \"%.60s\" (%zu bytes): got %d want %d (%s)\n", path, len, got,
                 want_file, why ? why : "");
}

int main (void)
{
    for (const homepath_case_t *c = homepath_cases; c->path; c++)
        s_case (c->path, homepath_case_len (c), c->want_dir, c->want_file);
    int want;
    char *p;
    for (int i = 0; (p = homepath_long_case (i, &want)); i++) {
        s_case (p, strlen (p), want, want);
        free (p);
    }
    //  NULL is empty; the sentences say what is wrong.
    const char *why = NULL;
    CHECK (ah_homepath_check (NULL, 0, AH_HOMEPATH_HOME, &why) == -EINVAL && strstr (why, "empty"));
    CHECK (ah_homepath_check ("a/../b", 6, 0, &why) == -EACCES && strstr (why, "'..' component"));
    CHECK (ah_homepath_check ("/x", 2, 0, &why) == -EACCES && strstr (why, "escapes"));
    CHECK (ah_homepath_check ("a//b", 4, 0, &why) == -EINVAL && strstr (why, "empty component"));
    CHECK (ah_homepath_check ("a/", 2, 0, &why) == -EINVAL && strstr (why, "ends in '/'"));
    CHECK (ah_homepath_check ("a\0b", 3, 0, &why) == -EINVAL && strstr (why, "NUL"));
    CHECK (ah_homepath_check ("a\x1b", 2, 0, &why) == -EINVAL && strstr (why, "control"));
    CHECK (ah_homepath_check (".", 1, 0, &why) == -EINVAL && strstr (why, "itself"));
    //  Only the ".." that is a whole component: "a..b" is a name.
    CHECK (ah_homepath_check ("a..b/..c", 8, 0, &why) == 0);
    CHECK (ah_homepath_check ("x", 1, 0, NULL) == 0);
    CHECK (ah_homepath_check ("..", 2, 0, NULL) == -EACCES);

    //  The trim: one '/' after something else, never a lone "/" or "//".
    CHECK (ah_homepath_trim ("src/", 4) == 3);
    CHECK (ah_homepath_trim ("./", 2) == 1);
    CHECK (ah_homepath_trim ("src", 3) == 3);
    CHECK (ah_homepath_trim ("/", 1) == 1);
    CHECK (ah_homepath_trim ("a//", 3) == 3);
    CHECK (ah_homepath_trim ("", 0) == 0);
    CHECK (ah_homepath_trim (NULL, 0) == 0);
    return CHECK_DONE ();
}
