/*  actors/sleeper_index.c: the sleeper's due index (see sleeper.c's
    DESIGN for the whole): each running agent's facts and last verdict,
    the heap of the due and dirty ones, the rows kept and read, the
    passes that ask idle.lua, and the forecast rows they write. Used by
    the actor (sleeper.c) and, without it, by the benchmark and the
    tests (ah_sleeper_index_*, sleeper.h).                             */
#include "actors/sleeper_int.h"
#include "common/log.h"
#include "common/msg.h"
#include "common/str.h"
#include "policy/policy.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

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

facts_t *sleeper_facts (self_t *self, const char *agent_id)
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
void sleeper_dirty (self_t *self, facts_t *f)
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
void sleeper_touch (facts_t *f, int64_t ms)
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
    f->frozen = sqlite3_column_int (st, 7) != 0;
    f->frozen_at = sqlite3_column_int64 (st, 8);
    const char *tenant = (const char *) sqlite3_column_text (st, 9);
    snprintf (f->tenant, sizeof f->tenant, "%s", tenant ? tenant : "");
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
        facts_t *f = id ? sleeper_facts (self, id) : NULL;
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
//  The API adds the row's stops_at - sleeps_at to what it works out
//  (the freezing time): that gap must be the verdict's too.
static bool s_shown (const self_t *self, const facts_t *f, bool is_idle, const char *why, int64_t sleeps_at,
                     int64_t gap)
{
    if (self->write_all || is_idle || !why || !streq (why, "recent use") || !f->forecast_known
    ||  !isfinite (f->idle_minutes) || f->idle_minutes < 0 || f->idle_minutes > 1e9)
        return false;
    if (sleeps_at != ah_sleeper_since_use (f->last_activity, f->idle_minutes) || gap != f->forecast_gap)
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
    ah_msg_set_str (sandbox, "tenant", f->tenant);
    ah_msg_set_str (sandbox, "state", f->frozen ? "frozen" : "running");
    ah_msg_set_double (sandbox, "idle_minutes", f->idle_minutes);
    ah_msg_set_str (facts, "state", f->frozen ? "frozen" : "running");
    ah_msg_set_int (facts, "frozen_at_ms", f->frozen ? f->frozen_at : 0);
    ah_msg_set_bool (facts, "can_freeze", !self->no_freeze);
    ah_msg_set_double (facts, "freeze_minutes", self->freeze_minutes);
    ah_msg_set_int (facts, "now_ms", now);
    ah_msg_set_int (facts, "last_activity_ms", last);
    ah_msg_set_double (facts, "idle_minutes", f->idle_minutes);
    ah_msg_set_int (facts, "turns", f->turns);
    ah_msg_set_int (facts, "terminals", f->terminals + f->port_sockets);
    ah_msg_set_int (facts, "conversation_turns", f->conv_turns);
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
        sleeper_dirty (self, f);
        return;
    }
    bool is_idle = ah_msg_bool (verdict, "idle", false);
    const char *why = ah_msg_str (verdict, "why");
    int64_t sleeps_at = (int64_t) ah_msg_double (verdict, "sleeps_at_ms", (double) now);
    int64_t stops_at = (int64_t) ah_msg_double (verdict, "stops_at_ms", (double) sleeps_at);
    const char *action = ah_msg_str (verdict, "action");
    //  Only a running sandbox is frozen, and only where the driver can.
    bool freeze = !f->frozen && !self->no_freeze && action && streq (action, "freeze");
    double recheck = ah_msg_double (verdict, "recheck_cpu_share", 0);
    if (why && (streq (why, "turn") || streq (why, "terminal") || streq (why, "cpu")))
        sleeper_touch (f, now);
    f->dirty = false;
    f->idle = is_idle;
    f->sleeps_at = is_idle ? now : sleeps_at;
    f->recheck_cpu = isfinite (recheck) && recheck > 0 ? recheck : 0;
    if (!s_shown (self, f, is_idle, why, sleeps_at, stops_at - sleeps_at)) {
        f->forecast_known = !ah_store_bind_text (up, ":id", f->id)
            && !ah_store_bind_int64 (up, ":sleeps_at", sleeps_at) && !ah_store_bind_text (up, ":why", why)
            && !ah_store_bind_int64 (up, ":stops_at", stops_at)
            && !ah_store_bind_int64 (up, ":now", now) && ah_store_step (self->store, up) == SQLITE_DONE;
        sqlite3_reset (up);
        f->forecast_at = sleeps_at;
        f->forecast_recent = why && streq (why, "recent use");
        f->forecast_gap = stops_at - sleeps_at;
        self->forecasts++;
    }
    if (is_idle) {
        if (!f->stop_sent && self->actor) {
            ah_msg_t *stop = ah_msg_new (freeze ? "SANDBOX_FREEZE" : "SANDBOX_STOP");
            ah_msg_set_int (stop, "req", ++self->req_seq);
            ah_msg_set_str (stop, "agent", f->id);
            ah_msg_set_str (stop, "reason", f->frozen ? "frozen for freeze_minutes" : "idle");
            ah_actor_send (self->actor, "lifecycle", &stop);
            ah_info (AREA, "agent '%s' is %s: asked lifecycle to %s", f->name, f->frozen ? "frozen long enough"
                     : "idle", freeze ? "freeze it" : "put it to sleep");
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
            sleeper_dirty (self, ask [i]);
        }
        free (ask);
        return -1;
    }
    if (full)
        ah_store_exec (self->store, "DELETE FROM sleep_forecast WHERE agent_id NOT IN"
                       " (SELECT agent_id FROM sandboxes WHERE state IN ('running','frozen'))", NULL);
    sqlite3_stmt *up = ah_store_prepare (self->store, AH_SLEEPER_FORECAST_SQL);
    ah_msg_t *sandbox = ah_msg_new ("SANDBOX");
    ah_msg_t *facts = ah_msg_new ("FACTS");
    for (size_t i = 0; i < n; i++) {
        ask [i]->running = true;
        if (up)
            s_judge (self, ask [i], now, up, sandbox, facts);
        else
            sleeper_dirty (self, ask [i]);        //  asked again at the next pass
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

//  This actor changed one of its turns at now: it was busy then, and its
//  row is read again (a new turn, a renewed lease or an end).
static void s_turned (self_t *self, const char *agent, int64_t now, bool started)
{
    facts_t *f = sleeper_facts (self, agent);
    if (f) {
        sleeper_touch (f, now);
        if (started)
            f->stop_sent = false;
        f->has_row = false;
        sleeper_dirty (self, f);
    }
}

//  A sandbox's state moved (lifecycle's SANDBOX_STATE) at now_ms.
static void s_state_set (self_t *self, const char *agent, const char *state, int64_t now_ms)
{
    if (streq (state, "destroyed")) {
        s_forget (self, agent);
        return;
    }
    facts_t *f = sleeper_facts (self, agent);
    if (!f)
        return;
    f->stop_sent = false;
    f->has_sample = false;
    f->has_share = false;
    //  Frozen stays in the running set: the ladder's next step (stopped
    //  freeze_minutes after) is judged like the first.
    f->frozen = streq (state, "frozen");
    f->running = streq (state, "running") || f->frozen;
    if (f->frozen)
        f->frozen_at = now_ms;              //  until its row is read again
    f->dirty = f->running;
    f->has_row = false;                     //  entering running moved last_activity_at
    s_index (self, f);
    if (streq (state, "running"))
        sleeper_touch (f, now_ms);                //  the idle clock starts when it runs
    else
    if (!f->running) {
        //  Only running sandboxes have a forecast.
        sqlite3_stmt *st = ah_store_prepare (self->store, "DELETE FROM sleep_forecast WHERE agent_id = :id");
        f->forecast_known = st && !ah_store_bind_text (st, ":id", agent)
                         && ah_store_step (self->store, st) == SQLITE_DONE;
        f->forecast_at = INT64_MIN;
        if (st)
            sqlite3_reset (st);
    }
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
    sleeper_dirty (self, f);
}

static void s_facts_free (void **item)
{
    free (*item);
    *item = NULL;
}

void sleeper_self_destroy (self_t *self)
{
    ah_policy_destroy (&self->policy);
    ah_store_close (&self->store);
    zhashx_destroy (&self->facts);
    free (self->heap);
    self->heap = NULL;
}

//  0, or -1 with *why (caller frees).
int sleeper_self_init (self_t *self, const char *db_path, const char *lua_dir, char **why)
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

//  The frozen tier's memory ceiling (docs/lifecycle.md): the sandboxes
//  frozen here, each counted at its memory limit, may hold at most
//  sandbox.frozen_memory_mb; past it the longest-frozen are stopped
//  (sleeping) first until what stays frozen is within it. One host: the
//  one this installation's driver runs its sandboxes on.
typedef struct {
    char    id [48];
    char    name [AH_NAME_MAX + 1];
    int64_t mb;
} frozen_t;

int sleeper_ceiling (self_t *self)
{
    if (self->frozen_memory_mb <= 0)
        return 0;
    sqlite3_stmt *st = ah_store_prepare (self->store, "SELECT s.agent_id, a.name, s.memory_mb FROM sandboxes s"
                                         " JOIN agents a ON a.id = s.agent_id WHERE s.state = 'frozen'"
                                         " AND a.pool IS NULL"      //  warm: lifecycle's pools
                                         " ORDER BY s.frozen_at, s.agent_id");
    if (!st)
        return 0;
    size_t n = 0, cap = 0;
    frozen_t *rows = NULL;
    int64_t held = 0;
    while (ah_store_step (self->store, st) == SQLITE_ROW) {
        if (n == cap) {
            frozen_t *more = realloc (rows, (cap = cap ? 2 * cap : 16) * sizeof *rows);
            if (!more)
                break;
            rows = more;
        }
        const char *id = (const char *) sqlite3_column_text (st, 0);
        const char *name = (const char *) sqlite3_column_text (st, 1);
        snprintf (rows [n].id, sizeof rows [n].id, "%s", id ? id : "");
        snprintf (rows [n].name, sizeof rows [n].name, "%s", name ? name : "");
        rows [n].mb = sqlite3_column_int64 (st, 2);
        held += rows [n++].mb;
    }
    sqlite3_reset (st);
    int asked = 0;
    for (size_t i = 0; i < n && held > self->frozen_memory_mb; i++) {
        held -= rows [i].mb;
        facts_t *f = sleeper_facts (self, rows [i].id);
        if (!f || f->stop_sent)
            continue;                       //  already on its way down
        f->stop_sent = true;
        asked++;
        if (!self->actor)
            continue;
        ah_msg_t *stop = ah_msg_new ("SANDBOX_STOP");
        ah_msg_set_int (stop, "req", ++self->req_seq);
        ah_msg_set_str (stop, "agent", rows [i].id);
        ah_msg_set_str (stop, "reason", "frozen memory ceiling");
        ah_actor_send (self->actor, "lifecycle", &stop);
        ah_info (AREA, "agent '%s' frozen longest while frozen sandboxes hold more than %lld MB "
                 "(sandbox.frozen_memory_mb): asked lifecycle to put it to sleep", rows [i].name,
                 (long long) self->frozen_memory_mb);
    }
    free (rows);
    return asked;
}

ah_sleeper_index_t *ah_sleeper_index_new (const char *db_path, const char *lua_dir, char **err)
{
    self_t *self = calloc (1, sizeof *self);
    char *why = NULL;
    if (self && sleeper_self_init (self, db_path, lua_dir, &why) == 0) {
        self->started_ms = 0;
        self->freeze_minutes = 10;
        return self;
    }
    if (err)
        *err = why ? why : strdup ("out of memory");
    else
        free (why);
    if (self)
        sleeper_self_destroy (self);
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

int ah_sleeper_index_ceiling (ah_sleeper_index_t *self, int64_t frozen_memory_mb)
{
    self->frozen_memory_mb = frozen_memory_mb;
    return sleeper_ceiling (self);
}

void ah_sleeper_index_destroy (ah_sleeper_index_t **self_p)
{
    if (self_p && *self_p) {
        sleeper_self_destroy (*self_p);
        free (*self_p);
        *self_p = NULL;
    }
}

