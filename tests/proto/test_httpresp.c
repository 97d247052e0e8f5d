/*  tests/proto/test_httpresp.c: a server's answer read as it arrives
    (proto/httpresp.h): each framing whole and a byte at a time, interim
    answers, bodiless statuses, and the hostile answers: every malformed
    head, length and chunk refused with a sentence, every cap held.   */
#include "proto/httpresp.h"
#include "tests/common/check.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    char body [256];
    size_t n;
    size_t stop_at;                 //  stop after this many bytes (0: never)
} got_t;

static int s_body (void *ud, const uint8_t *data, size_t size)
{
    got_t *g = ud;
    for (size_t i = 0; i < size && g->n < sizeof g->body - 1; i++)
        g->body [g->n++] = (char) data [i];
    return g->stop_at && g->n >= g->stop_at;
}

//  Feeds text (step bytes at a time; 0 whole), then the end when close:
//  the final verdict (1 complete, 2 stopped, -1 refused, 0 wants more).
static int s_feed (const char *text, size_t len, size_t step, bool close, bool head, got_t *g,
                   int *status, const char **why_out)
{
    ah_httpresp_t r;
    ah_httpresp_init (&r, head);
    memset (g->body, 0, sizeof g->body);
    g->n = 0;
    size_t at = 0;
    int rc = 0;
    const char *why = NULL;
    while (rc == 0 && at < len) {
        size_t n = step && len - at > step ? step : len - at, used = 0;
        rc = ah_httpresp_feed (&r, (const uint8_t *) text + at, n, &used, s_body, g, &why);
        at += rc ? used : n;
    }
    if (rc == 0 && close)
        rc = ah_httpresp_eof (&r, &why);
    *status = r.status;
    if (why_out)
        *why_out = why;
    ah_httpresp_clear (&r);
    return rc;
}

//  Whole and a byte at a time agree on the verdict and the body.
static void s_ok (const char *text, int want_status, const char *want_body, bool close)
{
    for (size_t step = 0; step <= 1; step++) {
        got_t g = { .stop_at = 0 };
        int status;
        const char *why = NULL;
        int rc = s_feed (text, strlen (text), step, close, false, &g, &status, &why);
        if (rc != 1)
            fprintf (stderr, "  (step %zu) %s: %s\n", step, text, why ? why : "incomplete");
        CHECK (rc == 1);
        CHECK (status == want_status);
        CHECK_STR (g.body, want_body);
    }
}

static void s_bad (const char *text, size_t len, const char *want_why)
{
    for (size_t step = 0; step <= 1; step++) {
        got_t g = { .stop_at = 0 };
        int status;
        const char *why = NULL;
        int rc = s_feed (text, len, step, true, false, &g, &status, &why);
        CHECK (rc == -1);
        if (!why || !strstr (why, want_why))
            fprintf (stderr, "  (step %zu) want '%s', got '%s'\n", step, want_why, why ? why : "(null)");
        CHECK (why && strstr (why, want_why));
    }
}

int main (void)
{
    //  Framings.
    s_ok ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 200, "hello", false);
    s_ok ("HTTP/1.1 200 OK\r\ncontent-length:5 \r\n\r\nhello", 200, "hello", false);
    s_ok ("HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n1;ext=1\r\n!\r\n0\r\n\r\n",
          201, "hello!", false);
    s_ok ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nA\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\n",
          200, "0123456789", false);
    s_ok ("HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: 1\n\n", 200, "data: 1\n\n", true);
    s_ok ("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}", 404, "{}", false);
    s_ok ("HTTP/1.1 204 No Content\r\n\r\n", 204, "", false);
    s_ok ("HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", 304, "", false);
    s_ok ("HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", 200, "", false);
    //  Chunked wins over a Content-Length beside it.
    s_ok ("HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
          200, "ok", false);

    //  HEAD: no body whatever the length says.
    {
        got_t g = { 0 };
        int status;
        const char *t = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n";
        CHECK (s_feed (t, strlen (t), 0, false, true, &g, &status, NULL) == 1);
        CHECK (g.n == 0);
    }
    //  What comes after a complete answer is not taken.
    {
        ah_httpresp_t r;
        ah_httpresp_init (&r, false);
        const char *t = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA";
        size_t used = 0;
        const char *why = NULL;
        got_t g = { 0 };
        CHECK (ah_httpresp_feed (&r, (const uint8_t *) t, strlen (t), &used, s_body, &g, &why) == 1);
        CHECK (used == strlen (t) - 5);
        ah_httpresp_clear (&r);
    }
    //  The body's reader stops it.
    {
        got_t g = { .stop_at = 3 };
        int status;
        const char *t = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789";
        CHECK (s_feed (t, strlen (t), 0, false, false, &g, &status, NULL) == 2);
    }
    //  Not complete yet: more wanted, not an error.
    {
        got_t g = { 0 };
        int status;
        const char *t = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234";
        CHECK (s_feed (t, strlen (t), 0, false, false, &g, &status, NULL) == 0);
    }

    //  Hostile answers.
    s_bad ("", strlen (""), "closed the connection before answering");
    s_bad ("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234", strlen ("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234"), "in the middle of its answer");
    s_bad ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", strlen ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel"), "in the middle");
    s_bad ("HTTP/2 200\r\n\r\n", strlen ("HTTP/2 200\r\n\r\n"), "HTTP/1.x status line");
    s_bad ("HTTP/1.1 20 OK\r\n\r\n", strlen ("HTTP/1.1 20 OK\r\n\r\n"), "HTTP/1.x status line");
    s_bad ("HTTP/1.1 600 Odd\r\n\r\n", strlen ("HTTP/1.1 600 Odd\r\n\r\n"), "HTTP/1.x status line");
    s_bad ("http/1.1 200 OK\r\n\r\n", strlen ("http/1.1 200 OK\r\n\r\n"), "HTTP/1.x status line");
    s_bad ("HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n", strlen ("HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n"), "CRLF");
    s_bad ("HTTP/1.1 200 O\x01K\r\n\r\n", strlen ("HTTP/1.1 200 O\x01K\r\n\r\n"), "control byte");
    s_bad ("HTTP/1.1 200 OK\r\nX-A: b\x01\r\n\r\n", strlen ("HTTP/1.1 200 OK\r\nX-A: b\x01\r\n\r\n"), "control byte");
    s_bad ("HTTP/1.1 200 OK\r\nX A: b\r\n\r\n", strlen ("HTTP/1.1 200 OK\r\nX A: b\r\n\r\n"), "not a token");
    s_bad ("HTTP/1.1 200 OK\r\n: b\r\n\r\n", strlen ("HTTP/1.1 200 OK\r\n: b\r\n\r\n"), "no name");
    s_bad ("HTTP/1.1 200 OK\r\nNoColon\r\n\r\n", strlen ("HTTP/1.1 200 OK\r\nNoColon\r\n\r\n"), "no name");
    s_bad ("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", strlen ("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"), "not a number");
    s_bad ("HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n", strlen ("HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n"), "not a number");
    s_bad ("HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n", strlen ("HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n"), "not a number");
    s_bad ("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabc", strlen ("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabc"), "two different");
    s_bad ("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", strlen ("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), "not chunked");
    s_bad ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", strlen ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"), "not a hex number");
    s_bad ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5x\r\n", strlen ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5x\r\n"), "malformed");
    s_bad ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFF\r\n", strlen ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFF\r\n"), "too large");
    s_bad ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokXX0\r\n\r\n", strlen ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokXX0\r\n\r\n"), "does not end with CRLF");
    //  Caps: a head past 16 KiB, a chunk-size line past 1 KiB, a trailer line past 16 KiB.
    {
        size_t n = AH_HTTPRESP_HEAD_MAX + 100;
        char *big = malloc (n + 1);
        memcpy (big, "HTTP/1.1 200 OK\r\nX: ", 20);
        memset (big + 20, 'a', n - 20);
        big [n] = 0;
        s_bad (big, n, "larger than 16 KiB");
        const char *pre = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1";
        memcpy (big, pre, strlen (pre));
        memset (big + strlen (pre), ' ', 2000);
        s_bad (big, strlen (pre) + 2000, "longer than 1 KiB");
        pre = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: ";
        memcpy (big, pre, strlen (pre));
        memset (big + strlen (pre), 'a', n - strlen (pre));
        s_bad (big, n, "longer than 16 KiB");
        free (big);
    }
    //  A failed parser stays failed.
    {
        ah_httpresp_t r;
        ah_httpresp_init (&r, false);
        size_t used;
        const char *why = NULL;
        CHECK (ah_httpresp_feed (&r, (const uint8_t *) "XTTP/1.1 200\r\n\r\n", 16, &used, NULL, NULL, &why) == -1);
        CHECK (ah_httpresp_feed (&r, (const uint8_t *) "HTTP/1.1 200\r\n\r\n", 16, &used, NULL, NULL, &why) == -1);
        CHECK (ah_httpresp_eof (&r, &why) == -1);
        ah_httpresp_clear (&r);
    }
    return CHECK_DONE ();
}
