/*  tests/proto/test_http.c: request heads read as sent (proto/http.h):
    what is accepted, what each refusal's status is, byte by byte
    arrival, and percent-decoding once.                                */
#include "tests/common/check.h"
#include "proto/http.h"

#include <stdlib.h>

static int s_parse (const char *text, ah_http_head_t *head, size_t *used, const char **why)
{
    return ah_http_head_parse ((const uint8_t *) text, strlen (text), head, used, why);
}

static void s_expect (const char *text, int want, const char *what)
{
    ah_http_head_t head = { 0 };
    size_t used = 0;
    const char *why = NULL;
    int rc = s_parse (text, &head, &used, &why);
    if (rc != want)
        fprintf (stderr, "%s: got %d (%s), want %d\n", what, rc, why ? why : "", want);
    CHECK (rc == want);
    CHECK (rc >= 0 || why != NULL);
    ah_http_head_clear (&head);
}

static void test_good (void)
{
    const char *text = "\r\nPUT /api/v1/agents/a/files/x%2e%2e/..?path=a%0Ab HTTP/1.1\r\n"
                       "Host: localhost\r\nContent-Length:  12 \r\nX-Odd:\tv\xc3\xa9\r\n"
                       "Connection: keep-alive, Upgrade\r\n\r\nBODY";
    ah_http_head_t head = { 0 };
    size_t used = 0;
    const char *why = NULL;
    CHECK (s_parse (text, &head, &used, &why) == 1);
    CHECK (used == strlen (text) - 4);
    CHECK_STR (head.method, "PUT");
    CHECK_STR (head.target, "/api/v1/agents/a/files/x%2e%2e/..?path=a%0Ab");   //  as sent
    CHECK (head.minor == 1);
    CHECK_STR (ah_http_header (&head, "content-length"), "12");
    CHECK_STR (ah_http_header (&head, "host"), "localhost");
    CHECK_STR (ah_http_header (&head, "x-odd"), "v\xc3\xa9");
    CHECK (ah_http_header (&head, "nope") == NULL);
    CHECK (ah_http_header_has (&head, "connection", "upgrade"));
    CHECK (ah_http_header_has (&head, "connection", "KEEP-ALIVE"));
    CHECK (!ah_http_header_has (&head, "connection", "close"));
    ah_http_head_clear (&head);
    //  Byte by byte: "need more" until the last byte, then the same head.
    size_t n = strlen (text) - 4;
    for (size_t i = 0; i < n; i++) {
        int rc = ah_http_head_parse ((const uint8_t *) text, i, &head, &used, &why);
        if (rc != 0)
            fprintf (stderr, "prefix %zu: %d %s\n", i, rc, why ? why : "");
        CHECK (rc == 0);
    }
    CHECK (ah_http_head_parse ((const uint8_t *) text, n, &head, &used, &why) == 1);
    ah_http_head_clear (&head);
}

static void test_refusals (void)
{
    s_expect ("GET / HTTP/1.1\nHost: x\r\n\r\n", -400, "bare LF");
    s_expect ("GET / HTTP/1.1\r\nHost: x\rY\r\n\r\n", -400, "bare CR");
    s_expect ("GET /a\x01 HTTP/1.1\r\n\r\n", -400, "control byte in the target");
    s_expect ("GET /a\tb HTTP/1.1\r\n\r\n", -400, "tab in the target");
    s_expect ("GET /\xc3\xa9 HTTP/1.1\r\n\r\n", -400, "non-ASCII in the target");
    s_expect ("GET /a b HTTP/1.1\r\n\r\n", -400, "space in the target");
    s_expect ("get / HTTP/1.1\r\n\r\n", -400, "lower-case method");
    s_expect ("VERYLONGMETHODNAME / HTTP/1.1\r\n\r\n", -501, "long method");
    s_expect ("GET / HTTP/2.0\r\n\r\n", -505, "HTTP/2");
    s_expect ("GET / HTTX/1.1\r\n\r\n", -400, "bad version");
    s_expect ("GET /\r\n\r\n", -400, "HTTP/0.9");
    s_expect ("GET / HTTP/1.1\r\n folded\r\n\r\n", -400, "folding");
    s_expect ("GET / HTTP/1.1\r\nBad Name: v\r\n\r\n", -400, "space in a name");
    s_expect ("GET / HTTP/1.1\r\nNoColon\r\n\r\n", -400, "no colon");
    s_expect ("GET / HTTP/1.1\r\nX: a\x01z\r\n\r\n", -400, "control in a value");
    {
        //  A NUL in the head refuses it (fed with its real length).
        const char raw [] = "GET /a\0b HTTP/1.1\r\n\r\n";
        ah_http_head_t head = { 0 };
        size_t used;
        const char *why = NULL;
        CHECK (ah_http_head_parse ((const uint8_t *) raw, sizeof raw - 1, &head, &used, &why) == -400);
        ah_http_head_clear (&head);
    }
    //  Over-long target: 414 as soon as it cannot fit, even unfinished.
    char *big = malloc (AH_HTTP_MAX_TARGET + 100);
    memcpy (big, "GET /", 5);
    memset (big + 5, 'a', AH_HTTP_MAX_TARGET + 80);
    big [AH_HTTP_MAX_TARGET + 85] = 0;
    s_expect (big, -414, "long target, unfinished");
    ah_http_head_t head = { 0 };
    size_t used;
    const char *why;
    //  Too many headers, too large a head
    char *many = malloc (AH_HTTP_MAX_HEAD * 2);
    strcpy (many, "GET / HTTP/1.1\r\n");
    for (int i = 0; i < AH_HTTP_MAX_HEADERS + 1; i++)
        sprintf (many + strlen (many), "X-%d: v\r\n", i);
    strcat (many, "\r\n");
    s_expect (many, -431, "too many headers");
    strcpy (many, "GET / HTTP/1.1\r\nX: ");
    memset (many + strlen (many), 'v', AH_HTTP_MAX_HEAD);
    many [AH_HTTP_MAX_HEAD + 20] = 0;
    s_expect (many, -431, "huge header");
    free (many);
    free (big);
    ah_http_head_clear (&head);
    (void) used; (void) why;
}

static void test_decode (void)
{
    char out [64];
    const char *why = NULL;
    CHECK (ah_http_decode ("a%2Fb%2e%2E", 11, out, sizeof out, &why) == 5);
    CHECK_STR (out, "a/b..");
    CHECK (ah_http_decode ("caf%C3%A9+x", 11, out, sizeof out, &why) == 7);
    CHECK_STR (out, "caf\xc3\xa9+x");                 //  '+' stays '+'
    CHECK (ah_http_decode ("a%00", 4, out, sizeof out, &why) == -1 && why);
    CHECK (ah_http_decode ("a%0A", 4, out, sizeof out, &why) == -1);
    CHECK (ah_http_decode ("a%0d", 4, out, sizeof out, &why) == -1);
    CHECK (ah_http_decode ("a%7f", 4, out, sizeof out, &why) == -1);
    CHECK (ah_http_decode ("a%", 2, out, sizeof out, &why) == -1);
    CHECK (ah_http_decode ("a%4", 3, out, sizeof out, &why) == -1);
    CHECK (ah_http_decode ("a%zz", 4, out, sizeof out, &why) == -1);
    CHECK (ah_http_decode ("%252e", 5, out, sizeof out, &why) == 3);
    CHECK_STR (out, "%2e");                           //  once, never twice
    CHECK (ah_http_decode ("abc", 3, out, 3, &why) == -1);
    CHECK_STR (ah_http_reason (414), "URI Too Long");
    CHECK_STR (ah_http_reason (406), "Not Acceptable");
}

static bool s_accepts (const char *accept, const char *type)
{
    char text [512];
    snprintf (text, sizeof text, "POST /mcp HTTP/1.1\r\n%s\r\n", accept);
    ah_http_head_t head = { 0 };
    size_t used = 0;
    const char *why = NULL;
    CHECK (s_parse (text, &head, &used, &why) == 1);
    bool yes = ah_http_accepts (&head, type);
    ah_http_head_clear (&head);
    return yes;
}

static void test_accepts (void)
{
    const char *json = "application/json";
    CHECK (s_accepts ("", json));                                    //  no Accept: anything
    CHECK (s_accepts ("Accept: application/json, text/event-stream\r\n", json));
    CHECK (s_accepts ("Accept: application/json, text/event-stream\r\n", "text/event-stream"));
    CHECK (s_accepts ("Accept: APPLICATION/JSON;charset=utf-8\r\n", json));
    CHECK (s_accepts ("Accept: text/html ; q=0.5 , */*;q=0.1\r\n", json));
    CHECK (s_accepts ("Accept: application/*\r\n", json));
    CHECK (s_accepts ("Accept: text/*\r\n", "text/event-stream"));
    CHECK (s_accepts ("Accept: text/html\r\nAccept: application/json\r\n", json));   //  two headers
    CHECK (s_accepts ("Accept: application/json;q=0.001\r\n", json));
    CHECK (s_accepts ("Accept: application/json;level=1;q=1\r\n", json));
    CHECK (!s_accepts ("Accept: text/html\r\n", json));
    CHECK (!s_accepts ("Accept: text/*\r\n", json));
    CHECK (!s_accepts ("Accept: application/jsonx, xapplication/json\r\n", json));
    CHECK (!s_accepts ("Accept: application/json;q=0\r\n", json));
    CHECK (!s_accepts ("Accept: application/json ; Q=0.000, */*;q=0.\r\n", json));
    CHECK (!s_accepts ("Accept: application\r\n", json));
    CHECK (!s_accepts ("Accept: */json, application/, ;q=1, ,,\r\n", json));
    CHECK (!s_accepts ("Accept:\r\n", json));                        //  present, names none
    CHECK (!s_accepts ("Accept: \xc3\xa9/*\r\n", json));
}

int main (void)
{
    test_accepts ();
    test_good ();
    test_refusals ();
    test_decode ();
    return CHECK_DONE ();
}
