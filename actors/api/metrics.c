/*  actors/api/metrics.c: GET /metrics in the Prometheus text format
    (docs/api.md "Metrics"), for an admin token or a metrics token.

    DESIGN. Two kinds of numbers. Counters and histograms this process
    counts as things pass through the API actor (requests by route and
    status, bytes through terminals and files, wakes and sleeps by cause
    and the create/start/wake durations, both from SANDBOX_STATE). And
    gauges read when asked: sandboxes by state and tenant, tombstones,
    policy scripts failing to load, sweep outcomes as the audit trail
    holds them (from SQLite), runtime images by state (the builder's
    CATALOG_LIST), and the tunnel's sessions and each tenant's egress
    counts (TUNNEL_SESSIONS: the tunnel counts them on its thread and
    sends a copy). Everything here runs on the API actor's thread.     */
#include "actors/api/api_int.h"

#include <string.h>

#define MAX_ROUTES      64
#define MAX_STATUSES    24
#define MAX_TIMING      100000          //  agents with a transition being timed
#define NB              12

static const double s_buckets [NB] = { 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300 };

typedef struct {
    uint64_t counts [NB];           //  per bucket (not cumulative)
    uint64_t total;
    double   sum;
} histogram_t;

typedef enum { H_CREATE, H_START, H_WAKE, H_COUNT } timing_t;
static const char *s_timing_names [H_COUNT] = { "create", "start", "wake" };

typedef struct {
    char state [16];                //  the last state seen
    int64_t since_ms;               //  when the timed transition began, 0 none
    timing_t what;
} seen_t;

typedef enum { C_API, C_SLEEPER, C_RECONCILER, C_TTL, C_RETRY, C_OTHER, C_COUNT } cause_t;
static const char *s_cause_names [C_COUNT] = { "api", "sleeper", "reconciler", "ttl", "tombstone_retry", "other" };

typedef enum { B_TERMINAL, B_READ, B_WRITE, B_COUNT } channel_t;
static const char *s_channel_names [B_COUNT] = { "terminal", "fs_read", "fs_write" };

typedef struct {
    const char *pattern;            //  the route table's (static)
    int status;
    uint64_t count;
} requests_t;

struct api_metrics_t {
    requests_t requests [MAX_ROUTES * MAX_STATUSES / 4];
    size_t nrequests;
    uint64_t bytes [B_COUNT];
    uint64_t spliced;               //  upload bytes moved by splice (upload.c)
    uint64_t wakes [C_COUNT], sleeps [C_COUNT];
    histogram_t durations [H_COUNT];
    zhashx_t *seen;                 //  agent id -> seen_t
    //  The tunnel's answer to the request being served (TUNNEL_SESSIONS).
    int64_t tunnel_sessions, tunnel_connections, tunnel_channels;
    json_t *tunnel_egress;          //  [{tenant, allowed, denied, failed, bytes_out, bytes_in}], owned
    //  The builder's catalog (owned), then lifecycle's warm pools (POOL_LIST).
    json_t *runtimes;
    int64_t pool_hits, pool_misses, pool_drained;
};

static void s_free_seen (void **item)
{
    free (*item);
    *item = NULL;
}

api_metrics_t *api_metrics_new (void)
{
    api_metrics_t *m = calloc (1, sizeof *m);
    if (m && !(m->seen = zhashx_new ())) {
        free (m);
        return NULL;
    }
    if (m)
        zhashx_set_destructor (m->seen, s_free_seen);
    return m;
}

void api_metrics_destroy (api_metrics_t **m_p)
{
    if (*m_p) {
        zhashx_destroy (&(*m_p)->seen);
        json_decref ((*m_p)->tunnel_egress);
        json_decref ((*m_p)->runtimes);
        free (*m_p);
        *m_p = NULL;
    }
}

void api_metrics_request (api_metrics_t *m, const char *pattern, int status)
{
    if (!m)
        return;
    if (!pattern)
        pattern = "unrouted";
    for (size_t i = 0; i < m->nrequests; i++)
        if (m->requests [i].status == status && m->requests [i].pattern == pattern) {
            m->requests [i].count++;
            return;
        }
    if (m->nrequests < sizeof m->requests / sizeof m->requests [0])
        m->requests [m->nrequests++] = (requests_t) { pattern, status, 1 };
}

void api_metrics_bytes (api_metrics_t *m, const char *kind, int64_t bytes)
{
    if (!m || bytes <= 0 || !kind)
        return;
    channel_t c = streq (kind, "fs.read") ? B_READ : streq (kind, "fs.write") ? B_WRITE
                : strncmp (kind, "terminal", 8) == 0 ? B_TERMINAL : B_COUNT;
    if (c < B_COUNT)
        m->bytes [c] += (uint64_t) bytes;
}

void api_metrics_spliced (api_metrics_t *m, int64_t bytes)
{
    if (m && bytes > 0)
        m->spliced += (uint64_t) bytes;
}

static cause_t s_cause (const char *by)
{
    if (!by)
        return C_OTHER;
    if (strncmp (by, "api", 3) == 0)
        return C_API;
    if (streq (by, "sleeper"))
        return C_SLEEPER;
    if (streq (by, "reconciler"))
        return C_RECONCILER;
    if (streq (by, "ttl"))
        return C_TTL;
    if (streq (by, "tombstone-retry"))
        return C_RETRY;
    return C_OTHER;
}

static void s_observe (histogram_t *h, double seconds)
{
    size_t b = 0;
    while (b < NB && seconds > s_buckets [b])
        b++;
    if (b < NB)
        h->counts [b]++;
    h->total++;
    h->sum += seconds;
}

//  Wakes, sleeps and durations from lifecycle's SANDBOX_STATE: a wake is
//  sleeping -> starting; a sleep is reaching sleeping from stopping or
//  running; create runs from creating to running, start from starting
//  (after an error or a rebuild) to running, wake from a wake to running.
void api_metrics_state (api_metrics_t *m, const ah_msg_t *msg)
{
    const char *id = ah_msg_str (msg, "agent_id");
    const char *state = ah_msg_str (msg, "state");
    if (!m || !id || !state)
        return;
    if (streq (state, "destroyed")) {
        zhashx_delete (m->seen, id);
        return;
    }
    seen_t *s = zhashx_lookup (m->seen, id);
    if (!s) {
        if (zhashx_size (m->seen) >= MAX_TIMING)
            zhashx_purge (m->seen);
        if (!(s = calloc (1, sizeof *s)))
            return;
        zhashx_insert (m->seen, id, s);
    }
    int64_t now = zclock_mono ();
    cause_t cause = s_cause (ah_msg_str (msg, "by"));
    if (streq (state, "creating")) {
        s->since_ms = now;
        s->what = H_CREATE;
    }
    else
    if (streq (state, "starting") && !streq (s->state, "creating")) {
        bool wake = streq (s->state, "sleeping");
        if (wake)
            m->wakes [cause]++;
        s->since_ms = now;
        s->what = wake ? H_WAKE : H_START;
    }
    else
    if (streq (state, "running") && s->since_ms) {
        s_observe (&m->durations [s->what], (now - s->since_ms) / 1000.0);
        s->since_ms = 0;
    }
    else
    if (streq (state, "sleeping") && (streq (s->state, "stopping") || streq (s->state, "running")))
        m->sleeps [cause]++;
    else
    if (streq (state, "error"))
        s->since_ms = 0;
    snprintf (s->state, sizeof s->state, "%s", state);
}

//  --------------------------------------------------------------------
//  The exposition

//  A label value: backslash, double quote and newline escaped.
static void s_label (ah_buf_t *out, const char *v)
{
    for (const char *c = v ? v : ""; *c; c++) {
        if (*c == '\\' || *c == '"')
            ah_buf_appendf (out, "\\%c", *c);
        else if (*c == '\n')
            ah_buf_appendf (out, "\\n");
        else
            ah_buf_append (out, c, 1);
    }
}

static void s_family (ah_buf_t *out, const char *name, const char *type, const char *help)
{
    ah_buf_appendf (out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

//  Rows of a query with two text columns and a number, as name{a="",b=""} n.
static void s_rows (api_t *api, ah_buf_t *out, const char *name, const char *sql,
                    const char *label1, const char *label2)
{
    sqlite3_stmt *st = ah_store_prepare (api->store, sql);
    while (st && ah_store_step (api->store, st) == SQLITE_ROW) {
        ah_buf_appendf (out, "%s{%s=\"", name, label1);
        s_label (out, (const char *) sqlite3_column_text (st, 0));
        if (label2) {
            ah_buf_appendf (out, "\",%s=\"", label2);
            s_label (out, (const char *) sqlite3_column_text (st, 1));
        }
        ah_buf_appendf (out, "\"} %lld\n", (long long) sqlite3_column_int64 (st, 2));
    }
    if (st)
        sqlite3_reset (st);
}

static int64_t s_scalar (api_t *api, const char *sql)
{
    sqlite3_stmt *st = ah_store_prepare (api->store, sql);
    int64_t n = st && ah_store_step (api->store, st) == SQLITE_ROW ? sqlite3_column_int64 (st, 0) : 0;
    if (st)
        sqlite3_reset (st);
    return n;
}

//  The tunnel's egress counts by tenant (TUNNEL_SESSIONS' "egress"):
//  one row per tenant and label value; tenants are identifiers
//  (common/ident.h), so the labels are bounded by the tenants there are.
static void s_egress (ah_buf_t *out, const json_t *egress)
{
    static const struct { const char *family, *label, *value, *key; } rows [] = {
        { "agenthold_egress_connections_total", "verdict", "allowed", "allowed" },
        { "agenthold_egress_connections_total", "verdict", "denied", "denied" },
        { "agenthold_egress_connections_total", "verdict", "failed", "failed" },
        { "agenthold_egress_bytes_total", "direction", "out", "bytes_out" },
        { "agenthold_egress_bytes_total", "direction", "in", "bytes_in" },
    };
    for (size_t k = 0; k < sizeof rows / sizeof rows [0]; k++) {
        if (k == 0)
            s_family (out, rows [k].family, "counter",
                      "Egress connections by tenant and verdict: allowed (connected), denied (refused by the"
                      " rule, the cap or the address check), failed (let through, not connected).");
        if (k == 3)
            s_family (out, rows [k].family, "counter",
                      "Egress bytes by tenant, out to the upstream and in from it, counted as they pass.");
        size_t i;
        json_t *t;
        json_array_foreach (egress, i, t) {
            const char *tenant = json_string_value (json_object_get (t, "tenant"));
            if (!tenant)
                continue;
            ah_buf_appendf (out, "%s{tenant=\"", rows [k].family);
            s_label (out, tenant);
            ah_buf_appendf (out, "\",%s=\"%s\"} %lld\n", rows [k].label, rows [k].value,
                            (long long) json_integer_value (json_object_get (t, rows [k].key)));
        }
    }
}

static void s_exposition (req_t *r, const json_t *runtimes)
{
    api_t *api = r->api;
    api_metrics_t *m = api->metrics;
    ah_buf_t out = { 0 };

    s_family (&out, "agenthold_sandboxes", "gauge", "Sandboxes by lifecycle state and tenant.");
    s_rows (api, &out, "agenthold_sandboxes",
            "SELECT s.state, a.tenant, count(*) FROM sandboxes s JOIN agents a ON a.id = s.agent_id"
            " WHERE a.pool IS NULL GROUP BY s.state, a.tenant ORDER BY s.state, a.tenant", "state", "tenant");
    s_family (&out, "agenthold_warm_sandboxes", "gauge",
              "Warm sandboxes (made ahead of any create, no tenant's) by runtime and lifecycle state.");
    s_rows (api, &out, "agenthold_warm_sandboxes",
            "SELECT a.pool, s.state, count(*) FROM sandboxes s JOIN agents a ON a.id = s.agent_id"
            " WHERE a.pool IS NOT NULL GROUP BY a.pool, s.state ORDER BY a.pool, s.state", "runtime", "state");

    s_family (&out, "agenthold_tunnel_sessions", "gauge",
              "Sandboxd connections the tunnel holds whose hello succeeded.");
    ah_buf_appendf (&out, "agenthold_tunnel_sessions %lld\n", (long long) m->tunnel_sessions);
    s_family (&out, "agenthold_tunnel_connections", "gauge",
              "Sandboxd connections the tunnel holds, hello done or not.");
    ah_buf_appendf (&out, "agenthold_tunnel_connections %lld\n", (long long) m->tunnel_connections);
    s_family (&out, "agenthold_tunnel_channels", "gauge",
              "Channels (yamux streams) open on the tunnel's connections.");
    ah_buf_appendf (&out, "agenthold_tunnel_channels %lld\n", (long long) m->tunnel_channels);

    s_egress (&out, m->tunnel_egress);

    s_family (&out, "agenthold_wakes_total", "counter", "Sandboxes woken (sleeping to starting), by cause.");
    for (int c = 0; c < C_COUNT; c++)
        ah_buf_appendf (&out, "agenthold_wakes_total{cause=\"%s\"} %llu\n", s_cause_names [c],
                        (unsigned long long) m->wakes [c]);
    s_family (&out, "agenthold_sleeps_total", "counter", "Sandboxes put to sleep, by cause.");
    for (int c = 0; c < C_COUNT; c++)
        ah_buf_appendf (&out, "agenthold_sleeps_total{cause=\"%s\"} %llu\n", s_cause_names [c],
                        (unsigned long long) m->sleeps [c]);

    s_family (&out, "agenthold_transition_duration_seconds", "histogram",
              "Seconds from creating, starting or a wake to running.");
    for (int h = 0; h < H_COUNT; h++) {
        uint64_t cumulative = 0;
        for (int b = 0; b < NB; b++) {
            cumulative += m->durations [h].counts [b];
            ah_buf_appendf (&out, "agenthold_transition_duration_seconds_bucket{transition=\"%s\",le=\"%g\"} %llu\n",
                            s_timing_names [h], s_buckets [b], (unsigned long long) cumulative);
        }
        ah_buf_appendf (&out, "agenthold_transition_duration_seconds_bucket{transition=\"%s\",le=\"+Inf\"} %llu\n",
                        s_timing_names [h], (unsigned long long) m->durations [h].total);
        ah_buf_appendf (&out, "agenthold_transition_duration_seconds_sum{transition=\"%s\"} %.6f\n",
                        s_timing_names [h], m->durations [h].sum);
        ah_buf_appendf (&out, "agenthold_transition_duration_seconds_count{transition=\"%s\"} %llu\n",
                        s_timing_names [h], (unsigned long long) m->durations [h].total);
    }

    s_family (&out, "agenthold_api_requests_total", "counter", "API requests answered, by route and status.");
    for (size_t i = 0; i < m->nrequests; i++) {
        ah_buf_appendf (&out, "agenthold_api_requests_total{route=\"");
        s_label (&out, m->requests [i].pattern);
        ah_buf_appendf (&out, "\",status=\"%d\"} %llu\n", m->requests [i].status,
                        (unsigned long long) m->requests [i].count);
    }

    s_family (&out, "agenthold_bytes_total", "counter",
              "Bytes through terminals (both ways, counted as they pass) and files.");
    for (int c = 0; c < B_COUNT; c++)
        ah_buf_appendf (&out, "agenthold_bytes_total{channel=\"%s\"} %llu\n", s_channel_names [c],
                        (unsigned long long) m->bytes [c]);

    s_family (&out, "agenthold_spliced_bytes_total", "counter",
              "Upload bytes moved from the client's socket to the sandbox's by splice, never "
              "through the server's memory (part of fs_write's bytes).");
    ah_buf_appendf (&out, "agenthold_spliced_bytes_total %llu\n", (unsigned long long) m->spliced);

    s_family (&out, "agenthold_runtime_images", "gauge", "Runtime images of the catalog, by the builder's state.");
    const char *states [] = { "present", "building", "missing", "error" };
    for (size_t s = 0; s < sizeof states / sizeof states [0]; s++) {
        int n = 0;
        size_t i;
        json_t *rt;
        json_array_foreach (runtimes, i, rt) {
            const char *st = json_string_value (json_object_get (rt, "image_state"));
            n += st && streq (st, states [s]);
        }
        ah_buf_appendf (&out, "agenthold_runtime_images{state=\"%s\"} %d\n", states [s], n);
    }

    s_family (&out, "agenthold_sweep_results", "gauge",
              "Sweeps and lifetime decisions as the audit trail holds them (within audit.retention_days),"
              " by kind and result.");
    s_rows (api, &out, "agenthold_sweep_results",
            "SELECT kind, CASE WHEN ok THEN 'ok' ELSE 'failed' END, count(*) FROM operations"
            " WHERE kind IN ('retention.sweep','container.expire','workspace.expire','tombstone.forget')"
            " GROUP BY 1, 2 ORDER BY 1, 2", "kind", "result");
    s_family (&out, "agenthold_retention_deleted_rows", "gauge",
              "Audit rows deleted by the retention sweeps the trail still records.");
    ah_buf_appendf (&out, "agenthold_retention_deleted_rows %lld\n", (long long) s_scalar (api,
                    "SELECT coalesce (sum (CAST (substr (detail, 9) AS INTEGER)), 0) FROM operations"
                    " WHERE kind = 'retention.sweep' AND ok"));

    s_family (&out, "agenthold_warm_pool_hits_total", "counter",
              "Creates that took a warm sandbox (running at once), since the server started.");
    ah_buf_appendf (&out, "agenthold_warm_pool_hits_total %lld\n", (long long) m->pool_hits);
    s_family (&out, "agenthold_warm_pool_misses_total", "counter",
              "Creates that found no warm sandbox of their runtime and shape (a cold create), since the "
              "server started.");
    ah_buf_appendf (&out, "agenthold_warm_pool_misses_total %lld\n", (long long) m->pool_misses);
    s_family (&out, "agenthold_warm_pool_drained_total", "counter",
              "Warm sandboxes destroyed by the fill pass (their runtime changed or gone, failed, the pool "
              "made smaller), since the server started.");
    ah_buf_appendf (&out, "agenthold_warm_pool_drained_total %lld\n", (long long) m->pool_drained);

    s_family (&out, "agenthold_tombstones", "gauge", "Destroys still owed to the driver.");
    ah_buf_appendf (&out, "agenthold_tombstones %lld\n",
                    (long long) s_scalar (api, "SELECT count(*) FROM tombstones"));

    s_family (&out, "agenthold_policy_errors", "gauge",
              "Lua policy scripts whose last load failed (1), by holder and script.");
    s_rows (api, &out, "agenthold_policy_errors",
            "SELECT holder, script, error IS NOT NULL FROM policy_status ORDER BY holder, script",
            "holder", "script");

    api_respond_text (r, 200, "text/plain; version=0.0.4; charset=utf-8", &out);
    ah_buf_free (&out);
}

static void s_pools (req_t *r, ah_msg_t *msg)
{
    api_metrics_t *m = r->api->metrics;
    m->pool_hits = ah_msg_int (msg, "hits", 0);
    m->pool_misses = ah_msg_int (msg, "misses", 0);
    m->pool_drained = ah_msg_int (msg, "drained", 0);
    s_exposition (r, json_is_array (m->runtimes) ? m->runtimes : NULL);
}

//  The builder's catalog, then lifecycle's warm pools.
static void s_catalog (req_t *r, ah_msg_t *msg)
{
    api_metrics_t *m = r->api->metrics;
    json_decref (m->runtimes);
    m->runtimes = api_json_raw (msg, "runtimes");
    ah_msg_t *ask = ah_msg_new ("POOL_LIST");
    api_ask (r, "lifecycle", &ask, s_pools);
}

//  The tunnel's sessions first, then the builder's catalog.
static void s_sessions (req_t *r, ah_msg_t *reply)
{
    api_metrics_t *m = r->api->metrics;
    m->tunnel_sessions = ah_msg_int (reply, "sessions", 0);
    m->tunnel_connections = ah_msg_int (reply, "connections", 0);
    m->tunnel_channels = ah_msg_int (reply, "channels", 0);
    json_decref (m->tunnel_egress);
    m->tunnel_egress = api_json_raw (reply, "egress");
    if (m->tunnel_egress && !json_is_array (m->tunnel_egress)) {
        json_decref (m->tunnel_egress);
        m->tunnel_egress = NULL;
    }
    ah_msg_t *msg = ah_msg_new ("CATALOG_LIST");
    api_ask (r, "builder", &msg, s_catalog);
}

static void s_metrics (req_t *r)
{
    ah_msg_t *msg = ah_msg_new ("TUNNEL_SESSIONS");
    api_ask (r, "tunnel", &msg, s_sessions);
}

const route_t api_metrics_routes [] = {
    { M_GET, "/metrics", s_metrics, R_METRICS, "", NULL },
    { 0 }
};
