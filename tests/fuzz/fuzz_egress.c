/*  tests/fuzz/fuzz_egress.c: the egress proxy's request (proto/egress.h,
    docs/egress.md) from arbitrary bytes. The input's first line is a list
    entry, the rest a request head as a sandbox's client sends it to
    sandboxd's proxy. Never a crash, a read past the input or a leak; a
    refusal always has its sentence; a target taken is well formed (a
    host of 1..253 bytes, lower case, that the host grammar gives back
    unchanged, and a port of 1..65535); a name matches itself, itself
    with its port, and `*`, and not itself with another port; an entry the
    check refuses matches nothing the proxy would ask for; the address
    check reads the entry and the input's bytes as an address without
    harm.                                                                */
#include "proto/egress.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr (data, '\n', size);
    size_t pn = nl ? (size_t) (nl - data) : 0;
    char pattern [AH_EGRESS_PATTERN_MAX + 1];
    if (pn > AH_EGRESS_PATTERN_MAX)
        pn = AH_EGRESS_PATTERN_MAX;
    memcpy (pattern, data, pn);
    pattern [pn] = 0;
    const uint8_t *rest = nl ? nl + 1 : data;
    size_t rn = nl ? size - (size_t) (rest - data) : size;

    const char *why = NULL;
    bool pattern_ok = ah_egress_pattern_check (pattern, &why) == 0;
    if (!pattern_ok && !why)
        abort ();

    ah_http_head_t head = { 0 };
    size_t used = 0;
    why = NULL;
    if (ah_http_head_parse (rest, rn, &head, &used, &why) == 1) {
        ah_egress_target_t t;
        why = NULL;
        int rc = ah_egress_target (&head, &t, &why);
        if (rc == 0) {
            size_t hn = strnlen (t.host, sizeof t.host);
            if (hn == 0 || hn > AH_EGRESS_HOST_MAX || t.port < 1 || t.port > 65535)
                abort ();
            for (size_t i = 0; i < hn; i++)
                if (isupper ((unsigned char) t.host [i]))
                    abort ();
            //  An IPv6 literal is given back without its brackets.
            char given [AH_EGRESS_HOST_MAX + 3], again [AH_EGRESS_HOST_MAX + 1];
            snprintf (given, sizeof given, strchr (t.host, ':') ? "[%s]" : "%s", t.host);
            bool literal = !t.literal;
            if (ah_egress_host (given, strlen (given), again, &literal, &why) != 0 || strcmp (again, t.host)
            ||  literal != t.literal)
                abort ();
            if (!t.literal) {
                char with [AH_EGRESS_HOST_MAX + 8];
                snprintf (with, sizeof with, "%s:%d", t.host, t.port);
                if (!ah_egress_match (t.host, t.host, t.port) || !ah_egress_match ("*", t.host, t.port)
                ||  !ah_egress_match (with, t.host, t.port)
                ||  ah_egress_match (with, t.host, t.port == 65535 ? 1 : t.port + 1))
                    abort ();
            }
            const char *list [] = { pattern };
            const char *first = ah_egress_first (list, 1, t.host, t.port);
            if (first && first != pattern)
                abort ();
        }
        else if (rc != -400 && rc != -405)
            abort ();
        else if (!why)
            abort ();
    }
    ah_http_head_clear (&head);

    //  The input's bytes as an address, against the entry.
    struct sockaddr_in v4 = { .sin_family = AF_INET };
    struct sockaddr_in6 v6 = { .sin6_family = AF_INET6 };
    memcpy (&v4.sin_addr, rest, rn < 4 ? rn : 4);
    memcpy (&v6.sin6_addr, rest, rn < 16 ? rn : 16);
    (void) ah_egress_addr_refusal ((const struct sockaddr *) &v4);
    (void) ah_egress_addr_refusal ((const struct sockaddr *) &v6);
    (void) ah_egress_addr_in (pattern, (const struct sockaddr *) &v4);
    (void) ah_egress_addr_names (pattern, (const struct sockaddr *) &v6, 443);
    return 0;
}
