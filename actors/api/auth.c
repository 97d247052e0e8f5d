/*  actors/api/auth.c: who is asking, and within which tenant (see
    api_int.h and docs/api.md "Tenants and tokens").

    A bearer token in the Authorization header; without that header, the
    console's session cookie (login.c: its session names a token, read
    here by id, then the CSRF rules); or, on a WebSocket route (browsers
    cannot set headers there), a token= query argument. Only
    token hashes are stored (api_tokens.hash); every stored hash is
    compared in constant time and the token itself is wiped once hashed.
    A revoked or expired token is refused at once. The tenant is the
    boundary: a tenant's token acts within its tenant only; an admin's
    acts within every tenant, or within the one ?tenant= names.       */
#include "actors/api/api_int.h"
#include "common/token.h"

#include <strings.h>

#define LAST_USED_EVERY_MS  60000       //  last_used_at is written at most this often

const char *api_tenant (const req_t *r)
{
    return r->who.scope [0] ? r->who.scope : r->who.tenant;
}

//  One row of api_tokens (id, name, hash, tenant, admin, user,
//  expires_at, revoked_at, last_used_at, metrics_only) into r->who: 0,
//  or 401 with why (revoked, expired).
static int s_fill (req_t *r, sqlite3_stmt *st, int64_t now, int64_t *last_used, char *why, size_t why_size)
{
    const char *name = (const char *) sqlite3_column_text (st, 1);
    if (sqlite3_column_type (st, 7) != SQLITE_NULL) {
        snprintf (why, why_size, "the token '%s' was revoked", name ? name : "?");
        return 401;
    }
    if (sqlite3_column_type (st, 6) != SQLITE_NULL && sqlite3_column_int64 (st, 6) <= now) {
        char at [40];
        ah_store_format_time (sqlite3_column_int64 (st, 6), at, sizeof at);
        snprintf (why, why_size, "the token '%s' expired at %s", name ? name : "?", at);
        return 401;
    }
    const char *tenant = (const char *) sqlite3_column_text (st, 3);
    const char *user = (const char *) sqlite3_column_text (st, 5);
    const char *hash = (const char *) sqlite3_column_text (st, 2);
    r->who.token_id = sqlite3_column_int64 (st, 0);
    snprintf (r->who.token_hash, sizeof r->who.token_hash, "%s", hash ? hash : "");
    snprintf (r->who.token_name, sizeof r->who.token_name, "%s", name ? name : "?");
    snprintf (r->who.tenant, sizeof r->who.tenant, "%s", tenant ? tenant : "default");
    snprintf (r->who.user, sizeof r->who.user, "%s", user ? user : "");
    r->who.admin = sqlite3_column_int (st, 4) != 0;
    r->who.metrics_only = sqlite3_column_int (st, 9) != 0;
    *last_used = sqlite3_column_int64 (st, 8);
    r->who.ok = true;
    return 0;
}

//  The token's last use, at most once a minute (the writer's: not waited for).
static void s_touch (req_t *r, int64_t now, int64_t last_used)
{
    if (now - last_used < LAST_USED_EVERY_MS)
        return;
    api_stmt_write (NULL, r->api, api_stmt_int (api_stmt_int (api_stmt (
        "UPDATE api_tokens SET last_used_at = :now WHERE id = :id"), ":now", now), ":id", r->who.token_id), NULL, NULL);
}

#define TOKEN_COLUMNS "SELECT id, name, hash, tenant, admin, user, expires_at, revoked_at, last_used_at, metrics_only" \
                      " FROM api_tokens"

int api_token_who (req_t *r, const char *token, char *why, size_t why_size)
{
    char hash [AH_TOKEN_HEX];
    ah_token_hash (token, hash);
    ah_store_t *store = r->api->store;
    sqlite3_stmt *st = ah_store_prepare (store, TOKEN_COLUMNS);
    if (!st)
        return 500;
    int64_t now = ah_store_now_ms (), last_used = 0;
    bool found = false;
    int rc, status = 401;
    snprintf (why, why_size, "missing or wrong bearer token (Authorization: Bearer <token>)");
    while ((rc = ah_store_step (store, st)) == SQLITE_ROW) {
        const char *stored = (const char *) sqlite3_column_text (st, 2);
        if (!stored || !ah_token_equal (hash, stored) || found)
            continue;
        found = true;
        status = s_fill (r, st, now, &last_used, why, why_size);
    }
    sqlite3_reset (st);
    explicit_bzero (hash, sizeof hash);
    if (rc != SQLITE_DONE)
        return 500;
    if (status == 0)
        s_touch (r, now, last_used);
    return status;
}

int api_token_who_by_id (req_t *r, int64_t token_id, const char *token_hash, char *why, size_t why_size)
{
    ah_store_t *store = r->api->store;
    sqlite3_stmt *st = ah_store_prepare (store, TOKEN_COLUMNS " WHERE id = :id");
    if (!st || ah_store_bind_int64 (st, ":id", token_id)) {
        if (st)
            sqlite3_reset (st);
        return 500;
    }
    int64_t now = ah_store_now_ms (), last_used = 0;
    int rc = ah_store_step (store, st), status = 401;
    snprintf (why, why_size, "the token of this session is gone");
    //  The row must be the one the pass was issued for: a token removed
    //  (its tenant's) leaves its id to the next one made.
    const char *stored = rc == SQLITE_ROW ? (const char *) sqlite3_column_text (st, 2) : NULL;
    if (stored && token_hash && ah_token_equal (stored, token_hash))
        status = s_fill (r, st, now, &last_used, why, why_size);
    sqlite3_reset (st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return 500;
    if (status == 0)
        s_touch (r, now, last_used);
    return status;
}

bool api_token_stands (ah_store_t *store, int64_t token_id, const char *token_hash)
{
    sqlite3_stmt *st = ah_store_prepare (store,
        "SELECT hash FROM api_tokens WHERE id = :id AND revoked_at IS NULL"
        " AND (expires_at IS NULL OR expires_at > :now)");
    bool ok = st && !ah_store_bind_int64 (st, ":id", token_id)
           && !ah_store_bind_int64 (st, ":now", ah_store_now_ms ())
           && ah_store_step (store, st) == SQLITE_ROW;
    const char *stored = ok ? (const char *) sqlite3_column_text (st, 0) : NULL;
    ok = stored && token_hash && ah_token_equal (stored, token_hash);
    if (st)
        sqlite3_reset (st);
    return ok;
}

//  Within which tenant: 0, or the status (answered).
static int s_scope (req_t *r)
{
    const char *asked = api_query (r, "tenant");
    if (!r->who.admin) {
        if (asked && !streq (asked, r->who.tenant)) {
            api_respond_error (r, 403, "this token acts for tenant '%s' only", r->who.tenant);
            return 403;
        }
        snprintf (r->who.scope, sizeof r->who.scope, "%s", r->who.tenant);
        return 0;
    }
    if (!asked)
        return 0;                   //  an admin: every tenant
    const char *why = ah_ident_check (AH_IDENT_TENANT, asked);
    if (why) {
        api_respond_error (r, 400, "query 'tenant': tenant name '%.64s' %s", asked, why);
        return 400;
    }
    sqlite3_stmt *st = ah_store_prepare (r->api->store, "SELECT 1 FROM tenants WHERE name = :name");
    int rc = st && !ah_store_bind_text (st, ":name", asked) ? ah_store_step (r->api->store, st) : SQLITE_ERROR;
    if (st)
        sqlite3_reset (st);
    if (rc != SQLITE_ROW) {
        api_respond_error (r, rc == SQLITE_DONE ? 404 : 500,
                           rc == SQLITE_DONE ? "no tenant '%s'" : "cannot read the tenants (%s)", asked);
        return rc == SQLITE_DONE ? 404 : 500;
    }
    snprintf (r->who.scope, sizeof r->who.scope, "%s", asked);
    return 0;
}

//  What the route asks of who r is (r->who set from its credentials):
//  a metrics token only on metrics routes, a cookie's CSRF rules, the
//  tenant it acts within (?tenant=), an admin on admin routes. 0, or the
//  status answered.
static int s_route_checks (req_t *r)
{
    int status;
    bool metrics_route = r->route && (r->route->flags & R_METRICS);
    if (r->who.metrics_only != metrics_route && !(metrics_route && r->who.admin)) {
        api_respond_error (r, 403, r->who.metrics_only ? "token '%s' reads GET /metrics only"
                                                       : "%s needs an admin or a metrics token",
                           r->who.metrics_only ? r->who.token_name : r->path);
        return 403;
    }
    if (r->who.cookie && (status = api_session_csrf (r)))
        return status;
    if ((status = s_scope (r)))
        return status;
    if (r->route && (r->route->flags & R_ADMIN) && !r->who.admin) {
        api_respond_error (r, 403, "%s needs an admin token", r->path);
        return 403;
    }
    return 0;
}

int api_auth (req_t *r)
{
    memset (&r->who, 0, sizeof r->who);
    const char *token = NULL;
    const char *header = ah_http_header (&r->head, "authorization");
    char why [200];
    snprintf (why, sizeof why, "missing or wrong bearer token (Authorization: Bearer <token>)");
    if (header) {
        if (ah_http_header_count (&r->head, "authorization") == 1 && !strncasecmp (header, "Bearer ", 7))
            token = header + 7;
    }
    //  No Authorization header: the console's session cookie, if sent.
    char cookie [AH_TOKEN_HEX];
    int found = header ? 0 : api_session_cookie (r, cookie, why, sizeof why);
    int status = 401;
    if (found > 0)
        status = api_session_who (r, cookie, why, sizeof why);
    else if (found == 0) {
        if (!header && r->route && (r->route->flags & R_UPGRADE))
            token = api_query (r, "token");
        while (token && *token == ' ')
            token++;
        status = token && *token && strlen (token) <= 256 ? api_token_who (r, token, why, sizeof why) : 401;
    }
    explicit_bzero (cookie, sizeof cookie);
    if (status == 401) {
        api_respond_error (r, 401, "%s", why);
        return 401;
    }
    if (status) {
        api_respond_error (r, 500, "cannot read the token table");
        return 500;
    }
    return s_route_checks (r);
}

int api_auth_as (req_t *r, const who_t *who)
{
    r->who = *who;
    r->who.scope [0] = 0;
    return s_route_checks (r);
}
