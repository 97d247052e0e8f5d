/*  proto/egress.h: the pieces of the egress path (docs/egress.md) that
    both ends share and that need no I/O: what a proxy request asks for
    (CONNECT host:port, or an absolute http:// URI), the host grammar,
    host patterns of the allow and deny lists (`*.debian.org`), and the
    address check the server makes after resolving a name and before
    connecting to the address it checked (no DNS rebinding).

    Pure byte work: no allocation, every length capped before it is
    believed; hostile input gives a refusal with a static sentence.      */
#ifndef AH_PROTO_EGRESS_H
#define AH_PROTO_EGRESS_H

#include "proto/http.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define AH_EGRESS_HOST_MAX      253     //  a DNS name's longest text form
#define AH_EGRESS_PATTERN_MAX   256     //  a list entry
//  Connections out one sandbox holds at once, at most: sandboxd's proxy
//  takes no more (its 503 beyond), so sandbox.egress_max_connections is
//  from 1 to this (docs/egress.md).
#define AH_EGRESS_CONN_MAX      256

typedef struct {
    char host [AH_EGRESS_HOST_MAX + 1];     //  lower-case; an IPv6 literal without brackets
    int  port;                              //  1..65535
    bool connect;                           //  CONNECT (a tunnel) or a plain HTTP request
    bool literal;                           //  host is an IP address literal
} ah_egress_target_t;

//  What the request head asks the proxy to reach. 0, or -status (400
//  malformed, 405 a method other than CONNECT with a target that is not
//  an absolute http:// URI) with *why.
int  ah_egress_target (const ah_http_head_t *head, ah_egress_target_t *out, const char **why);

//  A host name or an IP literal as the lists and the proxy take it:
//  0 and the normalised form (lower case, no trailing dot, IPv6 without
//  brackets) in out, or -1 with *why.
int  ah_egress_host (const char *in, size_t n, char out [AH_EGRESS_HOST_MAX + 1], bool *literal,
                     const char **why);

//  A list entry against a host: `name` (that name only), `*.name` (any
//  name below it, not the name itself), `*` (any name), or an address or
//  range (`10.1.2.3`, `10.1.0.0/16`, `fd00::/8`) which matches only a
//  literal host inside it. Optional `:port` suffix (names and IPv4 only;
//  IPv6 ranges take no port) restricts it to that port. Case-insensitive.
bool ah_egress_match (const char *pattern, const char *host, int port);

//  The first entry of list [0, n) that matches host and port, or NULL
//  (borrowed from the list): the facts lua/egress.lua decides on.
const char *ah_egress_first (const char *const *list, size_t n, const char *host, int port);

//  Whether a list entry is well formed (the API and the CLI refuse the
//  others before storing them): 0, or -1 with *why.
int  ah_egress_pattern_check (const char *pattern, const char **why);

//  An address the server must not connect to unless an admin's entry
//  names it: the reason ("loopback", "private range", "link-local",
//  "metadata address", ...), or NULL when it is an ordinary public
//  address. IPv4-mapped and -compatible IPv6 forms are checked as the
//  IPv4 address they carry.
const char *ah_egress_addr_refusal (const struct sockaddr *sa);

//  Whether an address lies inside an entry naming an address or range
//  (the admin's explicit opening of a refused address).
bool ah_egress_addr_in (const char *pattern, const struct sockaddr *sa);

//  ah_egress_addr_in, and the entry's port suffix (if any) is port: an
//  entry that names this address for a connection to port (the
//  server's opening of a refused address, and a deny entry's match on
//  what a name resolved to).
bool ah_egress_addr_names (const char *pattern, const struct sockaddr *sa, int port);

//  Secrets (docs/egress.md "Secrets"): a header a tenant attaches to one
//  host and port, added by the server to each request it carries there.
#define AH_EGRESS_SECRET_NAME_MAX   64      //  a header name
#define AH_EGRESS_SECRET_VALUE_MAX  8192    //  a header value

//  The host a secret is for: `name`, `name:port`, an IPv4 address with
//  an optional port, or `[v6]` with an optional port (no pattern: one
//  host). 0 with the normalised host (as ah_egress_host) and the port
//  (443 when none is named), or -1 with *why.
int  ah_egress_secret_target (const char *in, char out [AH_EGRESS_HOST_MAX + 1], int *port, bool *literal,
                              const char **why);
//  A secret's header name: an HTTP token of at most 64 bytes, and not
//  one that frames or routes the message (Host, Content-Length,
//  Transfer-Encoding, Connection, ...). 0, or -1 with *why.
int  ah_egress_secret_name_check (const char *name, const char **why);
//  A secret's value, n bytes: 1 to 8192 bytes of visible ASCII, spaces,
//  tabs and bytes >= 0x80 (RFC 9110 field-value): no CR, LF, NUL or
//  other control byte, no blank at either end. 0, or -1 with *why.
int  ah_egress_secret_value_check (const char *value, size_t n, const char **why);

#endif
