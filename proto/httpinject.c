/*  proto/httpinject.c: see httpinject.h.

    States: HEAD gathers a head in self->head (at most AH_HTTP_MAX_HEAD
    bytes, the parser's cap) until it is whole; then BODY (Content-Length
    bytes left), or CHUNK_LINE / CHUNK_DATA / CHUNK_END / TRAILER for a
    chunked body, each line gathered in self->line (capped) and checked
    before it passes; RAW after an upgrade; DEAD after a refusal.       */
#include "proto/httpinject.h"
#include "proto/http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define S_LINE_MAX      4096            //  a chunk size line, a trailer line
#define S_TRAILER_MAX   AH_HTTP_MAX_HEAD

typedef enum { HEAD, BODY, CHUNK_LINE, CHUNK_DATA, CHUNK_END, TRAILER, RAW, DEAD } state_t;

struct ah_http_inject_t {
    char *host;                     //  "api.example.com", "[2001:db8::1]"
    int port;
    char *name, *value;
    size_t value_n;
    state_t state;
    ah_buf_t head;                  //  HEAD: the head so far
    ah_buf_t line;                  //  CHUNK_LINE, CHUNK_END, TRAILER: the line so far
    uint64_t left;                  //  BODY, CHUNK_DATA: bytes of it still to pass
    size_t trailer;                 //  TRAILER: bytes of the section so far
    bool upgrade;                   //  the request asked to upgrade: RAW after its body
    uint64_t requests;
};

ah_http_inject_t *ah_http_inject_new (const char *host, int port, const char *name, const char *value)
{
    ah_http_inject_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    size_t hn = strlen (host);
    bool v6 = strchr (host, ':') != NULL;
    self->host = malloc (hn + 3);
    self->name = strdup (name);
    self->value = strdup (value);
    if (!self->host || !self->name || !self->value) {
        ah_http_inject_destroy (&self);
        return NULL;
    }
    snprintf (self->host, hn + 3, v6 ? "[%s]" : "%s", host);
    self->port = port;
    self->value_n = strlen (value);
    return self;
}

void ah_http_inject_destroy (ah_http_inject_t **self_p)
{
    ah_http_inject_t *self = self_p ? *self_p : NULL;
    if (!self)
        return;
    if (self->value)
        explicit_bzero (self->value, self->value_n);
    free (self->value);
    free (self->name);
    free (self->host);
    ah_buf_free (&self->head);
    ah_buf_free (&self->line);
    free (self);
    *self_p = NULL;
}

uint64_t ah_http_inject_requests (const ah_http_inject_t *self)
{
    return self ? self->requests : 0;
}

bool ah_http_inject_raw (const ah_http_inject_t *self)
{
    return self && self->state == RAW;
}

static int s_refuse (ah_http_inject_t *self, const char **why, const char *text)
{
    self->state = DEAD;
    *why = text;
    return -1;
}

//  Host names the connection's host, with its port or none.
static bool s_host_ok (const ah_http_inject_t *self, const char *value)
{
    size_t hn = strlen (self->host);
    if (strncasecmp (value, self->host, hn))
        return false;
    if (value [hn] == 0)
        return true;
    char port [8];
    snprintf (port, sizeof port, "%d", self->port);
    return value [hn] == ':' && !strcmp (value + hn + 1, port);
}

//  Content-Length: digits alone, at most 15 of them. -1: malformed.
static int64_t s_length (const char *v)
{
    size_t n = strlen (v);
    if (n == 0 || n > 15 || strspn (v, "0123456789") != n)
        return -1;
    return strtoll (v, NULL, 10);
}

//  A whole head at self->head [0, used): checked, passed on with the
//  secret, the body's framing set. 0 / -1.
static int s_head (ah_http_inject_t *self, const ah_http_head_t *h, size_t used, ah_buf_t *out, const char **why)
{
    if (!strcmp (h->method, "CONNECT"))
        return s_refuse (self, why, "a CONNECT request inside the tunnel");
    if (h->target [0] != '/' && strcmp (h->target, "*"))
        return s_refuse (self, why, "a request target that is not in origin form (/path)");
    const char *host = ah_http_header (h, "host");
    if (ah_http_header_count (h, "host") != 1 || !s_host_ok (self, host))
        return s_refuse (self, why, ah_http_header_count (h, "host") != 1
                         ? "a request without exactly one Host header"
                         : "a Host header naming another host than the connection's");
    size_t ncl = ah_http_header_count (h, "content-length"), nte = ah_http_header_count (h, "transfer-encoding");
    if (ncl > 1 || nte > 1)
        return s_refuse (self, why, "a request with more than one Content-Length or Transfer-Encoding");
    if (ncl && nte)
        return s_refuse (self, why, "a request with both Content-Length and Transfer-Encoding");
    int64_t length = ncl ? s_length (ah_http_header (h, "content-length")) : 0;
    if (length < 0)
        return s_refuse (self, why, "a Content-Length that is not a number");
    if (nte && strcasecmp (ah_http_header (h, "transfer-encoding"), "chunked"))
        return s_refuse (self, why, "a Transfer-Encoding other than chunked alone");
    //  The lines as they came, the secret's own dropped (any case), the
    //  secret's added before the blank line.
    const char *p = (const char *) ah_buf_head (&self->head), *end = p + used;
    while (p + 1 < end && p [0] == '\r' && p [1] == '\n')
        p += 2;                         //  empty lines before the request line (the parser skips them)
    size_t nlen = strlen (self->name);
    bool first = true;
    while (p < end) {
        const char *eol = memchr (p, '\n', (size_t) (end - p));
        if (!eol)
            break;
        size_t len = (size_t) (eol + 1 - p);
        if (len == 2)
            break;                      //  the blank line
        bool drop = !first && len > nlen && p [nlen] == ':' && !strncasecmp (p, self->name, nlen);
        if (!drop && ah_buf_append (out, p, len))
            return s_refuse (self, why, "out of memory");
        first = false;
        p = eol + 1;
    }
    if (ah_buf_appendf (out, "%s: ", self->name) || ah_buf_append (out, self->value, self->value_n)
    ||  ah_buf_append (out, "\r\n\r\n", 4))
        return s_refuse (self, why, "out of memory");
    self->requests++;
    self->upgrade = ah_http_header (h, "upgrade") != NULL;
    if (nte)
        self->state = CHUNK_LINE;
    else if (length > 0) {
        self->state = BODY;
        self->left = (uint64_t) length;
    }
    else
        self->state = self->upgrade ? RAW : HEAD;
    return 0;
}

//  A line in self->line (without its CRLF) checked: visible bytes, tabs,
//  spaces. false: refuse.
static bool s_line_clean (const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((p [i] < 0x20 && p [i] != '\t') || p [i] == 0x7f)
            return false;
    return true;
}

//  A chunk size line: hex digits (at most 15), then optionally ';' and
//  extensions. -1: malformed.
static int64_t s_chunk_size (const uint8_t *p, size_t n)
{
    size_t d = 0;
    uint64_t v = 0;                     //  16 digits fit; a 16th means refused below
    while (d < n && d < 16) {
        int c = p [d], x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (x < 0)
            break;
        v = v * 16 + (uint64_t) x;
        d++;
    }
    if (d == 0 || d > 15 || (d < n && p [d] != ';' && p [d] != ' ' && p [d] != '\t'))
        return -1;
    return (int64_t) v;                 //  at most 15 digits: below 2^60
}

//  Gathers one CRLF-ended line into self->line from in; *took bytes of
//  in. 1: whole (self->line holds it without its CRLF), 0: more needed,
//  -1: malformed (a bare CR or LF, too long).
static int s_gather (ah_http_inject_t *self, const uint8_t *in, size_t n, size_t *took)
{
    const uint8_t *lf = memchr (in, '\n', n);
    size_t take = lf ? (size_t) (lf - in) + 1 : n;
    *took = take;
    if (ah_buf_size (&self->line) + take > S_LINE_MAX || ah_buf_append (&self->line, in, take))
        return -1;
    if (!lf)
        return 0;
    size_t len = ah_buf_size (&self->line);
    const uint8_t *l = ah_buf_head (&self->line);
    if (len < 2 || l [len - 2] != '\r' || memchr (l, '\r', len - 2))
        return -1;
    self->line.len -= 2;                //  without its CRLF
    return 1;
}

int ah_http_inject_feed (ah_http_inject_t *self, const uint8_t *in, size_t n, ah_buf_t *out, const char **why)
{
    *why = NULL;
    while (n > 0) {
        size_t took = 0;
        switch (self->state) {
            case DEAD:
                *why = "the stream was refused already";
                return -1;
            case RAW:
                if (ah_buf_append (out, in, n))
                    return s_refuse (self, why, "out of memory");
                return 0;
            case HEAD: {
                //  Take what fits the cap; parse what there is.
                size_t room = AH_HTTP_MAX_HEAD + 1 - ah_buf_size (&self->head);
                took = n < room ? n : room;
                if (ah_buf_append (&self->head, in, took))
                    return s_refuse (self, why, "out of memory");
                ah_http_head_t h = { 0 };
                size_t used = 0;
                const char *perr = NULL;
                int rc = ah_http_head_parse (ah_buf_head (&self->head), ah_buf_size (&self->head), &h, &used, &perr);
                if (rc == 0 && ah_buf_size (&self->head) > AH_HTTP_MAX_HEAD)
                    rc = -431, perr = "request head too large";
                if (rc < 0) {
                    ah_http_head_clear (&h);
                    return s_refuse (self, why, perr ? perr : "a malformed request head");
                }
                if (rc == 1) {
                    //  Bytes past the head were taken too: given back to the loop.
                    size_t extra = ah_buf_size (&self->head) - used;
                    int hr = s_head (self, &h, used, out, why);
                    ah_http_head_clear (&h);
                    ah_buf_clear (&self->head);
                    if (hr)
                        return -1;
                    took -= extra;
                }
                else
                    ah_http_head_clear (&h);
                break;
            }
            case BODY:
            case CHUNK_DATA: {
                took = (uint64_t) n < self->left ? n : (size_t) self->left;
                if (ah_buf_append (out, in, took))
                    return s_refuse (self, why, "out of memory");
                self->left -= took;
                if (self->left == 0)
                    self->state = self->state == CHUNK_DATA ? CHUNK_END : self->upgrade ? RAW : HEAD;
                break;
            }
            case CHUNK_LINE:
            case CHUNK_END:
            case TRAILER: {
                int rc = s_gather (self, in, n, &took);
                if (rc < 0)
                    return s_refuse (self, why, self->state == TRAILER ? "a malformed trailer line"
                                     : "a malformed chunk line");
                if (rc == 0)
                    break;
                const uint8_t *l = ah_buf_head (&self->line);
                size_t len = ah_buf_size (&self->line);
                if (self->state == CHUNK_END) {
                    if (len != 0)
                        return s_refuse (self, why, "a chunk that does not end where its size says");
                    self->state = CHUNK_LINE;
                }
                else
                if (self->state == CHUNK_LINE) {
                    int64_t size = s_chunk_size (l, len);
                    if (size < 0 || !s_line_clean (l, len))
                        return s_refuse (self, why, "a malformed chunk size");
                    self->left = (uint64_t) size;
                    self->trailer = 0;
                    self->state = size ? CHUNK_DATA : TRAILER;
                }
                else {
                    //  A trailer line, or the blank line that ends the body.
                    size_t nlen = strlen (self->name);
                    const uint8_t *colon = len ? memchr (l, ':', len) : NULL;
                    self->trailer += len + 2;
                    if (len && (!colon || colon == l || !ah_http_is_token ((const char *) l, (size_t) (colon - l))
                                || !s_line_clean (l, len)))
                        return s_refuse (self, why, "a malformed trailer line");
                    if (len && (size_t) (colon - l) == nlen && !strncasecmp ((const char *) l, self->name, nlen))
                        return s_refuse (self, why, "a trailer field named like the secret's header");
                    if (self->trailer > S_TRAILER_MAX)
                        return s_refuse (self, why, "a trailer section too large");
                    if (!len)
                        self->state = self->upgrade ? RAW : HEAD;
                }
                if (ah_buf_append (out, l, len) || ah_buf_append (out, "\r\n", 2))
                    return s_refuse (self, why, "out of memory");
                ah_buf_clear (&self->line);
                break;
            }
        }
        in += took;
        n -= took;
    }
    return 0;
}
