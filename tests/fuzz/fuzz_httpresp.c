/*  tests/fuzz/fuzz_httpresp.c: a server's answer as the agenthold
    command reads it (proto/httpresp.h), from arbitrary bytes fed in
    pieces whose sizes the first byte chooses: never a crash, a read past
    the input or a leak; `used` never passes what was fed; the body
    handed on is never more than what was fed; a failure says why; the
    same bytes fed whole give the same verdict and the same body.       */
#include "proto/httpresp.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t body;
    uint64_t sum;
} seen_t;

static int s_body (void *ud, const uint8_t *data, size_t size)
{
    seen_t *s = ud;
    s->body += size;
    for (size_t i = 0; i < size; i++)
        s->sum = s->sum * 31 + data [i];
    return 0;
}

//  The verdict of data fed in pieces of step bytes (0: whole), then the end.
static int s_run (const uint8_t *data, size_t size, size_t step, bool head, seen_t *seen)
{
    ah_httpresp_t r;
    ah_httpresp_init (&r, head);
    size_t at = 0;
    int rc = 0;
    const char *why = NULL;
    while (rc == 0 && at < size) {
        size_t n = step && size - at > step ? step : size - at;
        size_t used = 0;
        why = NULL;
        rc = ah_httpresp_feed (&r, data + at, n, &used, s_body, seen, &why);
        if (used > n || (rc < 0 && !why) || (rc == 0 && used != 0 && used != n))
            abort ();
        at += rc == 1 ? used : n;
    }
    if (rc == 0) {
        why = NULL;
        rc = ah_httpresp_eof (&r, &why) == 1 ? 1 : -1;
        if (rc < 0 && !why)
            abort ();
    }
    if (seen->body > size)
        abort ();
    ah_httpresp_clear (&r);
    return rc;
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t step = data [0] % 17;
    bool head = data [0] & 0x80;
    seen_t a = { 0 }, b = { 0 };
    int ra = s_run (data + 1, size - 1, step, head, &a);
    int rb = s_run (data + 1, size - 1, 0, head, &b);
    if (ra != rb || a.body != b.body || a.sum != b.sum)
        abort ();
    return 0;
}
