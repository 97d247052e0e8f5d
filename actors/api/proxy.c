/*  actors/api/proxy.c: a sandbox's web server reached through the server
    (issue 30, docs/ports.md): /p/{agent_id}/{port}/{capability}/... is
    forwarded to that port of the sandbox's loopback over its sandboxd's
    port channel, waking the agent when it sleeps.

    The link is the credential, not a token or a cookie. The API's own
    origin serves the console, so a page of the agent's web app served
    here must never act as the console's user:
    - the capability is EXPIRY-ID-SIG, SIG the first 128 bits of
      HMAC-SHA256 (the installation's ports key; "agenthold-port-v2",
      tenant, agent id, port, expiry, link id) in hex: made by POST
      /api/v1/agents/{agent}/ports/{port}/link for the agent's tenant and
      checked here in constant time; a link cannot be bent to another
      port, agent or expiry; it stands while its port_links row does
      (DELETE .../ports/links/{id} revokes it);
    - every proxied answer carries Content-Security-Policy: sandbox
      allow-scripts allow-forms allow-popups allow-downloads (no
      allow-same-origin): the page is an opaque origin, so its scripts
      send no cookie of the API's and read none of its answers;
      Referrer-Policy: no-referrer keeps the link out of other sites'
      logs; Set-Cookie, Clear-Site-Data, Strict-Transport-Security,
      Alt-Svc and credentialed CORS from the sandbox are dropped (each
      would act on the API's origin);
    - the request loses Authorization, the console's session cookie
      (agenthold_session; other cookies pass), Forwarded and X-Forwarded-*
      a client made up, and the hop-by-hop headers; Host becomes the
      sandbox's 127.0.0.1:PORT.
    One request per connection to the sandbox (Connection: close): the
    answer's bytes pass as they come after its head is checked and
    rewritten (a head over PROXY_HEAD_MAX, not HTTP/1.x or holding a
    control byte is a 502), and the client's connection closes after it.
    A request body needs a Content-Length (the API's framing answers 411
    to Transfer-Encoding). Each request is audited (port.request: the
    method, the port and the path without its query) and counts as use
    of the agent. /p/{agent_id}/{port}/t/... takes the tenant's bearer
    token instead of a capability (API clients); /p/{agent_id}/{port}/public/...
    takes nothing, for a port the tenant marked public that lua/ports.lua
    allows (shipped rule: private).                                    */
#include "actors/api/api_int.h"
#include "common/file.h"
#include "common/ident.h"
#include "common/str.h"
#include "policy/policy.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROXY_HEAD_MAX      (64u << 10)     //  the sandbox's answer head
#define PROXY_OUT_HIGH      (1u << 20)      //  stop acknowledging past this in conn->out
#define PROXY_SIG_HEX       32
#define PROXY_KEY_FILE      "ports.key"
#define PROXY_CSP           "sandbox allow-scripts allow-forms allow-popups allow-downloads"

typedef struct {
    req_t *r;
    api_t *api;
    api_chan_t chan;
    bool open, waking, eof, closed, head_done, recorded;
    bool upgrade;                   //  a WebSocket upgrade asked: a 101 makes the connection a pipe
    bool counted;                   //  a pipe, counted in PORT_SOCKETS (keeps the agent awake)
    char agent_id [AH_AGENT_ID_LEN + 1];
    int port;
    char prefix [160];              //  "/p/{agent}/{port}/{cap}" (X-Forwarded-Prefix)
    char *target;                   //  what the sandbox is asked for ("/x?y")
    ah_buf_t head;                  //  the sandbox's answer head, until whole
    ah_buf_t pending_body;          //  body bytes that came before the channel opened
    size_t unacked;                 //  channel bytes not yet acknowledged (backpressure)
    int64_t bytes;                  //  answer bytes passed on
} proxy_t;

//  --------------------------------------------------------------------
//  The key and the links

int api_proxy_key_load (api_t *api, const char *data_dir, char **why)
{
    char path [4096];
    snprintf (path, sizeof path, "%s/%s", data_dir, PROXY_KEY_FILE);
    if (ah_keyfile_load (path, api->port_key, sizeof api->port_key, true, why))
        return -1;
    api->port_key_ok = true;
    return 0;
}

static void s_sign (api_t *api, const char *tenant, const char *agent_id, int port, int64_t expiry,
                    const char *id, char out [PROXY_SIG_HEX + 1])
{
    char text [512];
    int n = snprintf (text, sizeof text, "agenthold-port-v2\n%s\n%s\n%d\n%lld\n%s", tenant, agent_id, port,
                      (long long) expiry, id);
    uint8_t mac [EVP_MAX_MD_SIZE];
    unsigned len = 0;
    HMAC (EVP_sha256 (), api->port_key, (int) sizeof api->port_key, (const uint8_t *) text, (size_t) n, mac, &len);
    for (int i = 0; i < PROXY_SIG_HEX / 2; i++)
        snprintf (out + 2 * i, 3, "%02x", mac [i]);
}

char *api_port_link (api_t *api, const char *tenant, const char *agent_id, int port, int64_t expiry,
                     const char *id)
{
    char sig [PROXY_SIG_HEX + 1];
    s_sign (api, tenant, agent_id, port, expiry, id, sig);
    return ah_strf ("/p/%s/%d/%lld-%s-%s/", agent_id, port, (long long) expiry, id, sig);
}

bool api_link_id_ok (const char *id)
{
    bool ok = strlen (id) == API_LINK_ID_LEN;
    for (const char *c = id; ok && *c; c++)
        ok = (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f');
    return ok;
}

//  The capability EXPIRY-ID-SIG for (tenant, agent, port) now: true when
//  its signature stands (checked in constant time) and its row too (one
//  lookup by the primary key: a revoked link has none).
static bool s_capability_ok (api_t *api, const char *tenant, const char *agent_id, int port, const char *cap)
{
    if (!api->port_key_ok)
        return false;
    const char *dash = strchr (cap, '-');
    if (!dash || dash == cap || dash - cap > 12 || strlen (dash + 1) != API_LINK_ID_LEN + 1 + PROXY_SIG_HEX
    ||  dash [1 + API_LINK_ID_LEN] != '-')
        return false;
    int64_t expiry = 0;
    for (const char *c = cap; c < dash; c++) {
        if (*c < '0' || *c > '9')
            return false;
        expiry = expiry * 10 + (*c - '0');
    }
    char id [API_LINK_ID_LEN + 1];
    memcpy (id, dash + 1, API_LINK_ID_LEN);
    id [API_LINK_ID_LEN] = 0;
    if (!api_link_id_ok (id))
        return false;
    if (expiry * 1000 < ah_store_now_ms ())
        return false;
    char sig [PROXY_SIG_HEX + 1];
    s_sign (api, tenant, agent_id, port, expiry, id, sig);
    if (CRYPTO_memcmp (sig, dash + 2 + API_LINK_ID_LEN, PROXY_SIG_HEX) != 0)
        return false;
    sqlite3_stmt *st = ah_store_prepare (api->store, "SELECT 1 FROM port_links WHERE id = :id AND agent_id = :agent"
                                         " AND port = :port AND expires_at = :expires");
    bool live = st && !ah_store_bind_text (st, ":id", id) && !ah_store_bind_text (st, ":agent", agent_id)
             && !ah_store_bind_int64 (st, ":port", port) && !ah_store_bind_int64 (st, ":expires", expiry * 1000)
             && ah_store_step (api->store, st) == SQLITE_ROW;
    if (st)
        sqlite3_reset (st);
    return live;
}

//  "public" instead of a capability: the port stands in public_ports
//  (the tenant marked it) and lua/ports.lua allows it now. Why not into
//  why (for the audit row and the log).
static bool s_public_ok (api_t *api, const char *tenant, const char *agent_id, const char *name, int port,
                         char *why, size_t why_size)
{
    sqlite3_stmt *st = ah_store_prepare (api->store, "SELECT 1 FROM public_ports WHERE agent_id = :agent"
                                         " AND port = :port");
    bool marked = st && !ah_store_bind_text (st, ":agent", agent_id) && !ah_store_bind_int64 (st, ":port", port)
               && ah_store_step (api->store, st) == SQLITE_ROW;
    if (st)
        sqlite3_reset (st);
    if (!marked) {
        snprintf (why, why_size, "port %d is not marked public", port);
        return false;
    }
    if (!api->ports_rule) {
        snprintf (why, why_size, "lua/ports.lua is not loaded: public ports are refused");
        return false;
    }
    ah_msg_t *mt = ah_msg_new ("TENANT"), *ma = ah_msg_new ("AGENT"), *mp = ah_msg_new ("PORT");
    ah_msg_set_str (mt, "name", tenant);
    ah_msg_set_str (ma, "id", agent_id);
    ah_msg_set_str (ma, "name", name);
    ah_msg_set_int (mp, "number", port);
    const ah_msg_t *args [3] = { mt, ma, mp };
    ah_msg_t *result = NULL;
    char *err = NULL;
    bool allowed = false;
    if (ah_policy_callv (api->ports_rule, "decide", args, 3, &result, &err) == 0) {
        allowed = ah_msg_bool (result, "allow", false);
        const char *w = ah_msg_str (result, "why");
        snprintf (why, why_size, "%s", w && *w ? w : allowed ? "allowed by lua/ports.lua" : "refused by lua/ports.lua");
    }
    else {
        ah_warn (AREA, "ports.lua did not decide (%s): refused", err ? err : "?");
        snprintf (why, why_size, "lua/ports.lua failed (%.200s): refused", err ? err : "?");
    }
    free (err);
    ah_msg_destroy (&result);
    ah_msg_destroy (&mt);
    ah_msg_destroy (&ma);
    ah_msg_destroy (&mp);
    return allowed;
}

//  --------------------------------------------------------------------
//  The request to the sandbox

static bool s_header_dropped (const char *name)
{
    static const char *drop [] = {
        "host", "authorization", "proxy-authorization", "connection", "keep-alive", "te", "trailer",
        "upgrade", "transfer-encoding", "expect", "forwarded", "x-real-ip", "proxy-connection",
    };
    for (size_t i = 0; i < sizeof drop / sizeof drop [0]; i++)
        if (streq (name, drop [i]))
            return true;
    return strncmp (name, "x-forwarded-", 12) == 0;
}

//  The Cookie header without the console's session cookie; "" when nothing is left.
static void s_cookie_kept (const char *value, ah_buf_t *out)
{
    const char *p = value;
    bool first = true;
    while (*p) {
        while (*p == ' ' || *p == ';')
            p++;
        const char *end = strchr (p, ';');
        size_t n = end ? (size_t) (end - p) : strlen (p);
        if (n > 0 && !(n >= 18 && strncmp (p, "agenthold_session=", 18) == 0)) {
            ah_buf_appendf (out, "%s%.*s", first ? "" : "; ", (int) n, p);
            first = false;
        }
        p += n;
    }
}

static int s_send_head (proxy_t *x)
{
    req_t *r = x->r;
    ah_buf_t b = { 0 };
    ah_buf_appendf (&b, "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%s\r\n", r->head.method,
                    x->target, x->port, x->upgrade ? "Connection: Upgrade\r\nUpgrade: websocket" : "Connection: close");
    //  Where the client reached it: the app may build its absolute URLs.
    const char *host = ah_http_header (&r->head, "host");
    ah_buf_appendf (&b, "X-Forwarded-Proto: %s\r\nX-Forwarded-Prefix: %s\r\n",
                    r->api->config->tls_cert ? "https" : "http", x->prefix);
    if (host && ah_http_header_count (&r->head, "host") == 1)
        ah_buf_appendf (&b, "X-Forwarded-Host: %s\r\n", host);
    for (size_t i = 0; i < r->head.nheaders; i++) {
        const ah_http_header_t *h = &r->head.headers [i];
        if (s_header_dropped (h->name))
            continue;
        if (streq (h->name, "cookie")) {
            ah_buf_t kept = { 0 };
            s_cookie_kept (h->value, &kept);
            if (ah_buf_size (&kept))
                ah_buf_appendf (&b, "cookie: %.*s\r\n", (int) ah_buf_size (&kept), (const char *) ah_buf_head (&kept));
            ah_buf_free (&kept);
            continue;
        }
        ah_buf_appendf (&b, "%s: %s\r\n", h->name, h->value);
    }
    ah_buf_appendf (&b, "\r\n");
    int rc = api_chan_send (&x->chan, ah_buf_head (&b), ah_buf_size (&b));
    ah_buf_free (&b);
    return rc;
}

//  --------------------------------------------------------------------
//  The answer

static bool s_answer_dropped (const char *name, size_t n)
{
    static const char *drop [] = {
        "set-cookie", "set-cookie2", "clear-site-data", "strict-transport-security", "alt-svc",
        "connection", "keep-alive", "proxy-connection", "referrer-policy", "access-control-allow-credentials",
        "public-key-pins", "service-worker-allowed",
    };
    for (size_t i = 0; i < sizeof drop / sizeof drop [0]; i++)
        if (strlen (drop [i]) == n && strncasecmp (name, drop [i], n) == 0)
            return true;
    return false;
}

static void s_fail (proxy_t *x, int status, const char *fmt, ...) __attribute__ ((format (printf, 3, 4)));
static void s_fail (proxy_t *x, int status, const char *fmt, ...)
{
    req_t *r = x->r;
    if (!r || r->responded)
        return;
    char why [400];
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (why, sizeof why, fmt, ap);
    va_end (ap);
    api_record (r, false, why);
    x->recorded = true;
    api_respond_error (r, status, "%s", why);
}

//  The audit row of an answer that went through (once: at its end, or
//  when the client leaves first, as one that read its whole answer may).
static void s_record_passed (proxy_t *x)
{
    req_t *r = x->r;
    if (!r || x->recorded || !x->head_done)
        return;
    x->recorded = true;
    r->has_bytes = true;
    r->bytes = x->bytes;
    api_record (r, true, NULL);
}

//  The answer's head is whole in x->head (n bytes, blank line included):
//  checked, rewritten into conn->out. -1: refused (answered 502).
//  A token character of RFC 9110 (a header name is one or more of them:
//  no blank before its colon, no folded line).
static bool s_tchar (unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
        || (c && strchr ("!#$%&'*+-.^_`|~", c));
}

//  The status of the head at h (n bytes, its blank line included), each
//  of its header names checked; -1 answered 502.
static int s_head_status (proxy_t *x, const char *h, size_t n)
{
    const char *eol = memmem (h, n, "\r\n", 2);
    int status = 0;
    if (!eol || eol - h < 12 || strncmp (h, "HTTP/1.", 7) || (h [7] != '0' && h [7] != '1') || h [8] != ' '
    ||  sscanf (h + 9, "%3d", &status) != 1 || status < 100 || status > 599) {
        s_fail (x, 502, "the sandbox's server on port %d did not answer with HTTP/1.x", x->port);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char) h [i];
        if ((c < 0x20 && c != '\t' && c != '\r' && c != '\n') || c == 0x7f
        ||  (c == '\r' && (i + 1 >= n || h [i + 1] != '\n')) || (c == '\n' && (i == 0 || h [i - 1] != '\r'))) {
            s_fail (x, 502, "the answer head of port %d holds a control byte or a bare CR/LF", x->port);
            return -1;
        }
    }
    for (const char *line = eol + 2; line < h + n - 2; ) {
        const char *next = memmem (line, (size_t) (h + n - line), "\r\n", 2);
        const char *c = line;
        while (c < next && s_tchar ((unsigned char) *c))
            c++;
        if (c == line || c == next || *c != ':') {
            s_fail (x, 502, "the answer head of port %d holds a header line without a proper name "
                    "(a blank before the colon, a folded line)", x->port);
            return -1;
        }
        line = next + 2;
    }
    return status;
}

//  An open WebSocket through a port keeps its agent awake as a terminal
//  does: the API's count of them per agent, told to the sleeper
//  (PORT_SOCKETS), which adds it to the terminals idle.lua sees.
static void s_count (proxy_t *x, bool on)
{
    if (x->counted == on)
        return;
    x->counted = on;
    int n = 0;
    zhashx_t *counts = x->api->port_sockets;
    if (counts) {
        n = (int) (intptr_t) zhashx_lookup (counts, x->agent_id) + (on ? 1 : -1);
        if (n > 0)
            zhashx_update (counts, x->agent_id, (void *) (intptr_t) n);
        else
            zhashx_delete (counts, x->agent_id);
    }
    ah_msg_t *m = ah_msg_new ("PORT_SOCKETS");
    ah_msg_set_str (m, "agent_id", x->agent_id);
    ah_msg_set_int (m, "open", n > 0 ? n : 0);
    api_send (x->api, "sleeper", &m);
}

static int s_head_out (proxy_t *x, size_t n)
{
    req_t *r = x->r;
    const char *h = (const char *) ah_buf_head (&x->head);
    const char *eol = memmem (h, n, "\r\n", 2);
    int status = s_head_status (x, h, n);
    if (status < 0)
        return -1;
    ah_buf_t *out = &r->conn->out;
    r->responded = true;
    r->streaming = true;
    r->close_after = true;
    r->status = status;
    ah_buf_append (out, h, (size_t) (eol - h) + 2);
    const char *line = eol + 2, *end = h + n - 2;       //  at the blank line
    while (line < end) {
        const char *next = memmem (line, (size_t) (end - line), "\r\n", 2);
        size_t len = next ? (size_t) (next - line) : (size_t) (end - line);
        const char *colon = memchr (line, ':', len);
        if (!colon || colon == line) {
            s_fail (x, 502, "the answer head of port %d holds a header line without a name", x->port);
            return -1;
        }
        if (!s_answer_dropped (line, (size_t) (colon - line))) {
            ah_buf_append (out, line, len);
            ah_buf_append (out, "\r\n", 2);
        }
        line += len + 2;
    }
    if (status == 101) {
        //  The WebSocket: the client's bytes go to the sandbox from now on.
        ah_buf_appendf (out, "Connection: Upgrade\r\n\r\n");
        api_conn_pipe (r);
        s_count (x, true);
        return 0;
    }
    ah_buf_appendf (out, "Content-Security-Policy: " PROXY_CSP "\r\nReferrer-Policy: no-referrer\r\n"
                         "Connection: close\r\n\r\n");
    return 0;
}

static void s_ack (proxy_t *x)
{
    if (x->unacked && x->r && ah_buf_size (&x->r->conn->out) < PROXY_OUT_HIGH) {
        api_chan_ack (&x->chan, x->unacked);
        x->unacked = 0;
    }
}

static void s_data (void *owner, const uint8_t *data, size_t size)
{
    proxy_t *x = owner;
    req_t *r = x->r;
    if (!r) {
        api_chan_ack (&x->chan, size);
        return;
    }
    x->unacked += size;
    if (!x->head_done) {
        ah_buf_append (&x->head, data, size);
        const uint8_t *h = ah_buf_head (&x->head);
        size_t have = ah_buf_size (&x->head);
        const uint8_t *blank = memmem (h, have < PROXY_HEAD_MAX + 4 ? have : PROXY_HEAD_MAX + 4, "\r\n\r\n", 4);
        if (!blank) {
            if (have > PROXY_HEAD_MAX) {
                s_fail (x, 502, "the answer head of port %d is over %u bytes", x->port, PROXY_HEAD_MAX);
                api_chan_close (&x->chan);
            }
            s_ack (x);
            return;
        }
        size_t head = (size_t) (blank - h) + 4;
        //  An interim answer (1xx: 100 Continue, 103 Early Hints) is
        //  dropped: only the final head is rewritten, so only one is sent.
        int status = s_head_status (x, (const char *) h, head);
        if (status < 0) {
            api_chan_close (&x->chan);
            return;
        }
        if (status < 200 && !(status == 101 && x->upgrade)) {
            ah_buf_consume (&x->head, head);
            if (ah_buf_size (&x->head))
                s_data (x, (const uint8_t *) "", 0);    //  the rest: the next head
            else
                s_ack (x);
            return;
        }
        x->head_done = true;
        api_unpark (r);             //  its head came in time
        if (s_head_out (x, head)) {
            api_chan_close (&x->chan);
            return;
        }
        ah_buf_append (&r->conn->out, h + head, have - head);
        x->bytes += (int64_t) (have - head);
        ah_buf_free (&x->head);
    }
    else {
        ah_buf_append (&r->conn->out, data, size);
        x->bytes += (int64_t) size;
    }
    s_ack (x);
    api_want_write (r);
}

static void s_written (req_t *r, size_t n)
{
    (void) n;
    proxy_t *x = r->ext;
    if (x)
        s_ack (x);
}

static int s_produce (req_t *r)
{
    proxy_t *x = r->ext;
    if (!x)
        return 0;
    s_ack (x);
    if (x->eof || x->closed) {
        s_record_passed (x);
        api_chan_close (&x->chan);
        return 0;
    }
    return 1;
}

static void s_ended (proxy_t *x, const char *error)
{
    req_t *r = x->r;
    if (!r)
        return;
    if (!x->head_done)
        s_fail (x, 502, "the sandbox's server on port %d closed the connection before answering%s%s", x->port,
                error ? ": " : "", error ? error : "");
    else
        api_want_write (r);
}

static void s_eof (void *owner)
{
    proxy_t *x = owner;
    x->eof = true;
    s_ended (x, NULL);
}

static void s_closed (void *owner, const char *error)
{
    proxy_t *x = owner;
    x->closed = true;
    s_ended (x, error);
}

static void s_writable (void *owner)
{
    proxy_t *x = owner;
    if (x->r)
        api_body_resume (x->r);
}

static void s_head_late (req_t *r)
{
    proxy_t *x = r->ext;
    if (!x)
        return;
    s_fail (x, 504, "the sandbox's server on port %d did not answer within %g s (ports.answer_timeout)", x->port,
            x->api->config->ports_answer_timeout_s);
    api_chan_close (&x->chan);
}

static void s_opened (void *owner, ah_msg_t *reply)
{
    (void) reply;
    proxy_t *x = owner;
    x->open = true;
    if (x->r) {
        x->r->on_deadline = s_head_late;
        api_park (x->r, zclock_mono () + (int64_t) (x->api->config->ports_answer_timeout_s * 1000));
    }
    if (!x->r || s_send_head (x)) {
        s_fail (x, 502, "cannot send the request to port %d of the sandbox", x->port);
        api_chan_close (&x->chan);
        return;
    }
    if (ah_buf_size (&x->pending_body)) {
        api_chan_send (&x->chan, ah_buf_head (&x->pending_body), ah_buf_size (&x->pending_body));
        ah_buf_free (&x->pending_body);
    }
    api_continue (x->r);            //  a client that waits for 100-continue sends its body now
}

static void s_refused (void *owner, int status, const char *error, ah_msg_t *reply)
{
    (void) status, (void) reply;
    proxy_t *x = owner;
    s_fail (x, 502, "the sandbox's port %d: %.300s", x->port, error ? error : "refused");
}

static const chan_ops_t s_chan_ops = {
    .opened = s_opened, .refused = s_refused, .data = s_data, .eof = s_eof, .closed = s_closed,
    .writable = s_writable,
};

//  --------------------------------------------------------------------
//  The client's side

static size_t s_body (req_t *r, const uint8_t *data, size_t size)
{
    proxy_t *x = r->ext;
    if (!x)
        return size;
    if (!x->open) {
        //  Before the channel opens (a wake): held, up to what the yamux
        //  window would hold anyway; the rest waits for the open.
        size_t room = ah_buf_size (&x->pending_body) < API_CHAN_CREDIT
                    ? API_CHAN_CREDIT - ah_buf_size (&x->pending_body) : 0;
        size_t n = size < room ? size : room;
        ah_buf_append (&x->pending_body, data, n);
        return n;
    }
    ssize_t n = api_chan_write (&x->chan, data, size);
    return n > 0 ? (size_t) n : 0;
}

static void s_free (req_t *r)
{
    proxy_t *x = r->ext;
    if (!x)
        return;
    s_record_passed (x);
    s_count (x, false);
    ah_api_events_wake_cancel (x->api->events, x);
    api_chan_close (&x->chan);
    ah_buf_free (&x->head);
    ah_buf_free (&x->pending_body);
    free (x->target);
    free (x);
    r->ext = NULL;
}

static const ext_ops_t s_ext_ops = { .free = s_free, .body = s_body, .produce = s_produce,
                                     .written = s_written };

static void s_open (proxy_t *x)
{
    ah_msg_t *h = ah_msg_new ("CHAN_HEADER");
    ah_msg_set_str (h, "ch", "port");
    ah_msg_set_int (h, "port", x->port);
    if (api_chan_open (x->api, &x->chan, x->agent_id, &h, &s_chan_ops, x))
        s_fail (x, 503, "cannot reach the tunnel of agent %s now", x->agent_id);
}

static void s_woken (void *ctx, int status, const char *error)
{
    proxy_t *x = ctx;
    x->waking = false;
    if (status)
        s_fail (x, status == 409 ? 409 : status == 504 ? 504 : 503, "the agent could not be woken: %s",
                error ? error : "?");
    else
        s_open (x);
}

//  The target for the sandbox: what follows /p/{agent}/{port}/{cap} in
//  the request as sent (its query included), "/" when nothing does.
static char *s_target (const char *sent)
{
    const char *p = sent;
    for (int seg = 0; seg < 4 && p; seg++)
        p = strchr (p + 1, '/');
    if (!p) {
        const char *q = strchr (sent, '?');
        return ah_strf ("/%s", q ? q : "");
    }
    return strdup (p);
}

static void s_proxy (req_t *r)
{
    api_t *api = r->api;
    const char *agent_id = r->params [0], *port_s = r->params [1], *cap = r->params [2];
    char *end = NULL;
    long port = strtol (port_s, &end, 10);
    if (ah_ident_check (AH_IDENT_AGENT_ID, agent_id) || *end || port < 1 || port > 65535 || port_s [0] == '0') {
        api_respond_error (r, 404, "no such port link");
        return;
    }
    //  A link to the bare prefix becomes the prefix with its '/' (relative
    //  URLs in the page then keep the capability).
    const char *q = strchr (r->head.target, '?');
    size_t plen = q ? (size_t) (q - r->head.target) : strlen (r->head.target);
    const char *p = r->head.target;
    int slashes = 0;
    for (size_t i = 0; i < plen; i++)
        slashes += p [i] == '/';
    sqlite3_stmt *st = ah_store_prepare (api->store, "SELECT tenant, name FROM agents WHERE id = :id");
    char tenant [64] = "", name [AH_NAME_MAX + 1] = "";
    if (st && !ah_store_bind_text (st, ":id", agent_id) && ah_store_step (api->store, st) == SQLITE_ROW) {
        snprintf (tenant, sizeof tenant, "%s", (const char *) sqlite3_column_text (st, 0));
        snprintf (name, sizeof name, "%s", (const char *) sqlite3_column_text (st, 1));
    }
    if (st)
        sqlite3_reset (st);
    //  "t" instead of a capability: the tenant's bearer token (an API
    //  client's form; a browser's cookie does not count here).
    if (tenant [0] && streq (cap, "t")) {
        if (!ah_http_header (&r->head, "authorization")) {
            api_respond_error (r, 401, "a port reached with /t/ needs Authorization: Bearer <token>");
            return;
        }
        if (api_auth (r))
            return;                 //  answered
        if (!r->who.admin && !streq (r->who.tenant, tenant)) {
            api_respond_error (r, 404, "no agent '%s'", agent_id);
            return;
        }
    }
    else
    if (tenant [0] && streq (cap, "public")) {
        char why [300];
        if (!s_public_ok (api, tenant, agent_id, name, (int) port, why, sizeof why)) {
            ah_debug (AREA, "public port %ld of agent %s refused: %s", port, agent_id, why);
            api_respond_error (r, 403, "this port link is not valid, or has expired: ask for a new one "
                               "(POST /api/v1/agents/{agent}/ports/{port}/link)");
            return;
        }
    }
    else
    if (!tenant [0] || !s_capability_ok (api, tenant, agent_id, (int) port, cap)) {
        api_respond_error (r, 403, "this port link is not valid, or has expired: ask for a new one "
                           "(POST /api/v1/agents/{agent}/ports/{port}/link)");
        return;
    }
    if (slashes == 4) {
        char *loc = ah_strf ("%.*s/%s", (int) plen, p, q ? q : "");
        if (loc)
            api_respond_redirect (r, 308, loc);
        else
            api_respond_error (r, 503, "out of memory");
        free (loc);
        return;
    }
    bool upgrade = ah_http_header_has (&r->head, "upgrade", "websocket");
    if (upgrade && (r->method != M_GET || !ah_http_header_has (&r->head, "connection", "upgrade"))) {
        api_respond_error (r, 400, "a WebSocket upgrade is a GET with Connection: Upgrade");
        return;
    }
    proxy_t *x = calloc (1, sizeof *x);
    if (!x || !(x->target = s_target (r->head.target))) {
        free (x);
        api_respond_error (r, 503, "out of memory");
        return;
    }
    x->r = r;
    x->api = api;
    x->upgrade = upgrade;
    x->port = (int) port;
    snprintf (x->prefix, sizeof x->prefix, "/p/%s/%ld/%.64s", agent_id, port, cap);
    snprintf (x->agent_id, sizeof x->agent_id, "%s", agent_id);
    snprintf (r->agent_id, sizeof r->agent_id, "%s", agent_id);
    snprintf (r->name, sizeof r->name, "%s", name);
    if (!r->who.ok) {
        snprintf (r->who.token_name, sizeof r->who.token_name, "port-link");
        snprintf (r->who.tenant, sizeof r->who.tenant, "%s", tenant);
    }
    r->kind = "port.request";
    const char *path_end = strchr (x->target, '?');
    snprintf (r->detail, sizeof r->detail, "%s :%ld %.*s", r->head.method, port,
              (int) (path_end ? (size_t) (path_end - x->target) : strlen (x->target)), x->target);
    r->ext = x;
    r->ext_ops = &s_ext_ops;
    ah_api_events_activity (api->events, agent_id, "port");
    char why [300];
    int rc = ah_api_events_wake (api->events, agent_id, x, s_woken, AH_API_WAKE_TIMEOUT_S, why, sizeof why);
    if (rc == 0)
        s_open (x);
    else if (rc == 1)
        x->waking = true;
    else {
        api_record (r, false, why);
        api_respond_error (r, rc, "%s", why);
    }
}

const route_t api_proxy_routes [] = {
    { M_GET | M_HEAD | M_POST | M_PUT | M_PATCH | M_DELETE | M_OPTIONS, "/p/{agent}/{port}/{cap}/{rest*}",
      s_proxy, R_PUBLIC | R_STREAM | R_RAW | R_PIPE, "", NULL },
    { M_GET | M_HEAD | M_POST | M_PUT | M_PATCH | M_DELETE | M_OPTIONS, "/p/{agent}/{port}/{cap}",
      s_proxy, R_PUBLIC | R_STREAM | R_RAW | R_PIPE, "", NULL },
    { 0 }
};
