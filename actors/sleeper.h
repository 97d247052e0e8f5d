/*  actors/sleeper.h: the sleeper actor (bus name "sleeper").

    Puts idle sandboxes to sleep. Every idle_check_interval it asks the
    Lua idle policy (lua/idle.lua, idle(sandbox, facts)) about each
    running sandbox that is due (its last forecast has come) or whose
    facts changed, and sends SANDBOX_STOP {reason: "idle"} to lifecycle
    for the idle ones. It owns the turns table (leases an agent harness
    holds while it works) and sleep_forecast (when each running sandbox
    falls asleep and why it is awake), and keeps in memory what only the
    live server knows: open terminals (TERMINALS from the api) and CPU
    samples (AGENT_STATS from the tunnel).

    Idle clock: what counts as the last use of a sandbox is the latest of
    its last_activity_at, the end of its last turn, the last check that
    found it busy (turn, terminal or CPU), and the moment it was last
    seen entering running or this actor started: so after a restart the
    idle clock of running agents starts again.

    Messages in docs/messages.md (sleeper section).                    */
#ifndef AH_SLEEPER_H
#define AH_SLEEPER_H

#include "common/actor.h"
#include "config/config.h"

#include <stdbool.h>
#include <stdint.h>

#define AH_SLEEPER_TURN_LEASE_MS      60000     //  default lease of a turn
#define AH_SLEEPER_TURN_LEASE_MAX_MS  3600000

typedef struct {
    const ah_config_t *config;      //  borrowed; idle_check_interval_s, lua_dir
    const char *db_path;            //  the database (opened, not migrated)
    int64_t check_interval_ms;      //  0: from config
} ah_sleeper_args_t;

//  "Recent use": when an agent used last at used_ms sleeps if nothing else
//  happens, idle_minutes later. The one formula the sleeper (which then
//  skips writing that forecast) and the API (which shows it when no later
//  forecast row says otherwise) both use: they must agree to the ms.
static inline int64_t ah_sleeper_since_use (int64_t used_ms, double idle_minutes)
{
    return used_ms + (int64_t) (idle_minutes * 60000 + 0.5);
}

//  The sleeps_at a running agent shows (GET /agents), in one place: the
//  time since use (ah_sleeper_since_use) unless its forecast row
//  (has_forecast, at forecast_at) is at least as late; *by_use says
//  which ("recent use", or the row's why). The API shows it; the sleeper
//  asks it whether a verdict would show so without its row written.
static inline int64_t ah_sleeper_sleeps_at (int64_t used_ms, double idle_minutes, bool has_forecast,
                                            int64_t forecast_at, bool *by_use)
{
    int64_t since = ah_sleeper_since_use (used_ms, idle_minutes);
    *by_use = !has_forecast || since > forecast_at;
    return *by_use ? since : forecast_at;
}

//  ah_actor_new (&ah_sleeper_actor, &args, &err): running once on the bus
//  with its database and idle.lua loaded; NULL with the reason otherwise.
extern const ah_actor_def_t ah_sleeper_actor;

//  The sleeper's passes without the actor, for the benchmark and the
//  tests: its own connection to db_path and its own idle.lua state from
//  lua_dir. The first pass reads every running sandbox; later ones ask
//  only the due and changed, and read again only the rows a message did
//  not keep (sleeper.c, DESIGN). A pass returns how many were found idle,
//  or -1; *checked is how many are running, *asked how many idle.lua was
//  asked about, *read how many rows the pass read, *written how many
//  forecast rows it wrote (not the verdicts the API works out itself,
//  sleeper.c s_shown; _write_all writes them too, for a test's
//  reference). _changed marks an
//  agent as lifecycle's AGENT_CHANGED does (last_activity_ms < 0 and
//  idle_minutes NAN when the change is not said), _turned as this
//  actor's own turn handlers do after their write, _state moves it as
//  its SANDBOX_STATE does.
//  What a pass reads of the running sandboxes (bind :now; add
//  " AND s.agent_id = :id" for one): id, name, idle_minutes,
//  last_activity_at, the turns running at :now, the first of their
//  leases to run out, and the latest end (or lease end) of any turn.
#define AH_SLEEPER_ROWS_SQL \
    "SELECT s.agent_id, a.name, a.idle_minutes, coalesce(s.last_activity_at, 0)," \
    " (SELECT count(*) FROM turns t WHERE t.agent_id = s.agent_id" \
    "   AND t.ended_at IS NULL AND t.expires_at > :now)," \
    " (SELECT min(t.expires_at) FROM turns t WHERE t.agent_id = s.agent_id" \
    "   AND t.ended_at IS NULL AND t.expires_at > :now)," \
    " (SELECT coalesce(max(coalesce(t.ended_at, t.expires_at)), 0)" \
    "   FROM turns t WHERE t.agent_id = s.agent_id)," \
    " s.state = 'frozen', coalesce(s.frozen_at, 0), a.tenant" \
    " FROM sandboxes s JOIN agents a ON a.id = s.agent_id WHERE s.state IN ('running','frozen')" \
    " AND a.pool IS NULL"
//  How it records a verdict (bind :id, :sleeps_at, :stops_at, :why,
//  :now). Here so that bench/sleeper's baselines run the same statements.
#define AH_SLEEPER_FORECAST_SQL \
    "INSERT INTO sleep_forecast (agent_id, sleeps_at, why, checked_at, stops_at)" \
    " VALUES (:id, :sleeps_at, :why, :now, :stops_at) ON CONFLICT (agent_id) DO UPDATE SET" \
    " sleeps_at = excluded.sleeps_at, why = excluded.why, checked_at = excluded.checked_at," \
    " stops_at = excluded.stops_at"

typedef struct ah_sleeper_index_s ah_sleeper_index_t;
ah_sleeper_index_t *ah_sleeper_index_new (const char *db_path, const char *lua_dir, char **err);
int  ah_sleeper_index_pass (ah_sleeper_index_t *self, int64_t now_ms, int *checked, int *asked, int *read,
                           int *written);
void ah_sleeper_index_changed (ah_sleeper_index_t *self, const char *agent_id,
                               int64_t last_activity_ms, double idle_minutes);
void ah_sleeper_index_turned (ah_sleeper_index_t *self, const char *agent_id, int64_t now_ms, bool started);
void ah_sleeper_index_write_all (ah_sleeper_index_t *self);
//  The frozen sandboxes' memory ceiling at frozen_memory_mb: how many
//  (longest-frozen first) it would ask lifecycle to stop (no actor: none
//  is sent; each is marked asked, as the actor's are).
int  ah_sleeper_index_ceiling (ah_sleeper_index_t *self, int64_t frozen_memory_mb);
void ah_sleeper_index_state (ah_sleeper_index_t *self, const char *agent_id, const char *state, int64_t now_ms);
void ah_sleeper_index_destroy (ah_sleeper_index_t **self_p);

#endif
