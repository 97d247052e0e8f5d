/*  tests/fuzz/fuzz_catalog.c: libFuzzer target for the runtime catalog
    parser (catalog/catalog.c ah_catalog_parse: JSON text to a validated
    catalog).

    Checks beyond "no crash": a catalog or an error, never both and never
    neither; a catalog holds 1..AH_CATALOG_MAX_RUNTIMES runtimes, the
    first is the default, each is found again by its alias, has an image,
    exactly one form (base_image with a 16-hex recipe, or an image), and
    a context directory under the base directory when it has a build.  */
#include "catalog/catalog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) do { fprintf (stderr, __VA_ARGS__); fputc ('\n', stderr); abort (); } while (0)
#define BASE "/fuzz/catalog"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    char *err = NULL;
    ah_catalog_t *c = ah_catalog_parse ((const char *) data, size, "fuzz.json", BASE, &err);
    if (c && err)
        FAIL ("a catalog and an error: %s", err);
    if (!c && (!err || !*err))
        FAIL ("no catalog and no error");
    if (c) {
        size_t n = ah_catalog_size (c);
        if (n < 1 || n > AH_CATALOG_MAX_RUNTIMES)
            FAIL ("a catalog of %zu runtimes", n);
        if (ah_catalog_default (c) != ah_catalog_at (c, 0))
            FAIL ("the default is not the first entry");
        for (size_t i = 0; i < n; i++) {
            const ah_runtime_t *rt = ah_catalog_at (c, i);
            if (!rt || !rt->alias || !*rt->alias || !rt->image || !*rt->image)
                FAIL ("runtime %zu without an alias or an image", i);
            if (ah_catalog_find (c, rt->alias) != rt)
                FAIL ("runtime '%s' is not found by its alias", rt->alias);
            if (rt->base_image && strspn (rt->recipe, "0123456789abcdef") != 16)
                FAIL ("runtime '%s': recipe '%s'", rt->alias, rt->recipe);
            if (rt->context_dir && strncmp (rt->context_dir, BASE "/", strlen (BASE) + 1))
                FAIL ("runtime '%s': context %s outside the catalog's directory", rt->alias,
                      rt->context_dir);
            if (rt->setup_count > AH_CATALOG_MAX_LIST || rt->package_count > AH_CATALOG_MAX_LIST
            ||  rt->env_count > AH_CATALOG_MAX_LIST || rt->briefing_count > AH_CATALOG_MAX_LIST
            ||  rt->host_file_count > AH_CATALOG_MAX_FILES)
                FAIL ("runtime '%s': a list over its limit", rt->alias);
            (void) ah_runtime_built (rt);
        }
    }
    free (err);
    ah_catalog_destroy (&c);
    return 0;
}
