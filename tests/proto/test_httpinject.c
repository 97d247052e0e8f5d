/*  tests/proto/test_httpinject.c: the secret header added to each request
    of a client's stream (proto/httpinject.h), fed whole and one byte at
    a time: a GET gets it; the client's own header of that name (any
    case, given twice) is dropped, not forwarded; pipelined requests with
    Content-Length and chunked bodies each get it and bodies pass
    untouched (a body that looks like a request is not one); an upgrade
    ends the parsing. Refused for good: CR or LF injection (bare CR,
    bare LF, folding), a head over 16 KiB, too many header lines, no Host
    or two, another Host, an absolute target, CONNECT, two
    Content-Lengths, Content-Length with Transfer-Encoding, another
    Transfer-Encoding, a bad chunk size or chunk end, a trailer named
    like the secret; no refusal shows a byte of the input.              */
#include "proto/httpinject.h"
#include "tests/common/check.h"

#include <stdlib.h>
#include <string.h>

#define SECRET "Bearer sk-SECRET"

//  in fed to a fresh injector (whole, or a byte at a time); the output
//  as a string (the caller frees), NULL on refusal with *why.
static char *s_run (const char *host, int port, const char *in, size_t n, bool bytewise, const char **why,
                    uint64_t *requests)
{
    ah_http_inject_t *inj = ah_http_inject_new (host, port, "Authorization", SECRET);
    ah_buf_t out = { 0 };
    int rc = 0;
    *why = NULL;
    if (bytewise)
        for (size_t i = 0; i < n && rc == 0; i++)
            rc = ah_http_inject_feed (inj, (const uint8_t *) in + i, 1, &out, why);
    else
        rc = ah_http_inject_feed (inj, (const uint8_t *) in, n, &out, why);
    if (requests)
        *requests = ah_http_inject_requests (inj);
    ah_http_inject_destroy (&inj);
    char *text = rc == 0 ? strdup (ah_buf_size (&out) ? ah_buf_cstr (&out) : "") : NULL;
    ah_buf_free (&out);
    return text;
}

static void s_ok (const char *in, const char *want, uint64_t want_requests)
{
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        const char *why = NULL;
        uint64_t requests = 0;
        char *got = s_run ("api.example.com", 443, in, strlen (in), bytewise, &why, &requests);
        CHECK_STR (got, want);
        CHECK (requests == want_requests);
        if (!got)
            fprintf (stderr, "  refused (%s): %.80s\n", why, in);
        free (got);
    }
}

static void s_refused (const char *in, size_t n, const char *says)
{
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        const char *why = NULL;
        char *got = s_run ("api.example.com", 443, in, n, bytewise, &why, NULL);
        CHECK (got == NULL && why && strstr (why, says));
        if (got || !why || !strstr (why, says))
            fprintf (stderr, "  want refusal '%s', got %s (%s) for: %.60s\n", says, got ? "output" : "refusal",
                     why ? why : "-", in);
        CHECK (!why || !strstr (why, "evil"));
        free (got);
    }
}

int main (void)
{
    s_ok ("GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
          "GET / HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: " SECRET "\r\n\r\n", 1);
    //  The client's own, any case, twice: dropped.
    s_ok ("GET /x HTTP/1.1\r\nHost: API.example.com:443\r\nauthorization: Bearer mine\r\nAccept: */*\r\n"
          "AUTHORIZATION: again\r\n\r\n",
          "GET /x HTTP/1.1\r\nHost: API.example.com:443\r\nAccept: */*\r\nAuthorization: " SECRET "\r\n\r\n", 1);
    //  A header whose name only begins like it stays.
    s_ok ("GET / HTTP/1.1\r\nHost: api.example.com\r\nAuthorization-Extra: 1\r\n\r\n",
          "GET / HTTP/1.1\r\nHost: api.example.com\r\nAuthorization-Extra: 1\r\nAuthorization: " SECRET "\r\n\r\n", 1);
    //  Pipelined: a POST with a body that looks like a request, a chunked
    //  one, then a GET: three heads, each with the header; bodies untouched.
    s_ok ("POST /a HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 46\r\n\r\n"
          "GET /smuggled HTTP/1.1\r\nHost: evil.example\r\n\r\n"
          "POST /b HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\n\r\n"
          "5;ext=1\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n"
          "GET /c HTTP/1.0\r\nHost: api.example.com\r\n\r\n",
          "POST /a HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 46\r\nAuthorization: " SECRET "\r\n\r\n"
          "GET /smuggled HTTP/1.1\r\nHost: evil.example\r\n\r\n"
          "POST /b HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\nAuthorization: " SECRET "\r\n\r\n"
          "5;ext=1\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n"
          "GET /c HTTP/1.0\r\nHost: api.example.com\r\nAuthorization: " SECRET "\r\n\r\n", 3);
    //  An upgrade: what follows passes as it is.
    s_ok ("GET /ws HTTP/1.1\r\nHost: api.example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
          "GET /not-parsed HTTP/1.1\r\n\r\n",
          "GET /ws HTTP/1.1\r\nHost: api.example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
          "Authorization: " SECRET "\r\n\r\nGET /not-parsed HTTP/1.1\r\n\r\n", 1);
    //  An IPv6 literal with a port.
    {
        const char *why;
        const char *in = "GET / HTTP/1.1\r\nHost: [2001:db8::1]:8443\r\n\r\n";
        char *got = s_run ("2001:db8::1", 8443, in, strlen (in), false, &why, NULL);
        CHECK (got && strstr (got, "Authorization: " SECRET));
        free (got);
        in = "GET / HTTP/1.1\r\nHost: [2001:db8::1]:443\r\n\r\n";
        got = s_run ("2001:db8::1", 8443, in, strlen (in), false, &why, NULL);
        CHECK (got == NULL);
        free (got);
    }
    //  Hostile.
    const char *const cases [][2] = {
        { "GET / HTTP/1.1\r\nHost: api.example.com\r\nX-A: a\rAuthorization: evil\r\n\r\n", "CR" },
        { "GET / HTTP/1.1\r\nHost: api.example.com\nAuthorization: evil\r\n\r\n", "" },
        { "GET / HTTP/1.1\r\nHost: api.example.com\r\nX-A: a\r\n Authorization: evil\r\n\r\n", "folded" },
        { "GET / HTTP/1.1\r\nX-A: evil\r\n\r\n", "exactly one Host" },
        { "GET / HTTP/1.1\r\nHost: api.example.com\r\nHost: evil.example\r\n\r\n", "exactly one Host" },
        { "GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n", "another host" },
        { "GET / HTTP/1.1\r\nHost: api.example.com.evil.example\r\n\r\n", "another host" },
        { "GET / HTTP/1.1\r\nHost: api.example.com:8443\r\n\r\n", "another host" },
        { "GET https://evil.example/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n", "origin form" },
        { "CONNECT evil.example:443 HTTP/1.1\r\nHost: api.example.com\r\n\r\n", "CONNECT" },
        { "POST / HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", "more than one" },
        { "POST / HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", "both" },
        { "POST / HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "chunked alone" },
        { "POST / HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: -1\r\n\r\n", "not a number" },
        { "POST / HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 1e3\r\n\r\n", "not a number" },
        { "POST / HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size" },
        { "POST / HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n", "does not end" },
        { "POST / HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n", "chunk line" },
        { "POST / HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\n\r\n"
          "1000000000000000\r\n", "chunk size" },
        { "POST / HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\n\r\n"
          "0\r\nauthorization: evil\r\n\r\n", "trailer field named" },
        { "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\nGET / HTTP/1.1\r\nHost: evil.example\r\n\r\n", "another host" },
        { "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\nGARBAGE\r\n\r\n", "" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++)
        s_refused (cases [i][0], strlen (cases [i][0]), cases [i][1]);
    //  A NUL in a header value.
    {
        const char in [] = "GET / HTTP/1.1\r\nHost: api.example.com\r\nX-A: a\0b\r\n\r\n";
        s_refused (in, sizeof in - 1, "");
    }
    //  A huge head (no end in sight), and 65 header lines.
    {
        size_t n = 40000;
        char *big = malloc (n + 1);
        const char *start = "GET / HTTP/1.1\r\nHost: api.example.com\r\nX-Big: ";
        memcpy (big, start, strlen (start));
        memset (big + strlen (start), 'a', n - strlen (start));
        big [n] = 0;
        s_refused (big, n, "too large");
        free (big);
        char many [4096] = "GET / HTTP/1.1\r\nHost: api.example.com\r\n";
        for (int i = 0; i < 65; i++)
            snprintf (many + strlen (many), sizeof many - strlen (many), "X-%d: v\r\n", i);
        strcat (many, "\r\n");
        s_refused (many, strlen (many), "too many");
    }
    //  Once refused, refused for good.
    {
        ah_http_inject_t *inj = ah_http_inject_new ("api.example.com", 443, "Authorization", SECRET);
        ah_buf_t out = { 0 };
        const char *why;
        const char *bad = "GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n";
        const char *good = "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n";
        CHECK (ah_http_inject_feed (inj, (const uint8_t *) bad, strlen (bad), &out, &why) == -1);
        CHECK (ah_http_inject_feed (inj, (const uint8_t *) good, strlen (good), &out, &why) == -1);
        CHECK (ah_buf_size (&out) == 0);
        ah_buf_free (&out);
        ah_http_inject_destroy (&inj);
        CHECK (inj == NULL);
    }
    return CHECK_DONE ();
}
