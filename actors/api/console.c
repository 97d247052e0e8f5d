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

    DESIGN. The tickets are passes (passes.c) in this API actor's memory:
    only the SHA-256 of a ticket is kept, bound to its token's id and
    hash; at most api_ticket_rules.per_token for one token (a new one
    ends that token's oldest) and .per_tenant for one tenant (past it a
    new one is a 429), so no tenant and no token ends another's tickets;
    only the API that issued a ticket redeems it.                       */
#include "actors/api/api_int.h"
#include "common/token.h"
#include "web/assets.h"

#include <string.h>
#include <strings.h>

#define TICKET_TTL_MS   30000

const api_passes_rules_t api_ticket_rules = {
    .what = "terminal tickets", .one = "ticket", .end_one = "open a terminal with one",
    .per_token = 16, .per_tenant = 64, .most = 16384, .ttl_ms = TICKET_TTL_MS,
};

//  The headers of every page and asset of the console.
#define CONSOLE_CSP \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; " \
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

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
    if (api_passes_issue (r->api->tickets, r, r->agent_id, ticket))
        return;                     //  answered (429 at a bound)
    json_t *body = json_object ();
    json_object_set_new (body, "ticket", json_string (ticket));
    json_object_set_new (body, "agent_id", json_string (r->agent_id));
    json_object_set_new (body, "expires_in_s", json_integer (TICKET_TTL_MS / 1000));
    explicit_bzero (ticket, sizeof ticket);
    api_respond (r, 201, body);
}

//  GET /console/terminal/{agent}?ticket=T (Upgrade: websocket)
static void s_terminal (req_t *r)
{
    if (!api_same_origin (r)) {
        api_respond_error (r, 403, "a terminal opens from this server's own console only (Origin)");
        return;
    }
    //  Used up whether good or not.
    api_pass_t ticket;
    if (api_passes_find (r->api->tickets, api_query (r, "ticket"), true, &ticket)
    ||  !streq (ticket.tag, r->params [0])) {
        api_respond_error (r, 401, "missing, used, expired or wrong terminal ticket "
                           "(POST /api/v1/agents/{agent}/terminal/ticket)");
        return;
    }
    //  The token read afresh, by the id and the hash it had: revoked,
    //  expired or removed since (its id given to another), no.
    char why [200];
    memset (&r->who, 0, sizeof r->who);
    int status = api_token_who_by_id (r, ticket.token_id, ticket.token_hash, why, sizeof why);
    if (status) {
        if (status == 401)
            api_respond_error (r, 401, "the token that asked for this ticket no longer stands (%s)", why);
        else
            api_respond_error (r, 500, "cannot read the token table");
        return;
    }
    snprintf (r->who.scope, sizeof r->who.scope, "%s", ticket.scope);
    for (const route_t *route = api_terminal_routes; route->pattern; route++)
        if (route->flags & R_UPGRADE) {
            route->fn (r);
            return;
        }
    api_respond_error (r, 500, "this server has no terminal route");
}

const route_t api_console_routes [] = {
    { M_GET | M_HEAD, "/", s_index, R_PUBLIC, "", NULL },
    { M_GET | M_HEAD, "/console/{asset}", s_asset, R_PUBLIC, "", NULL },
    { M_GET | M_HEAD, "/favicon.ico", s_favicon, R_PUBLIC, "", NULL },
    { M_GET, "/console/terminal/{agent}", s_terminal, R_PUBLIC | R_UPGRADE, "ticket cols rows terminal", NULL },
    { M_GET, "/api/v1/me", s_me, 0, "", NULL },
    { M_POST, "/api/v1/agents/{agent}/terminal/ticket", s_ticket, 0, "", NULL },
    { 0 }
};
