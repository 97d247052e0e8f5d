/*  proto/http.h: HTTP/1.1 request heads, read exactly as the client sent
    them, and the pieces of a request target (RFC 9112, RFC 3986).

    The API's server reads every request itself (the transport under it
    is a raw socket), so what it routes on is the request line as it came:
    no library has resolved "." or ".." segments, merged slashes or
    decoded escapes first. Pure byte work, no I/O, no allocation beyond
    the head's own copy; every length is capped before it is believed.

    Strictness, on purpose: CRLF only (a bare LF or CR is refused), no
    control byte anywhere in the request line or a header value (HTAB
    aside), no obsolete line folding, a target of visible ASCII only,
    a method of upper-case letters, HTTP/1.0 or HTTP/1.1.               */
#ifndef AH_PROTO_HTTP_H
#define AH_PROTO_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AH_HTTP_MAX_HEAD        16384   //  request line and headers (431 past it)
#define AH_HTTP_MAX_TARGET      4096    //  request target (414 past it)
#define AH_HTTP_MAX_HEADERS     64

typedef struct {
    const char *name;               //  lower-cased
    const char *value;              //  surrounding blanks trimmed
} ah_http_header_t;

typedef struct {
    char method [16];
    const char *target;             //  the request target, as sent
    int minor;                      //  HTTP/1.<minor>
    ah_http_header_t headers [AH_HTTP_MAX_HEADERS];
    size_t nheaders;
    char *store;                    //  owns the strings above
} ah_http_head_t;

//  A request head at the start of buf (len bytes so far). 1: complete,
//  *used = bytes of the head, blank line included; 0: more bytes needed;
//  otherwise -status (400 malformed, 414 target too long, 431 head too
//  large, 501 method not implemented, 505 version) with *why, a static
//  sentence. The head is the caller's to clear (ah_http_head_clear),
//  also after a failure.
int  ah_http_head_parse (const uint8_t *buf, size_t len, ah_http_head_t *head, size_t *used,
                         const char **why);
void ah_http_head_clear (ah_http_head_t *head);
//  The value of the first header called name (lower-case), or NULL;
//  count: how many there are.
const char *ah_http_header (const ah_http_head_t *head, const char *name);
size_t      ah_http_header_count (const ah_http_head_t *head, const char *name);
//  True when a comma-separated header (Connection, Upgrade) holds token,
//  compared without case.
bool ah_http_header_has (const ah_http_head_t *head, const char *name, const char *token);
//  True when the request's Accept headers admit the media type type
//  ("application/json", lower-case): a range of them that is type
//  itself, its "major/*" or "*/*" (without case, parameters aside), whose
//  q is not zero (RFC 9110 12.5.1). No Accept header admits every type;
//  an Accept header that names none (empty) admits none.
bool ah_http_accepts (const ah_http_head_t *head, const char *type);

//  True when [0, n) is a non-empty HTTP token (RFC 9110 5.6.2: a field
//  name, a method).
bool ah_http_is_token (const char *s, size_t n);

//  Percent-decodes in [0, n) once into out (NUL-terminated; out_size
//  must be at least n + 1). -1 with *why on a malformed escape, a NUL
//  or any control byte (raw or decoded); else the decoded length.
int  ah_http_decode (const char *in, size_t n, char *out, size_t out_size, const char **why);

//  The reason phrase of a status ("Not Found"), "Unknown" for others.
const char *ah_http_reason (int status);

#endif
