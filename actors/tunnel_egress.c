/*  actors/tunnel_egress.c: the server's side of the egress channel
    (docs/egress.md, docs/tunnel.md "egress"): a stream sandboxd opened
    for a connection of its proxy. The request is checked again here
    (sandboxd is hostile like anything else), decided, and every
    attempt goes to the audit trail (OP_RECORD kind "egress").

    Each request is decided by lua/egress.lua (docs/policy.md) on the
    agent's tenant and runtime, the runtime's catalog `egress` list and
    the tenant's lists. A refusal says the rule's
    sentence (EACCES, which the agent's client reads as the proxy's
    403); so does a sandbox at its cap of connections out (EAGAIN, 503).
    An allowed one goes to tunnel_egress_relay.c: resolved, each address
    checked (proto/egress.c), connected in a worker, then carried. The
    catalog is read once, at the actor's start.

    The cache. A tenant's lists and its secrets' rows (values sealed)
    are read from SQLite once, at the first request of its agents, and
    kept in self->egress_tenants, so that a request reads neither table
    on this thread (issue 25). Only the API writes them (PATCH of the
    tenant's lists, a secret set or removed, the tenant removed), and
    its writer's done sends EGRESS_CHANGED {tenant} here before it
    answers the admin: the tenant's entry is dropped and read again at
    its next request, so a change applies to the next connection, as
    when every request read them. Anything else that wrote those tables
    while the server runs would not be seen until that tenant's next
    EGRESS_CHANGED or the server's restart.

    A miss is not read here either. The request is parked (parked_t,
    on its tenant's fill_t in self->egress_fills: the stream stays
    open, what sandboxd sends meanwhile is kept unconsumed, so yamux's
    window bounds it) and a fill job reads the tenant's rows in one of
    the actor's workers, on a read-only SQLite connection of its own
    (fill_job_t owns it while it runs; the actor keeps one between
    fills). One fill per tenant at a time: later misses of the tenant
    park behind the first. When the job is back, the rows go into the
    cache and the parked requests are decided in the order they came;
    an EGRESS_CHANGED that came while the fill ran marks it stale, and
    its rows are dropped and read again before anyone is decided on
    them. At most AH_TUN_EGRESS_PARKED_TENANT requests wait for one
    tenant and AH_TUN_EGRESS_PARKED in all; the one beyond is refused
    (EAGAIN, 503) saying so. A stream that ends while parked is freed
    and recorded ("ended before it was decided").                     */
#include "actors/tunnel_int.h"
#include "catalog/catalog.h"
#include "common/log.h"
#include "common/str.h"
#include "policy/policy.h"
#include "proto/channel.h"
#include "proto/egress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ah_tun_egress_answer (conn_t *conn, chan_t *chan, const char *code, const char *error,
                          const char *address)
{
    ah_msg_t *reply = ah_msg_new ("");
    ah_msg_set_bool (reply, "ok", error == NULL);
    if (error) {
        ah_msg_set_str (reply, "code", code);
        ah_msg_set_str (reply, "error", error);
    }
    else
        ah_msg_set_str (reply, "address", address ? address : "");
    uint8_t *hdr = NULL;
    size_t size = 0;
    int rc = -1;
    if (ah_chan_header_encode (reply, &hdr, &size) == 0
    &&  ah_yamux_write (conn->yamux, chan->stream, hdr, size) == (ssize_t) size) {
        rc = 0;
        if (error)
            ah_yamux_close (conn->yamux, chan->stream);
    }
    free (hdr);
    ah_msg_destroy (&reply);
    return rc;
}

void ah_tun_egress_record (self_t *self, const char *agent_id, const char *kind, const char *detail,
                           bool ok, const char *error, int64_t bytes)
{
    ah_msg_t *m = ah_msg_new ("OP_RECORD");
    ah_msg_set_str (m, "agent_id", agent_id);
    ah_msg_set_str (m, "actor", "sandbox");
    ah_msg_set_str (m, "kind", kind);
    ah_msg_set_str (m, "detail", detail);
    ah_msg_set_bool (m, "ok", ok);
    if (error)
        ah_msg_set_str (m, "error", error);
    if (bytes >= 0)
        ah_msg_set_int (m, "bytes", bytes);
    ah_actor_send (self->actor, "recorder", &m);
}

ah_tun_egress_counts_t *ah_tun_egress_counts (self_t *self, const char *tenant)
{
    if (!self->egress_counts || !tenant || !*tenant)
        return NULL;
    ah_tun_egress_counts_t *c = (ah_tun_egress_counts_t *) zhashx_lookup (self->egress_counts, tenant);
    if (!c && (c = (ah_tun_egress_counts_t *) calloc (1, sizeof *c))
    &&  zhashx_insert (self->egress_counts, tenant, c)) {
        free (c);
        c = NULL;
    }
    return c;
}

static void s_tenant_free (void **item);
static void s_fills_destroy (self_t *self);

static void s_counts_free (void **item)
{
    free (*item);
    *item = NULL;
}

void ah_tun_egress_init (self_t *self, const ah_config_t *config)
{
    if ((self->egress_counts = zhashx_new ()))
        zhashx_set_destructor (self->egress_counts, s_counts_free);
    if ((self->egress_tenants = zhashx_new ()))
        zhashx_set_destructor (self->egress_tenants, s_tenant_free);
    self->egress_fills = zhashx_new ();
    char *err = NULL;
    if (config && config->catalog_path && !(self->catalog = ah_catalog_load (config->catalog_path, &err))) {
        self->egress_broken = ah_strf ("the catalog could not be read: %s", err ? err : "?");
        free (err);
        err = NULL;
    }
    if (!(self->egress_rule = ah_policy_new (config ? config->lua_dir : NULL, "egress.lua", AREA,
                                             self->store, &err)) && !self->egress_broken)
        self->egress_broken = ah_strf ("lua/egress.lua could not be loaded: %s", err ? err : "?");
    free (err);
    if (self->egress_broken)
        ah_warn (AREA, "egress: %s; every egress request is refused", self->egress_broken);
    ah_tun_egress_tls_init (self, config);
    self->egress_max = config ? (int) config->egress_max_connections : 256;
    self->egress_connect_ms = config ? (int) (config->egress_connect_timeout_s * 1000) : 10000;
}

void ah_tun_egress_destroy (self_t *self)
{
    ah_policy_destroy (&self->egress_rule);
    ah_catalog_destroy (&self->catalog);
    free (self->egress_broken);
    self->egress_broken = NULL;
    zhashx_destroy (&self->egress_counts);
    zhashx_destroy (&self->egress_tenants);
    s_fills_destroy (self);
    ah_store_close (&self->egress_fill_store);
    ah_tun_egress_tls_destroy (self);
}

#define S_LIST_MAX  256             //  a tenant's list as the API keeps it

static void s_strv_free (char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free (v [i]);
    free (v);
}

static void s_tenant_free (void **item)
{
    ah_tun_tenant_t *t = (ah_tun_tenant_t *) *item;
    if (t) {
        s_strv_free (t->allow, t->n_allow);
        s_strv_free (t->deny, t->n_deny);
        for (size_t i = 0; i < t->n_secrets; i++) {
            free (t->secrets [i].host);
            free (t->secrets [i].header);
            free (t->secrets [i].sealed);
        }
        free (t->secrets);
        free (t);
    }
    *item = NULL;
}

//  The tenant's allow or deny list (at most S_LIST_MAX entries, in
//  order) into *out. 0, or -1 (read or memory failed).
static int s_read_list (ah_store_t *store, const char *tenant, const char *list, char ***out, size_t *n)
{
    *out = (char **) calloc (S_LIST_MAX, sizeof **out);
    *n = 0;
    sqlite3_stmt *st = *out ? ah_store_prepare (store, "SELECT entry FROM tenant_egress"
                                                " WHERE tenant = :tenant AND list = :list ORDER BY pos") : NULL;
    int rc = st && !ah_store_bind_text (st, ":tenant", tenant) && !ah_store_bind_text (st, ":list", list)
           ? SQLITE_ROW : SQLITE_ERROR;
    while (rc == SQLITE_ROW && *n < S_LIST_MAX && (rc = ah_store_step (store, st)) == SQLITE_ROW) {
        const char *e = (const char *) sqlite3_column_text (st, 0);
        if (!e || !((*out) [*n] = strdup (e)))
            rc = SQLITE_ERROR;
        else
            (*n)++;
    }
    if (st)
        sqlite3_reset (st);
    return rc == SQLITE_DONE || (rc == SQLITE_ROW && *n == S_LIST_MAX) ? 0 : -1;
}

//  The tenant's secrets' rows into t. 0 / -1.
static int s_read_secrets (ah_store_t *store, const char *tenant, ah_tun_tenant_t *t)
{
    sqlite3_stmt *st = ah_store_prepare (store, "SELECT host, port, header, value FROM egress_secrets"
                                         " WHERE tenant = :tenant ORDER BY host, port");
    int rc = st && !ah_store_bind_text (st, ":tenant", tenant) ? SQLITE_ROW : SQLITE_ERROR;
    size_t cap = 0;
    while (rc == SQLITE_ROW && (rc = ah_store_step (store, st)) == SQLITE_ROW) {
        if (t->n_secrets == cap) {
            size_t more = cap ? 2 * cap : 4;
            ah_tun_secret_t *s = (ah_tun_secret_t *) realloc (t->secrets, more * sizeof *s);
            if (!s) {
                rc = SQLITE_ERROR;
                break;
            }
            t->secrets = s;
            cap = more;
        }
        ah_tun_secret_t *s = &t->secrets [t->n_secrets];
        memset (s, 0, sizeof *s);
        const char *host = (const char *) sqlite3_column_text (st, 0);
        const char *header = (const char *) sqlite3_column_text (st, 2);
        const void *sealed = sqlite3_column_blob (st, 3);
        int sealed_n = sqlite3_column_bytes (st, 3);
        s->port = sqlite3_column_int (st, 1);
        s->host = host ? strdup (host) : NULL;
        s->header = header ? strdup (header) : NULL;
        s->sealed = sealed && sealed_n > 0 ? (uint8_t *) malloc ((size_t) sealed_n) : NULL;
        t->n_secrets++;                 //  freed with t whatever came of it
        if (!s->host || !s->header || !s->sealed) {
            rc = SQLITE_ERROR;          //  a row without its value is not used: read as a failure
            break;
        }
        memcpy (s->sealed, sealed, (size_t) sealed_n);
        s->sealed_n = (size_t) sealed_n;
    }
    if (st)
        sqlite3_reset (st);
    return rc == SQLITE_DONE ? 0 : -1;
}

//  ---------------------------------------------------------------------
//  A fill, in a worker (see "The cache" above): the job owns its copies
//  and its SQLite connection; of the actor it reads nothing.

typedef struct {
    char tenant [128];
    char *db_path;                  //  to open a connection when it was given none
    ah_store_t *store;              //  the actor's kept connection, or one of its own
    bool keep;                      //  the connection goes back to the actor (else closed here)
    ah_tunnel_fill_hook_fn *hook;   //  tests only (ah_tunnel_args_t)
    void *hook_arg;
    ah_tun_tenant_t *t;             //  the outcome; NULL: could not be read
} fill_job_t;

static void s_fill_job_free (fill_job_t *job)
{
    void *t = job->t;
    s_tenant_free (&t);
    ah_store_close (&job->store);
    free (job->db_path);
    free (job);
}

static void s_fill_work (void *arg)
{
    fill_job_t *job = (fill_job_t *) arg;
    char *err = NULL;
    if (!job->store && (job->store = ah_store_open (job->db_path, false, &err))
    &&  ah_store_exec (job->store, "PRAGMA query_only = ON", &err))
        ah_store_close (&job->store);       //  a connection that could write is not used
    if (!job->store)
        ah_warn (AREA, "egress: tenant '%s''s lists: the database cannot be opened: %s", job->tenant,
                 err ? err : "?");
    free (err);
    ah_tun_tenant_t *t = job->store ? (ah_tun_tenant_t *) calloc (1, sizeof *t) : NULL;
    if (t && (s_read_list (job->store, job->tenant, "allow", &t->allow, &t->n_allow)
          ||  s_read_list (job->store, job->tenant, "deny", &t->deny, &t->n_deny)
          ||  s_read_secrets (job->store, job->tenant, t))) {
        void *p = t;
        s_tenant_free (&p);
        t = NULL;
    }
    job->t = t;
    if (job->hook)
        job->hook (job->tenant, job->hook_arg);
    if (!job->keep)
        ah_store_close (&job->store);
}
const ah_tun_secret_t *ah_tun_tenant_secret (const ah_tun_tenant_t *t, const char *host, int port)
{
    for (size_t i = 0; t && i < t->n_secrets; i++)
        if (t->secrets [i].port == port && streq (t->secrets [i].host, host))
            return &t->secrets [i];
    return NULL;
}

//  The lists a request was decided on (borrowed from the cache: valid
//  within the handler that decided).
typedef struct {
    const char *tenant;             //  the agent's (its secrets)
    bool connect;
    const ah_runtime_t *rt;         //  NULL: an image outside the catalog
    const ah_tun_tenant_t *t;       //  the tenant's lists and secrets
} lists_t;

typedef struct {
    char tenant [128], name [128], runtime [128];
} agent_row_t;

//  A request as it came, checked (ah_tun_egress), with its agent's row.
typedef struct {
    char host [AH_EGRESS_HOST_MAX + 1];     //  normalised (proto/egress.h)
    bool literal;
    int port;
    char kind [8];                          //  "connect" or "http"
    char detail [AH_EGRESS_HOST_MAX + 40];  //  "host:port (kind)", for the audit
    bool known;                             //  the agent has a row
    agent_row_t row;
} request_t;

//  A request parked until its tenant's lists are read (see "The cache"):
//  on its fill's list, in order; its channel points at it (chan->parked).
struct ah_tun_parked_t {
    ah_tun_parked_t *next;
    struct fill_t *fill;
    int64_t chan_id;
    char agent_id [AGENT_ID_MAX];
    request_t req;
    ah_buf_t early;                 //  the stream's bytes after the request (not consumed)
    bool eof;                       //  sandboxd's FIN came meanwhile
};

//  A tenant's fill in flight (self->egress_fills), on the actor's thread.
typedef struct fill_t {
    char tenant [128];
    bool stale;                     //  EGRESS_CHANGED meanwhile: its rows are read again
    ah_tun_parked_t *head, *tail;   //  the requests waiting for it, in order
    size_t n;
} fill_t;

//  The agent's row; false when there is none.
static bool s_agent (self_t *self, const char *agent_id, agent_row_t *row)
{
    memset (row, 0, sizeof *row);
    sqlite3_stmt *st = ah_store_prepare (self->store, "SELECT tenant, name, runtime FROM agents WHERE id = :id");
    bool found = st && !ah_store_bind_text (st, ":id", agent_id) && ah_store_step (self->store, st) == SQLITE_ROW;
    if (found) {
        const char *t = (const char *) sqlite3_column_text (st, 0), *a = (const char *) sqlite3_column_text (st, 1);
        const char *r = (const char *) sqlite3_column_text (st, 2);
        snprintf (row->tenant, sizeof row->tenant, "%s", t ? t : "default");
        snprintf (row->name, sizeof row->name, "%s", a ? a : "");
        snprintf (row->runtime, sizeof row->runtime, "%s", r ? r : "");
    }
    if (st)
        sqlite3_reset (st);
    return found;
}

//  lua/egress.lua's verdict for agent_id asking for r on t (the tenant's
//  rows; NULL: they could not be read, refused); its sentence (or why it
//  could not be asked) into why; the lists it read into l.
static bool s_decide (self_t *self, const char *agent_id, const request_t *r, const ah_tun_tenant_t *t,
                      char *why, size_t why_size, lists_t *l)
{
    const agent_row_t *row = r->known ? &r->row : NULL;
    const char *host = r->host, *kind = r->kind;
    bool literal = r->literal;
    int port = r->port;
    if (self->egress_broken || !self->egress_rule) {
        snprintf (why, why_size, "egress refused: %s", self->egress_broken ? self->egress_broken : "no rule");
        return false;
    }
    if (!row) {
        snprintf (why, why_size, "egress refused: agent '%s' is not known", agent_id);
        return false;
    }
    const char *tenant = row->tenant, *name = row->name, *runtime = row->runtime;
    const ah_runtime_t *rt = *runtime && self->catalog ? ah_catalog_find (self->catalog, runtime) : NULL;
    l->rt = rt;
    l->t = t;
    if (!t) {
        snprintf (why, why_size, "egress refused: tenant '%.100s''s egress lists cannot be read", tenant);
        return false;
    }
    const char *rt_entry = rt ? ah_egress_first ((const char *const *) rt->egress, rt->egress_count, host, port) : NULL;
    const char *allow_entry = ah_egress_first ((const char *const *) t->allow, t->n_allow, host, port);
    const char *deny_entry = ah_egress_first ((const char *const *) t->deny, t->n_deny, host, port);

    ah_msg_t *mt = ah_msg_new ("TENANT"), *ma = ah_msg_new ("AGENT"), *mr = ah_msg_new ("RUNTIME");
    ah_msg_t *mg = ah_msg_new ("TARGET");
    ah_msg_set_str (mt, "name", tenant);
    ah_msg_set_str (ma, "id", agent_id);
    ah_msg_set_str (ma, "name", name);
    ah_msg_set_str (mr, "name", *runtime ? runtime : "(an image outside the catalog)");
    ah_msg_set_bool (mr, "needs_network", rt && rt->needs_network);
    ah_msg_set_str (mg, "host", host);
    ah_msg_set_int (mg, "port", port);
    ah_msg_set_bool (mg, "literal", literal);
    ah_msg_set_str (mg, "kind", kind);
    ah_msg_set_str (mg, "runtime_entry", rt_entry ? rt_entry : "");
    ah_msg_set_str (mg, "allow_entry", allow_entry ? allow_entry : "");
    ah_msg_set_str (mg, "deny_entry", deny_entry ? deny_entry : "");
    const ah_msg_t *args [4] = { mt, ma, mr, mg };
    ah_msg_t *result = NULL;
    char *err = NULL;
    bool allowed = false;
    if (ah_policy_callv (self->egress_rule, "decide", args, 4, &result, &err) == 0) {
        allowed = ah_msg_bool (result, "allow", false);
        const char *w = ah_msg_str (result, "why");
        snprintf (why, why_size, "%s", w && *w ? w : allowed ? "allowed by lua/egress.lua"
                                                               : "egress refused by lua/egress.lua");
    }
    else {
        //  A script that fails refuses: nothing goes out (docs/egress.md).
        ah_warn (AREA, "egress.lua did not decide (%s): refused", err ? err : "?");
        snprintf (why, why_size, "egress refused: lua/egress.lua failed (%.200s)", err ? err : "?");
    }
    free (err);
    ah_msg_destroy (&result);
    ah_msg_destroy (&mt);
    ah_msg_destroy (&ma);
    ah_msg_destroy (&mr);
    ah_msg_destroy (&mg);
    return allowed;
}

//  An allowed request: within the sandbox's cap, handed to the relay
//  (answered once it connected or failed); else refused here. true when
//  the relay has it.
static bool s_start (self_t *self, chan_t *chan, const char *host, int port, bool literal,
                     const char *detail, const char *why_rule, lists_t *l,
                     const uint8_t *early, size_t early_size, char *error, size_t error_size,
                     const char **code, ah_tun_egress_counts_t *counts)
{
    conn_t *conn = chan->conn;
    if (conn->egress_open >= self->egress_max) {
        *code = "EAGAIN";
        snprintf (error, error_size, "egress refused: this sandbox has %d connections out already, the "
                  "most it may have at once (sandbox.egress_max_connections)", conn->egress_open);
        return false;
    }
    //  The admin's entries that may name an address: the runtime's
    //  catalog list and the tenant's allow list open one, the tenant's
    //  deny list refuses one (ah_egress_addr_names keeps to those that
    //  name an address or a range).
    const char *open [2 * S_LIST_MAX];
    size_t n_open = 0;
    for (size_t i = 0; l->rt && i < l->rt->egress_count && n_open < S_LIST_MAX; i++)
        open [n_open++] = l->rt->egress [i];
    for (size_t i = 0; i < l->t->n_allow; i++)
        open [n_open++] = l->t->allow [i];
    ah_tun_egress_req_t req = {
        .host = host, .port = port, .literal = literal, .detail = detail, .why = why_rule,
        .open = open, .n_open = n_open, .deny = (const char *const *) l->t->deny, .n_deny = l->t->n_deny,
        .counts = counts, .tenant = l->tenant,
        .secret = l->connect ? ah_tun_tenant_secret (l->t, host, port) : NULL,
    };
    *code = "EIO";
    return ah_tun_egress_start (self, chan, &req, early, early_size, error, error_size) == 0;
}

//  A request refused (or failed) before anything started: answered,
//  recorded, counted and the channel forgotten. early_size: the bytes
//  after the request nobody will read (given back to the window).
static void s_refuse (self_t *self, chan_t *chan, const char *detail, const char *code, const char *error,
                      size_t early_size, ah_tun_egress_counts_t *counts)
{
    conn_t *conn = chan->conn;
    ah_debug (AREA, "agent '%s': egress %s: %s", conn->agent_id, detail, error);
    if (early_size)
        ah_yamux_consumed (conn->yamux, chan->stream, early_size);
    if (ah_tun_egress_answer (conn, chan, code, error, NULL))
        ah_yamux_reset (conn->yamux, chan->stream);
    ah_tun_egress_record (self, conn->agent_id, "egress", detail, false, error, -1);
    if (counts && streq (code, "EIO"))
        counts->failed++;           //  let through, but the relay could not take it
    else if (counts)
        counts->denied++;
    ah_tun_chan_free (self, chan);
}

//  r decided on t (the tenant's cached rows; NULL: they could not be
//  read), then handed to the relay or refused. eof: sandboxd's FIN came
//  already (while it was parked).
static void s_go (self_t *self, chan_t *chan, const request_t *r, const ah_tun_tenant_t *t,
                  const uint8_t *early, size_t early_size, bool eof)
{
    conn_t *conn = chan->conn;
    ah_tun_egress_counts_t *counts = r->known ? ah_tun_egress_counts (self, r->row.tenant) : NULL;
    char why_rule [300], error [900];
    const char *code = "EACCES";
    lists_t lists = { .tenant = r->row.tenant, .connect = streq (r->kind, "connect") };
    bool allow = s_decide (self, conn->agent_id, r, t, why_rule, sizeof why_rule, &lists);
    if (!allow)
        snprintf (error, sizeof error, "%s", why_rule);
    else
    if (s_start (self, chan, r->host, r->port, r->literal, r->detail, why_rule, &lists, early, early_size,
                 error, sizeof error, &code, counts)) {
        ah_debug (AREA, "agent '%s': egress %s: %s; connecting", conn->agent_id, r->detail, why_rule);
        if (eof)
            ah_tun_egress_eof (self, chan);
        return;                     //  the relay answers, records and ends it
    }
    s_refuse (self, chan, r->detail, code, error, early_size, counts);
}

//  ---------------------------------------------------------------------
//  Fills, on the actor's thread

static void s_fill_done (void *self_, void *arg, bool ran);

//  A job for fill's tenant to a worker. 0, or -1 (none started).
static int s_fill_launch (self_t *self, fill_t *fill)
{
    fill_job_t *job = (fill_job_t *) calloc (1, sizeof *job);
    if (!job || !self->db_path || !(job->db_path = strdup (self->db_path))) {
        free (job);
        return -1;
    }
    snprintf (job->tenant, sizeof job->tenant, "%s", fill->tenant);
    job->hook = self->egress_fill_hook;
    job->hook_arg = self->egress_fill_hook_arg;
    //  The kept connection (or, the first time, the one the job opens
    //  and hands back); a fill beside it opens and closes its own.
    if (self->egress_fill_store || !self->egress_fill_store_out) {
        job->store = self->egress_fill_store;
        self->egress_fill_store = NULL;
        job->keep = self->egress_fill_store_out = true;
    }
    if (ah_actor_job (self->actor, s_fill_work, s_fill_done, job)) {
        if (job->keep) {
            self->egress_fill_store = job->store;
            job->store = NULL;
            self->egress_fill_store_out = false;
        }
        s_fill_job_free (job);
        return -1;
    }
    return 0;
}

//  The fill's requests decided on t, in the order they came (t NULL:
//  refused, the rows could not be read); the fill emptied.
static void s_resume (self_t *self, fill_t *fill, const ah_tun_tenant_t *t)
{
    ah_tun_parked_t *p;
    while ((p = fill->head)) {
        //  Off the list before it is decided: deciding one may end the
        //  connection, and with it others of the list (ah_tun_egress_unpark).
        fill->head = p->next;
        if (!fill->head)
            fill->tail = NULL;
        fill->n--;
        self->egress_parked--;
        chan_t *chan = ah_tun_chan_find (self, p->chan_id);
        if (chan && chan->parked == p) {
            chan->parked = NULL;
            s_go (self, chan, &p->req, t, ah_buf_head (&p->early), ah_buf_size (&p->early), p->eof);
        }
        ah_buf_free (&p->early);
        free (p);
    }
}

static void s_fill_done (void *self_, void *arg, bool ran)
{
    self_t *self = (self_t *) self_;
    fill_job_t *job = (fill_job_t *) arg;
    if (self && job->keep) {
        self->egress_fill_store = job->store;
        job->store = NULL;
        self->egress_fill_store_out = false;
    }
    fill_t *fill = self && self->egress_fills ? (fill_t *) zhashx_lookup (self->egress_fills, job->tenant) : NULL;
    if (!fill || !ran || atomic_load (&self->egress_stop)) {
        s_fill_job_free (job);      //  the actor ends: its parked requests go with their channels
        return;
    }
    ah_tun_tenant_t *t = job->t;
    job->t = NULL;
    s_fill_job_free (job);
    if (fill->stale) {
        //  EGRESS_CHANGED came while it read: what it read may be the
        //  rows before the change. Read again; nobody is decided on these.
        void *old = t;
        s_tenant_free (&old);
        fill->stale = false;
        if (s_fill_launch (self, fill) == 0)
            return;
        t = NULL;
    }
    if (t && zhashx_insert (self->egress_tenants, fill->tenant, t)) {
        void *p = t;
        s_tenant_free (&p);
        t = NULL;
    }
    if (!t)
        ah_warn (AREA, "egress: tenant '%s''s lists and secrets cannot be read", fill->tenant);
    zhashx_delete (self->egress_fills, fill->tenant);
    s_resume (self, fill, t);       //  t is the cache's: nothing in a turn drops it
    free (fill);
}

//  r waits for its tenant's lists: parked on the tenant's fill, one
//  started when there is none. 0, or -1 with *code and error (refused).
static int s_park (self_t *self, chan_t *chan, const request_t *r, const uint8_t *early, size_t early_size,
                   char *error, size_t error_size, const char **code)
{
    const char *tenant = r->row.tenant;
    fill_t *fill = self->egress_fills ? (fill_t *) zhashx_lookup (self->egress_fills, tenant) : NULL;
    if (self->egress_parked >= AH_TUN_EGRESS_PARKED || (fill && fill->n >= AH_TUN_EGRESS_PARKED_TENANT)) {
        *code = "EAGAIN";
        if (fill && fill->n >= AH_TUN_EGRESS_PARKED_TENANT)
            snprintf (error, error_size, "egress refused: %zu requests of tenant '%.100s' wait already for its "
                      "egress lists to be read, the most that may wait (try again)", fill->n, tenant);
        else
            snprintf (error, error_size, "egress refused: %zu requests wait already for their tenants' "
                      "egress lists to be read, the most that may wait (try again)", self->egress_parked);
        return -1;
    }
    *code = "EIO";
    ah_tun_parked_t *p = (ah_tun_parked_t *) calloc (1, sizeof *p);
    if (!p || (early_size && ah_buf_append (&p->early, early, early_size))) {
        snprintf (error, error_size, "egress failed: out of memory");
        goto fail;
    }
    if (!fill) {
        fill = (fill_t *) calloc (1, sizeof *fill);
        if (fill)
            snprintf (fill->tenant, sizeof fill->tenant, "%s", tenant);
        if (!fill || !self->egress_fills || zhashx_insert (self->egress_fills, tenant, fill)) {
            free (fill);
            snprintf (error, error_size, "egress failed: out of memory");
            goto fail;
        }
        if (s_fill_launch (self, fill)) {
            zhashx_delete (self->egress_fills, tenant);
            free (fill);
            *code = "EACCES";
            snprintf (error, error_size, "egress refused: tenant '%.100s''s egress lists cannot be read (no "
                      "worker could take the read)", tenant);
            goto fail;
        }
    }
    p->fill = fill;
    p->chan_id = chan->id;
    snprintf (p->agent_id, sizeof p->agent_id, "%s", chan->conn->agent_id);
    p->req = *r;
    if (fill->tail)
        fill->tail->next = p;
    else
        fill->head = p;
    fill->tail = p;
    fill->n++;
    self->egress_parked++;
    chan->parked = p;
    return 0;
fail:
    if (p)
        ah_buf_free (&p->early);
    free (p);
    return -1;
}

void ah_tun_egress_unpark (self_t *self, chan_t *chan, const char *error)
{
    ah_tun_parked_t *p = chan->parked;
    if (!p)
        return;
    chan->parked = NULL;
    fill_t *fill = p->fill;
    ah_tun_parked_t **pp = &fill->head, *prev = NULL;
    while (*pp && *pp != p) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp) {
        *pp = p->next;
        if (fill->tail == p)
            fill->tail = prev;
        fill->n--;
        self->egress_parked--;
    }
    char why [300];
    snprintf (why, sizeof why, "egress ended before it was decided (tenant '%.100s''s egress lists were being "
              "read): %s", fill->tenant, error ? error : "the sandbox closed the stream");
    ah_tun_egress_record (self, p->agent_id, "egress", p->req.detail, false, why, -1);
    ah_buf_free (&p->early);
    free (p);
}

void ah_tun_egress_parked_data (self_t *self, chan_t *chan, const uint8_t *data, size_t size)
{
    ah_tun_parked_t *p = chan->parked;
    //  Not consumed: yamux's window bounds what waits here.
    if (p->eof || ah_buf_append (&p->early, data, size))
        ah_tun_chan_abort (self, chan, 0, p->eof ? "sandboxd sent data after its FIN" : "out of memory");
}

void ah_tun_egress_parked_eof (self_t *self, chan_t *chan)
{
    chan->parked->eof = true;
}

static void s_fills_destroy (self_t *self)
{
    //  Their channels went first (each unparked its request).
    for (fill_t *f = self->egress_fills ? (fill_t *) zhashx_first (self->egress_fills) : NULL; f;
         f = (fill_t *) zhashx_next (self->egress_fills))
        while (f->head) {
            ah_tun_parked_t *p = f->head;
            f->head = p->next;
            ah_buf_free (&p->early);
            free (p);
        }
    if (self->egress_fills)
        for (fill_t *f = (fill_t *) zhashx_first (self->egress_fills); f; f = (fill_t *) zhashx_first (self->egress_fills)) {
            zhashx_delete (self->egress_fills, f->tenant);
            free (f);
        }
    zhashx_destroy (&self->egress_fills);
}

void ah_tun_egress_forget (self_t *self, const char *tenant)
{
    if (!tenant)
        return;
    if (self->egress_tenants)
        zhashx_delete (self->egress_tenants, tenant);
    fill_t *fill = self->egress_fills ? (fill_t *) zhashx_lookup (self->egress_fills, tenant) : NULL;
    if (fill)
        fill->stale = true;         //  read again before anyone is decided on it
}

//  ---------------------------------------------------------------------

void ah_tun_egress (self_t *self, chan_t *chan, const ah_msg_t *req, const uint8_t *early,
                    size_t early_size)
{
    conn_t *conn = chan->conn;
    const char *ch = ah_msg_str (req, "ch");
    const char *host = ah_msg_str (req, "host");
    const char *kind = ah_msg_str (req, "kind");
    int64_t port = ah_msg_int (req, "port", 0);
    if (!ch || strcmp (ch, "egress")) {
        char error [200];
        snprintf (error, sizeof error, "sandboxd opened a stream for channel '%.32s': only egress is "
                  "opened by sandboxd", ch ? ch : "?");
        ah_warn (AREA, "agent '%s': %s; reset", conn->agent_id, error);
        ah_yamux_reset (conn->yamux, chan->stream);
        ah_tun_chan_free (self, chan);
        return;
    }
    request_t r;
    memset (&r, 0, sizeof r);
    //  Counted on the agent's tenant (an agent without a row: nowhere).
    r.known = s_agent (self, conn->agent_id, &r.row);
    //  An IPv6 literal comes without brackets (docs/tunnel.md); the
    //  grammar takes it with them.
    char bracketed [AH_EGRESS_HOST_MAX + 3] = "";
    if (host && strchr (host, ':') && strlen (host) <= AH_EGRESS_HOST_MAX) {
        snprintf (bracketed, sizeof bracketed, "[%s]", host);
        host = bracketed;
    }
    const char *why = NULL;
    char error [900];
    if (!host || ah_egress_host (host, strlen (host), r.host, &r.literal, &why)
    ||  port < 1 || port > 65535 || !kind || (strcmp (kind, "connect") && strcmp (kind, "http"))) {
        snprintf (error, sizeof error, "egress refused: a malformed request from sandboxd (%s)",
                  !host ? "no host" : why ? why : port < 1 || port > 65535 ? "port out of range" : "kind");
        s_refuse (self, chan, "(malformed)", "EINVAL", error, early_size,
                  r.known ? ah_tun_egress_counts (self, r.row.tenant) : NULL);
        return;
    }
    r.port = (int) port;
    snprintf (r.kind, sizeof r.kind, "%s", kind);
    snprintf (r.detail, sizeof r.detail, strchr (r.host, ':') ? "[%s]:%d (%s)" : "%s:%d (%s)", r.host,
              r.port, r.kind);
    const ah_tun_tenant_t *t = r.known && self->egress_tenants
                             ? (const ah_tun_tenant_t *) zhashx_lookup (self->egress_tenants, r.row.tenant) : NULL;
    if (!t && r.known && !self->egress_broken && self->egress_rule) {
        //  Not held: parked until a worker read them (see "The cache").
        const char *code = "EAGAIN";
        if (s_park (self, chan, &r, early, early_size, error, sizeof error, &code) == 0) {
            ah_debug (AREA, "agent '%s': egress %s: waits for tenant '%s''s lists", conn->agent_id, r.detail,
                      r.row.tenant);
            return;
        }
        s_refuse (self, chan, r.detail, code, error, early_size, ah_tun_egress_counts (self, r.row.tenant));
        return;
    }
    s_go (self, chan, &r, t, early, early_size, false);
}
