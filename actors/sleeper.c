/*  actors/sleeper.c: the sleeper actor (see sleeper.h).

    DESIGN. One actor thread (common/actor.h; bus name "sleeper") owns
    its own store connection (turns and sleep_forecast are
    its tables; sandboxes and agents it only reads), one Lua state for
    idle.lua, and a hash of per-agent live facts (terminals, CPU samples,
    when it was last seen busy). Nothing here blocks; stopping is
    lifecycle's job, asked by message. A repeating timer runs the pass
    every idle_check_interval.

    The due index. Each running agent's facts keep its last verdict
    (sleeps_at, idle) and a dirty flag. A verdict holds until sleeps_at
    unless a fact changes, so a pass asks idle.lua only about the agents
    that are due (sleeps_at <= now) or dirty; the others cost nothing:
    the due and dirty ones are the top of a heap ordered by when each is
    due (a dirty one at once), kept as facts change, and the running and
    idle counts are kept with it, so a pass costs what it asks, not how
    many run. Dirty means: a turn started, renewed or ended (this actor's
    own table), a terminal opened or closed, a CPU share at or above the
    verdict's recheck_cpu_share (any new share when the policy names
    none), lifecycle's AGENT_CHANGED (its activity flush moved
    last_activity_at, or an update changed idle_minutes), or entering
    running. A verdict that is already idle and whose stop was asked
    stays idle without asking again (time only makes an idle sandbox
    idler). A full pass (one SELECT of every running sandbox, idle.lua
    for each) runs first, and again whenever idle.lua is reloaded.

    The kept rows. What a pass reads of an agent (its row: name,
    idle_minutes, last_activity_at and its turns) is kept in its facts,
    and the messages that move it keep it true: AGENT_CHANGED carries the
    use or the idle_minutes lifecycle wrote (the later use wins, as in
    its UPDATE); a change it does not say, this actor's own turn writes
    and entering running drop the row, to be read again. The turns
    running at the read stay so until the first of their leases runs out,
    and then the row is read again too. So an agent asked because it was
    used is judged without a read; the rows that must be read are read in
    key order in one read transaction. Nothing else writes these columns
    (lifecycle and this actor are their only writers).

    The forecast rows. A verdict is written to sleep_forecast for the
    API (GET /agents: sleeps_at, awake_because), except one the API
    works out itself from the same row: "recent use" until idle_minutes
    after last_activity_at, when the row it would find is earlier
    (s_shown). This actor is the only writer of the table, so it knows
    each running agent's row from its own writes and deletes; one it does
    not know (since its start, or a write that failed) is written.      */
#include "actors/sleeper.h"
#include "common/ident.h"
#include "common/log.h"
#include "common/msg.h"
#include "common/str.h"
#include "common/token.h"
#include "policy/policy.h"
#include "store/store.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define AREA "sleeper"

typedef struct {
    int     terminals;              //  open terminal sessions (from the api)
    bool    has_sample;
    int64_t cpu_ns;                 //  last CPU sample (from the tunnel)
    int64_t cpu_at_ns;
    double  cpu_share;              //  share of one core between the last two samples
    bool    has_share;
    int64_t busy_at;                //  ms: last time it was found busy or began running
    bool    stop_sent;              //  asked lifecycle to stop it; cleared on a state change
    //  the due index
    bool    running;                //  in the running set (full pass, SANDBOX_STATE)
    bool    dirty;                  //  a fact changed since the verdict
    bool    idle;                   //  the verdict
    int64_t sleeps_at;              //  ms: the verdict holds until then
    double  recheck_cpu;            //  a share at or above this makes it dirty (0: any share)
    //  kept by s_index
    size_t  heap_at;                //  its place in the due heap (SIZE_MAX: not there)
    bool    counted_running, counted_idle;
    //  What the database knows of its use, as last read and kept since by
    //  the messages that move it (see DESIGN).
    bool    has_row;
    int64_t read_at;                //  ms: the clock of that read
    double  idle_minutes;
    int64_t last_activity;          //  ms (0: never)
    int     turns;                  //  its turns running at the read
    int64_t turns_until;            //  ms: the first of their leases to run out (NOT_DUE: none)
    int64_t turn_last;              //  ms: the latest end (or lease end) of any of its turns (0: none)
    //  Its forecast row as this actor last left it (see s_shown).
    bool    forecast_known;         //  false: not known (none written since it ran, or a failed write)
    bool    forecast_recent;        //  its why is "recent use"
    int64_t forecast_at;            //  its sleeps_at (INT64_MIN: no row)
    char    name [AH_NAME_MAX + 1];
    char    id [48];                //  the agent's id (the hash's key)
} facts_t;

//  An entry of the due heap: when it is due (INT64_MIN: dirty, at once).
typedef struct {
    int64_t  due;
    facts_t *f;
} due_t;

struct ah_sleeper_index_s {
    ah_actor_t  *actor;             //  NULL in an ah_sleeper_index_t
    ah_store_t  *store;
    ah_policy_t *policy;
    zhashx_t    *facts;             //  agent id -> facts_t (owned)
    int64_t      started_ms;
    int64_t      req_seq;
    bool         full;              //  the next pass reads every running sandbox
    int64_t      policy_at;         //  ah_policy_loaded_at of the verdicts held
    int          evaluated;         //  idle.lua calls in the last pass
    int          rows_read;         //  rows it read
    int          forecasts;         //  forecast rows it wrote
    bool         write_all;         //  every verdict's row written (a test's reference)
    due_t       *heap;              //  a binary min-heap on due
    size_t       heap_n, heap_cap;
    int          n_running;         //  facts with running set
    int          n_idle;            //  of those, the ones whose verdict is idle
};
typedef struct ah_sleeper_index_s self_t;

#define NOT_DUE INT64_MAX

//  When the next pass must ask about it: not while it is not running, or
//  idle with its stop asked; at once when dirty; else when its verdict ends.
static int64_t s_due_at (const facts_t *f)
{
    if (!f->running || (!f->dirty && f->idle && f->stop_sent))
        return NOT_DUE;
    return f->dirty ? INT64_MIN : f->sleeps_at;
}

static void s_heap_set (self_t *self, size_t at, due_t entry)
{
    self->heap [at] = entry;
    entry.f->heap_at = at;
}

static void s_heap_up (self_t *self, size_t at)
{
    due_t entry = self->heap [at];
    while (at > 0 && self->heap [(at - 1) / 2].due > entry.due) {
        s_heap_set (self, at, self->heap [(at - 1) / 2]);
        at = (at - 1) / 2;
    }
    s_heap_set (self, at, entry);
}

static void s_heap_down (self_t *self, size_t at)
{
    due_t entry = self->heap [at];
    for (;;) {
        size_t child = 2 * at + 1;
        if (child >= self->heap_n)
            break;
        if (child + 1 < self->heap_n && self->heap [child + 1].due < self->heap [child].due)
            child++;
        if (self->heap [child].due >= entry.due)
            break;
        s_heap_set (self, at, self->heap [child]);
        at = child;
    }
    s_heap_set (self, at, entry);
}

static void s_heap_remove (self_t *self, facts_t *f)
{
    size_t at = f->heap_at;
    f->heap_at = SIZE_MAX;
    due_t last = self->heap [--self->heap_n];
    if (at == self->heap_n)
        return;
    int64_t was = self->heap [at].due;
    s_heap_set (self, at, last);
    if (last.due < was)
        s_heap_up (self, at);
    else
        s_heap_down (self, at);
}

//  After any change to its facts: its place in the due heap and in the
//  running and idle counts. When the heap cannot grow it stays out, and
//  the next pass is a full one.
static void s_index (self_t *self, facts_t *f)
{
    bool running = f->running, idle = f->running && f->idle;
    self->n_running += (int) running - (int) f->counted_running;
    self->n_idle += (int) idle - (int) f->counted_idle;
    f->counted_running = running;
    f->counted_idle = idle;
    int64_t due = s_due_at (f);
    if (due == NOT_DUE) {
        if (f->heap_at != SIZE_MAX)
            s_heap_remove (self, f);
        return;
    }
    if (f->heap_at == SIZE_MAX) {
        if (self->heap_n == self->heap_cap) {
            size_t cap = self->heap_cap ? 2 * self->heap_cap : 256;
            due_t *more = realloc (self->heap, cap * sizeof *more);
            if (!more) {
                self->full = true;
                return;
            }
            self->heap = more;
            self->heap_cap = cap;
        }
        self->heap [self->heap_n] = (due_t) { due, f };
        f->heap_at = self->heap_n++;
        s_heap_up (self, f->heap_at);
        return;
    }
    int64_t was = self->heap [f->heap_at].due;
    self->heap [f->heap_at].due = due;
    if (due < was)
        s_heap_up (self, f->heap_at);
    else
        s_heap_down (self, f->heap_at);
}

static facts_t *s_facts (self_t *self, const char *agent_id)
{
    facts_t *f = zhashx_lookup (self->facts, agent_id);
    if (!f) {
        if (strlen (agent_id) >= sizeof f->id)
            return NULL;                    //  no agent id is that long
        f = calloc (1, sizeof *f);
        if (!f)
            return NULL;
        f->heap_at = SIZE_MAX;
        strcpy (f->id, agent_id);
        zhashx_insert (self->facts, agent_id, f);
    }
    return f;
}

//  A fact changed: ask idle.lua about it again at the next pass.
static void s_dirty (self_t *self, facts_t *f)
{
    f->dirty = true;
    s_index (self, f);
}

//  Its agent is gone: out of the heap and the counts, then freed.
static void s_forget (self_t *self, const char *agent_id)
{
    facts_t *f = zhashx_lookup (self->facts, agent_id);
    if (f) {
        f->running = false;
        s_index (self, f);
        zhashx_delete (self->facts, agent_id);
    }
}

//  Busy at ms: the clock only moves forward (a pass may run on a given clock).
static void s_touch (facts_t *f, int64_t ms)
{
    if (ms > f->busy_at)
        f->busy_at = ms;
}

static int64_t s_max (int64_t a, int64_t b) { return a > b ? a : b; }


//  Keeps a row of AH_SLEEPER_ROWS_SQL, read at now, in its facts.
static void s_row_keep (facts_t *f, sqlite3_stmt *st, int64_t now)
{
    const char *name = (const char *) sqlite3_column_text (st, 1);
    snprintf (f->name, sizeof f->name, "%s", name ? name : "");
    f->idle_minutes = sqlite3_column_double (st, 2);
    f->last_activity = sqlite3_column_int64 (st, 3);
    f->turns = (int) sqlite3_column_int64 (st, 4);
    f->turns_until = sqlite3_column_type (st, 5) == SQLITE_NULL ? NOT_DUE : sqlite3_column_int64 (st, 5);
    f->turn_last = sqlite3_column_int64 (st, 6);
    f->read_at = now;
    f->has_row = true;
}

//  Its row as kept still says what the database would say at now: no
//  message moved it since, and none of its turns' leases ran out.
static bool s_fresh (const facts_t *f, int64_t now)
{
    return f->has_row && now >= f->read_at && now < f->turns_until;
}

//  Appends f to the list *ask (*n of *cap): 0, or -1 out of memory.
static int s_push (facts_t ***ask, size_t *n, size_t *cap, facts_t *f)
{
    if (*n == *cap) {
        facts_t **more = realloc (*ask, 2 * *cap * sizeof *more);
        if (!more)
            return -1;
        *ask = more;
        *cap *= 2;
    }
    (*ask) [(*n)++] = f;
    return 0;
}

//  A full pass's read: the row of every running sandbox, kept in its
//  facts, and the running set becomes what the database says now.
//  *ask_p: their facts, to be judged.
static int s_read_all (self_t *self, int64_t now, facts_t ***ask_p, size_t *n_ask)
{
    sqlite3_stmt *st = ah_store_prepare (self->store, AH_SLEEPER_ROWS_SQL);
    if (!st || ah_store_bind_int64 (st, ":now", now))
        return -1;
    size_t n = 0, cap = zhashx_size (self->facts) + 64;
    facts_t **ask = malloc (cap * sizeof *ask);
    int rc = SQLITE_DONE;
    while (ask && (rc = ah_store_step (self->store, st)) == SQLITE_ROW) {
        const char *id = (const char *) sqlite3_column_text (st, 0);
        facts_t *f = id ? s_facts (self, id) : NULL;
        if (!f)
            continue;
        s_row_keep (f, st, now);
        self->rows_read++;
        if (s_push (&ask, &n, &cap, f))
            break;
    }
    sqlite3_reset (st);
    if (!ask || rc != SQLITE_DONE) {
        free (ask);
        return -1;
    }
    for (facts_t *f = zhashx_first (self->facts); f; f = zhashx_next (self->facts)) {
        f->running = false;
        s_index (self, f);
    }
    *ask_p = ask;
    *n_ask = n;
    return 0;
}

static int s_idcmp (const void *a, const void *b)
{
    return strcmp ((*(facts_t *const *) a)->id, (*(facts_t *const *) b)->id);
}

//  An indexed pass's read (see DESIGN): the due and dirty agents, taken
//  off the heap. The rows of those whose facts are not fresh are read
//  again, in key order (the B-tree pages in order) and in one read
//  transaction (one snapshot, one lock); one that no longer runs leaves
//  the running set (its state event is on its way, and its forecast row
//  goes then). *ask_p: the facts to judge. On a failure each goes back
//  into the heap as it was.
static int s_read_due (self_t *self, int64_t now, facts_t ***ask_p, size_t *n_ask)
{
    size_t n = 0, cap = 64, n_stale = 0;
    facts_t **ask = malloc (cap * sizeof *ask);
    while (ask && self->heap_n && self->heap [0].due <= now) {
        facts_t *f = self->heap [0].f;
        s_heap_remove (self, f);
        if (s_push (&ask, &n, &cap, f)) {
            s_index (self, f);              //  back: asked at a later pass
            break;
        }
        if (!s_fresh (f, now)) {            //  the stale ones first
            ask [n - 1] = ask [n_stale];
            ask [n_stale++] = f;
        }
    }
    if (!ask)
        return -1;
    qsort (ask, n_stale, sizeof *ask, s_idcmp);
    int rc = SQLITE_DONE;
    size_t k = 0;
    if (n_stale) {
        sqlite3_stmt *st = ah_store_prepare (self->store, AH_SLEEPER_ROWS_SQL " AND s.agent_id = :id");
        rc = st && ah_store_bind_int64 (st, ":now", now) == 0 ? SQLITE_DONE : SQLITE_ERROR;
        bool txn = rc == SQLITE_DONE && n_stale > 1 && ah_store_exec (self->store, "BEGIN", NULL) == 0;
        for (; k < n_stale && rc == SQLITE_DONE; k++) {
            facts_t *f = ask [k];
            rc = ah_store_bind_text (st, ":id", f->id) ? SQLITE_ERROR : ah_store_step (self->store, st);
            if (rc == SQLITE_ROW) {
                s_row_keep (f, st, now);
                self->rows_read++;
                rc = SQLITE_DONE;
            }
            else
            if (rc == SQLITE_DONE) {        //  it no longer runs
                f->running = false;
                f->has_row = false;
                s_index (self, f);
                ask [k] = NULL;
            }
            sqlite3_reset (st);
        }
        if (txn && ah_store_exec (self->store, "COMMIT", NULL))
            ah_store_rollback (self->store);
    }
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        if (ask [i]) {
            if (rc != SQLITE_DONE)
                s_index (self, ask [i]);    //  back where it was
            ask [kept++] = ask [i];
        }
    if (rc != SQLITE_DONE) {
        free (ask);
        return -1;
    }
    *ask_p = ask;
    *n_ask = kept;
    return 0;
}

//  Whether the API already shows this verdict without its forecast row
//  being written (actors/api/agents.c, s_sleeps_at): "recent use" until
//  idle_minutes after last_activity_at is what it works out itself
//  whenever the row it finds is earlier (or there is none). So such a
//  verdict, the commonest (an agent asked because it was used), costs no
//  write; any other is written.
static bool s_shown (const self_t *self, const facts_t *f, bool is_idle, const char *why, int64_t sleeps_at)
{
    if (self->write_all || is_idle || !why || !streq (why, "recent use") || !f->forecast_known
    ||  !isfinite (f->idle_minutes) || f->idle_minutes < 0 || f->idle_minutes > 1e9)
        return false;
    if (sleeps_at != ah_sleeper_since_use (f->last_activity, f->idle_minutes))
        return false;
    bool by_use;
    int64_t shown = ah_sleeper_sleeps_at (f->last_activity, f->idle_minutes, f->forecast_at != INT64_MIN,
                                          f->forecast_at, &by_use);
    return shown == sleeps_at && (by_use || f->forecast_recent);
}

//  Asks idle.lua about one running sandbox, records the forecast, asks
//  lifecycle to stop it when idle. When the policy fails it stays awake
//  and is asked again next pass.
static void s_judge (self_t *self, facts_t *f, int64_t now, sqlite3_stmt *up,
                    ah_msg_t *sandbox, ah_msg_t *facts)
{
    int64_t turn_end = f->turn_last < now ? f->turn_last : now;
    int64_t last = s_max (s_max (f->last_activity, turn_end),
                          s_max (f->busy_at, self->started_ms));
    ah_msg_set_str (sandbox, "id", f->id);
    ah_msg_set_str (sandbox, "name", f->name);
    ah_msg_set_double (sandbox, "idle_minutes", f->idle_minutes);
    ah_msg_set_int (facts, "now_ms", now);
    ah_msg_set_int (facts, "last_activity_ms", last);
    ah_msg_set_double (facts, "idle_minutes", f->idle_minutes);
    ah_msg_set_int (facts, "turns", f->turns);
    ah_msg_set_int (facts, "terminals", f->terminals);
    if (f->has_share)
        ah_msg_set_double (facts, "cpu_share", f->cpu_share);
    else
        ah_msg_set_nil (facts, "cpu_share");
    ah_msg_t *verdict = NULL;
    char *err = NULL;
    self->evaluated++;
    if (ah_policy_call (self->policy, "idle", sandbox, facts, &verdict, &err)) {
        ah_warn (AREA, "idle.lua failed for agent '%s': %s (it stays awake)", f->name, err);
        free (err);
        f->idle = false;
        s_dirty (self, f);
        return;
    }
    bool is_idle = ah_msg_bool (verdict, "idle", false);
    const char *why = ah_msg_str (verdict, "why");
    int64_t sleeps_at = (int64_t) ah_msg_double (verdict, "sleeps_at_ms", (double) now);
    double recheck = ah_msg_double (verdict, "recheck_cpu_share", 0);
    if (why && (streq (why, "turn") || streq (why, "terminal") || streq (why, "cpu")))
        s_touch (f, now);
    f->dirty = false;
    f->idle = is_idle;
    f->sleeps_at = is_idle ? now : sleeps_at;
    f->recheck_cpu = isfinite (recheck) && recheck > 0 ? recheck : 0;
    if (!s_shown (self, f, is_idle, why, sleeps_at)) {
        f->forecast_known = !ah_store_bind_text (up, ":id", f->id)
            && !ah_store_bind_int64 (up, ":sleeps_at", sleeps_at) && !ah_store_bind_text (up, ":why", why)
            && !ah_store_bind_int64 (up, ":now", now) && ah_store_step (self->store, up) == SQLITE_DONE;
        sqlite3_reset (up);
        f->forecast_at = sleeps_at;
        f->forecast_recent = why && streq (why, "recent use");
        self->forecasts++;
    }
    if (is_idle) {
        if (!f->stop_sent && self->actor) {
            ah_msg_t *stop = ah_msg_new ("SANDBOX_STOP");
            ah_msg_set_int (stop, "req", ++self->req_seq);
            ah_msg_set_str (stop, "agent", f->id);
            ah_msg_set_str (stop, "reason", "idle");
            ah_actor_send (self->actor, "lifecycle", &stop);
            ah_info (AREA, "agent '%s' is idle: asked lifecycle to put it to sleep", f->name);
        }
        f->stop_sent = true;
    }
    else
        f->stop_sent = false;               //  awake: when idle again, its stop is asked again
    s_index (self, f);
    ah_msg_destroy (&verdict);
}

//  One pass (see DESIGN): a full one, or the due and dirty agents only.
//  Returns the idle count; *checked is how many sandboxes are running.
static int s_pass (self_t *self, int64_t now, int *checked)
{
    ah_policy_reload (self->policy, false);
    if (ah_policy_loaded_at (self->policy) != self->policy_at) {
        self->policy_at = ah_policy_loaded_at (self->policy);
        self->full = true;                  //  a new rule: every verdict is asked again
    }
    self->evaluated = self->rows_read = self->forecasts = 0;
    bool full = self->full;
    facts_t **ask = NULL;
    size_t n = 0;
    if (full ? s_read_all (self, now, &ask, &n) : s_read_due (self, now, &ask, &n))
        return -1;
    if (n == 0 && !full) {
        free (ask);
        if (checked)
            *checked = self->n_running;
        return self->n_idle;
    }
    if (ah_store_begin (self->store)) {
        for (size_t i = 0; i < n; i++) {    //  asked again at the next pass
            ask [i]->running = true;
            s_dirty (self, ask [i]);
        }
        free (ask);
        return -1;
    }
    if (full)
        ah_store_exec (self->store, "DELETE FROM sleep_forecast WHERE agent_id NOT IN"
                       " (SELECT agent_id FROM sandboxes WHERE state = 'running')", NULL);
    sqlite3_stmt *up = ah_store_prepare (self->store, AH_SLEEPER_FORECAST_SQL);
    ah_msg_t *sandbox = ah_msg_new ("SANDBOX");
    ah_msg_t *facts = ah_msg_new ("FACTS");
    for (size_t i = 0; i < n; i++) {
        ask [i]->running = true;
        if (up)
            s_judge (self, ask [i], now, up, sandbox, facts);
        else
            s_dirty (self, ask [i]);        //  asked again at the next pass
    }
    ah_msg_destroy (&sandbox);
    ah_msg_destroy (&facts);
    if (ah_store_commit (self->store)) {
        ah_store_rollback (self->store);
        for (size_t i = 0; i < n; i++)      //  what it wrote is gone
            ask [i]->forecast_known = false;
    }
    else
    if (up)
        self->full = false;
    free (ask);
    if (checked)
        *checked = self->n_running;
    return self->n_idle;
}

static int64_t s_lease (const ah_msg_t *msg)
{
    int64_t lease = ah_msg_int (msg, "lease_ms", AH_SLEEPER_TURN_LEASE_MS);
    if (lease < 1000) lease = 1000;
    if (lease > AH_SLEEPER_TURN_LEASE_MAX_MS) lease = AH_SLEEPER_TURN_LEASE_MAX_MS;
    return lease;
}

//  This actor changed one of its turns at now: it was busy then, and its
//  row is read again (a new turn, a renewed lease or an end).
static void s_turned (self_t *self, const char *agent, int64_t now, bool started)
{
    facts_t *f = s_facts (self, agent);
    if (f) {
        s_touch (f, now);
        if (started)
            f->stop_sent = false;
        f->has_row = false;
        s_dirty (self, f);
    }
}

static void s_turn_start (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *agent = ah_msg_str (msg, "agent");
    char id [48], turn [20];
    if (!agent) {
        ah_actor_reply_error (self->actor, msg, 400, "TURN_START needs 'agent' (a string)");
        return;
    }
    //  The API sends an id; a name (another sender's) is looked up as
    //  everywhere, within "tenant" when the message names one.
    int found = ah_store_agent_find (self->store, agent, ah_msg_str (msg, "tenant"), id, sizeof id);
    if (found != 1) {
        char why [160];
        if (found == -2)
            ah_actor_reply_error (self->actor, msg, 409, "%s", ah_store_agent_ambiguous (agent, why, sizeof why));
        else
            ah_actor_reply_error (self->actor, msg, found ? 500 : 404, found ? "cannot read agent '%.64s'"
                                  : "no agent named '%.64s'", agent);
        return;
    }
    int64_t now = ah_store_now_ms (), expires = now + s_lease (msg);
    if (ah_token_id (turn, sizeof turn, 16)) {
        ah_actor_reply_error (self->actor, msg, 500, "no entropy for a turn id");
        return;
    }
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "INSERT INTO turns (id, agent_id, started_at, expires_at, run, actor)"
        " VALUES (:id, :agent, :now, :exp, :run, :actor)");
    if (!st || ah_store_bind_text (st, ":id", turn) || ah_store_bind_text (st, ":agent", id)
    ||  ah_store_bind_int64 (st, ":now", now) || ah_store_bind_int64 (st, ":exp", expires)
    ||  ah_store_bind_text (st, ":run", ah_msg_str (msg, "run"))
    ||  ah_store_bind_text (st, ":actor", ah_msg_str (msg, "actor"))
    ||  ah_store_step (self->store, st) != SQLITE_DONE) {
        if (st) sqlite3_reset (st);
        ah_actor_reply_error (self->actor, msg, 500, "could not record the turn (see the server log)");
        return;
    }
    sqlite3_reset (st);
    s_turned (self, id, now, true);
    ah_msg_t *r = ah_msg_reply_ok (msg);
    ah_msg_set_int (r, "status", 201);
    ah_msg_set_str (r, "turn_id", turn);
    ah_msg_set_str (r, "agent_id", id);
    ah_msg_set_int (r, "expires_at", expires);
    ah_actor_reply (self->actor, msg, r);
}

//  TURN_RENEW and TURN_END: one guarded UPDATE on a turn still running.
static void s_turn_change (self_t *self, const ah_msg_t *msg, bool end)
{
    const char *turn = ah_msg_str (msg, "turn_id");
    if (!turn) {
        ah_actor_reply_error (self->actor, msg, 400, "needs 'turn_id' (a string)");
        return;
    }
    int64_t now = ah_store_now_ms ();
    sqlite3_stmt *st = ah_store_prepare (self->store, end
        ? "UPDATE turns SET ended_at = :now WHERE id = :id AND ended_at IS NULL"
          " AND expires_at > :now RETURNING agent_id, expires_at"
        : "UPDATE turns SET expires_at = :exp WHERE id = :id AND ended_at IS NULL"
          " AND expires_at > :now RETURNING agent_id, expires_at");
    if (!st || ah_store_bind_text (st, ":id", turn) || ah_store_bind_int64 (st, ":now", now)
    ||  (!end && ah_store_bind_int64 (st, ":exp", now + s_lease (msg)))) {
        ah_actor_reply_error (self->actor, msg, 500, "could not update the turn (see the server log)");
        return;
    }
    int rc = ah_store_step (self->store, st);
    char agent [48] = "";
    int64_t expires = 0;
    if (rc == SQLITE_ROW) {
        snprintf (agent, sizeof agent, "%s", (const char *) sqlite3_column_text (st, 0));
        expires = sqlite3_column_int64 (st, 1);
    }
    sqlite3_reset (st);
    if (rc != SQLITE_ROW) {
        ah_actor_reply_error (self->actor, msg, 404,
                              "no running turn '%.32s' (it ended, its lease expired, or it never was)", turn);
        return;
    }
    s_turned (self, agent, now, false);
    ah_msg_t *r = ah_msg_reply_ok (msg);
    ah_msg_set_str (r, "turn_id", turn);
    ah_msg_set_str (r, "agent_id", agent);
    ah_msg_set_int (r, "expires_at", expires);
    ah_actor_reply (self->actor, msg, r);
}

static void s_turn_renew (void *self, ah_msg_t *msg) { s_turn_change (self, msg, false); }
static void s_turn_end (void *self, ah_msg_t *msg) { s_turn_change (self, msg, true); }

//  A sandbox's state moved (lifecycle's SANDBOX_STATE) at now_ms.
static void s_state_set (self_t *self, const char *agent, const char *state, int64_t now_ms)
{
    if (streq (state, "destroyed")) {
        s_forget (self, agent);
        return;
    }
    facts_t *f = s_facts (self, agent);
    if (!f)
        return;
    f->stop_sent = false;
    f->has_sample = false;
    f->has_share = false;
    f->running = streq (state, "running");
    f->dirty = f->running;
    f->has_row = false;                     //  entering running moved last_activity_at
    s_index (self, f);
    if (f->running)
        s_touch (f, now_ms);                //  the idle clock starts when it runs
    else {
        //  Only running sandboxes have a forecast.
        sqlite3_stmt *st = ah_store_prepare (self->store, "DELETE FROM sleep_forecast WHERE agent_id = :id");
        f->forecast_known = st && !ah_store_bind_text (st, ":id", agent)
                         && ah_store_step (self->store, st) == SQLITE_DONE;
        f->forecast_at = INT64_MIN;
        if (st)
            sqlite3_reset (st);
    }
}

static void s_state (void *self_, ah_msg_t *msg)
{
    const char *agent = ah_msg_str (msg, "agent_id"), *state = ah_msg_str (msg, "state");
    if (agent && state)
        s_state_set (self_, agent, state, ah_store_now_ms ());
}

//  Lifecycle moved what the database knows of its use: the new
//  last_activity_at (ms, < 0: not said) or idle_minutes (NAN: not said)
//  are kept; a change it does not say is read again. Either way its
//  verdict is asked again at the next pass.
static void s_changed_set (self_t *self, const char *agent, int64_t last_activity, double idle_minutes)
{
    facts_t *f = agent ? zhashx_lookup (self->facts, agent) : NULL;
    if (!f)
        return;
    bool said = false;
    if (last_activity >= 0) {               //  the flush writes the later of the two
        f->last_activity = s_max (f->last_activity, last_activity);
        said = true;
    }
    if (isfinite (idle_minutes) && idle_minutes >= 0) {
        f->idle_minutes = idle_minutes;
        said = true;
    }
    if (!said)
        f->has_row = false;
    s_dirty (self, f);
}

static void s_changed (void *self, ah_msg_t *msg)
{
    s_changed_set (self, ah_msg_str (msg, "agent_id"), ah_msg_int (msg, "last_activity_at", -1),
                   ah_msg_double (msg, "idle_minutes", NAN));
}

static void s_stats (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *agent = ah_msg_str (msg, "agent_id");
    int64_t cpu = ah_msg_int (msg, "cpu_ns", -1), at = ah_msg_int (msg, "at_ns", -1);
    if (!agent || cpu < 0 || at <= 0) {
        ah_warn (AREA, "AGENT_STATS from '%s' without agent_id, cpu_ns or at_ns: ignored", ah_msg_peer (msg));
        return;
    }
    facts_t *f = s_facts (self, agent);
    if (!f)
        return;
    if (f->has_sample && at > f->cpu_at_ns && cpu >= f->cpu_ns) {
        f->cpu_share = (double) (cpu - f->cpu_ns) / (double) (at - f->cpu_at_ns);
        f->has_share = true;
        if (f->cpu_share >= f->recheck_cpu)
            s_dirty (self, f);              //  may keep it awake: ask again
    }
    f->has_sample = true;
    f->cpu_ns = cpu;
    f->cpu_at_ns = at;
}

static void s_terminals (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *agent = ah_msg_str (msg, "agent_id");
    facts_t *f = agent ? s_facts (self, agent) : NULL;
    if (f) {
        f->terminals = (int) ah_msg_int (msg, "open", 0);
        s_touch (f, ah_store_now_ms ());
        f->stop_sent = f->stop_sent && f->terminals == 0;
        s_dirty (self, f);
    }
}

static void s_check (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    int checked = 0;
    int64_t now = ah_msg_int (msg, "now_ms", ah_store_now_ms ());
    int idle = s_pass (self, now, &checked);
    ah_msg_t *r = idle < 0 ? ah_msg_reply_error (msg, 500, "the sleeper pass failed (see the log)")
                           : ah_msg_reply_ok (msg);
    ah_msg_set_int (r, "checked", checked);
    ah_msg_set_int (r, "idle", idle);
    ah_msg_set_int (r, "asked", self->evaluated);
    ah_msg_set_int (r, "read", self->rows_read);
    ah_msg_set_int (r, "written", self->forecasts);
    ah_actor_reply (self->actor, msg, r);
}

static void s_policy_reload (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    if (ah_policy_reload (self->policy, true) < 0)
        ah_warn (AREA, "idle.lua not reloaded, the previous version stays: %s",
                 ah_policy_error (self->policy));
}

//  Lifecycle's answers to our SANDBOX_STOP: 409 means it moved meanwhile.
static void s_reply (void *self_, ah_msg_t *msg)
{
    if (!ah_msg_bool (msg, "ok", false) && ah_msg_int (msg, "status", 0) != 409)
        ah_warn (AREA, "%s answered: %s", ah_msg_peer (msg),
                 ah_msg_str (msg, "error") ? ah_msg_str (msg, "error") : "an error");
}

static void s_on_timer (void *self_, void *arg)
{
    int checked = 0;
    s_pass (self_, ah_store_now_ms (), &checked);
}

static void s_facts_free (void **item)
{
    free (*item);
    *item = NULL;
}

static void s_self_destroy (self_t *self)
{
    ah_policy_destroy (&self->policy);
    ah_store_close (&self->store);
    zhashx_destroy (&self->facts);
    free (self->heap);
    self->heap = NULL;
}

//  0, or -1 with *why (caller frees).
static int s_self_init (self_t *self, const char *db_path, const char *lua_dir, char **why)
{
    char *err = NULL;
    self->facts = zhashx_new ();
    zhashx_set_destructor (self->facts, s_facts_free);
    self->started_ms = ah_store_now_ms ();
    self->full = true;
    if (!(self->store = ah_store_open (db_path, false, &err)))
        *why = ah_strf ("cannot open %s: %s", db_path, err);
    else
    //  Mapped: the due rows read one by one cost no system call each
    //  (bench/sleeper: a third less CPU per pass at 100,000 agents; at
    //  most 256 MiB of the file).
    if (ah_store_exec (self->store, "PRAGMA mmap_size = 268435456", &err))
        *why = ah_strf ("cannot map %s: %s", db_path, err);
    else
    if (!(self->policy = ah_policy_new (lua_dir, "idle.lua", AREA, self->store, &err)))
        *why = ah_strf ("cannot load idle.lua from %s: %s", lua_dir, err);
    free (err);
    return self->policy ? 0 : -1;
}

ah_sleeper_index_t *ah_sleeper_index_new (const char *db_path, const char *lua_dir, char **err)
{
    self_t *self = calloc (1, sizeof *self);
    char *why = NULL;
    if (self && s_self_init (self, db_path, lua_dir, &why) == 0) {
        self->started_ms = 0;
        return self;
    }
    if (err)
        *err = why ? why : strdup ("out of memory");
    else
        free (why);
    if (self)
        s_self_destroy (self);
    free (self);
    return NULL;
}

int ah_sleeper_index_pass (ah_sleeper_index_t *self, int64_t now_ms, int *checked, int *asked, int *read,
                           int *written)
{
    int rc = s_pass (self, now_ms, checked);
    if (asked)
        *asked = self->evaluated;
    if (read)
        *read = self->rows_read;
    if (written)
        *written = self->forecasts;
    return rc;
}

void ah_sleeper_index_changed (ah_sleeper_index_t *self, const char *agent_id,
                               int64_t last_activity_ms, double idle_minutes)
{
    s_changed_set (self, agent_id, last_activity_ms, idle_minutes);
}

void ah_sleeper_index_write_all (ah_sleeper_index_t *self)
{
    self->write_all = true;
}

void ah_sleeper_index_turned (ah_sleeper_index_t *self, const char *agent_id, int64_t now_ms, bool started)
{
    s_turned (self, agent_id, now_ms, started);
}

void ah_sleeper_index_state (ah_sleeper_index_t *self, const char *agent_id, const char *state, int64_t now_ms)
{
    s_state_set (self, agent_id, state, now_ms);
}

void ah_sleeper_index_destroy (ah_sleeper_index_t **self_p)
{
    if (self_p && *self_p) {
        s_self_destroy (*self_p);
        free (*self_p);
        *self_p = NULL;
    }
}

static void s_destroy (void *self_)
{
    s_self_destroy (self_);
    free (self_);
}

static void *s_init (ah_actor_t *actor, void *args)
{
    const ah_sleeper_args_t *a = args;
    self_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->actor = actor;
    char *why = NULL;
    if (s_self_init (self, a->db_path, a->config->lua_dir, &why)) {
        ah_actor_fail (actor, "%s", why ? why : "out of memory");
        free (why);
        s_destroy (self);
        return NULL;
    }
    int64_t interval = a->check_interval_ms > 0 ? a->check_interval_ms
                     : (int64_t) llround (a->config->idle_check_interval_s * 1000.0);
    if (interval < 100)
        interval = 100;
    ah_actor_timer (actor, interval, interval, s_on_timer, NULL);
    ah_info (AREA, "checking running sandboxes every %lld ms with idle.lua", (long long) interval);
    return self;
}

static const ah_actor_handler_t s_handlers [] = {
    { "TURN_START", s_turn_start },
    { "TURN_RENEW", s_turn_renew },
    { "TURN_END", s_turn_end },
    { "TERMINALS", s_terminals },
    { "AGENT_STATS", s_stats },
    { "SANDBOX_STATE", s_state },
    { "AGENT_CHANGED", s_changed },
    { "SLEEPER_CHECK", s_check },
    { "POLICY_RELOAD", s_policy_reload },
    { "REPLY", s_reply },
    { NULL, NULL }
};

const ah_actor_def_t ah_sleeper_actor = {
    .name = AREA, .on_bus = true, .init = s_init, .destroy = s_destroy, .handlers = s_handlers,
};
