/*  tests/fuzz/fuzz_route.c: libFuzzer target for the API's URL router
    (actors/api/route.c api_route: the path split and percent-decoded,
    matched against the real route table, then the query parsed against
    what the route takes).

    The input's first byte picks the method; the rest is the request
    target. Only what the HTTP parser lets through reaches the router
    (visible ASCII, at most AH_HTTP_MAX_TARGET bytes: fuzz_http covers
    that), so only that is given.

    Checks beyond "no crash": the answer is 0, 400, 404 or 405 with a
    reason for each refusal; 405 only with an Allow set that lacks the
    method, 404 only with none; a route found takes the method, each of
    its captures is set and holds no control character, a capture other
    than the "{path*}" rest holds no '/'; query keys are distinct and
    each is one the route takes.                                       */
#include "actors/api/api_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) do { fprintf (stderr, __VA_ARGS__); fputc ('\n', stderr); abort (); } while (0)

static const method_t s_methods [] = { M_GET, M_HEAD, M_POST, M_PUT, M_PATCH, M_DELETE, M_OPTIONS };

static void s_check_found (const req_t *r, const char *target)
{
    const char *c = r->route->pattern;
    size_t p = 0;
    while ((c = strchr (c, '{'))) {
        const char *e = strchr (c, '}');
        bool rest = e && e > c && e [-1] == '*';
        const char *v = p < API_MAX_PARAMS ? r->params [p] : NULL;
        if (!v)
            FAIL ("%s: capture %zu of %s not set", target, p, r->route->pattern);
        for (const char *s = v; *s; s++)
            if ((unsigned char) *s < 0x20 || *s == 0x7f)
                FAIL ("%s: capture %zu holds a control character", target, p);
        if (!rest && strchr (v, '/'))
            FAIL ("%s: capture %zu holds a '/'", target, p);
        p++;
        c = e ? e : c + 1;
    }
    for (size_t i = 0; i < r->nquery; i++) {
        if (!r->qkey [i] || !r->qval [i])
            FAIL ("%s: query %zu without key or value", target, i);
        for (size_t j = 0; j < i; j++)
            if (!strcmp (r->qkey [i], r->qkey [j]))
                FAIL ("%s: query key '%s' twice", target, r->qkey [i]);
    }
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (size < 1 || size - 1 > AH_HTTP_MAX_TARGET)
        return 0;
    for (size_t i = 1; i < size; i++)
        if (data [i] <= 0x20 || data [i] >= 0x7f)
            return 0;
    char target [AH_HTTP_MAX_TARGET + 1];
    memcpy (target, data + 1, size - 1);
    target [size - 1] = 0;
    req_t *r = calloc (1, sizeof *r);
    if (!r)
        return 0;
    r->head.target = target;
    r->method = s_methods [data [0] % (sizeof s_methods / sizeof s_methods [0])];
    char why [512] = "";
    unsigned allowed = 0;
    int status = api_route (r, why, sizeof why, &allowed);
    if (status != 0 && status != 400 && status != 404 && status != 405)
        FAIL ("%s: status %d", target, status);
    if (status && !why [0])
        FAIL ("%s: status %d without a reason", target, status);
    if (status == 405 && (!allowed || (allowed & r->method)))
        FAIL ("%s: 405 with Allow %#x for method %#x", target, allowed, r->method);
    if (status == 404 && allowed)
        FAIL ("%s: 404 with Allow %#x", target, allowed);
    if (status == 0 && (!r->route || !(r->route->methods & r->method) || !(allowed & r->method)))
        FAIL ("%s: routed to a route that does not take the method", target);
    if (status == 0)
        s_check_found (r, target);
    for (size_t i = 0; i < API_MAX_PARAMS; i++)
        free (r->params [i]);
    for (size_t i = 0; i < r->nquery; i++) {
        free (r->qkey [i]);
        free (r->qval [i]);
    }
    free (r);
    return 0;
}
