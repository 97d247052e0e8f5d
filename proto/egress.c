/*  proto/egress.c: proxy request targets, host patterns and the address
    check of the egress path (proto/egress.h, docs/egress.md).          */
#include "proto/egress.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

//  A port in [s, s + n): 1..65535, digits only, or -1.
static int s_port (const char *s, size_t n)
{
    if (n == 0 || n > 5)
        return -1;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s [i] < '0' || s [i] > '9')
            return -1;
        v = v * 10 + (s [i] - '0');
    }
    return v >= 1 && v <= 65535 ? v : -1;
}

int ah_egress_host (const char *in, size_t n, char out [AH_EGRESS_HOST_MAX + 1], bool *literal,
                    const char **why)
{
    *literal = false;
    if (n >= 2 && in [0] == '[' && in [n - 1] == ']') {
        //  An IPv6 literal.
        char tmp [INET6_ADDRSTRLEN + 1];
        struct in6_addr a6;
        if (n - 2 >= sizeof tmp) {
            *why = "the IPv6 address is too long";
            return -1;
        }
        memcpy (tmp, in + 1, n - 2);
        tmp [n - 2] = 0;
        if (inet_pton (AF_INET6, tmp, &a6) != 1) {
            *why = "the bracketed host is not an IPv6 address";
            return -1;
        }
        inet_ntop (AF_INET6, &a6, out, AH_EGRESS_HOST_MAX + 1);
        *literal = true;
        return 0;
    }
    if (n > 0 && in [n - 1] == '.')
        n--;                            //  the root's dot
    if (n == 0 || n > AH_EGRESS_HOST_MAX) {
        *why = n ? "the host name is longer than 253 bytes" : "the host is empty";
        return -1;
    }
    size_t label = 0;
    bool digits_dots = true;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char) in [i];
        if (c == '.') {
            if (label == 0 || in [i - 1] == '-') {
                *why = "the host name has an empty label or one ending in '-'";
                return -1;
            }
            label = 0;
        }
        else
        if (isalnum (c) || c == '-' || c == '_') {
            if ((label == 0 && c == '-') || ++label > 63) {
                *why = label > 63 ? "a label of the host name is longer than 63 bytes"
                                  : "a label of the host name starts with '-'";
                return -1;
            }
            if (!isdigit (c))
                digits_dots = false;
        }
        else {
            *why = "the host holds a byte no host name has (letters, digits, '-', '_' and '.' only)";
            return -1;
        }
        out [i] = (char) tolower (c);
    }
    if (in [n - 1] == '-') {
        *why = "the host name ends in '-'";
        return -1;
    }
    out [n] = 0;
    const char *last = strrchr (out, '.');
    last = last ? last + 1 : out;
    if (!digits_dots && last [strspn (last, "0123456789")] == 0) {
        //  A name whose last label is a number is none (no top-level
        //  domain is): the resolver would read "0x7f.1" as an address.
        *why = "the host's last label is a number but the host is no IPv4 address";
        return -1;
    }
    if (!digits_dots && !strncmp (last, "0x", 2) && last [2 + strspn (last + 2, "0123456789abcdef")] == 0) {
        *why = "the host's last label is a hexadecimal number";
        return -1;
    }
    if (digits_dots) {
        //  All digits and dots: an IPv4 address in its one dotted form,
        //  never a name (inet_aton's 0x, octal and short forms refused).
        struct in_addr a4;
        char back [INET_ADDRSTRLEN];
        if (inet_pton (AF_INET, out, &a4) != 1 || !inet_ntop (AF_INET, &a4, back, sizeof back)
        ||  strcmp (back, out)) {
            *why = "the host is all digits but not an IPv4 address in dotted form";
            return -1;
        }
        *literal = true;
    }
    return 0;
}

//  host[:port] or [v6]:port in [s, s + n); need_port: CONNECT's form.
static int s_authority (const char *s, size_t n, bool need_port, int default_port,
                        ah_egress_target_t *out, const char **why)
{
    const char *colon = NULL;
    if (n && s [0] == '[') {
        const char *close = memchr (s, ']', n);
        if (!close) {
            *why = "an IPv6 host without its closing ']'";
            return -400;
        }
        if ((size_t) (close + 1 - s) < n) {
            if (close [1] != ':') {
                *why = "something other than ':port' after the IPv6 host";
                return -400;
            }
            colon = close + 1;
        }
    }
    else
        colon = memrchr (s, ':', n);
    size_t host_n = colon ? (size_t) (colon - s) : n;
    if (colon) {
        out->port = s_port (colon + 1, n - host_n - 1);
        if (out->port < 0) {
            *why = "the port is not a number from 1 to 65535";
            return -400;
        }
    }
    else
    if (need_port) {
        *why = "CONNECT needs host:port";
        return -400;
    }
    else
        out->port = default_port;
    if (ah_egress_host (s, host_n, out->host, &out->literal, why))
        return -400;
    return 0;
}

int ah_egress_target (const ah_http_head_t *head, ah_egress_target_t *out, const char **why)
{
    memset (out, 0, sizeof *out);
    if (!head->target || !*head->target) {
        *why = "the request has no target";
        return -400;
    }
    const char *t = head->target;
    size_t n = strlen (t);
    if (!strcmp (head->method, "CONNECT")) {
        out->connect = true;
        if (memchr (t, '/', n) || memchr (t, '@', n)) {
            *why = "CONNECT's target must be host:port alone";
            return -400;
        }
        return s_authority (t, n, true, 0, out, why);
    }
    if (strncasecmp (t, "http://", 7)) {
        *why = strncasecmp (t, "https://", 8)
             ? "the proxy takes CONNECT host:port or a request for an absolute http:// URI"
             : "an https:// URI is asked of a proxy with CONNECT host:443, not as a plain request";
        return t [0] == '/' || !strncasecmp (t, "https://", 8) ? -400 : -405;
    }
    const char *a = t + 7;
    size_t an = strcspn (a, "/?#");
    if (memchr (a, '@', an)) {
        *why = "user information in the URI is not taken";
        return -400;
    }
    return s_authority (a, an, false, 80, out, why);
}

//  ---------------------------------------------------------------------
//  Ranges

typedef struct {
    int family;
    uint8_t addr [16];
    int bits;
} range_t;

//  "a.b.c.d[/n]" or "v6[/n]" in [s, s + n).
static int s_range (const char *s, size_t n, range_t *r)
{
    char tmp [INET6_ADDRSTRLEN + 5];
    if (n == 0 || n >= sizeof tmp)
        return -1;
    memcpy (tmp, s, n);
    tmp [n] = 0;
    char *slash = strchr (tmp, '/');
    int bits = -1;
    if (slash) {
        *slash = 0;
        char *end;
        if (!slash [1] || strlen (slash + 1) > 3)
            return -1;
        long b = strtol (slash + 1, &end, 10);
        if (*end || b < 0)
            return -1;
        bits = (int) b;
    }
    memset (r, 0, sizeof *r);
    if (inet_pton (AF_INET, tmp, r->addr) == 1) {
        r->family = AF_INET;
        if (bits > 32)
            return -1;
        r->bits = bits < 0 ? 32 : bits;
    }
    else
    if (inet_pton (AF_INET6, tmp, r->addr) == 1) {
        r->family = AF_INET6;
        if (bits > 128)
            return -1;
        r->bits = bits < 0 ? 128 : bits;
    }
    else
        return -1;
    return 0;
}

static bool s_in (const range_t *r, int family, const uint8_t *addr)
{
    if (r->family != family)
        return false;
    int full = r->bits / 8, rest = r->bits % 8;
    if (memcmp (r->addr, addr, (size_t) full))
        return false;
    if (rest) {
        uint8_t mask = (uint8_t) (0xff << (8 - rest));
        if ((r->addr [full] & mask) != (addr [full] & mask))
            return false;
    }
    return true;
}

//  The family and bytes of a socket address, IPv4-mapped unwrapped.
static int s_bytes (const struct sockaddr *sa, uint8_t out [16])
{
    if (!sa)
        return -1;
    if (sa->sa_family == AF_INET) {
        memcpy (out, &((const struct sockaddr_in *) sa)->sin_addr, 4);
        return AF_INET;
    }
    if (sa->sa_family == AF_INET6) {
        const uint8_t *b = ((const struct sockaddr_in6 *) sa)->sin6_addr.s6_addr;
        static const uint8_t mapped [12] = { [10] = 0xff, [11] = 0xff };
        static const uint8_t compat [12] = { 0 };
        if (!memcmp (b, mapped, 12)
        ||  (!memcmp (b, compat, 12) && (b [12] | b [13] | b [14]) != 0)) {
            memcpy (out, b + 12, 4);
            return AF_INET;
        }
        memcpy (out, b, 16);
        return AF_INET6;
    }
    return -1;
}

//  Splits "pattern[:port]": *pn the pattern's length, *port 0 or the port;
//  -1 when a port suffix is malformed.
static int s_split_port (const char *p, size_t *pn, int *port)
{
    size_t n = strlen (p);
    *port = 0;
    *pn = n;
    const char *colon = memrchr (p, ':', n);
    if (!colon)
        return 0;
    //  IPv6 (two colons or more, no brackets): no port.
    if (memchr (p, ':', (size_t) (colon - p)))
        return 0;
    *port = s_port (colon + 1, n - (size_t) (colon - p) - 1);
    *pn = (size_t) (colon - p);
    return *port > 0 ? 0 : -1;
}

int ah_egress_pattern_check (const char *pattern, const char **why)
{
    size_t pn;
    int port;
    if (!pattern || !*pattern || strlen (pattern) > AH_EGRESS_PATTERN_MAX) {
        *why = "an entry is 1 to 256 bytes";
        return -1;
    }
    if (s_split_port (pattern, &pn, &port)) {
        *why = "the entry's port is not a number from 1 to 65535";
        return -1;
    }
    range_t r;
    if (s_range (pattern, pn, &r) == 0)
        return 0;
    if (pn == 1 && pattern [0] == '*')
        return 0;
    const char *name = pattern;
    if (pn > 2 && !strncmp (pattern, "*.", 2)) {
        name += 2;
        pn -= 2;
    }
    char norm [AH_EGRESS_HOST_MAX + 1];
    bool literal;
    if (ah_egress_host (name, pn, norm, &literal, why))
        return -1;
    if (literal) {
        *why = "an address entry is an address or a range (a.b.c.d/n), not under '*.'";
        return name == pattern ? 0 : -1;
    }
    return 0;
}

bool ah_egress_match (const char *pattern, const char *host, int port)
{
    size_t pn;
    int pport;
    if (!pattern || !host || s_split_port (pattern, &pn, &pport) || (pport && pport != port))
        return false;
    range_t r;
    if (s_range (pattern, pn, &r) == 0) {
        uint8_t b [16];
        int family = inet_pton (AF_INET, host, b) == 1 ? AF_INET
                   : inet_pton (AF_INET6, host, b) == 1 ? AF_INET6 : -1;
        return family > 0 && s_in (&r, family, b);
    }
    if (pn == 1 && pattern [0] == '*')
        return true;
    size_t hn = strlen (host);
    if (pn > 2 && !strncmp (pattern, "*.", 2)) {
        //  Strictly below: "x.debian.org" for "*.debian.org", not "debian.org".
        size_t sn = pn - 1;                         //  ".debian.org"
        return hn > sn && !strncasecmp (host + hn - sn, pattern + 1, sn);
    }
    return hn == pn && !strncasecmp (host, pattern, pn);
}

const char *ah_egress_first (const char *const *list, size_t n, const char *host, int port)
{
    for (size_t i = 0; list && i < n; i++)
        if (ah_egress_match (list [i], host, port))
            return list [i];
    return NULL;
}

bool ah_egress_addr_in (const char *pattern, const struct sockaddr *sa)
{
    size_t pn;
    int port;
    range_t r;
    uint8_t b [16];
    int family = s_bytes (sa, b);
    if (!pattern || family < 0 || s_split_port (pattern, &pn, &port) || s_range (pattern, pn, &r))
        return false;
    return s_in (&r, family, b);
}

bool ah_egress_addr_names (const char *pattern, const struct sockaddr *sa, int port)
{
    size_t pn;
    int pport;
    if (!ah_egress_addr_in (pattern, sa) || s_split_port (pattern, &pn, &pport))
        return false;
    return pport == 0 || pport == port;
}

typedef struct {
    const char *range;
    const char *why;
} refused_t;

//  Checked in order: the first that holds is the reason.
static const refused_t s_refused [] = {
    { "169.254.169.254/32", "metadata address" },
    { "0.0.0.0/8",          "unspecified or 'this network' address" },
    { "127.0.0.0/8",        "loopback" },
    { "10.0.0.0/8",         "private range" },
    { "172.16.0.0/12",      "private range" },
    { "192.168.0.0/16",     "private range" },
    { "100.64.0.0/10",      "carrier-grade NAT range" },
    { "169.254.0.0/16",     "link-local" },
    { "192.0.0.0/24",       "IETF protocol assignments" },
    { "192.0.2.0/24",       "documentation range" },
    { "198.18.0.0/15",      "benchmarking range" },
    { "198.51.100.0/24",    "documentation range" },
    { "203.0.113.0/24",     "documentation range" },
    { "224.0.0.0/4",        "multicast" },
    { "240.0.0.0/4",        "reserved or broadcast" },
    { "fd00:ec2::254/128",  "metadata address" },
    { "::/128",             "unspecified address" },
    { "::1/128",            "loopback" },
    { "fc00::/7",           "private range (unique local)" },
    { "fe80::/10",          "link-local" },
    { "fec0::/10",          "site-local" },
    { "ff00::/8",           "multicast" },
    { "64:ff9b::/96",       "NAT64 (carries an IPv4 address)" },
    { "64:ff9b:1::/48",     "NAT64 (carries an IPv4 address)" },
    { "2001:db8::/32",      "documentation range" },
    { "2002::/16",          "6to4 (carries an IPv4 address)" },
    { "2001::/32",          "Teredo (carries an IPv4 address)" },
};

const char *ah_egress_addr_refusal (const struct sockaddr *sa)
{
    uint8_t b [16];
    int family = s_bytes (sa, b);
    if (family < 0)
        return "not an IPv4 or IPv6 address";
    for (size_t i = 0; i < sizeof s_refused / sizeof s_refused [0]; i++) {
        range_t r;
        if (s_range (s_refused [i].range, strlen (s_refused [i].range), &r) == 0 && s_in (&r, family, b))
            return s_refused [i].why;
    }
    return NULL;
}

//  ---------------------------------------------------------------------
//  Secrets

int ah_egress_secret_target (const char *in, char out [AH_EGRESS_HOST_MAX + 1], int *port, bool *literal,
                             const char **why)
{
    size_t n = in ? strnlen (in, AH_EGRESS_HOST_MAX + 16) : 0;
    *port = 443;
    if (n == 0 || n > AH_EGRESS_HOST_MAX + 8) {
        *why = n ? "is too long" : "is empty";
        return -1;
    }
    if (strchr (in, '*')) {
        *why = "is a pattern: a secret names one host (name, name:port, an address)";
        return -1;
    }
    //  The port: after the last ':' of a name or IPv4 address, after
    //  the ']' of an IPv6 literal; a bare IPv6 literal has none.
    size_t host_n = n;
    const char *colon = strrchr (in, ':');
    const char *bracket = strrchr (in, ']');
    bool bare_v6 = in [0] != '[' && colon && strchr (in, ':') != colon;
    if (bare_v6) {
        *why = "is an IPv6 address without brackets: write [v6] or [v6]:port";
        return -1;
    }
    if (colon && (!bracket || colon > bracket)) {
        host_n = (size_t) (colon - in);
        const char *p = colon + 1;
        long v = 0;
        if (!*p || strlen (p) > 5) {
            *why = "has a port that is not a number from 1 to 65535";
            return -1;
        }
        for (; *p; p++) {
            if (*p < '0' || *p > '9') {
                *why = "has a port that is not a number from 1 to 65535";
                return -1;
            }
            v = v * 10 + (*p - '0');
        }
        if (v < 1 || v > 65535) {
            *why = "has a port that is not a number from 1 to 65535";
            return -1;
        }
        *port = (int) v;
    }
    return ah_egress_host (in, host_n, out, literal, why);
}

int ah_egress_secret_name_check (const char *name, const char **why)
{
    //  What frames the message, routes it or is the proxy's own: the
    //  server keeps those as the sandbox's client sent them.
    static const char *const refused [] = {
        "host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te",
        "trailer", "expect", "proxy-connection", NULL
    };
    size_t n = name ? strnlen (name, AH_EGRESS_SECRET_NAME_MAX + 1) : 0;
    if (n == 0 || n > AH_EGRESS_SECRET_NAME_MAX) {
        *why = n ? "is longer than 64 bytes" : "is empty";
        return -1;
    }
    if (!ah_http_is_token (name, n)) {
        *why = "is not an HTTP field name (letters, digits and !#$%&'*+-.^_`|~ only)";
        return -1;
    }
    for (size_t i = 0; refused [i]; i++)
        if (strcasecmp (name, refused [i]) == 0) {
            *why = "frames or routes the request (Host, Content-Length, Transfer-Encoding, Connection, "
                   "Keep-Alive, Upgrade, TE, Trailer, Expect, Proxy-Connection): not a secret's";
            return -1;
        }
    return 0;
}

int ah_egress_secret_value_check (const char *value, size_t n, const char **why)
{
    if (!value || n == 0 || n > AH_EGRESS_SECRET_VALUE_MAX) {
        *why = value && n ? "is longer than 8192 bytes" : "is empty";
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char) value [i];
        if ((c < 0x20 && c != '\t') || c == 0x7f) {
            *why = c == '\r' || c == '\n' ? "holds a CR or LF (a header value is one line)"
                 : c == 0 ? "holds a NUL byte" : "holds a control byte";
            return -1;
        }
    }
    if (value [0] == ' ' || value [0] == '\t' || value [n - 1] == ' ' || value [n - 1] == '\t') {
        *why = "begins or ends with a blank";
        return -1;
    }
    return 0;
}
