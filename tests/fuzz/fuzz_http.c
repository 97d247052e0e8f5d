/*  tests/fuzz/fuzz_http.c: request heads (proto/http.h) from arbitrary
    bytes: never a crash, a read past the input or a leak; a complete
    head's pointers stay inside its own copy; decoding never grows.    */
#include "proto/http.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    ah_http_head_t head = { 0 };
    size_t used = 0;
    const char *why = NULL;
    int rc = ah_http_head_parse (data, size, &head, &used, &why);
    if (rc == 1) {
        if (used > size || !head.target || !*head.target)
            abort ();
        for (size_t i = 0; i < head.nheaders; i++)
            if (!head.headers [i].name || !head.headers [i].value)
                abort ();
        size_t n = strlen (head.target);
        char *out = malloc (n + 1);
        int k = ah_http_decode (head.target, n, out, n + 1, &why);
        if (k > (int) n)
            abort ();
        free (out);
    }
    else if (rc < 0 && !why)
        abort ();
    ah_http_head_clear (&head);
    return 0;
}
