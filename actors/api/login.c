/*  actors/api/login.c: the console's sign-in by cookie (docs/api.md
    "Signing in with a cookie", docs/console.md).

    POST /api/v1/login takes an API token in its body and answers a
    session cookie (HttpOnly, SameSite=Strict, Secure when the listener
    speaks TLS) and a CSRF value; the page keeps neither the token nor the
    cookie (it cannot read it), only the CSRF value, in its memory. Every
    route then takes the cookie as it takes the bearer token: the session
    names its token, and the token's row is read afresh on each request,
    so its tenant and rights are the token's, and a token revoked or
    expired ends its sessions at once. POST /api/v1/logout ends the
    session on the server: the same cookie sent again is refused.

    CSRF: a request signed in by cookie whose Origin (when a browser sends
    one) is not this server is a 403; so is a state-changing one (any
    method but GET and HEAD, a WebSocket aside: browsers always send its
    Origin) without the session's X-Agenthold-CSRF value. SameSite=Strict
    already keeps the cookie off other sites' requests; these checks hold
    where a browser does not honour it.

    DESIGN. The sessions live in this API actor's memory, like the
    terminal tickets (console.c), as passes (passes.c): only the SHA-256
    of a cookie is kept, each for SESSION_TTL_MS from sign-in, bound to
    its token's id and hash, at most api_session_rules.per_token for one
    token (a new sign-in ends that token's oldest) and .per_tenant for
    one tenant (past it a sign-in is a 429): no tenant, and no token,
    ends another's sessions. A restart ends every session (the page asks
    for the token again); a session is good on the API that made it only. */
#include "actors/api/api_int.h"
#include "common/token.h"

#include <string.h>
#include <strings.h>

#define SESSION_TTL_MS      (12 * 3600 * 1000LL)
#define COOKIE_NAME         "agenthold_session"
#define CSRF_HEADER         "x-agenthold-csrf"

const api_passes_rules_t api_session_rules = {
    .what = "console sessions", .one = "session", .end_one = "POST /api/v1/logout",
    .per_token = 16, .per_tenant = 128, .most = 32768, .ttl_ms = SESSION_TTL_MS,
};

//  --------------------------------------------------------------------
//  The cookie

int api_session_cookie (req_t *r, char value [AH_TOKEN_HEX], char *why, size_t why_size)
{
    value [0] = 0;
    const char *header = ah_http_header (&r->head, "cookie");
    if (!header)
        return 0;
    //  Browsers send one Cookie header; several (a proxy's or a forger's)
    //  could smuggle a second session past the first: refused.
    bool several = ah_http_header_count (&r->head, "cookie") != 1;
    int found = 0;
    const char *p = header;
    while (*p) {
        while (*p == ' ' || *p == ';')
            p++;
        const char *end = strchr (p, ';');
        size_t len = end ? (size_t) (end - p) : strlen (p);
        size_t nlen = sizeof COOKIE_NAME - 1;
        if (len > nlen && p [nlen] == '=' && strncmp (p, COOKIE_NAME, nlen) == 0) {
            const char *v = p + nlen + 1;
            size_t vlen = len - nlen - 1;
            while (vlen && v [vlen - 1] == ' ')
                vlen--;
            bool hex = vlen == AH_TOKEN_HEX - 1;
            for (size_t i = 0; hex && i < vlen; i++)
                hex = (v [i] >= '0' && v [i] <= '9') || (v [i] >= 'a' && v [i] <= 'f');
            if (found || !hex) {
                snprintf (why, why_size, found ? "the cookie " COOKIE_NAME " is sent twice"
                                               : "a malformed " COOKIE_NAME " cookie (sign in again)");
                explicit_bzero (value, AH_TOKEN_HEX);
                return -1;
            }
            memcpy (value, v, vlen);
            value [vlen] = 0;
            found = 1;
        }
        p += len;
    }
    if (found && several) {
        snprintf (why, why_size, "more than one Cookie header");
        explicit_bzero (value, AH_TOKEN_HEX);
        return -1;
    }
    return found;
}

int api_session_who (req_t *r, const char *value, char *why, size_t why_size)
{
    api_pass_t session;
    if (api_passes_find (r->api->sessions, value, false, &session)) {
        snprintf (why, why_size, "this session cookie is unknown, expired or signed out "
                  "(POST /api/v1/login)");
        return 401;
    }
    int status = api_token_who_by_id (r, session.token_id, session.token_hash, why, why_size);
    if (status == 401)
        api_passes_drop_token (r->api->sessions, session.token_id, session.token_hash);
    else if (status == 0) {
        r->who.cookie = true;
        memcpy (r->who.session, session.key, sizeof r->who.session);
        memcpy (r->who.csrf, session.tag, sizeof r->who.csrf);
    }
    explicit_bzero (&session, sizeof session);
    return status;
}

bool api_same_origin (req_t *r)
{
    const char *origin = ah_http_header (&r->head, "origin");
    const char *host = ah_http_header (&r->head, "host");
    if (!origin)
        return true;                //  not a browser's cross-site request
    if (!host || ah_http_header_count (&r->head, "origin") != 1
    ||  ah_http_header_count (&r->head, "host") != 1)
        return false;
    bool tls = r->api->config->tls_cert != NULL;
    const char *rest = !tls && !strncasecmp (origin, "http://", 7) ? origin + 7
                     : tls && !strncasecmp (origin, "https://", 8) ? origin + 8 : NULL;
    return rest && strcasecmp (rest, host) == 0;
}

int api_session_csrf (req_t *r)
{
    if (!api_same_origin (r)) {
        api_respond_error (r, 403, "a request signed in by cookie must come from this server's own "
                           "console (Origin '%.80s')", ah_http_header (&r->head, "origin"));
        return 403;
    }
    if (r->method == M_GET || r->method == M_HEAD || (r->route && (r->route->flags & R_UPGRADE)))
        return 0;
    const char *given = ah_http_header (&r->head, CSRF_HEADER);
    if (!given || ah_http_header_count (&r->head, CSRF_HEADER) != 1
    ||  strlen (given) != AH_TOKEN_HEX - 1 || !ah_token_equal (given, r->who.csrf)) {
        api_respond_error (r, 403, "a %s signed in by cookie needs the session's X-Agenthold-CSRF "
                           "header (from POST /api/v1/login or GET /api/v1/me)", r->head.method);
        return 403;
    }
    return 0;
}

//  --------------------------------------------------------------------
//  The routes

//  Who r is, as /api/v1/me and the login answer it.
json_t *api_me_json (req_t *r)
{
    json_t *body = json_object ();
    json_object_set_new (body, "token", api_json_text (r->who.token_name));
    json_object_set_new (body, "tenant", api_json_text (r->who.tenant));
    json_object_set_new (body, "user", r->who.user [0] ? api_json_text (r->who.user) : json_null ());
    json_object_set_new (body, "admin", json_boolean (r->who.admin));
    json_object_set_new (body, "scope", r->who.scope [0] ? api_json_text (r->who.scope) : json_null ());
    json_object_set_new (body, "cookie", json_boolean (r->who.cookie));
    if (r->who.cookie)
        json_object_set_new (body, "csrf", json_string (r->who.csrf));
    return body;
}

static const body_field_t s_login_fields [] = { { "token", B_STR, NULL }, { NULL, 0, NULL } };

//  POST /api/v1/login {"token"}
static void s_login (req_t *r)
{
    if (!api_same_origin (r)) {
        api_respond_error (r, 403, "sign in from this server's own console (Origin '%.80s')",
                           ah_http_header (&r->head, "origin"));
        return;
    }
    json_t *body = api_body_object (r, false);
    if (!body)
        return;
    const char *token = json_string_value (json_object_get (body, "token"));
    if (!token || !*token || strlen (token) > 256) {
        json_decref (body);
        api_respond_error (r, 400, "field 'token' must be an API token (a string of 1 to 256 bytes)");
        return;
    }
    char why [200];
    memset (&r->who, 0, sizeof r->who);
    int status = api_token_who (r, token, why, sizeof why);
    explicit_bzero ((char *) token, strlen (token));
    json_decref (body);
    if (status) {
        if (status == 401)
            api_respond_error (r, 401, "%s", streq (why, "missing or wrong bearer token (Authorization: "
                               "Bearer <token>)") ? "wrong token" : why);
        else
            api_respond_error (r, 500, "cannot read the token table");
        return;
    }
    if (r->who.metrics_only) {
        api_respond_error (r, 403, "token '%s' reads GET /metrics only: it cannot sign in", r->who.token_name);
        return;
    }
    char cookie [AH_TOKEN_HEX], csrf [AH_TOKEN_HEX];
    if (ah_token_new (csrf)) {
        api_respond_error (r, 503, "no entropy for a session");
        return;
    }
    if (api_passes_issue (r->api->sessions, r, csrf, cookie)) {
        explicit_bzero (csrf, sizeof csrf);
        return;                     //  answered (429 at a bound)
    }
    r->who.cookie = true;
    ah_token_hash (cookie, r->who.session);
    memcpy (r->who.csrf, csrf, sizeof r->who.csrf);
    snprintf (r->set_cookie, sizeof r->set_cookie,
              COOKIE_NAME "=%s; Path=/; Max-Age=%lld; HttpOnly; SameSite=Strict%s",
              cookie, (long long) (SESSION_TTL_MS / 1000), r->api->config->tls_cert ? "; Secure" : "");
    explicit_bzero (cookie, sizeof cookie);
    explicit_bzero (csrf, sizeof csrf);
    json_t *answer = api_me_json (r);
    json_object_set_new (answer, "expires_in_s", json_integer (SESSION_TTL_MS / 1000));
    ah_info (AREA, "token '%s' signed in to the console", r->who.token_name);
    api_respond (r, 200, answer);
}

//  GET /api/v1/login: is this browser signed in? A page loaded within its
//  session takes it up again without asking for the token (and without a
//  401 in the browser's log when it is not).
static void s_session (req_t *r)
{
    if (!api_same_origin (r)) {
        api_respond_error (r, 403, "ask from this server's own console (Origin '%.80s')",
                           ah_http_header (&r->head, "origin"));
        return;
    }
    char value [AH_TOKEN_HEX], why [200];
    memset (&r->who, 0, sizeof r->who);
    int found = api_session_cookie (r, value, why, sizeof why);
    int status = found > 0 ? api_session_who (r, value, why, sizeof why) : 401;
    explicit_bzero (value, sizeof value);
    if (status == 500) {
        api_respond_error (r, 500, "cannot read the token table");
        return;
    }
    if (status || r->who.metrics_only) {
        memset (&r->who, 0, sizeof r->who);
        api_respond (r, 200, json_pack ("{s:b}", "signed_in", 0));
        return;
    }
    json_t *answer = api_me_json (r);
    json_object_set_new (answer, "signed_in", json_true ());
    api_respond (r, 200, answer);
}

//  POST /api/v1/logout: the cookie's session ends (a bearer token has
//  none: nothing ends). The browser is told to forget the cookie.
static void s_logout (req_t *r)
{
    bool ended = r->who.cookie && api_passes_drop (r->api->sessions, r->who.session);
    snprintf (r->set_cookie, sizeof r->set_cookie, COOKIE_NAME "=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict%s",
              r->api->config->tls_cert ? "; Secure" : "");
    api_respond (r, 200, json_pack ("{s:b}", "signed_out", ended));
}

const route_t api_login_routes [] = {
    { M_POST, "/api/v1/login", s_login, R_PUBLIC | R_BODY, "", s_login_fields },
    { M_GET, "/api/v1/login", s_session, R_PUBLIC, "", NULL },
    { M_POST, "/api/v1/logout", s_logout, 0, "", NULL },
    { 0 }
};
