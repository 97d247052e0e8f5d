/*  tests/api/test_api.c: the API actor alone on the bus, with fake
    actors around it (fake_actors.h: a "lifecycle" that answers like the
    real one and writes the rows the real one would), driven over real
    HTTP with libcurl: routes, status codes, auth, bad bodies, caps,
    ?wait, timeouts, malformed requests, a cookie and a ticket whose
    token's id went to another token.                                   */
#include "actors/api.h"
#include "tests/api/fake_actors.h"
#include "common/bounds.h"
#include "common/bus.h"
#include "common/msg.h"
#include "common/token.h"
#include "store/store.h"
#include "../common/check.h"
#include "../common/homepath_cases.h"

#include <ctype.h>
#include <curl/curl.h>
#include <msgpack.h>
#include <stdarg.h>
#include <strings.h>
#include <jansson.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

//  --------------------------------------------------------------------
//  HTTP

static int s_port;
static char s_token [AH_TOKEN_HEX];

typedef struct {
    char *data;
    size_t size;
} buf_t;

static size_t s_write (char *ptr, size_t size, size_t nmemb, void *userdata)
{
    buf_t *b = userdata;
    size_t n = size * nmemb;
    b->data = realloc (b->data, b->size + n + 1);
    memcpy (b->data + b->size, ptr, n);
    b->size += n;
    b->data [b->size] = 0;
    return n;
}

//  Keeps the value of a Set-Cookie: agenthold_session=... header.
static size_t s_header (char *ptr, size_t size, size_t nmemb, void *userdata)
{
    size_t n = size * nmemb;
    const char *want = "set-cookie: agenthold_session=";
    size_t wn = strlen (want);
    if (userdata && n > wn + 64 && strncasecmp (ptr, want, wn) == 0) {
        memcpy (userdata, ptr + 12, wn - 12 + 64);
        ((char *) userdata) [wn - 12 + 64] = 0;
    }
    return n;
}

//  s_http with a Cookie header (cookie "name=value", NULL none), keeping
//  the session cookie an answer sets into set_cookie (NULL: not kept).
static json_t *s_http_cookie (const char *method, const char *path, const char *body, const char *token,
                              const char *cookie, char set_cookie [128], long *status);

//  Returns the parsed JSON body (NULL if none or not JSON); *status set.
static json_t *s_http (const char *method, const char *path, const char *body,
                       const char *token, long *status)
{
    return s_http_cookie (method, path, body, token, NULL, NULL, status);
}

static json_t *s_http_cookie (const char *method, const char *path, const char *body, const char *token,
                              const char *cookie, char set_cookie [128], long *status)
{
    CURL *c = curl_easy_init ();
    char url [16384];
    snprintf (url, sizeof url, "http://127.0.0.1:%d%s", s_port, path);
    curl_easy_setopt (c, CURLOPT_URL, url);
    curl_easy_setopt (c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt (c, CURLOPT_PATH_AS_IS, 1L);           //  "./" and "../" sent as written
    curl_easy_setopt (c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt (c, CURLOPT_TIMEOUT, 20L);
    struct curl_slist *headers = NULL;
    char auth [200];
    if (token) {
        snprintf (auth, sizeof auth, "Authorization: Bearer %s", token);
        headers = curl_slist_append (headers, auth);
    }
    headers = curl_slist_append (headers, "Content-Type: application/json");
    if (body) {
        curl_easy_setopt (c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt (c, CURLOPT_POSTFIELDSIZE, (long) strlen (body));
    }
    curl_easy_setopt (c, CURLOPT_HTTPHEADER, headers);
    if (cookie)
        curl_easy_setopt (c, CURLOPT_COOKIE, cookie);
    if (set_cookie) {
        set_cookie [0] = 0;
        curl_easy_setopt (c, CURLOPT_HEADERFUNCTION, s_header);
        curl_easy_setopt (c, CURLOPT_HEADERDATA, set_cookie);
    }
    buf_t b = { 0 };
    curl_easy_setopt (c, CURLOPT_WRITEFUNCTION, s_write);
    curl_easy_setopt (c, CURLOPT_WRITEDATA, &b);
    *status = 0;
    CURLcode rc = curl_easy_perform (c);
    if (rc == CURLE_OK)
        curl_easy_getinfo (c, CURLINFO_RESPONSE_CODE, status);
    else
        fprintf (stderr, "curl %s %s: %s\n", method, path, curl_easy_strerror (rc));
    curl_slist_free_all (headers);
    curl_easy_cleanup (c);
    json_t *j = b.data ? json_loads (b.data, 0, NULL) : NULL;
    if (b.data && !j)
        fprintf (stderr, "%s %s: not JSON: %s\n", method, path, b.data);
    free (b.data);
    return j;
}

static const char *s_str (json_t *j, const char *key)
{
    return json_string_value (json_object_get (j, key));
}

static bool s_error_has (json_t *j, const char *part)
{
    const char *e = s_str (j, "error");
    if (!e || !strstr (e, part)) {
        fprintf (stderr, "error '%s' does not mention '%s'\n", e ? e : "(none)", part);
        return false;
    }
    return true;
}

//  GET raw bytes; returns the curl result, *status and the body.
static CURLcode s_download (const char *path, long *status, buf_t *b)
{
    CURL *c = curl_easy_init ();
    char url [512], auth [200];
    snprintf (url, sizeof url, "http://127.0.0.1:%d%s", s_port, path);
    snprintf (auth, sizeof auth, "Authorization: Bearer %s", s_token);
    struct curl_slist *headers = curl_slist_append (NULL, auth);
    curl_easy_setopt (c, CURLOPT_URL, url);
    curl_easy_setopt (c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt (c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt (c, CURLOPT_TIMEOUT, 20L);
    curl_easy_setopt (c, CURLOPT_WRITEFUNCTION, s_write);
    curl_easy_setopt (c, CURLOPT_WRITEDATA, b);
    CURLcode rc = curl_easy_perform (c);
    *status = 0;
    curl_easy_getinfo (c, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all (headers);
    curl_easy_cleanup (c);
    return rc;
}

//  One request that must fail with status and an error naming part.
static void s_expect_error (int line, const char *method, const char *path, const char *body,
                            const char *token, long want, const char *part)
{
    long status;
    json_t *j = s_http (method, path, body, token, &status);
    check_total++;
    if (status != want || (part && !s_error_has (j, part))) {
        check_failures++;
        fprintf (stderr, "%s:%d: %s %s: got %ld, want %ld naming '%s'\n", __FILE__, line,
                 method, path, status, want, part ? part : "");
    }
    json_decref (j);
}
#define EXPECT(...) s_expect_error (__LINE__, __VA_ARGS__)

//  Raw bytes to the server; returns what came back (caller frees).
static char *s_raw (const char *bytes, size_t n, bool half_close)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons (s_port) };
    inet_pton (AF_INET, "127.0.0.1", &sa.sin_addr);
    if (connect (fd, (struct sockaddr *) &sa, sizeof sa)) {
        close (fd);
        return strdup ("");
    }
    struct timeval tv = { .tv_sec = 3 };
    setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (write (fd, bytes, n) < 0) {
        close (fd);
        return strdup ("");
    }
    if (half_close)
        shutdown (fd, SHUT_WR);
    char *out = calloc (1, 65536);
    size_t got = 0;
    ssize_t r;
    while (got < 65535 && (r = read (fd, out + got, 65535 - got)) > 0)
        got += (size_t) r;
    close (fd);
    return out;
}

//  Every field a client names something with and the server shows back,
//  holding each control character (C0 but NUL, which JSON refuses, DEL,
//  each C1) as a JSON escape: 400 naming the field (common/ident.h, the
//  free-text rule). alice exists; nothing here is made.
static void s_test_text_fields (void)
{
    static const struct { const char *method, *path, *body, *field; } fields [] = {
        { "POST",  "/api/v1/agents", "{\"name\":\"a@b\"}", "'name'" },
        { "POST",  "/api/v1/agents", "{\"name\":\"ab\",\"image\":\"debian@:x\"}", "'image'" },
        { "POST",  "/api/v1/agents", "{\"name\":\"ab\",\"runtime\":\"deb@ian\"}", "'runtime'" },
        { "PATCH", "/api/v1/agents/alice", "{\"image\":\"debian@:x\"}", "'image'" },
        { "PATCH", "/api/v1/agents/alice", "{\"runtime\":\"deb@\"}", "'runtime'" },
        { "POST",  "/api/v1/tenants", "{\"name\":\"ac@me\"}", "'name'" },
        { "POST",  "/api/v1/tokens", "{\"tenant\":\"ac@me\"}", "'tenant'" },
        { "POST",  "/api/v1/tokens", "{\"admin\":true,\"name\":\"t@k\"}", "'name'" },
        { "POST",  "/api/v1/tokens", "{\"admin\":true,\"user\":\"bob@example\"}", "'user'" },
        { "POST",  "/api/v1/sessions", "{\"scope\":\"run\",\"subject\":\"s@s\"}", "'subject'" },
        { "POST",  "/api/v1/sessions", "{\"scope\":\"run\",\"subject\":\"s\",\"backend\":\"b@\"}", "'backend'" },
        { "POST",  "/api/v1/sessions", "{\"scope\":\"run\",\"subject\":\"s\",\"host\":\"@h\"}", "'host'" },
        { "POST",  "/api/v1/sessions", "{\"scope\":\"run\",\"subject\":\"s\",\"runtime\":\"r@\"}", "'runtime'" },
        { "POST",  "/api/v1/sessions", "{\"scope\":\"ru@n\",\"subject\":\"s\"}", "'scope'" },
        { "POST",  "/api/v1/agents/alice/stop", "{\"run\":\"r@\"}", "'run'" },
    };
    for (size_t f = 0; f < sizeof fields / sizeof fields [0]; f++)
        for (unsigned cp = 1; cp <= 0x9f; cp++) {
            if (cp >= 0x20 && cp < 0x7f)
                continue;
            const char *body = fields [f].body;
            const char *at = strchr (body, '@');
            char text [256];
            snprintf (text, sizeof text, "%.*s\\u%04x%s", (int) (at - body), body, cp, at + 1);
            long status;
            json_t *j = s_http (fields [f].method, fields [f].path, text, s_token, &status);
            const char *e = s_str (j, "error");
            bool named = e && strstr (e, fields [f].field) && !strstr (e, "unknown field");
            if (status != 400 || !named)
                fprintf (stderr, "%s %s %s: %ld %s\n", fields [f].method, fields [f].path, text, status,
                         e ? e : "");
            CHECK (status == 400 && named);
            json_decref (j);
        }
    //  The same as bytes: raw C1 in a body (UTF-8 C2 85, as the report's
    //  subject was), and bytes that are not UTF-8 (JSON is UTF-8: 400).
    EXPECT ("POST", "/api/v1/sessions", "{\"scope\":\"run\",\"subject\":\"a\xc2\x85" "b\"}", s_token, 400,
            "'subject' holds a control character");
    EXPECT ("POST", "/api/v1/sessions", "{\"scope\":\"run\",\"subject\":\"s\",\"host\":\"\xc2\x9b" "31m\"}",
            s_token, 400, "'host' holds a control character");
    static const char *bad_utf8 [] = { "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", "\xff" };
    for (size_t i = 0; i < sizeof bad_utf8 / sizeof bad_utf8 [0]; i++) {
        char text [128];
        snprintf (text, sizeof text, "{\"scope\":\"run\",\"subject\":\"a%sb\"}", bad_utf8 [i]);
        EXPECT ("POST", "/api/v1/sessions", text, s_token, 400, "bad JSON");
    }
    //  The run named in a header: C1 bytes there (the HTTP parser passes
    //  bytes past ASCII on to the route).
    char head [512];
    int n = snprintf (head, sizeof head, "POST /api/v1/agents/alice/stop HTTP/1.1\r\nHost: x\r\n"
                      "Authorization: Bearer %s\r\nX-Agenthold-Run: r\xc2\x9b" "1\r\nContent-Length: 0\r\n"
                      "Connection: close\r\n\r\n", s_token);
    char *reply = s_raw (head, (size_t) n, false);
    CHECK (strstr (reply, " 400 ") && strstr (reply, "X-Agenthold-Run"));
    free (reply);
}

//  --------------------------------------------------------------------
//  Bodies, generated from the router's table (ah_api_routes): every
//  route that takes a JSON body is sent unknown, empty, doubled and
//  wrongly typed keys, and numbers at and beyond every bound
//  (common/bounds.h); each refusal is a 400 naming the key, and nothing
//  is stored or sent on.

//  Everything the API or its lifecycle could have written, as text.
static char *s_digest (ah_store_t *store)
{
    zlist_t *tables = zlist_new ();
    zlist_autofree (tables);
    sqlite3_stmt *st = ah_store_prepare (store, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name");
    while (st && ah_store_step (store, st) == SQLITE_ROW)
        zlist_append (tables, (void *) sqlite3_column_text (st, 0));
    if (st)
        sqlite3_reset (st);
    char *all = strdup ("");
    for (char *t = zlist_first (tables); t; t = zlist_next (tables)) {
        //  A token's last use moves with every request: not a change.
        char *sql = streq (t, "api_tokens") ? strdup ("SELECT name, hash, tenant, admin, revoked_at FROM api_tokens")
                  : zsys_sprintf ("SELECT * FROM \"%s\"", t);
        sqlite3_stmt *q = ah_store_prepare (store, sql);
        while (q && ah_store_step (store, q) == SQLITE_ROW)
            for (int c = 0; c < sqlite3_column_count (q); c++) {
                const char *v = (const char *) sqlite3_column_text (q, c);
                char *more = zsys_sprintf ("%s%s.%d=%s;", all, t, c, v ? v : "null");
                free (all);
                all = more;
            }
        if (q)
            sqlite3_reset (q);
        free (sql);
    }
    zlist_destroy (&tables);
    return all;
}

//  The last message the fake lifecycle got (its req included).
static char *s_lifecycle_last (zactor_t *lifecycle)
{
    zstr_send (lifecycle, "LAST");
    return zstr_recv (lifecycle);
}

//  One body that must be a 400 naming part (NULL: any 400).
static int s_refused (const char *method, const char *path, const char *body, const char *part)
{
    long status;
    json_t *j = s_http (method, path, body, s_token, &status);
    const char *e = s_str (j, "error");
    bool ok = status == 400 && (!part || (e && strstr (e, part)));
    if (!ok)
        fprintf (stderr, "  %s %s %s: %ld %s (wanted 400 naming %s)\n", method, path, body, status,
                 e ? e : "", part ? part : "anything");
    json_decref (j);
    return ok ? 0 : 1;
}

//  A value of JSON type `type` ("string", "number", ...), as text.
static const char *s_value_of (const char *type)
{
    return streq (type, "string") ? "\"x\"" : streq (type, "number") ? "1" : streq (type, "boolean") ? "true"
         : streq (type, "object") ? "{}" : streq (type, "null") ? "null" : "[]";
}

static bool s_takes (json_t *field, const char *type)
{
    size_t i;
    json_t *t;
    json_array_foreach (json_object_get (field, "types"), i, t)
        if (streq (json_string_value (t), type))
            return true;
    return false;
}

static void s_test_bodies (zactor_t *lifecycle, ah_store_t *store)
{
    char *text = ah_api_routes ();
    json_t *routes = text ? json_loads (text, 0, NULL) : NULL;
    free (text);
    CHECK (json_array_size (routes) >= 15);
    char *before = s_digest (store), *last = s_lifecycle_last (lifecycle);
    int bad = 0, sent = 0, bound_fields = 0;
    size_t i;
    json_t *route;
    json_array_foreach (routes, i, route) {
        if (!json_is_true (json_object_get (route, "body")))
            continue;
        const char *method = s_str (route, "method");
        //  Path parameters: any well-formed segment (the body is checked
        //  before the handler looks anything up).
        char path [256] = "";
        const char *p = s_str (route, "pattern");
        size_t k = 0;
        while (*p && k + 16 < sizeof path) {
            if (*p == '{') {
                k += snprintf (path + k, sizeof path - k, "zz-param");
                p = strchr (p, '}') + 1;
            }
            else
                path [k++] = *p++;
        }
        path [k] = 0;
        json_t *fields = json_object_get (route, "fields");
        //  Every body-taking route states its fields.
        if (!json_is_array (fields)) {
            fprintf (stderr, "  %s %s states no body fields\n", method, path);
            bad++;
            continue;
        }
        //  Unknown and empty keys, wherever they stand.
        bad += s_refused (method, path, "{\"zz-unknown\": 1}", "'zz-unknown'");
        bad += s_refused (method, path, "{\"\": 1}", "''");
        bad += s_refused (method, path, "{\"zz\\u0001\": 1}", "'zz?'");
        sent += 3;
        size_t f;
        json_t *field;
        json_array_foreach (fields, f, field) {
            const char *name = s_str (field, "name");
            char body [2048], named [80];
            snprintf (named, sizeof named, "'%s'", name);
            if (s_str (field, "why")) {
                //  A key refused with its reason.
                snprintf (body, sizeof body, "{\"%s\": 1}", name);
                bad += s_refused (method, path, body, s_str (field, "why"));
                sent++;
                continue;
            }
            json_t *types = json_object_get (field, "types");
            const char *good = s_value_of (json_string_value (json_array_get (types, 0)));
            //  Given twice, with a value of its type each time.
            snprintf (body, sizeof body, "{\"%s\": %s, \"%s\": %s}", name, good, name, good);
            bad += s_refused (method, path, body, named);
            //  ... and after an unknown key: the unknown one is named.
            snprintf (body, sizeof body, "{\"zz-first\": 1, \"%s\": %s}", name, good);
            bad += s_refused (method, path, body, "'zz-first'");
            sent += 2;
            //  Every type it does not take.
            static const char *all [] = { "string", "number", "boolean", "object", "null", "array" };
            for (size_t t = 0; t < sizeof all / sizeof all [0]; t++)
                if (!s_takes (field, all [t])) {
                    snprintf (body, sizeof body, "{\"%s\": %s}", name, s_value_of (all [t]));
                    bad += s_refused (method, path, body, named);
                    sent++;
                }
            if (!s_takes (field, "number"))
                continue;
            //  Numbers: its bound, beyond every edge.
            const ah_bound_t *b = ah_bound (name);
            CHECK (b != NULL);
            if (!b)
                continue;
            bound_fields++;
            char beyond [16][64];
            size_t n = 0;
            snprintf (beyond [n++], 64, "%.17g", b->max + b->step);
            snprintf (beyond [n++], 64, "%.17g", b->max * 2);
            if (b->min - b->step > 0 || !b->zero)
                snprintf (beyond [n++], 64, "%.17g", b->min - b->step);
            snprintf (beyond [n++], 64, "-%.17g", b->min);
            snprintf (beyond [n++], 64, "5e-324");                  //  a denormal
            snprintf (beyond [n++], 64, "2.2250738585072009e-308"); //  the largest one
            snprintf (beyond [n++], 64, "1e-12");
            snprintf (beyond [n++], 64, "-0.0");                    //  negative zero
            snprintf (beyond [n++], 64, "1e308");
            snprintf (beyond [n++], 64, "9007199254740993");        //  2^53 + 1
            snprintf (beyond [n++], 64, "-9223372036854775808");
            if (b->whole) {
                snprintf (beyond [n++], 64, "%.17g.5", b->min);     //  a real where a whole number is meant
                snprintf (beyond [n++], 64, "%.17g.0", b->min);
                snprintf (beyond [n++], 64, "%.17ge0", b->min);
            }
            else
                snprintf (beyond [n++], 64, "%.17g", b->min + b->step / 2);     //  off the step
            if (!b->zero && b->min > 0)
                snprintf (beyond [n++], 64, "0");
            for (size_t v = 0; v < n; v++) {
                snprintf (body, sizeof body, "{\"%s\": %s}", name, beyond [v]);
                bad += s_refused (method, path, body, named);
                sent++;
            }
            //  Past any double, or any integer: bad JSON, still a 400.
            snprintf (body, sizeof body, "{\"%s\": 1e400}", name);
            bad += s_refused (method, path, body, NULL);
            snprintf (body, sizeof body, "{\"%s\": 99999999999999999999}", name);
            bad += s_refused (method, path, body, NULL);
            sent += 2;
            //  At its bounds the value passes: the key after it is the
            //  one refused (so nothing is stored by these either).
            char at [3][64];
            size_t m = 0;
            snprintf (at [m++], 64, "%.17g", b->min);
            snprintf (at [m++], 64, "%.17g", b->max);
            if (b->zero)
                snprintf (at [m++], 64, "0");
            for (size_t v = 0; v < m; v++) {
                snprintf (body, sizeof body, "{\"%s\": %s, \"zz-after\": 1}", name, at [v]);
                bad += s_refused (method, path, body, "unknown field 'zz-after'");
                sent++;
            }
        }
    }
    fprintf (stderr, "bodies: %zu routes, %d fields with bounds, %d bodies sent, %d not refused as they should be\n",
             json_array_size (routes), bound_fields, sent, bad);
    CHECK (bad == 0);
    CHECK (bound_fields >= 10);
    //  Nothing stored, nothing asked of lifecycle.
    char *after = s_digest (store), *last_after = s_lifecycle_last (lifecycle);
    CHECK (before && after && streq (before, after));
    CHECK (last && last_after && streq (last, last_after));
    free (before);
    free (after);
    zstr_free (&last);
    zstr_free (&last_after);
    json_decref (routes);
}

//  n bytes of p percent-encoded into out: every byte but A-Z a-z 0-9
//  - _ ~ and (keep_slash) '/'; '.' too unless dots (1: "%2e", 2: "%2E").
static void s_encode (const char *p, size_t n, int dots, bool keep_slash, char *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char) p [i];
        if (isalnum (b) || b == '-' || b == '_' || b == '~' || (keep_slash && b == '/')
        ||  (b == '.' && !dots))
            out [k++] = (char) b;
        else
            k += (size_t) sprintf (out + k, dots == 1 && b == '.' ? "%%%02x" : "%%%02X", b);
    }
    out [k] = 0;
}

//  One request; its status, and whether the error names part.
static long s_status (const char *method, const char *path, const char *body, const char *part,
                      bool *named)
{
    long status = 0;
    json_t *j = s_http (method, path, body, s_token, &status);
    *named = part ? s_error_has (j, part) : true;
    json_decref (j);
    return status;
}

//  The shared table of home paths (tests/common/homepath_cases.h) through
//  every route that takes one, with alice running: a path the grammar
//  refuses is a 400 naming it (or, in the URL form, the router's 400 for
//  the segment) before any sandbox is asked, written plain or with its
//  dots encoded (%2e, %2E); a good one is never a 400. The query value
//  is decoded once: "%252e%252e" is the name "%2e%2e", not "..".
static void s_test_home_paths (zactor_t *lifecycle)
{
    static char q [16384], url [16384 + 200];
    int cases = 0;
    for (const homepath_case_t *c = homepath_cases; c->path; c++) {
        size_t n = homepath_case_len (c);
        for (int dots = 0; dots < 3; dots++) {
            if (dots && !memchr (c->path, '.', n))
                continue;
            s_encode (c->path, n, dots, true, q);
            //  A directory may be named with one trailing '/' (listing,
            //  mkdir, tree: docs/api.md), taken off before the grammar.
            size_t dn = ah_homepath_trim (c->path, n);
            int mkdir_want = dn == n ? c->want_file : ah_homepath_check (c->path, dn, 0, NULL);
            int dir_want = dn == n ? c->want_dir : ah_homepath_check (c->path, dn, AH_HOMEPATH_HOME, NULL);
            struct { const char *method, *fmt; int want; } routes [] = {
                { "GET", "/api/v1/agents/alice/fs/file?path=%s", c->want_file },
                { "DELETE", "/api/v1/agents/alice/fs/file?path=%s", c->want_file },
                { "POST", "/api/v1/agents/alice/fs/mkdir?path=%s", mkdir_want },
                { "GET", "/api/v1/agents/alice/fs/list?path=%s", dir_want },
                { "GET", "/api/v1/agents/alice/files?path=%s", dir_want },
                { "GET", "/api/v1/agents/alice/tree?path=%s", dir_want },
            };
            for (size_t r = 0; r < sizeof routes / sizeof *routes; r++) {
                //  Listing a good directory would wait on the fake's
                //  stream: the good ones go through the tree alone.
                if (!routes [r].want && !strstr (routes [r].fmt, "tree"))
                    continue;
                snprintf (url, sizeof url, routes [r].fmt, q);
                bool named;
                long st = s_status (routes [r].method, url, NULL, routes [r].want ? "path" : NULL, &named);
                bool ok = routes [r].want ? st == 400 && named : st != 400;
                CHECK (ok);
                cases++;
                if (!ok)
                    fprintf (stderr, "  %s %s: %ld\n", routes [r].method, url, st);
            }
            //  The URL form: every bad path is a 400 (the router's or the
            //  grammar's); a mkdir of a good one is not.
            if (c->want_file && n) {
                snprintf (url, sizeof url, "/api/v1/agents/alice/files/%s", q);
                bool named;
                long st = s_status ("DELETE", url, NULL, NULL, &named);
                CHECK (st == 400);
                if (st != 400)
                    fprintf (stderr, "  DELETE %s: %ld\n", url, st);
            }
        }
        //  exec's cwd, in a JSON body.
        json_t *body = json_pack ("{s:s, s:s%}", "cmd", "make", "cwd", c->path, n);
        char *text = json_dumps (body, JSON_COMPACT);
        bool named;
        //  (a NUL is JSON's "\u0000": the body's parser may refuse it first)
        const char *part = c->want_dir && n == strlen (c->path) ? "'cwd'" : NULL;
        long st = s_status ("POST", "/api/v1/agents/alice/exec", text, part, &named);
        bool ok = c->want_dir ? st == 400 && named : st == 200;
        CHECK (ok);
        if (!ok)
            fprintf (stderr, "  exec cwd \"%s\": %ld\n", c->path, st);
        free (text);
        json_decref (body);
    }
    //  The long ones: in exec's cwd (a URL past 4096 bytes is a 414).
    int want;
    char *p;
    for (int i = 0; (p = homepath_long_case (i, &want)); i++) {
        json_t *body = json_pack ("{s:s, s:s}", "cmd", "make", "cwd", p);
        char *text = json_dumps (body, JSON_COMPACT);
        bool named;
        long st = s_status ("POST", "/api/v1/agents/alice/exec", text, want ? "'cwd'" : NULL, &named);
        CHECK (want ? st == 400 && named : st == 200);
        free (text);
        json_decref (body);
        if (i == 1) {
            snprintf (url, sizeof url, "/api/v1/agents/alice/fs/file?path=%s", p);
            EXPECT ("GET", url, NULL, s_token, 400, "longer than 255 bytes");
        }
        free (p);
    }
    //  Decoded once; a directory's one trailing '/' taken off; what goes
    //  to the sandbox is the path as checked.
    bool named;
    CHECK (s_status ("GET", "/api/v1/agents/alice/tree?path=%252e%252e", NULL, NULL, &named) != 400);
    zstr_send (lifecycle, "OTHER");
    char *last = zstr_recv (lifecycle);
    CHECK (last && strstr (last, "\"path\":\"%2e%2e\""));
    zstr_free (&last);
    EXPECT ("GET", "/api/v1/agents/alice/tree?path=nope/", NULL, s_token, 404, "No such file");
    zstr_send (lifecycle, "OTHER");
    last = zstr_recv (lifecycle);
    CHECK (last && strstr (last, "\"path\":\"nope\""));
    zstr_free (&last);
    EXPECT ("GET", "/api/v1/agents/alice/fs/file?path=nope/", NULL, s_token, 400, "ends in '/'");
    EXPECT ("GET", "/api/v1/agents/alice/tree?path=nope//", NULL, s_token, 400, "empty component");
    CHECK (cases > 100);
}

int main (void)
{
    zsys_handler_set (NULL);        //  SIGTERM (ctest's timeout) kills, not hangs
    zsys_init ();
    zsys_set_linger (0);
    curl_global_init (CURL_GLOBAL_DEFAULT);
    char dir [] = "/tmp/ah-test-api-XXXXXX";
    CHECK (mkdtemp (dir) != NULL);
    char db [256];
    snprintf (db, sizeof db, "%s/agenthold.db", dir);

    //  The schema and one API token, as the server would leave them.
    ah_store_t *store = ah_store_open (db, true, NULL);
    CHECK (store != NULL);
    ah_token_new (s_token);
    char hash [AH_TOKEN_HEX];
    ah_token_hash (s_token, hash);
    sqlite3_stmt *st = ah_store_prepare (store,
        "INSERT INTO api_tokens (name, hash, admin, created_at) VALUES ('admin', :h, 1, 0)");
    ah_store_bind_text (st, ":h", hash);
    CHECK (ah_store_step (store, st) == SQLITE_DONE);
    sqlite3_reset (st);
    CHECK (ah_store_exec (store, "INSERT INTO policy_status (holder, script, loaded_at, error, error_at)"
                                 " VALUES ('lifecycle', 'limits.lua', 1764406800000, NULL, NULL),"
                                 " ('sleeper', 'idle.lua', 1764406800000, 'idle.lua:3: syntax error', 1764406900000)",
                          NULL) == 0);

    ah_bus_args_t bus_args = { .tap_endpoint = NULL };
    zactor_t *bus = ah_actor_new (&ah_bus_actor, &bus_args, NULL);
    zactor_t *lifecycle = zactor_new (fake_actors, db);

    //  A listen address that is taken: the actor says so and fails to start.
    ah_config_t *config = ah_config_new_defaults ();
    free (config->listen);
    config->listen = strdup ("127.0.0.1:0");
    ah_api_args_t args = { .config = config, .db_path = db, .reply_timeout_s = 1, .body_stall_s = 1 };
    char *start_err = NULL;
    zactor_t *api = ah_actor_new (&ah_api_actor, &args, &start_err);
    CHECK (api != NULL && start_err == NULL);
    zsock_set_rcvtimeo (api, 5000);
    zstr_send (api, "PORT");
    char *port = zstr_recv (api);
    s_port = port ? atoi (port) : 0;
    zstr_free (&port);
    CHECK (s_port > 0);
    if (s_port <= 0)
        return CHECK_DONE ();       //  nothing else can work; the log says why
    {
        ah_config_t *taken = ah_config_new_defaults ();
        free (taken->listen);
        taken->listen = zsys_sprintf ("127.0.0.1:%d", s_port);
        ah_api_args_t args2 = { .config = taken, .db_path = db };
        //  The start fails, and says why.
        zactor_t *second = ah_actor_new (&ah_api_actor, &args2, &start_err);
        CHECK (second == NULL && start_err && strstr (start_err, "cannot listen"));
        free (start_err);
        ah_config_destroy (&taken);
    }

    long status;
    json_t *j;

    //  healthz without a token
    j = s_http ("GET", "/healthz", NULL, NULL, &status);
    CHECK (status == 200 && json_is_true (json_object_get (j, "ok")));
    json_decref (j);

    //  Auth: none, wrong, wrong scheme
    EXPECT ("GET", "/api/v1/agents", NULL, NULL, 401, "bearer token");
    EXPECT ("GET", "/api/v1/agents", NULL, "0000000000000000000000000000000000000000000000000000000000000000", 401, NULL);
    EXPECT ("POST", "/api/v1/agents", "{\"name\":\"x\"}", "nope", 401, NULL);

    //  Empty list
    j = s_http ("GET", "/api/v1/agents", NULL, s_token, &status);
    CHECK (status == 200 && json_array_size (json_object_get (j, "agents")) == 0);
    json_decref (j);

    //  Bad bodies: each names its problem.
    EXPECT ("POST", "/api/v1/agents", "{\"name\": ", s_token, 400, "bad JSON");
    EXPECT ("POST", "/api/v1/agents", "[1,2]", s_token, 400, "JSON object");
    EXPECT ("POST", "/api/v1/agents", "{\"name\":\"a\",\"colour\":\"red\"}", s_token, 400, "unknown field 'colour'");
    EXPECT ("POST", "/api/v1/agents", "{\"name\":\"a\",\"cpus\":\"two\"}", s_token, 400, "'cpus'");
    EXPECT ("POST", "/api/v1/agents", "{\"name\":\"a\",\"memory_mb\":1.5}", s_token, 400, "'memory_mb'");
    //  A key given twice is named, however long and however escaped.
    EXPECT ("POST", "/api/v1/agents", "{\"name\":\"a\",\"name\":\"b\"}", s_token, 400, "field 'name' is given twice");
    EXPECT ("POST", "/api/v1/agents", "{\"idle_minutes\":1,\n \"idle_minutes\" :2}", s_token, 400,
            "field 'idle_minutes' is given twice (line 2");
    EXPECT ("POST", "/api/v1/agents", "{\"a\\\"b\\\\\":1, \"a\\\"b\\\\\":2}", s_token, 400,
            "field 'a\"b\\' is given twice");
    EXPECT ("PATCH", "/api/v1/agents/alice", "{\"cpus\":1,\"image\":\"x:1\",\"cpus\":1e-12}", s_token, 400,
            "field 'cpus' is given twice");
    EXPECT ("POST", "/api/v1/agents", "{\"image\":\"x\"}", s_token, 400, "'name' is required");
    EXPECT ("POST", "/api/v1/agents", "{\"name\":\"Bad Name\"}", s_token, 400, "agent name 'Bad Name' must be");
    EXPECT ("POST", "/api/v1/agents", NULL, s_token, 400, "body is required");

    //  Create: 201 and the agent JSON, from the row lifecycle wrote.
    j = s_http ("POST", "/api/v1/agents",
                "{\"name\":\"alice\",\"cpus\":1,\"memory_mb\":1024,\"idle_minutes\":0.5}", s_token, &status);
    CHECK (status == 201);
    CHECK_STR (s_str (j, "name"), "alice");
    CHECK_STR (s_str (j, "state"), "sleeping");
    CHECK (s_str (j, "id") && strlen (s_str (j, "id")) == 12);
    CHECK (json_number_value (json_object_get (j, "cpus")) == 1);
    CHECK (json_integer_value (json_object_get (j, "memory_mb")) == 1024);
    CHECK (json_is_false (json_object_get (j, "needs_rebuild")));
    CHECK (s_str (j, "created_at") && strchr (s_str (j, "created_at"), 'T'));
    CHECK (json_is_null (json_object_get (j, "last_activity_at")));
    CHECK (json_is_null (json_object_get (j, "error")));
    char alice_id [32] = "";
    snprintf (alice_id, sizeof alice_id, "%s", s_str (j, "id") ? s_str (j, "id") : "");
    json_decref (j);
    //  The message lifecycle got: typed fields, a req.
    zstr_send (lifecycle, "LAST");
    char *last = zstr_recv (lifecycle);
    json_t *lj = json_loads (last, 0, NULL);
    json_t *fields = json_object_get (lj, "fields");
    CHECK_STR (s_str (fields, "name"), "alice");
    CHECK (json_is_real (json_object_get (fields, "cpus")));
    CHECK (json_is_integer (json_object_get (fields, "memory_mb")));
    CHECK (json_is_integer (json_object_get (fields, "req")));
    json_decref (lj);
    zstr_free (&last);

    //  Refused by policy: 422 with the policy's message.
    EXPECT ("POST", "/api/v1/agents", "{\"name\":\"bob\",\"cpus\":16}", s_token, 422, "over the limit of 8");
    //  Name taken: 409.
    EXPECT ("POST", "/api/v1/agents", "{\"name\":\"alice\"}", s_token, 409, "alice");

    //  List, show by name and by id, unknown.
    j = s_http ("GET", "/api/v1/agents", NULL, s_token, &status);
    CHECK (status == 200 && json_array_size (json_object_get (j, "agents")) == 1);
    json_decref (j);
    j = s_http ("GET", "/api/v1/agents/alice", NULL, s_token, &status);
    CHECK (status == 200);
    CHECK_STR (s_str (j, "id"), alice_id);
    json_decref (j);
    char path [256];
    snprintf (path, sizeof path, "/api/v1/agents/%s", alice_id);
    j = s_http ("GET", path, NULL, s_token, &status);
    CHECK (status == 200);
    CHECK_STR (s_str (j, "name"), "alice");
    json_decref (j);
    EXPECT ("GET", "/api/v1/agents/bob", NULL, s_token, 404, "no agent named 'bob'");
    EXPECT ("POST", "/api/v1/agents/bob/start", NULL, s_token, 404, "no agent named 'bob'");

    //  Update
    j = s_http ("PATCH", "/api/v1/agents/alice", "{\"cpus\":4}", s_token, &status);
    CHECK (status == 200);
    CHECK (json_number_value (json_object_get (j, "cpus")) == 4);
    CHECK (json_is_true (json_object_get (j, "needs_rebuild")));
    json_decref (j);
    EXPECT ("PATCH", "/api/v1/agents/alice", "{\"name\":\"carol\"}", s_token, 400, "'name'");
    EXPECT ("PATCH", "/api/v1/agents/alice", "{}", s_token, 400, "nothing to change");
    s_test_text_fields ();

    //  Routes and methods
    EXPECT ("POST", "/api/v1/agents/alice/explode", NULL, s_token, 404, "no route");
    EXPECT ("GET", "/api/v1/agents/alice/start", NULL, s_token, 405, NULL);
    EXPECT ("PUT", "/api/v1/agents", "{}", s_token, 405, NULL);
    EXPECT ("GET", "/nowhere", NULL, s_token, 404, NULL);
    EXPECT ("POST", "/api/v1/agents/alice/start?colour=red", NULL, s_token, 400, "colour");
    EXPECT ("POST", "/api/v1/agents/alice/start", "{\"force\":true}", s_token, 400, "unknown field 'force'");

    //  Start without waiting: 202 and the transitional state.
    j = s_http ("POST", "/api/v1/agents/alice/start", NULL, s_token, &status);
    if (status != 202)
        fprintf (stderr, "start: %ld %s\n", status, s_str (j, "error") ? s_str (j, "error") : "");
    CHECK (status == 202);
    CHECK_STR (s_str (j, "state"), "starting");
    json_decref (j);
    //  Stop with ?wait=1 right away: lifecycle refuses (still starting) 409 naming the state...
    EXPECT ("POST", "/api/v1/agents/alice/stop?wait=1", NULL, s_token, 409, "starting");
    zclock_sleep (300);
    //  ...then it is running, and stop?wait=1 returns once it sleeps.
    j = s_http ("POST", "/api/v1/agents/alice/stop?wait=1", NULL, s_token, &status);
    CHECK (status == 200);
    CHECK_STR (s_str (j, "state"), "sleeping");
    json_decref (j);
    j = s_http ("POST", "/api/v1/agents/alice/start?wait=1&timeout=10", "{}", s_token, &status);
    CHECK (status == 200);
    CHECK_STR (s_str (j, "state"), "running");
    json_decref (j);
    EXPECT ("POST", "/api/v1/agents/alice/start", NULL, s_token, 409, "running");

    //  Exec over a (fake) tunnel: records cut into 3-byte messages.
    j = s_http ("POST", "/api/v1/agents/alice/exec",
                "{\"cmd\":\"make\",\"timeout\":5,\"env\":{\"A\":\"b\"},\"stdin\":\"x\"}", s_token, &status);
    CHECK (status == 200);
    CHECK_STR (s_str (j, "stdout"), "hello");
    CHECK_STR (s_str (j, "stderr"), "oops");
    CHECK (json_integer_value (json_object_get (j, "status")) == 2);
    CHECK (json_is_false (json_object_get (j, "timed_out")));
    json_decref (j);
    zstr_send (lifecycle, "OTHER");
    last = zstr_recv (lifecycle);
    CHECK (last && strstr (last, "\"ch\":\"exec\"") && strstr (last, "\"cmd\":\"make\"")
           && strstr (last, "\"env\":{\"A\":\"b\"}") && strstr (last, "\"timeout\":5"));
    zstr_free (&last);
    EXPECT ("POST", "/api/v1/agents/alice/exec", "{\"cmd\":\"bad-record\"}", s_token, 502, "malformed");
    EXPECT ("POST", "/api/v1/agents/alice/exec", "{\"cmd\":7}", s_token, 400, "'cmd'");
    EXPECT ("POST", "/api/v1/agents/alice/exec", "{\"cmd\":\"x\",\"env\":{\"A\":1}}", s_token, 400, "'env'");
    EXPECT ("POST", "/api/v1/agents/alice/exec", "{\"cmd\":\"x\",\"user\":\"root\"}", s_token, 400, "unknown field 'user'");
    //  A download: 100000 bytes in two messages, ACKed as written.
    {
        buf_t b = { 0 };
        CURLcode rc = s_download ("/api/v1/agents/alice/fs/file?path=d%2Fdata.bin", &status, &b);
        CHECK (rc == CURLE_OK && status == 200 && b.size == 100000);
        bool same = b.size == 100000;
        for (size_t i = 0; same && i < b.size; i++)
            same = (uint8_t) b.data [i] == (uint8_t) (i % 251);
        CHECK (same);
        free (b.data);
        zstr_send (lifecycle, "OTHER");
        last = zstr_recv (lifecycle);
        CHECK (last && strstr (last, "\"path\":\"d/data.bin\""));         //  decoded
        zstr_free (&last);
        //  A stream that breaks half way: the client sees it fail.
        b = (buf_t) { 0 };
        rc = s_download ("/api/v1/agents/alice/fs/file?path=short", &status, &b);
        CHECK (rc != CURLE_OK || status >= 500);
        CHECK (b.size < 1000);
        free (b.data);
        zclock_sleep (100);
        zstr_send (lifecycle, "TUNNEL");
        char *counts = zstr_recv (lifecycle);
        long long acked = 0;
        int eofs = 0, closes = 0;
        char seen [64] = "";
        if (counts)
            sscanf (counts, "%lld %d %d %63s", &acked, &eofs, &closes, seen);
        //  stdin "x" went as one STDIN record: kind 0, length 1, 'x'.
        CHECK_STR (seen, "000000000178");
        zstr_free (&counts);
        //  exec: the record bytes ACKed as parsed; the download as written
        //  while its channel lived (here it closes right after the data;
        //  the e2e test moves 1 MiB, which stalls without ACKs).
        CHECK (acked > 0);
        CHECK (eofs >= 3);
        CHECK (closes >= 1);                        //  the bad record's channel was reset
    }
    EXPECT ("GET", "/api/v1/agents/alice/fs/list?path=nope", NULL, s_token, 404, "No such file");
    //  The tree of a running agent whose home the server does not open:
    //  sandboxd's fs.tree, decoded into the server's own tree's shape;
    //  whatever a sandbox sends that is not well formed is a 502.
    j = s_http ("GET", "/api/v1/agents/alice/tree?path=t-ok", NULL, s_token, &status);
    CHECK (status == 200);
    CHECK_STR (s_str (j, "path"), "t-ok");
    json_t *es = json_object_get (j, "entries");
    CHECK (json_array_size (es) == 2);
    CHECK_STR (json_string_value (json_object_get (json_array_get (es, 1), "path")), "uploads/n?");
    CHECK_STR (json_string_value (json_object_get (json_array_get (es, 1), "name")), "n?");
    CHECK (json_is_true (json_object_get (json_array_get (es, 1), "uploaded")));
    CHECK (json_integer_value (json_object_get (json_array_get (es, 1), "depth")) == 2);
    CHECK (json_integer_value (json_object_get (j, "count")) == 2);
    CHECK (json_integer_value (json_object_get (j, "max_depth")) == 6);
    CHECK (json_integer_value (json_object_get (j, "max_entries")) == 2000);
    CHECK (json_is_true (json_object_get (j, "depth_limit_reached")));
    CHECK (json_is_false (json_object_get (j, "incomplete")));
    json_decref (j);
    zstr_send (lifecycle, "OTHER");
    last = zstr_recv (lifecycle);
    CHECK (last && strstr (last, "\"ch\":\"fs.tree\"") && strstr (last, "\"max_depth\":6")
           && strstr (last, "\"max_entries\":2000") && strstr (last, "\"all\":false"));
    zstr_free (&last);
    EXPECT ("GET", "/api/v1/agents/alice/tree?path=t-bad", NULL, s_token, 502, "malformed entry");
    EXPECT ("GET", "/api/v1/agents/alice/tree?path=t-more", NULL, s_token, 502, "more of the tree");
    EXPECT ("GET", "/api/v1/agents/alice/tree?path=t-short", NULL, s_token, 502, "ended early");
    EXPECT ("GET", "/api/v1/agents/alice/tree?path=t-big", NULL, s_token, 502, "over 16 MiB");
    EXPECT ("GET", "/api/v1/agents/alice/tree?path=nope", NULL, s_token, 404, "No such file");
    EXPECT ("GET", "/api/v1/agents/alice/tree?path=t-old", NULL, s_token, 502, "restart it");
    EXPECT ("GET", "/api/v1/agents/alice/tree?path=..", NULL, s_token, 400, NULL);
    s_test_home_paths (lifecycle);
    EXPECT ("GET", "/api/v1/agents/alice/fs/file", NULL, s_token, 400, "'path' is required");
    EXPECT ("PUT", "/api/v1/agents/alice/fs/mkdir?path=x", "{}", s_token, 405, NULL);
    EXPECT ("GET", "/api/v1/agents/alice/fs/other", NULL, s_token, 404, "no route");
    j = s_http ("POST", "/api/v1/agents/alice/rebuild?wait=1", NULL, s_token, &status);
    CHECK (status == 200);
    CHECK_STR (s_str (j, "state"), "sleeping");
    json_decref (j);
    EXPECT ("POST", "/api/v1/agents/alice/start?wait=maybe", NULL, s_token, 400, "wait");

    //  A body over the cap: 413 before it is read.
    {
        size_t big = AH_API_MAX_BODY + 10;
        char *body = malloc (big + 1);
        memset (body, ' ', big);
        body [0] = '{';
        body [big - 1] = '}';
        body [big] = 0;
        j = s_http ("POST", "/api/v1/agents", body, s_token, &status);
        CHECK (status == 413 && s_error_has (j, "over the limit"));
        json_decref (j);
        free (body);
    }
    //  A client that leaves while its request waits for lifecycle: the
    //  request is forgotten (no answer written to a closed connection),
    //  the server goes on.
    {
        char req [600];
        const char *body = "{\"name\":\"mute\"}";
        snprintf (req, sizeof req, "POST /api/v1/agents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                  "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s", s_token, strlen (body), body);
        int fd = socket (AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons (s_port) };
        inet_pton (AF_INET, "127.0.0.1", &sa.sin_addr);
        CHECK (connect (fd, (struct sockaddr *) &sa, sizeof sa) == 0);
        CHECK (write (fd, req, strlen (req)) == (ssize_t) strlen (req));
        zclock_sleep (200);
        close (fd);
        zclock_sleep (1500);                        //  past the reply timeout
        EXPECT ("GET", "/healthz", NULL, NULL, 200, NULL);
    }

    //  Lifecycle does not answer: 504 after the (shortened) timeout.
    EXPECT ("POST", "/api/v1/agents", "{\"name\":\"mute\"}", s_token, 504, "did not answer");

    //  Policy
    j = s_http ("GET", "/api/v1/policy", NULL, s_token, &status);
    CHECK (status == 200 && json_array_size (json_object_get (j, "policies")) == 2);
    {
        json_t *second = json_array_get (json_object_get (j, "policies"), 1);
        CHECK_STR (s_str (second, "holder"), "sleeper");
        CHECK (s_str (second, "error") && strstr (s_str (second, "error"), "syntax error"));
    }
    json_decref (j);
    EXPECT ("POST", "/api/v1/policy/reload", NULL, s_token, 202, NULL);
    zclock_sleep (100);
    zstr_send (lifecycle, "RELOADS");
    char *reloads = zstr_recv (lifecycle);
    CHECK_STR (reloads, "1");
    zstr_free (&reloads);

    //  A token's id is a rowid SQLite gives again: a row deleted behind
    //  the API's back (no sweep of its sessions) and a new token that
    //  takes its id. The old cookie and ticket must not act as the new one.
    {
        char tok_a [AH_TOKEN_HEX], tok_b [AH_TOKEN_HEX], h [AH_TOKEN_HEX];
        ah_token_new (tok_a);
        ah_token_new (tok_b);
        ah_token_hash (tok_a, h);
        st = ah_store_prepare (store, "INSERT INTO api_tokens (name, hash, created_at) VALUES ('reuse-a', :h, 0)");
        ah_store_bind_text (st, ":h", h);
        CHECK (ah_store_step (store, st) == SQLITE_DONE);
        sqlite3_reset (st);
        int64_t id_a = sqlite3_last_insert_rowid (ah_store_db (store));
        char body [200], cookie [128], ticket [AH_TOKEN_HEX] = "";
        snprintf (body, sizeof body, "{\"token\":\"%s\"}", tok_a);
        j = s_http_cookie ("POST", "/api/v1/login", body, NULL, NULL, cookie, &status);
        CHECK (status == 200 && strlen (cookie) == 17 + 1 + 64);
        json_decref (j);
        j = s_http_cookie ("GET", "/api/v1/me", NULL, NULL, cookie, NULL, &status);
        CHECK (status == 200 && streq (s_str (j, "token") ? s_str (j, "token") : "", "reuse-a"));
        json_decref (j);
        j = s_http ("POST", "/api/v1/agents/alice/terminal/ticket", NULL, tok_a, &status);
        CHECK (status == 201 && s_str (j, "ticket"));
        snprintf (ticket, sizeof ticket, "%s", s_str (j, "ticket") ? s_str (j, "ticket") : "");
        json_decref (j);
        //  Gone, and another token made: it takes the same id.
        CHECK (ah_store_exec (store, "DELETE FROM api_tokens WHERE name = 'reuse-a'", NULL) == 0);
        ah_token_hash (tok_b, h);
        st = ah_store_prepare (store, "INSERT INTO api_tokens (name, hash, created_at) VALUES ('reuse-b', :h, 0)");
        ah_store_bind_text (st, ":h", h);
        CHECK (ah_store_step (store, st) == SQLITE_DONE);
        sqlite3_reset (st);
        CHECK (sqlite3_last_insert_rowid (ah_store_db (store)) == id_a);
        j = s_http_cookie ("GET", "/api/v1/me", NULL, NULL, cookie, NULL, &status);
        CHECK (status == 401 && s_error_has (j, "token of this session is gone"));
        json_decref (j);
        j = s_http_cookie ("GET", "/api/v1/login", NULL, NULL, cookie, NULL, &status);
        CHECK (status == 200 && json_is_false (json_object_get (j, "signed_in")));
        json_decref (j);
        char req [600];
        snprintf (req, sizeof req, "GET /console/terminal/%s?ticket=%s HTTP/1.1\r\nHost: x\r\n"
                  "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", alice_id, ticket);
        char *raw = s_raw (req, strlen (req), false);
        CHECK (strstr (raw, " 401 ") && strstr (raw, "no longer stands"));
        free (raw);
        //  The new token signs in as itself.
        snprintf (body, sizeof body, "{\"token\":\"%s\"}", tok_b);
        j = s_http_cookie ("POST", "/api/v1/login", body, NULL, NULL, cookie, &status);
        CHECK (status == 200 && streq (s_str (j, "token") ? s_str (j, "token") : "", "reuse-b"));
        json_decref (j);
        j = s_http_cookie ("GET", "/api/v1/me", NULL, NULL, cookie, NULL, &status);
        CHECK (status == 200 && streq (s_str (j, "token") ? s_str (j, "token") : "", "reuse-b"));
        json_decref (j);
    }

    //  The audit trail: who created alice, and the refused create.
    {
        zstr_send (lifecycle, "RECORDS");
        char *rec = zstr_recv (lifecycle);
        CHECK (rec && atoi (rec) >= 4);
        CHECK (rec && strstr (rec, "\"actor\":\"api:admin\""));
        zstr_free (&rec);
    }
    zstr_send (lifecycle, "LAST");
    last = zstr_recv (lifecycle);
    CHECK (last && strstr (last, "\"tenant\":\"default\""));
    zstr_free (&last);

    //  Operations (recorder), runtimes and briefings (builder), turns (sleeper)
    j = s_http ("GET", "/api/v1/agents/alice/operations?limit=5", NULL, s_token, &status);
    CHECK (status == 200);
    {
        json_t *op = json_array_get (json_object_get (j, "operations"), 0);
        CHECK_STR (s_str (op, "kind"), "create");
        CHECK (s_str (op, "at") && strchr (s_str (op, "at"), 'T'));
        CHECK (json_integer_value (json_object_get (op, "at_ms")) == 1764406800000);
        CHECK_STR (s_str (op, "agent_id"), alice_id);
    }
    json_decref (j);
    zstr_send (lifecycle, "OTHER");
    last = zstr_recv (lifecycle);
    CHECK (last && strstr (last, "\"limit\":5") && strstr (last, alice_id));
    zstr_free (&last);
    EXPECT ("GET", "/api/v1/operations?limit=0", NULL, s_token, 400, "'limit'");
    EXPECT ("GET", "/api/v1/operations?before=1764406800000", NULL, s_token, 200, NULL);
    //  A name that is no agent (now) is asked of the recorder by the name
    //  its rows kept (a deleted agent's trail); the fake recorder answers
    //  its canned rows. An empty trail would be a 404 (e2e.tenants).
    EXPECT ("GET", "/api/v1/agents/bob/operations", NULL, s_token, 200, NULL);
    EXPECT ("GET", "/api/v1/agents/..bob/operations", NULL, s_token, 400, NULL);
    j = s_http ("GET", "/api/v1/runtimes", NULL, s_token, &status);
    CHECK (status == 200);
    CHECK_STR (s_str (json_array_get (json_object_get (j, "runtimes"), 0), "name"), "debian");
    json_decref (j);
    j = s_http ("GET", "/api/v1/runtimes/debian/briefing", NULL, s_token, &status);
    CHECK (status == 200);
    CHECK_STR (s_str (j, "text"), "You run on Debian.");
    json_decref (j);
    EXPECT ("GET", "/api/v1/runtimes/plan9/briefing", NULL, s_token, 404, "plan9");
    EXPECT ("GET", "/api/v1/runtimes/debian/other", NULL, s_token, 404, "no route");
    j = s_http ("POST", "/api/v1/agents/alice/turns", "{\"lease_ms\":5000}", s_token, &status);
    CHECK (status == 201);
    CHECK_STR (s_str (j, "turn_id"), "00112233aabbccdd");
    CHECK (s_str (j, "expires_at") && strchr (s_str (j, "expires_at"), 'T'));
    json_decref (j);
    zstr_send (lifecycle, "OTHER");
    last = zstr_recv (lifecycle);
    CHECK (last && strstr (last, "\"lease_ms\":5000") && strstr (last, alice_id));
    zstr_free (&last);
    EXPECT ("POST", "/api/v1/agents/alice/turns", "{\"lease\":5}", s_token, 400, "unknown field 'lease'");
    EXPECT ("POST", "/api/v1/agents/bob/turns", NULL, s_token, 404, "no agent named 'bob'");
    EXPECT ("POST", "/api/v1/turns/00112233aabbccdd/renew", "{\"lease_ms\":9000}", s_token, 200, NULL);
    EXPECT ("POST", "/api/v1/turns/feedface/renew", NULL, s_token, 404, "no turn 'feedface'");
    EXPECT ("DELETE", "/api/v1/turns/00112233aabbccdd", NULL, s_token, 200, NULL);
    EXPECT ("GET", "/api/v1/turns/00112233aabbccdd", NULL, s_token, 405, NULL);

    //  Malformed requests: answered or closed, never a crash.
    char *out = s_raw ("GARBAGE\r\n\r\n", 11, true);
    free (out);
    out = s_raw ("POST /api/v1/agents HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", 61, false);
    CHECK (strstr (out, " 400 ") && strstr (out, "Content-Length"));
    free (out);
    {
        char req [512];
        snprintf (req, sizeof req, "POST /api/v1/agents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                  "Content-Length: 5\r\n\r\n{\"na", s_token);
        out = s_raw (req, strlen (req), true);             //  short body, then EOF
        free (out);
        //  A body that stops coming: the connection closes once it has
        //  stalled body_stall_s (1 s here), well before our 3 s read limit.
        int64_t t0 = zclock_mono ();
        out = s_raw (req, strlen (req), false);
        int64_t took = zclock_mono () - t0;
        CHECK (took >= 900 && took < 2800);
        CHECK (!strstr (out, "HTTP/1.1 2"));
        free (out);
    }
    {
        char longpath [3000];
        memset (longpath, 'a', sizeof longpath);
        memcpy (longpath, "GET /", 5);
        memcpy (longpath + sizeof longpath - 20, " HTTP/1.1\r\nHost: x\r\n\r\n", 19);
        out = s_raw (longpath, sizeof longpath - 1, true);
        free (out);
    }
    out = s_raw ("GET /api/v1/agents/%ff%fe HTTP/1.1\r\nHost: x\r\n\r\n", 47, true);
    free (out);
    EXPECT ("GET", "/healthz", NULL, NULL, 200, NULL);

    s_test_bodies (lifecycle, store);

    //  Destroy, waiting: the agent is gone afterwards.
    j = s_http ("DELETE", "/api/v1/agents/alice?wait=1", NULL, s_token, &status);
    CHECK (status == 200);
    CHECK_STR (s_str (j, "state"), "destroyed");
    json_decref (j);
    EXPECT ("GET", "/api/v1/agents/alice", NULL, s_token, 404, NULL);

    //  Lifecycle gone: the bus answers for it, 503 naming it.
    zactor_destroy (&lifecycle);
    zclock_sleep (50);
    EXPECT ("POST", "/api/v1/agents", "{\"name\":\"dave\"}", s_token, 503, "lifecycle");

    zactor_destroy (&api);
    zactor_destroy (&bus);
    ah_config_destroy (&config);
    ah_store_close (&store);
    char cmd [300];
    snprintf (cmd, sizeof cmd, "rm -rf %s", dir);
    if (system (cmd) != 0)
        fprintf (stderr, "cannot remove %s\n", dir);
    curl_global_cleanup ();
    return CHECK_DONE ();
}
