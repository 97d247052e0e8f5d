/*  cli/http.c: see http.h. */
#include "cli/http.h"
#include "cli/tls.h"
#include "common/clock.h"
#include "common/str.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#define CONNECT_MS      10000
#define PIECE           65536

struct ah_hc_t {
    ah_ws_io_t io;
    bool open;                      //  io is connected
    ah_httpresp_t resp;
    ah_httpresp_body_fn *on_body;
    void *ud;
    int64_t deadline;               //  -1: none
    ah_buf_t early;                 //  body bytes that came with the head
    bool starting;                  //  in ah_hc_start: body bytes go to early
    bool done;                      //  complete (or stopped)
    bool malformed;                 //  the answer broke HTTP's rules
};

char *ah_hc_escape (const char *s, bool keep_slash)
{
    size_t n = strlen (s);
    char *out = malloc (n * 3 + 1), *o = out;
    if (!out)
        return NULL;
    for (; *s; s++) {
        unsigned char c = (unsigned char) *s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
        ||  c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/'))
            *o++ = (char) c;
        else {
            static const char hex [] = "0123456789ABCDEF";
            *o++ = '%';
            *o++ = hex [c >> 4];
            *o++ = hex [c & 15];
        }
    }
    *o = 0;
    return out;
}

int ah_hc_connect (const ah_ws_url_t *url, const char *ca, int timeout_ms, ah_ws_io_t *io,
                   char *err, size_t err_size)
{
    //  A name, or an IP literal: the resolver knows both.
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
    int rc = getaddrinfo (url->host, url->port, &hints, &ai);
    if (rc) {
        snprintf (err, err_size, "%s: %s", url->host, gai_strerror (rc));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next)
        fd = ah_ws_dial (a->ai_addr, a->ai_addrlen, timeout_ms, -1, err, err_size);
    freeaddrinfo (ai);
    if (fd < 0)
        return -1;
    *io = ah_ws_io_plain (fd);
    if (url->secure && ah_tls_io (fd, url->host, ca, timeout_ms, io, err, err_size))
        return -1;
    return 0;
}

//  ms until the deadline, at most want (-1: no limit); 0 when it passed.
static int s_wait_ms (const ah_hc_t *self, int want)
{
    if (self->deadline < 0)
        return want;
    int64_t left = self->deadline - ah_clock_ms ();
    if (left <= 0)
        return 0;
    return want < 0 || left < want ? (int) left : want;
}

static int s_body (void *ud, const uint8_t *data, size_t size)
{
    ah_hc_t *self = ud;
    if (self->starting)
        return ah_buf_append (&self->early, data, size) ? 1 : 0;
    return self->on_body ? self->on_body (self->ud, data, size) : 0;
}

//  Feeds what was read: as ah_hc_pump.
static int s_feed (ah_hc_t *self, const uint8_t *data, size_t size, char **err)
{
    size_t used;
    const char *why = NULL;
    int rc = ah_httpresp_feed (&self->resp, data, size, &used, s_body, self, &why);
    if (rc < 0) {
        self->malformed = true;
        *err = strdup (why);
        return -1;
    }
    if (rc == 2 && self->starting) {
        *err = strdup ("out of memory");
        return -1;
    }
    if (rc >= 1)
        self->done = true;
    return rc;
}

//  One read (after waiting up to wait_ms): as ah_hc_pump.
static int s_read_once (ah_hc_t *self, int wait_ms, char **err)
{
    uint8_t buf [PIECE];
    ssize_t n = self->io.read (&self->io, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        int ms = s_wait_ms (self, wait_ms);
        if (ms == 0 && self->deadline >= 0 && ah_clock_ms () >= self->deadline) {
            *err = strdup ("no answer within the time allowed");
            return -1;
        }
        struct pollfd p = { .fd = self->io.fd, .events = POLLIN };
        int r = poll (&p, 1, ms);
        if (r <= 0)
            return r < 0 && errno != EINTR ? (*err = ah_strf ("poll: %s", strerror (errno)), -1) : 0;
        n = self->io.read (&self->io, buf, sizeof buf);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return 0;
    }
    if (n < 0) {
        *err = ah_strf ("the connection broke: %s", strerror (errno));
        return -1;
    }
    if (n == 0) {
        const char *why = NULL;
        if (ah_httpresp_eof (&self->resp, &why) < 0) {
            *err = strdup (why);
            return -1;
        }
        self->done = true;
        return 1;
    }
    return s_feed (self, buf, (size_t) n, err);
}

int ah_hc_pump (ah_hc_t *self, int wait_ms, char **err)
{
    *err = NULL;
    if (ah_buf_size (&self->early)) {
        //  What came with the head first.
        int stop = self->on_body ? self->on_body (self->ud, ah_buf_head (&self->early),
                                                  ah_buf_size (&self->early)) : 0;
        ah_buf_clear (&self->early);
        if (stop) {
            self->done = true;
            return 2;
        }
        return self->done ? 1 : 0;     //  the caller looks at it before waiting for more
    }
    if (self->done)
        return 1;
    return s_read_once (self, wait_ms, err);
}

//  Writes all of data, watching for an early answer: 0 sent, 1 the
//  server answered (or closed) first, -1 failed (*err).
static int s_send (ah_hc_t *self, const void *data, size_t size, char **err)
{
    const uint8_t *p = data;
    while (size) {
        ssize_t n = self->io.write (&self->io, p, size);
        if (n > 0) {
            p += n;
            size -= (size_t) n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return 1;               //  EPIPE, ECONNRESET: the answer may say why
        int ms = s_wait_ms (self, -1);
        if (ms == 0) {
            *err = strdup ("the request could not be sent within the time allowed");
            return -1;
        }
        struct pollfd pf = { .fd = self->io.fd, .events = POLLOUT | POLLIN };
        if (poll (&pf, 1, ms) < 0 && errno != EINTR) {
            *err = ah_strf ("poll: %s", strerror (errno));
            return -1;
        }
        if (pf.revents & (POLLIN | POLLHUP | POLLERR))
            return 1;               //  an answer before the end of the request
    }
    return 0;
}

//  The authority and the target of url: the target's start, or NULL.
static const char *s_split (const char *url, ah_ws_url_t *out, char **err)
{
    const char *sep = strstr (url, "://");
    const char *target = sep ? strchr (sep + 3, '/') : NULL;
    size_t alen = target ? (size_t) (target - url) : strlen (url);
    char base [600];
    const char *why = "the URL is too long";
    if (alen >= sizeof base) {
        *err = ah_strf ("bad server URL: %s", why);
        return NULL;
    }
    memcpy (base, url, alen);
    base [alen] = 0;
    if (ah_ws_url_parse (base, out, &why)) {
        *err = ah_strf ("bad server URL %s: %s", base, why);
        return NULL;
    }
    target = target ? target : "/";
    for (const char *c = target; *c; c++)
        if ((unsigned char) *c <= 0x20 || (unsigned char) *c >= 0x7f) {
            *err = strdup ("a request path with a space or a control byte");
            return NULL;
        }
    return target;
}

void ah_hc_destroy (ah_hc_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_hc_t *self = *self_p;
    if (self->open)
        self->io.close (&self->io);
    ah_httpresp_clear (&self->resp);
    ah_buf_free (&self->early);
    free (self);
    *self_p = NULL;
}

static ah_hc_t *s_start (const ah_hc_req_t *req, bool *malformed, char **err)
{
    *err = NULL;
    ah_hc_t *self = calloc (1, sizeof *self);
    if (!self) {
        *err = strdup ("out of memory");
        return NULL;
    }
    ah_httpresp_init (&self->resp, !strcmp (req->method, "HEAD"));
    ah_buf_init (&self->early, 0);
    self->on_body = req->on_body;
    self->ud = req->ud;
    self->deadline = req->timeout_ms > 0 ? ah_clock_ms () + req->timeout_ms : -1;
    ah_ws_url_t url;
    const char *target = s_split (req->url, &url, err);
    if (!target)
        goto fail;
    char why [512] = "";
    int connect_ms = req->connect_ms > 0 ? req->connect_ms : CONNECT_MS;
    if (ah_hc_connect (&url, req->ca, s_wait_ms (self, connect_ms), &self->io, why, sizeof why)) {
        *err = strdup (why);
        goto fail;
    }
    self->open = true;
    bool has_body = req->body || req->upload || !strcmp (req->method, "POST")
                 || !strcmp (req->method, "PUT") || !strcmp (req->method, "PATCH");
    int64_t body_size = req->upload ? req->upload_size : (int64_t) req->body_size;
    bool v6 = strchr (url.host, ':') != NULL;
    char clen [48] = "";
    if (has_body)
        snprintf (clen, sizeof clen, "Content-Length: %lld\r\n", (long long) body_size);
    //  The head and an in-memory body in one write: two small writes would
    //  wait for the first one's acknowledgement (Nagle's algorithm).
    ah_buf_t out;
    ah_buf_init (&out, 0);
    int rc = ah_buf_appendf (&out, "%s %s HTTP/1.1\r\nHost: %s%s%s:%s\r\nConnection: close\r\n"
                             "User-Agent: agenthold\r\n%s%s\r\n",
                             req->method, target, v6 ? "[" : "", url.host, v6 ? "]" : "", url.port,
                             req->headers ? req->headers : "", clen);
    if (!rc && req->body && req->body_size)
        rc = ah_buf_append (&out, req->body, req->body_size);
    if (rc)
        *err = strdup ("out of memory");
    else
        rc = s_send (self, ah_buf_head (&out), ah_buf_size (&out), err);
    if (ah_buf_head (&out))
        memset (ah_buf_head (&out), 0, ah_buf_size (&out));     //  the token
    ah_buf_free (&out);
    if (!rc && req->upload) {
        static uint8_t piece [PIECE];
        int64_t left = req->upload_size;
        while (!rc && left > 0) {
            size_t n = fread (piece, 1, left < PIECE ? (size_t) left : PIECE, req->upload);
            if (n == 0) {
                *err = ah_strf ("the file to send ended %lld bytes early%s%s",
                                (long long) left, ferror (req->upload) ? ": " : "",
                                ferror (req->upload) ? strerror (errno) : "");
                rc = -1;
                break;
            }
            left -= (int64_t) n;
            rc = s_send (self, piece, n, err);
        }
    }
    if (rc < 0)
        goto fail;
    //  The answer's head (and what came with it, kept for the pump).
    self->starting = true;
    while (!ah_httpresp_has_head (&self->resp) && !self->done) {
        if (s_read_once (self, -1, err) < 0)
            goto fail;
    }
    self->starting = false;
    if (!ah_httpresp_has_head (&self->resp)) {
        *err = strdup ("the server closed the connection before answering");
        goto fail;
    }
    return self;
fail:
    if (self)
        *malformed = self->malformed;
    ah_hc_destroy (&self);
    return NULL;
}

ah_hc_t *ah_hc_start (const ah_hc_req_t *req, char **err)
{
    bool malformed;
    return s_start (req, &malformed, err);
}

int ah_hc_status (const ah_hc_t *self)
{
    return self->resp.status;
}

void ah_hc_set_timeout (ah_hc_t *self, int timeout_ms)
{
    self->deadline = timeout_ms > 0 ? ah_clock_ms () + timeout_ms : -1;
}

long ah_hc_perform (const ah_hc_req_t *req, bool *malformed, char **err)
{
    bool bad = false;
    ah_hc_t *self = s_start (req, &bad, err);
    if (malformed)
        *malformed = bad;
    if (!self)
        return 0;
    int rc;
    while ((rc = ah_hc_pump (self, -1, err)) == 0)
        ;
    long status = rc < 0 ? 0 : ah_hc_status (self);
    if (malformed)
        *malformed = self->malformed;
    ah_hc_destroy (&self);
    return status;
}
