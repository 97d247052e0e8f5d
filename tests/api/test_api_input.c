/*  tests/api/test_api_input.c: what the API refuses, driven over HTTP
    (api_http.h): text fields with control characters and bad UTF-8,
    bodies generated from the router's table (unknown, empty, doubled,
    wrongly typed keys, numbers at and beyond every bound), and hostile
    home paths on every route that takes one (tests/common/homepath_cases.h). */
#include "tests/api/api_http.h"
#include "tests/common/homepath_cases.h"

void test_text_fields (void)
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
            json_t *j = t_http (fields [f].method, fields [f].path, text, t_token, &status);
            const char *e = t_str (j, "error");
            bool named = e && strstr (e, fields [f].field) && !strstr (e, "unknown field");
            if (status != 400 || !named)
                fprintf (stderr, "%s %s %s: %ld %s\n", fields [f].method, fields [f].path, text, status,
                         e ? e : "");
            CHECK (status == 400 && named);
            json_decref (j);
        }
    //  The same as bytes: raw C1 in a body (UTF-8 C2 85, as the report's
    //  subject was), and bytes that are not UTF-8 (JSON is UTF-8: 400).
    EXPECT ("POST", "/api/v1/sessions", "{\"scope\":\"run\",\"subject\":\"a\xc2\x85" "b\"}", t_token, 400,
            "'subject' holds a control character");
    EXPECT ("POST", "/api/v1/sessions", "{\"scope\":\"run\",\"subject\":\"s\",\"host\":\"\xc2\x9b" "31m\"}",
            t_token, 400, "'host' holds a control character");
    static const char *bad_utf8 [] = { "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", "\xff" };
    for (size_t i = 0; i < sizeof bad_utf8 / sizeof bad_utf8 [0]; i++) {
        char text [128];
        snprintf (text, sizeof text, "{\"scope\":\"run\",\"subject\":\"a%sb\"}", bad_utf8 [i]);
        EXPECT ("POST", "/api/v1/sessions", text, t_token, 400, "bad JSON");
    }
    //  The run named in a header: C1 bytes there (the HTTP parser passes
    //  bytes past ASCII on to the route).
    char head [512];
    int n = snprintf (head, sizeof head, "POST /api/v1/agents/alice/stop HTTP/1.1\r\nHost: x\r\n"
                      "Authorization: Bearer %s\r\nX-Agenthold-Run: r\xc2\x9b" "1\r\nContent-Length: 0\r\n"
                      "Connection: close\r\n\r\n", t_token);
    char *reply = t_raw (head, (size_t) n, false);
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
    json_t *j = t_http (method, path, body, t_token, &status);
    const char *e = t_str (j, "error");
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

void test_bodies (zactor_t *lifecycle, ah_store_t *store)
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
        //  A JSON-RPC body (POST /mcp) is its protocol's, refused in its
        //  terms (-32700, -32600, -32602): tests/mcp/mcp_hostile.py.
        if (json_is_true (json_object_get (route, "rpc")))
            continue;
        const char *method = t_str (route, "method");
        //  Path parameters: any well-formed segment (the body is checked
        //  before the handler looks anything up).
        char path [256] = "";
        const char *p = t_str (route, "pattern");
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
            const char *name = t_str (field, "name");
            char body [2048], named [80];
            snprintf (named, sizeof named, "'%s'", name);
            if (t_str (field, "why")) {
                //  A key refused with its reason.
                snprintf (body, sizeof body, "{\"%s\": 1}", name);
                bad += s_refused (method, path, body, t_str (field, "why"));
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
    json_t *j = t_http (method, path, body, t_token, &status);
    *named = part ? t_error_has (j, part) : true;
    json_decref (j);
    return status;
}

//  The shared table of home paths (tests/common/homepath_cases.h) through
//  every route that takes one, with alice running: a path the grammar
//  refuses is a 400 naming it (or, in the URL form, the router's 400 for
//  the segment) before any sandbox is asked, written plain or with its
//  dots encoded (%2e, %2E); a good one is never a 400. The query value
//  is decoded once: "%252e%252e" is the name "%2e%2e", not "..".
void test_home_paths (zactor_t *lifecycle)
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
            EXPECT ("GET", url, NULL, t_token, 400, "longer than 255 bytes");
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
    EXPECT ("GET", "/api/v1/agents/alice/tree?path=nope/", NULL, t_token, 404, "No such file");
    zstr_send (lifecycle, "OTHER");
    last = zstr_recv (lifecycle);
    CHECK (last && strstr (last, "\"path\":\"nope\""));
    zstr_free (&last);
    EXPECT ("GET", "/api/v1/agents/alice/fs/file?path=nope/", NULL, t_token, 400, "ends in '/'");
    EXPECT ("GET", "/api/v1/agents/alice/tree?path=nope//", NULL, t_token, 400, "empty component");
    CHECK (cases > 100);
}
