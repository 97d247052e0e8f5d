/*  tests/fuzz/fuzz_httpinject.c: the secret header added to a client's
    requests (proto/httpinject.h) from arbitrary bytes, fed in two pieces
    split where the first byte says: never a crash, a read past the input
    or a leak; a refusal always says why; the same bytes fed whole give
    the same verdict and the same output (where a request ends does not
    depend on how the bytes came); every request that went on carries
    the secret's line.                                                  */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE            /* memmem (the build defines it; a bare clang run may not) */
#endif
#include "proto/httpinject.h"

#include <stdlib.h>
#include <string.h>

#define LINE "Authorization: s3cr3t\r\n"

static int s_feed (const uint8_t *data, size_t size, size_t split, ah_buf_t *out, uint64_t *requests)
{
    ah_http_inject_t *inj = ah_http_inject_new ("api.example.com", 443, "Authorization", "s3cr3t");
    const char *why = NULL;
    int rc = ah_http_inject_feed (inj, data, split, out, &why);
    if (rc == 0 && size > split)
        rc = ah_http_inject_feed (inj, data + split, size - split, out, &why);
    if (rc && !why)
        abort ();
    *requests = ah_http_inject_requests (inj);
    ah_http_inject_destroy (&inj);
    return rc;
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t split = data [0] % size;
    data++, size--;
    if (split > size)
        split = size;
    ah_buf_t a = { 0 }, b = { 0 };
    uint64_t ra = 0, rb = 0;
    int rca = s_feed (data, size, split, &a, &ra);
    int rcb = s_feed (data, size, size, &b, &rb);
    if (rca != rcb || (rca == 0 && (ra != rb || ah_buf_size (&a) != ah_buf_size (&b)
                                    || (ah_buf_size (&a) && memcmp (ah_buf_head (&a), ah_buf_head (&b), ah_buf_size (&a))))))
        abort ();
    if (rca == 0 && ra) {
        uint64_t lines = 0;
        const uint8_t *p = ah_buf_head (&a), *end = p + ah_buf_size (&a);
        while (p && p < end && (p = memmem (p, (size_t) (end - p), LINE, strlen (LINE)))) {
            lines++;
            p += strlen (LINE);
        }
        if (lines < ra)
            abort ();
    }
    ah_buf_free (&a);
    ah_buf_free (&b);
    return 0;
}
