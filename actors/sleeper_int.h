/*  actors/sleeper_int.h: what the sleeper actor (sleeper.c) and its due
    index (sleeper_index.c) share: the per-agent facts, the index's state
    (which is the actor's self), and the index's entry points the actor's
    handlers use beside the public ah_sleeper_index_* (sleeper.h). One
    thread: the actor's, or the caller's of an ah_sleeper_index_t.     */
#ifndef AH_SLEEPER_INT_H
#define AH_SLEEPER_INT_H

#include "actors/sleeper.h"
#include "common/ident.h"
#include "policy/policy.h"
#include "store/store.h"

#include <stdbool.h>
#include <stdint.h>

#define AREA "sleeper"

typedef struct {
    int     terminals;              //  open terminal sessions (from the api)
    int     conv_turns;             //  conversation turns running (from conversations)
    int     port_sockets;           //  WebSockets open through its ports (from the api; count as terminals)
    bool    has_sample;
    int64_t cpu_ns;                 //  last CPU sample (from the tunnel)
    int64_t cpu_at_ns;
    double  cpu_share;              //  share of one core between the last two samples
    bool    has_share;
    int64_t busy_at;                //  ms: last time it was found busy or began running
    bool    stop_sent;              //  asked lifecycle to stop (or freeze) it; cleared on a state change
    bool    frozen;                 //  in the running set, frozen (the ladder's second step)
    int64_t frozen_at;              //  ms: when it was frozen (from its row)
    int64_t forecast_gap;           //  its forecast row's stops_at - sleeps_at (see s_shown)
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
    char    tenant [AH_NAME_MAX + 1];
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
    double       freeze_minutes;    //  sandbox.freeze_minutes (idle.lua's facts.freeze_minutes)
    int64_t      frozen_memory_mb;  //  sandbox.frozen_memory_mb (0: no ceiling)
    bool         no_freeze;         //  the driver cannot pause (kubernetes, remote): the ladder skips frozen
};
typedef struct ah_sleeper_index_s self_t;


//  The facts of agent_id, made when first named (NULL: out of memory).
facts_t *sleeper_facts (self_t *self, const char *agent_id);
//  A fact of f changed: its verdict is asked again at the next pass.
void sleeper_dirty (self_t *self, facts_t *f);
//  f was busy at ms (the latest such time is kept).
void sleeper_touch (facts_t *f, int64_t ms);
//  Opens the store and idle.lua for self (zeroed): 0, or -1 with *why
//  (caller frees); sleeper_self_destroy either way.
int  sleeper_self_init (self_t *self, const char *db_path, const char *lua_dir, char **why);
void sleeper_self_destroy (self_t *self);
//  The frozen sandboxes' memory ceiling (sleeper.c): stops the longest
//  frozen while they hold more than sandbox.frozen_memory_mb; how many
//  it asked lifecycle to stop.
int  sleeper_ceiling (self_t *self);

#endif
