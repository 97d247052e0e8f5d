/*  proto/http.c: HTTP/1.1 request heads (see http.h).

    The head is found first (the blank line ending it, within the caps),
    copied once, and then cut into lines in the copy: names lower-cased
    and values trimmed in place, so the head's pointers all point into
    that one copy.                                                      */
#include "proto/http.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool s_tchar (uint8_t c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
        || (c && strchr ("!#$%&'*+-.^_`|~", c));
}

bool ah_http_is_token (const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!s_tchar ((uint8_t) s [i]))
            return false;
    return n > 0;
}

void ah_http_head_clear (ah_http_head_t *head)
{
    free (head->store);
    memset (head, 0, sizeof *head);
}

//  -status and why, for the caller's one line.
static int s_fail (const char **why, const char *text, int status)
{
    *why = text;
    return -status;
}

//  The request line, in place: METHOD SP target SP HTTP/1.x
static int s_request_line (char *line, ah_http_head_t *head, const char **why)
{
    char *sp = strchr (line, ' ');
    if (!sp || sp == line)
        return s_fail (why, "malformed request line", 400);
    size_t mlen = (size_t) (sp - line);
    if (mlen >= sizeof head->method)
        return s_fail (why, "unknown method", 501);
    for (size_t i = 0; i < mlen; i++)
        if (line [i] < 'A' || line [i] > 'Z')
            return s_fail (why, "malformed method", 400);
    memcpy (head->method, line, mlen);
    head->method [mlen] = 0;
    char *target = sp + 1;
    char *sp2 = strchr (target, ' ');
    if (!sp2 || sp2 == target)
        return s_fail (why, "malformed request line", 400);
    *sp2 = 0;
    for (const char *p = target; *p; p++) {
        uint8_t c = (uint8_t) *p;
        if (c < 0x21 || c > 0x7e)
            return s_fail (why, c >= 0x80 ? "a byte outside ASCII in the request target (percent-encode it)"
                                          : "a control character in the request target", 400);
    }
    if ((size_t) (sp2 - target) > AH_HTTP_MAX_TARGET)
        return s_fail (why, "request target too long", 414);
    const char *version = sp2 + 1;
    if (strncmp (version, "HTTP/", 5) || strlen (version) != 8 || version [6] != '.'
    ||  version [5] < '0' || version [5] > '9' || version [7] < '0' || version [7] > '9')
        return s_fail (why, "malformed HTTP version", 400);
    if (version [5] != '1')
        return s_fail (why, "only HTTP/1.x is spoken here", 505);
    head->minor = version [7] - '0';
    head->target = target;
    return 0;
}

static int s_header_line (char *line, ah_http_head_t *head, const char **why)
{
    if (*line == ' ' || *line == '\t')
        return s_fail (why, "folded header lines are not accepted", 400);
    char *colon = strchr (line, ':');
    if (!colon || colon == line)
        return s_fail (why, "malformed header line", 400);
    for (char *p = line; p < colon; p++) {
        if (!s_tchar ((uint8_t) *p))
            return s_fail (why, "malformed header name", 400);
        if (*p >= 'A' && *p <= 'Z')
            *p = (char) (*p - 'A' + 'a');
    }
    *colon = 0;
    char *value = colon + 1;
    while (*value == ' ' || *value == '\t')
        value++;
    char *end = value + strlen (value);
    while (end > value && (end [-1] == ' ' || end [-1] == '\t'))
        *--end = 0;
    for (const char *p = value; *p; p++) {
        uint8_t c = (uint8_t) *p;
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return s_fail (why, "a control character in a header value", 400);
    }
    if (head->nheaders == AH_HTTP_MAX_HEADERS)
        return s_fail (why, "too many header lines", 431);
    head->headers [head->nheaders++] = (ah_http_header_t) { line, value };
    return 0;
}

int ah_http_head_parse (const uint8_t *buf, size_t len, ah_http_head_t *head, size_t *used,
                        const char **why)
{
    const char *dummy;
    if (!why)
        why = &dummy;
    *why = NULL;
    ah_http_head_clear (head);
    //  Up to a few empty lines before the request line are ignored.
    size_t start = 0;
    while (start + 1 < len && start < 8 && buf [start] == '\r' && buf [start + 1] == '\n')
        start += 2;
    //  Find the end of the head: CRLF CRLF. A NUL or a lone LF anywhere
    //  before it refuses the request at once, as does a request line
    //  that cannot fit.
    size_t end = 0;
    bool line_one = true;
    for (size_t i = start; i < len; i++) {
        uint8_t c = buf [i];
        if (c == 0)
            return s_fail (why, "a NUL byte in the request head", 400);
        if (c == '\n' && (i == start || buf [i - 1] != '\r'))
            return s_fail (why, "a line ended by LF alone (CRLF is required)", 400);
        if (i > start && buf [i - 1] == '\r' && c != '\n')
            return s_fail (why, "a CR not followed by LF", 400);
        if (c == '\n') {
            if (line_one && i - start > AH_HTTP_MAX_TARGET + 32)
                return s_fail (why, "request target too long", 414);
            line_one = false;
            if (i >= start + 3 && buf [i - 2] == '\n') {
                end = i + 1;
                break;
            }
        }
        if (line_one && i - start > AH_HTTP_MAX_TARGET + 32)
            return s_fail (why, "request target too long", 414);
        if (i - start + 1 > AH_HTTP_MAX_HEAD)
            return s_fail (why, "request head too large", 431);
    }
    if (!end)
        return 0;
    size_t n = end - start;
    head->store = malloc (n + 1);
    if (!head->store)
        return s_fail (why, "out of memory", 503);
    memcpy (head->store, buf + start, n);
    head->store [n] = 0;
    //  Cut into lines (CRLF -> NUL NUL): the request line, then headers,
    //  then the empty line.
    char *line = head->store;
    for (int index = 0; ; index++) {
        char *cr = strstr (line, "\r\n");
        if (!cr)
            return s_fail (why, "malformed request head", 400);
        *cr = 0;
        if (!*line) {
            if (index == 0)
                return s_fail (why, "empty request line", 400);
            break;
        }
        int rc = index == 0 ? s_request_line (line, head, why) : s_header_line (line, head, why);
        if (rc)
            return rc;
        line = cr + 2;
    }
    *used = end;
    return 1;
}

const char *ah_http_header (const ah_http_head_t *head, const char *name)
{
    for (size_t i = 0; i < head->nheaders; i++)
        if (strcmp (head->headers [i].name, name) == 0)
            return head->headers [i].value;
    return NULL;
}

size_t ah_http_header_count (const ah_http_head_t *head, const char *name)
{
    size_t n = 0;
    for (size_t i = 0; i < head->nheaders; i++)
        n += strcmp (head->headers [i].name, name) == 0;
    return n;
}

bool ah_http_header_has (const ah_http_head_t *head, const char *name, const char *token)
{
    size_t tlen = strlen (token);
    for (size_t i = 0; i < head->nheaders; i++) {
        if (strcmp (head->headers [i].name, name))
            continue;
        const char *p = head->headers [i].value;
        while (*p) {
            while (*p == ' ' || *p == '\t' || *p == ',')
                p++;
            const char *e = p;
            while (*e && *e != ',' && *e != ' ' && *e != '\t')
                e++;
            if ((size_t) (e - p) == tlen && strncasecmp (p, token, tlen) == 0)
                return true;
            p = e;
        }
    }
    return false;
}

//  True when the parameters of a range (from its ';' to its ',') hold a
//  q of zero: "0", "0.", "0.0", "0.000"; any other value is not zero.
static bool s_q_zero (const char *p, const char *end)
{
    while (p < end) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ';'))
            p++;
        const char *e = p;
        while (e < end && *e != ';')
            e++;
        if (e - p >= 2 && (p [0] == 'q' || p [0] == 'Q') && p [1] == '=') {
            const char *v = p + 2, *ve = e;
            while (ve > v && (ve [-1] == ' ' || ve [-1] == '\t'))
                ve--;
            if (ve == v || *v != '0')
                return false;
            if (++v == ve)
                return true;
            if (*v++ != '.')
                return false;
            while (v < ve && *v == '0')
                v++;
            return v == ve;
        }
        p = e;
    }
    return false;
}

bool ah_http_accepts (const ah_http_head_t *head, const char *type)
{
    const char *slash = strchr (type, '/');
    size_t major = slash ? (size_t) (slash - type) : strlen (type);
    bool any = false;
    for (size_t i = 0; i < head->nheaders; i++) {
        if (strcmp (head->headers [i].name, "accept"))
            continue;
        any = true;
        const char *p = head->headers [i].value;
        while (*p) {
            while (*p == ' ' || *p == '\t' || *p == ',')
                p++;
            const char *e = p;                      //  the range ends at ';', ',' or a blank
            while (*e && *e != ',' && *e != ';' && *e != ' ' && *e != '\t')
                e++;
            const char *end = e;                    //  the element (its parameters too) at ','
            while (*end && *end != ',')
                end++;
            size_t n = (size_t) (e - p);
            bool match = (n == strlen (type) && strncasecmp (p, type, n) == 0)
                      || (n == 3 && strncmp (p, "*/*", 3) == 0)
                      || (n == major + 2 && strncasecmp (p, type, major) == 0 && strncmp (p + major, "/*", 2) == 0);
            if (match && !s_q_zero (e, end))
                return true;
            p = end;
        }
    }
    return !any;
}

static int s_hex (char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int ah_http_decode (const char *in, size_t n, char *out, size_t out_size, const char **why)
{
    const char *dummy;
    if (!why)
        why = &dummy;
    if (out_size < n + 1) {
        *why = "too long";
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t) in [i];
        if (c == '%') {
            int hi = i + 2 < n ? s_hex (in [i + 1]) : -1;
            int lo = i + 2 < n ? s_hex (in [i + 2]) : -1;
            if (hi < 0 || lo < 0) {
                *why = "a malformed percent escape";
                return -1;
            }
            c = (uint8_t) (hi << 4 | lo);
            i += 2;
        }
        if (c < 0x20 || c == 0x7f) {
            *why = c == 0 ? "a NUL byte" : "a control character";
            return -1;
        }
        out [k++] = (char) c;
    }
    out [k] = 0;
    return (int) k;
}

const char *ah_http_reason (int status)
{
    switch (status) {
        case 100: return "Continue";
        case 101: return "Switching Protocols";
        case 200: return "OK";
        case 201: return "Created";
        case 202: return "Accepted";
        case 204: return "No Content";
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 403: return "Forbidden";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 406: return "Not Acceptable";
        case 408: return "Request Timeout";
        case 409: return "Conflict";
        case 410: return "Gone";
        case 411: return "Length Required";
        case 413: return "Content Too Large";
        case 414: return "URI Too Long";
        case 415: return "Unsupported Media Type";
        case 417: return "Expectation Failed";
        case 422: return "Unprocessable Content";
        case 426: return "Upgrade Required";
        case 429: return "Too Many Requests";
        case 431: return "Request Header Fields Too Large";
        case 500: return "Internal Server Error";
        case 501: return "Not Implemented";
        case 502: return "Bad Gateway";
        case 503: return "Service Unavailable";
        case 504: return "Gateway Timeout";
        case 505: return "HTTP Version Not Supported";
        case 507: return "Insufficient Storage";
    }
    return "Unknown";
}
