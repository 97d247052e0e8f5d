/*  actors/api/console.c: the web console's routes (docs/console.md): its
    files, and the terminal's WebSocket for a page that keeps its token
    out of every URL.

    The files are web/console/, compiled into the binary (web/assets.h):
    GET / is index.html, GET /console/{asset} any other of them. A name is
    looked up in that table, never opened, so no path can lead anywhere
    else ('..' and encoded slashes are refused by route.c before this).
    Every asset goes out with a strict Content-Security-Policy (scripts,
    styles and connections of this origin only, no inline script, no
    framing), X-Frame-Options DENY and no-referrer.

    Sign-in is login.c's (a session cookie the page cannot read). A
    browser cannot set headers on a WebSocket, and no credential should go
    into a URL, so the terminal takes a ticket instead:
    POST /api/v1/agents/{agent}/terminal/ticket (cookie or bearer token,
    like any route) answers a fresh random ticket bound to that token, its
    scope and that agent, good once and for 30 s; GET /console/terminal/
    {agent}?ticket=T (a WebSocket) redeems it, checks that the token was
    neither revoked nor expired meanwhile and that the Origin, when sent,
    is this server, then serves the terminal route exactly as the token
    would.

    DESIGN. The tickets live in a small table of this file, locked
    because a process could run more than one API actor (tests do); each
    entry names the API that issued it, and only that API redeems it.   */
#include "actors/api/api_int.h"
#include "common/token.h"
#include "web/assets.h"

#include <pthread.h>
#include <string.h>
#include <strings.h>

#define TICKETS         64              //  outstanding at once (the oldest is dropped)
#define TICKET_TTL_MS   30000

//  The headers of every page and asset of the console.
#define CONSOLE_CSP \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; " \
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

typedef struct {
    const api_t *api;               //  the API that issued it; NULL: a free slot
    char hash [AH_TOKEN_HEX];       //  of the ticket (the ticket is never kept)
    char agent_id [AH_AGENT_ID_LEN + 1];
    who_t who;
    int64_t expires_ms;
    int64_t issued_ms;
} ticket_t;

//  Touched by every API actor's thread: under s_lock.
static ticket_t s_tickets [TICKETS];
static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;

//  --------------------------------------------------------------------
//  The files

static void s_asset_send (req_t *r, const ah_web_asset_t *asset)
{
    ah_buf_t *out = &r->conn->out;
    r->status = 200;
    r->responded = true;
    r->streaming = false;
    ah_buf_appendf (out, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                    "Content-Security-Policy: " CONSOLE_CSP "\r\n"
                    "X-Frame-Options: DENY\r\nX-Content-Type-Options: nosniff\r\n"
                    "Referrer-Policy: no-referrer\r\nCross-Origin-Opener-Policy: same-origin\r\n"
                    "Cross-Origin-Resource-Policy: same-origin\r\nCache-Control: no-cache\r\n%s\r\n",
                    asset->type, asset->size, r->close_after ? "Connection: close\r\n" : "");
    if (r->method == M_GET)
        ah_buf_append (out, asset->data, asset->size);
    api_want_write (r);
}

//  A file of the console by name, or 404 (a server built without it).
static void s_named (req_t *r, const char *name)
{
    const ah_web_asset_t *asset = ah_web_asset (name);
    if (!asset) {
        api_respond_error (r, 404, "this server was built without its console");
        return;
    }
    s_asset_send (r, asset);
}

//  GET /
static void s_index (req_t *r)
{
    s_named (r, "index.html");
}

//  GET /favicon.ico: browsers ask for it whatever the page says; the
//  console's icon (SVG, which they take from there too) instead of a 401.
static void s_favicon (req_t *r)
{
    s_named (r, "favicon.svg");
}

//  GET /console/{asset}
static void s_asset (req_t *r)
{
    const ah_web_asset_t *asset = ah_web_asset (r->params [0]);
    if (!asset) {
        api_respond_error (r, 404, "no console file '%.64s'", r->params [0]);
        return;
    }
    s_asset_send (r, asset);
}

//  GET /api/v1/me: who the token is, for the page's header and for what
//  it offers (an admin sees tenants; a tenant's person does not).
static void s_me (req_t *r)
{
    api_respond (r, 200, api_me_json (r));
}

//  --------------------------------------------------------------------
//  Terminal tickets

//  POST /api/v1/agents/{agent}/terminal/ticket
static void s_ticket (req_t *r)
{
    json_t *agent = api_agent_resolve (r);
    if (!agent)
        return;
    json_decref (agent);
    char ticket [AH_TOKEN_HEX];
    if (ah_token_new (ticket)) {
        api_respond_error (r, 503, "no entropy for a ticket");
        return;
    }
    int64_t now = ah_store_now_ms ();
    pthread_mutex_lock (&s_lock);
    ticket_t *slot = &s_tickets [0];
    for (size_t i = 0; i < TICKETS; i++) {
        ticket_t *t = &s_tickets [i];
        if (!t->api || t->expires_ms <= now) {
            slot = t;
            break;
        }
        if (t->issued_ms < slot->issued_ms)
            slot = t;
    }
    memset (slot, 0, sizeof *slot);
    slot->api = r->api;
    ah_token_hash (ticket, slot->hash);
    snprintf (slot->agent_id, sizeof slot->agent_id, "%s", r->agent_id);
    slot->who = r->who;
    slot->issued_ms = now;
    slot->expires_ms = now + TICKET_TTL_MS;
    pthread_mutex_unlock (&s_lock);
    json_t *body = json_object ();
    json_object_set_new (body, "ticket", json_string (ticket));
    json_object_set_new (body, "agent_id", json_string (r->agent_id));
    json_object_set_new (body, "expires_in_s", json_integer (TICKET_TTL_MS / 1000));
    explicit_bzero (ticket, sizeof ticket);
    api_respond (r, 201, body);
}

//  Takes the ticket out of the table (good or not, it is used up): 0
//  with *who set, or -1.
static int s_redeem (req_t *r, const char *ticket, const char *agent_id, who_t *who)
{
    if (!ticket || strlen (ticket) != AH_TOKEN_HEX - 1)
        return -1;
    char hash [AH_TOKEN_HEX];
    ah_token_hash (ticket, hash);
    int64_t now = ah_store_now_ms ();
    int rc = -1;
    pthread_mutex_lock (&s_lock);
    for (size_t i = 0; i < TICKETS; i++) {
        ticket_t *t = &s_tickets [i];
        if (t->api != r->api || !ah_token_equal (t->hash, hash))
            continue;
        if (t->expires_ms > now && streq (t->agent_id, agent_id)) {
            *who = t->who;
            rc = 0;
        }
        memset (t, 0, sizeof *t);
    }
    pthread_mutex_unlock (&s_lock);
    return rc;
}

//  The ticket's token still stands (revoked or expired since: no).
static bool s_token_stands (req_t *r, int64_t token_id)
{
    sqlite3_stmt *st = ah_store_prepare (r->api->store,
        "SELECT 1 FROM api_tokens WHERE id = :id AND revoked_at IS NULL"
        " AND (expires_at IS NULL OR expires_at > :now)");
    bool ok = st && !ah_store_bind_int64 (st, ":id", token_id)
           && !ah_store_bind_int64 (st, ":now", ah_store_now_ms ())
           && ah_store_step (r->api->store, st) == SQLITE_ROW;
    if (st)
        sqlite3_reset (st);
    return ok;
}

//  GET /console/terminal/{agent}?ticket=T (Upgrade: websocket)
static void s_terminal (req_t *r)
{
    if (!api_same_origin (r)) {
        api_respond_error (r, 403, "a terminal opens from this server's own console only (Origin)");
        return;
    }
    who_t who;
    if (s_redeem (r, api_query (r, "ticket"), r->params [0], &who)) {
        api_respond_error (r, 401, "missing, used, expired or wrong terminal ticket "
                           "(POST /api/v1/agents/{agent}/terminal/ticket)");
        return;
    }
    if (!s_token_stands (r, who.token_id)) {
        api_respond_error (r, 401, "the token '%s' that asked for this ticket no longer stands",
                           who.token_name);
        return;
    }
    r->who = who;
    for (const route_t *route = api_terminal_routes; route->pattern; route++)
        if (route->flags & R_UPGRADE) {
            route->fn (r);
            return;
        }
    api_respond_error (r, 500, "this server has no terminal route");
}

const route_t api_console_routes [] = {
    { M_GET | M_HEAD, "/", s_index, R_PUBLIC, "" },
    { M_GET | M_HEAD, "/console/{asset}", s_asset, R_PUBLIC, "" },
    { M_GET | M_HEAD, "/favicon.ico", s_favicon, R_PUBLIC, "" },
    { M_GET, "/console/terminal/{agent}", s_terminal, R_PUBLIC | R_UPGRADE, "ticket cols rows" },
    { M_GET, "/api/v1/me", s_me, 0, "" },
    { M_POST, "/api/v1/agents/{agent}/terminal/ticket", s_ticket, 0, "" },
    { 0 }
};
