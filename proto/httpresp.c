/*  proto/httpresp.c: see httpresp.h. */
#include "proto/httpresp.h"

#include <string.h>
#include <strings.h>
#include <sys/types.h>

enum { HEAD, BODY_LEN, BODY_CLOSE, CHUNK_SIZE, CHUNK_DATA, CHUNK_CRLF, TRAILER, DONE, FAILED };

#define CHUNK_LINE_MAX  1024
#define SIZE_MAX_BODY   (UINT64_C (1) << 53)

void ah_httpresp_init (ah_httpresp_t *self, bool head_request)
{
    memset (self, 0, sizeof *self);
    ah_buf_init (&self->line, 0);
    self->head_request = head_request;
    self->length = -1;
}

void ah_httpresp_clear (ah_httpresp_t *self)
{
    ah_buf_free (&self->line);
}

bool ah_httpresp_has_head (const ah_httpresp_t *self)
{
    return self->status > 0;
}

static int s_fail (ah_httpresp_t *self, const char **why, const char *text)
{
    self->phase = FAILED;
    *why = text;
    return -1;
}

//  Appends data to the line buffer until term (of term_len bytes) ends it
//  or cap is reached. Returns the bytes of data taken and sets *found;
//  -1 past the cap.
static ssize_t s_gather (ah_buf_t *line, const uint8_t *data, size_t size, const char *term,
                         size_t term_len, size_t cap, bool *found)
{
    size_t old = ah_buf_size (line);
    size_t room = cap - old;
    size_t take = size < room ? size : room;
    if (ah_buf_append (line, data, take))
        return -1;
    const uint8_t *h = ah_buf_head (line);
    size_t n = ah_buf_size (line);
    size_t from = old >= term_len - 1 ? old - (term_len - 1) : 0;
    for (size_t i = from; i + term_len <= n; i++)
        if (!memcmp (h + i, term, term_len)) {
            *found = true;
            size_t end = i + term_len;
            line->len = line->off + end;            //  what came after is not ours yet
            return (ssize_t) (end - old);
        }
    *found = false;
    return take < size || ah_buf_size (line) == cap ? -1 : (ssize_t) take;
}

static bool s_digits (const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0 || n > 16)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s [i] < '0' || s [i] > '9')
            return false;
        v = v * 10 + (uint64_t) (s [i] - '0');
    }
    *out = v;
    return v < SIZE_MAX_BODY;
}

static bool s_token_char (unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
        || (c && strchr ("!#$%&'*+-.^_`|~", c));
}

//  The head in self->line (ends with CRLF CRLF): status and framing.
static int s_head (ah_httpresp_t *self, const char **why)
{
    const char *h = (const char *) ah_buf_head (&self->line);
    size_t n = ah_buf_size (&self->line);
    //  HTTP/1.x SSS[ reason]
    if (n < 14 || memcmp (h, "HTTP/1.", 7) || h [7] < '0' || h [7] > '9' || h [8] != ' '
    ||  h [9] < '1' || h [9] > '5' || h [10] < '0' || h [10] > '9' || h [11] < '0' || h [11] > '9'
    ||  (h [12] != ' ' && h [12] != '\r'))
        return s_fail (self, why, "the server's answer does not start with an HTTP/1.x status line");
    self->status = (h [9] - '0') * 100 + (h [10] - '0') * 10 + (h [11] - '0');
    const char *p = memchr (h, '\n', n);
    if (!p || p [-1] != '\r')
        return s_fail (self, why, "the server's status line does not end with CRLF");
    for (const char *c = h; c < p - 1; c++)
        if ((unsigned char) *c < 0x20 && *c != '\t')
            return s_fail (self, why, "a control byte in the server's status line");
    p++;
    const char *end = h + n - 2;                    //  the blank line's CRLF
    bool have_len = false;
    while (p < end) {
        const char *eol = memchr (p, '\n', (size_t) (end - p) + 1);
        if (!eol || eol == p || eol [-1] != '\r')
            return s_fail (self, why, "a header line of the server's answer does not end with CRLF");
        const char *colon = memchr (p, ':', (size_t) (eol - p));
        if (!colon || colon == p)
            return s_fail (self, why, "a header line of the server's answer has no name");
        for (const char *c = p; c < colon; c++)
            if (!s_token_char ((unsigned char) *c))
                return s_fail (self, why, "a header name of the server's answer is not a token");
        const char *v = colon + 1, *ve = eol - 1;
        for (const char *c = v; c < ve; c++)
            if (((unsigned char) *c < 0x20 && *c != '\t') || *c == 0x7f)
                return s_fail (self, why, "a control byte in a header of the server's answer");
        while (v < ve && (*v == ' ' || *v == '\t'))
            v++;
        while (ve > v && (ve [-1] == ' ' || ve [-1] == '\t'))
            ve--;
        size_t nl = (size_t) (colon - p), vl = (size_t) (ve - v);
        if (nl == 14 && !strncasecmp (p, "content-length", 14)) {
            uint64_t len;
            if (!s_digits (v, vl, &len))
                return s_fail (self, why, "the server's Content-Length is not a number");
            if (have_len && (uint64_t) self->length != len)
                return s_fail (self, why, "the server sent two different Content-Lengths");
            self->length = (int64_t) len;
            have_len = true;
        }
        else if (nl == 17 && !strncasecmp (p, "transfer-encoding", 17)) {
            if (vl != 7 || strncasecmp (v, "chunked", 7))
                return s_fail (self, why, "the server's Transfer-Encoding is not chunked");
            self->chunked = true;
        }
        p = eol + 1;
    }
    if (self->chunked)
        self->length = -1;
    return 0;
}

//  What comes once the head is in.
static void s_body_phase (ah_httpresp_t *self)
{
    ah_buf_clear (&self->line);
    if (self->head_request || self->status == 204 || self->status == 304)
        self->phase = DONE;
    else if (self->chunked)
        self->phase = CHUNK_SIZE;
    else if (self->length >= 0) {
        self->left = (uint64_t) self->length;
        self->phase = self->left ? BODY_LEN : DONE;
    }
    else
        self->phase = BODY_CLOSE;
}

//  The chunk-size line in self->line (ends with CRLF).
static int s_chunk_size (ah_httpresp_t *self, const char **why)
{
    const char *h = (const char *) ah_buf_head (&self->line);
    size_t n = ah_buf_size (&self->line) - 2, i = 0;
    uint64_t v = 0;
    for (; i < n; i++) {
        char c = h [i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            break;
        if (i >= 13)
            return s_fail (self, why, "a chunk of the server's answer is too large");
        v = v * 16 + (uint64_t) d;
    }
    if (i == 0)
        return s_fail (self, why, "a chunk size of the server's answer is not a hex number");
    while (i < n && (h [i] == ' ' || h [i] == '\t'))
        i++;
    if (i < n && h [i] != ';')
        return s_fail (self, why, "a chunk size line of the server's answer is malformed");
    for (; i < n; i++)
        if ((unsigned char) h [i] < 0x20 && h [i] != '\t')
            return s_fail (self, why, "a control byte in a chunk size line of the server's answer");
    ah_buf_clear (&self->line);
    self->left = v;
    self->phase = v ? CHUNK_DATA : TRAILER;
    return 0;
}

int ah_httpresp_feed (ah_httpresp_t *self, const uint8_t *data, size_t size, size_t *used,
                      ah_httpresp_body_fn *body_fn, void *ud, const char **why)
{
    size_t at = 0;
    *used = 0;
    while (self->phase != DONE) {
        if (self->phase == FAILED)
            return s_fail (self, why, "the server's answer was already malformed");
        if (at == size)
            return 0;
        const uint8_t *d = data + at;
        size_t avail = size - at;
        bool found = false;
        ssize_t took;
        switch (self->phase) {
            case HEAD:
                took = s_gather (&self->line, d, avail, "\r\n\r\n", 4, AH_HTTPRESP_HEAD_MAX, &found);
                if (took < 0)
                    return s_fail (self, why, "the server's answer head is larger than 16 KiB");
                at += (size_t) took;
                if (!found)
                    return 0;
                if (s_head (self, why))
                    return -1;
                if (self->status < 200) {            //  100 Continue and the like: the next head
                    ah_buf_clear (&self->line);
                    self->status = 0;
                    self->length = -1;
                    self->chunked = false;
                    break;
                }
                s_body_phase (self);
                break;
            case BODY_LEN:
            case CHUNK_DATA:
            case BODY_CLOSE: {
                size_t n = avail;
                if (self->phase != BODY_CLOSE && self->left < n)
                    n = (size_t) self->left;
                at += n;
                if (self->phase != BODY_CLOSE)
                    self->left -= n;
                if (n && body_fn && body_fn (ud, d, n)) {
                    *used = at;
                    return 2;
                }
                if (self->phase == BODY_LEN && !self->left)
                    self->phase = DONE;
                else if (self->phase == CHUNK_DATA && !self->left)
                    self->phase = CHUNK_CRLF;
                break;
            }
            case CHUNK_SIZE:
                took = s_gather (&self->line, d, avail, "\r\n", 2, CHUNK_LINE_MAX, &found);
                if (took < 0)
                    return s_fail (self, why, "a chunk size line of the server's answer is longer than 1 KiB");
                at += (size_t) took;
                if (found && s_chunk_size (self, why))
                    return -1;
                break;
            case CHUNK_CRLF:
            case TRAILER:
                //  A chunk's CRLF; the trailer's lines (ignored), then CRLF.
                took = s_gather (&self->line, d, avail, "\r\n", 2,
                                 self->phase == CHUNK_CRLF ? 2 : AH_HTTPRESP_HEAD_MAX, &found);
                if (took < 0)
                    return s_fail (self, why, self->phase == CHUNK_CRLF
                                   ? "a chunk of the server's answer does not end with CRLF"
                                   : "a trailer line of the server's answer is longer than 16 KiB");
                at += (size_t) took;
                if (!found)
                    break;
                if (self->phase == CHUNK_CRLF)
                    self->phase = CHUNK_SIZE;
                else if (ah_buf_size (&self->line) == 2)
                    self->phase = DONE;
                ah_buf_clear (&self->line);
                break;
        }
    }
    *used = at;
    return 1;
}

int ah_httpresp_eof (ah_httpresp_t *self, const char **why)
{
    if (self->phase == DONE)
        return 1;
    if (self->phase == BODY_CLOSE) {
        self->phase = DONE;
        return 1;
    }
    if (self->phase == FAILED)
        return s_fail (self, why, "the server's answer was malformed");
    return s_fail (self, why, self->phase == HEAD ? "the server closed the connection before answering"
                                                  : "the server closed the connection in the middle of its answer");
}
