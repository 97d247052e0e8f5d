/*  actors/sleeper.c: the sleeper actor (see sleeper.h): its messages
    and its timer. The due index it keeps (the facts, the heap, the
    passes, the forecast rows) is sleeper_index.c.

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
    (s_shown, sleeper_index.c). This actor is the only writer of the table, so it knows
    each running agent's row from its own writes and deletes; one it does
    not know (since its start, or a write that failed) is written.      */
#include "actors/sleeper_int.h"
#include "common/log.h"
#include "common/msg.h"
#include "common/str.h"
#include "common/token.h"
#include "policy/policy.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static int64_t s_lease (const ah_msg_t *msg)
{
    int64_t lease = ah_msg_int (msg, "lease_ms", AH_SLEEPER_TURN_LEASE_MS);
    if (lease < 1000) lease = 1000;
    if (lease > AH_SLEEPER_TURN_LEASE_MAX_MS) lease = AH_SLEEPER_TURN_LEASE_MAX_MS;
    return lease;
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
    ah_sleeper_index_turned (self, id, now, true);
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
    ah_sleeper_index_turned (self, agent, now, false);
    ah_msg_t *r = ah_msg_reply_ok (msg);
    ah_msg_set_str (r, "turn_id", turn);
    ah_msg_set_str (r, "agent_id", agent);
    ah_msg_set_int (r, "expires_at", expires);
    ah_actor_reply (self->actor, msg, r);
}

static void s_turn_renew (void *self, ah_msg_t *msg) { s_turn_change (self, msg, false); }
static void s_turn_end (void *self, ah_msg_t *msg) { s_turn_change (self, msg, true); }

static void s_state (void *self_, ah_msg_t *msg)
{
    const char *agent = ah_msg_str (msg, "agent_id"), *state = ah_msg_str (msg, "state");
    if (agent && state)
        ah_sleeper_index_state (self_, agent, state, ah_store_now_ms ());
}

static void s_changed (void *self, ah_msg_t *msg)
{
    ah_sleeper_index_changed (self, ah_msg_str (msg, "agent_id"), ah_msg_int (msg, "last_activity_at", -1),
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
    facts_t *f = sleeper_facts (self, agent);
    if (!f)
        return;
    if (f->has_sample && at > f->cpu_at_ns && cpu >= f->cpu_ns) {
        f->cpu_share = (double) (cpu - f->cpu_ns) / (double) (at - f->cpu_at_ns);
        f->has_share = true;
        if (f->cpu_share >= f->recheck_cpu)
            sleeper_dirty (self, f);              //  may keep it awake: ask again
    }
    f->has_sample = true;
    f->cpu_ns = cpu;
    f->cpu_at_ns = at;
}

//  TERMINALS and PORT_SOCKETS (api), CONV_TURNS (conversations): a count
//  of what keeps the agent busy changed. which: the count it sets.
static void s_count (self_t *self, ah_msg_t *msg, size_t which)
{
    const char *agent = ah_msg_str (msg, "agent_id");
    facts_t *f = agent ? sleeper_facts (self, agent) : NULL;
    if (f) {
        int n = (int) ah_msg_int (msg, which == offsetof (facts_t, conv_turns) ? "running" : "open", 0);
        *(int *) ((char *) f + which) = n < 0 ? 0 : n;
        sleeper_touch (f, ah_store_now_ms ());
        f->stop_sent = f->stop_sent && f->terminals == 0 && f->conv_turns == 0 && f->port_sockets == 0;
        sleeper_dirty (self, f);
    }
}

static void s_terminals (void *self, ah_msg_t *msg) { s_count (self, msg, offsetof (facts_t, terminals)); }
static void s_conv_turns (void *self, ah_msg_t *msg) { s_count (self, msg, offsetof (facts_t, conv_turns)); }
static void s_port_sockets (void *self, ah_msg_t *msg) { s_count (self, msg, offsetof (facts_t, port_sockets)); }

static void s_check (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    int checked = 0;
    int64_t now = ah_msg_int (msg, "now_ms", ah_store_now_ms ());
    int idle = ah_sleeper_index_pass (self, now, &checked, NULL, NULL, NULL);
    int ceiling = sleeper_ceiling (self);
    ah_msg_t *r = idle < 0 ? ah_msg_reply_error (msg, 500, "the sleeper pass failed (see the log)")
                           : ah_msg_reply_ok (msg);
    ah_msg_set_int (r, "checked", checked);
    ah_msg_set_int (r, "idle", idle);
    ah_msg_set_int (r, "asked", self->evaluated);
    ah_msg_set_int (r, "read", self->rows_read);
    ah_msg_set_int (r, "written", self->forecasts);
    ah_msg_set_int (r, "ceiling_stops", ceiling);
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
    ah_sleeper_index_pass (self_, ah_store_now_ms (), &checked, NULL, NULL, NULL);
    sleeper_ceiling (self_);
}

static void s_destroy (void *self_)
{
    sleeper_self_destroy (self_);
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
    //  The drivers that pause (docker, and remote: its hostd runs
    //  docker; the fake one only marks it, and its tests expect idle
    //  agents stopped): with the others idle agents are stopped at once
    //  (docs/lifecycle.md, the frozen tier). freeze_minutes 0 is idle.lua's
    //  (it may still freeze some agents).
    self->no_freeze = !ah_config_driver_freezes (a->config);
    self->freeze_minutes = a->config->freeze_minutes;
    self->frozen_memory_mb = self->no_freeze ? 0 : a->config->frozen_memory_mb;
    if (sleeper_self_init (self, a->db_path, a->config->lua_dir, &why)) {
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
    { "CONV_TURNS", s_conv_turns },
    { "PORT_SOCKETS", s_port_sockets },
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
