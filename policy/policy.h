/*  policy/policy.h: the Lua policy host. docs/policy.md describes the hooks.

    One ah_policy_t holds one script (limits.lua, idle.lua, briefing.lua)
    in its own restricted Lua 5.4 state, for one holder (the actor that
    owns it: "lifecycle", "sleeper", "builder"). It belongs to that actor's
    thread and is never shared; two actors that need the same script each
    make their own.

    The state has no io, no os beyond os.time/os.clock/os.date, no require,
    package, load, loadfile, dofile, debug, collectgarbage, string.dump;
    print goes to the log. Library tables are read-only; after the script
    has run, creating or reading an undefined global is an error (typos
    fail loudly instead of reading nil). Each call is bounded by an
    instruction budget and the state's memory by a cap.

    Reload: ah_policy_reload stats the file (cheap) and, when it changed
    (or when forced), loads it into a fresh state; the new state replaces
    the old only if the script loaded and ran cleanly. Otherwise the
    previous version stays in force and the reason is kept
    (ah_policy_error) and written to policy_status (docs/schema.md).
    ah_policy_call also checks the file before a call, at most once per
    check interval (default 1 s; 0 = before every call), so an edited
    policy takes effect without a restart or a signal.

    Arguments and results are ah_msg_t maps. Arguments become Lua tables:
    strings, numbers (integers stay integers), booleans, nil; binary as
    strings; nested msgpack (ah_msg_set_raw) as nested tables. The result
    must be a table with string keys and flat values (string, number,
    boolean); a nested table in a result is refused with an error naming
    the key. The result message's type is "POLICY".                     */
#ifndef AH_POLICY_H
#define AH_POLICY_H

#include "proto/msg.h"
#include "store/store.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AH_POLICY_BUDGET         1000000        //  VM instructions per call (and for loading)
#define AH_POLICY_MEMORY_LIMIT   (32u << 20)    //  bytes per Lua state
#define AH_POLICY_MAX_SCRIPT     (1u << 20)     //  largest script file accepted

typedef struct ah_policy_t ah_policy_t;

//  Load lua_dir/script for holder. store (borrowed, may be NULL) receives
//  the status rows and must outlive the policy. NULL with *err (caller
//  frees) if the script cannot be loaded; the failure is recorded in
//  policy_status too.
ah_policy_t *ah_policy_new (const char *lua_dir, const char *script, const char *holder,
                            ah_store_t *store, char **err);
void ah_policy_destroy (ah_policy_t **self_p);

//  Call function(arg1, arg2) (either may be NULL: no argument / nil).
//  0 with *result (caller destroys) or -1 with *err (caller frees), e.g.
//  "policy limits.lua: admit() exceeded its budget of 1000000 instructions".
int ah_policy_call (ah_policy_t *self, const char *function,
                    const ah_msg_t *arg1, const ah_msg_t *arg2,
                    ah_msg_t **result, char **err);
//  The same with nargs (at most 8) arguments; a NULL one is nil.
int ah_policy_callv (ah_policy_t *self, const char *function,
                     const ah_msg_t *const *args, size_t nargs,
                     ah_msg_t **result, char **err);

//  1 = a new version is in force, 0 = the file had not changed (and not
//  forced), -1 = the new version failed to load and the previous one stays
//  (ah_policy_error says why).
int ah_policy_reload (ah_policy_t *self, bool force);

//  Why the last load failed, or NULL if it did not (borrowed).
const char *ah_policy_error (ah_policy_t *self);
//  When the version in force was loaded (ms since the epoch).
int64_t     ah_policy_loaded_at (ah_policy_t *self);
const char *ah_policy_script (ah_policy_t *self);     //  "limits.lua"
const char *ah_policy_holder (ah_policy_t *self);

//  Tuning (tests mostly). Take effect at the next call / load.
void ah_policy_set_budget (ah_policy_t *self, int64_t instructions);
void ah_policy_set_memory_limit (ah_policy_t *self, size_t bytes);
void ah_policy_set_check_interval (ah_policy_t *self, int64_t ms);

#endif
