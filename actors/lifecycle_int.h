/*  actors/lifecycle_int.h: what the files of the lifecycle actor share.
    Internal to the actor: everything here runs on its one thread.

      lifecycle.c          the actor: state, start and stop, the handler
                           table, rows and state moves, activity
      lifecycle_request.c  requests: AGENT_CREATE, AGENT_UPDATE and the
                           transitions (SANDBOX_START/STOP/REBUILD/DESTROY)
      lifecycle_admit.c    admission: request fields, limits.lua, tenant limits
      lifecycle_job.c      driver calls in worker threads and their outcomes,
                           hello deadlines
      lifecycle_repair.c   observations and repairs: SANDBOX_OBSERVED,
                           SANDBOX_HELLO, TUNNEL_LOST, the start-up scan
      lifecycle_host.c     HOST_STATE: a host agent gone (its sandboxes
                           unreachable) or back
      lifecycle_pool.c     warm pools: sandboxes made ahead of any create,
                           taken by one (issue 31)                    */
#ifndef AH_LIFECYCLE_INT_H
#define AH_LIFECYCLE_INT_H

#include "actors/lifecycle.h"
#include "catalog/catalog.h"
#include "common/ident.h"
#include "common/msg.h"
#include "common/token.h"
#include "policy/policy.h"
#include "policy/values.h"
#include "store/store.h"

#include <pthread.h>

#define AREA            "lifecycle"
#define ID_SIZE         (AH_AGENT_ID_LEN + 8)
#define ERROR_MAX_LEN   1024

//  A driver call, a job of the actor's workers (ah_actor_job). Owned by
//  the worker until it has put its outcome in done, then by the actor
//  (which frees it).
typedef struct {
    ah_driver_t *driver;
    char op [16];                   //  create start stop rebuild destroy inspect
    char agent_id [ID_SIZE];
    char token [AH_TOKEN_HEX];      //  start only; wiped when freed
    int  tunnel_port;
    char image [AH_IMAGE_MAX + 1];
    double  cpus;
    int64_t memory_mb;
    int64_t pids_limit;
    const ah_runtime_t *runtime;    //  the actor's catalog (outlives every job); NULL: none
    char *briefing;                 //  start: written into the sandbox; owned by the job
    bool cleanup;                   //  a stop that changes no state (after a hello timeout)
    bool recreate;                  //  start: its container was expired, rebuild it first
    //  create, rebuild or a recreate of a sandbox that had a home: the
    //  driver makes a missing home again, empty, without a word, so the
    //  worker inspects first and a home found gone is recorded lost.
    bool look_first;
    //  create of a warm sandbox (tenant ''): the engine's id of the image
    //  its container was made from is read after (agents.image_id).
    bool read_image_id;
    ah_msg_t *done;                 //  the outcome (JOB_DONE), the worker's last act
} job_t;

//  What the actor keeps per agent between messages, while it holds
//  something (a job, a hello deadline).
typedef struct {
    char    agent_id [ID_SIZE];
    job_t  *job;                    //  the driver call in flight, or NULL
    int     hello_timer;            //  waiting for sandboxd's hello; 0 = not
    char    preparing [AH_NAME_MAX + 2];    //  waiting for this runtime's image; "" = not
    bool    had_home;               //  row_t's, kept for the job while its runtime is prepared
    char    prepared [AH_NAME_MAX + 2];     //  RUNTIME_READY came for this runtime: launch
    bool    image_retried;          //  its runtime's image was found gone once and made again
} track_t;

//  One agent and its sandbox, copied out of the database.
typedef struct {
    char id [ID_SIZE];
    char name [AH_NAME_MAX + 2];
    char tenant [AH_NAME_MAX + 2];
    char image [AH_IMAGE_MAX + 1];
    char runtime [AH_NAME_MAX + 2];     //  "" for none (an image outside the catalog)
    double  cpus;
    int64_t memory_mb;
    double  idle_minutes;
    char state [16];
    char op [16];                   //  "" for NULL
    char error [ERROR_MAX_LEN + 1];
    bool needs_rebuild;
    bool container_removed;         //  sandbox.container_ttl removed its container
    int64_t updated_at;             //  ms: the row's last change
    //  Not from the store: set by a request on the row it launches from,
    //  when the sandbox had a home before the request moved it.
    bool had_home;
} row_t;

typedef struct {
    ah_actor_t *actor;
    bool ending;                    //  $TERM came: jobs that come back only go
    ah_store_t *store;
    const ah_config_t *config;
    ah_driver_t *driver;
    zlist_t *subscribers;           //  of char *, copied
    bool tunnel_subscribed;
    bool sleeper_subscribed;        //  gets AGENT_CHANGED (sleeper.c, the due index)
    int hello_timeout_ms;
    int tunnel_port;
    zhashx_t *tracks;               //  agent id -> track_t *
    zhashx_t *activity;             //  agent id -> int64_t * (ms), waiting for a flush
    int activity_timer;             //  0 = nothing pending
    ah_policy_t *policy;
    ah_catalog_t *catalog;          //  immutable; jobs borrow its runtimes
    bool ensure_images;
    zhashx_t *briefings;            //  runtime alias -> char * (from RUNTIME_READY)
    //  Who caused what the actor does now ("api:<token>", "sleeper",
    //  "reconciler", "ttl", "tombstone-retry"): set while a request or a
    //  sweep is handled, "" otherwise. Written into sandboxes.cause by
    //  every state move, published as SANDBOX_STATE's "by".
    char cause [129];
    int ttl_timer;                  //  the lifetime and tombstone sweep
    zhashx_t *readers;              //  agent id -> reader of its sleeping home (lifecycle_reader.c)
    //  Warm pools (lifecycle_pool.c): pool.lua, NULL when there are none
    //  (sandbox.warm_pool_max 0, no catalog, no pool.lua).
    ah_policy_t *pool_policy;
    int pool_timer;
    bool pool_warned;               //  pool.lua's failure was logged once
    int64_t pool_wanted;            //  what the sizes add up to, at the last fill
    int64_t pool_hits, pool_misses, pool_drained;
    int64_t pool_paused_until;      //  ms: a warm sandbox failed, none made before then
    int64_t pool_taken_first;       //  ms: the first take the refill waits for (0: none)
    int64_t pool_taken_last;        //  ms: the last take
    //  runtime alias -> char *, the engine's id of its image as the
    //  builder last said (RUNTIME_IMAGE): warm rows made from another go.
    zhashx_t *image_ids;
    //  agent id -> a create's answer held until its warm sandbox's thaw
    //  is done (lifecycle_pool.c): sent when the agent's job comes back.
    zhashx_t *held;
    bool pool_frozen_warned;        //  "frozen" asked of a driver without freeze: said once
    int64_t pool_freeze_paused_until;   //  ms: a warm freeze failed, none tried before then
} self_t;

//  What a create or update asks for. Absent fields keep has_* false.
typedef struct {
    char image [AH_IMAGE_MAX + 1];
    char runtime [AH_NAME_MAX + 2];
    double cpus;
    int64_t memory_mb;
    double idle_minutes;
    bool has_image, has_runtime, has_cpus, has_memory, has_idle;
} desired_t;

//  Rows and state moves (lifecycle.c)
const char *ah_lc_state_for_op (const char *op);
const char *ah_lc_op_for_state (const char *state);     //  NULL: not transitional
//  By id first, then by name (within tenant when it is not NULL). 1
//  found, 0 not, -1 error, -2 a name that two tenants hold.
int  ah_lc_lookup (self_t *self, const char *key, row_t *row);
int  ah_lc_lookup_in (self_t *self, const char *key, const char *tenant, row_t *row);
//  The guarded UPDATE: moves the row to `to` if `guard` (constant SQL)
//  holds. 1 (we won), 0 (the row is elsewhere) or -1. Does not publish.
int  ah_lc_update (self_t *self, const char *agent_id, const char *guard,
                   const char *to, const char *op, const char *error);
//  ah_lc_update, and SANDBOX_STATE when it won.
int  ah_lc_move (self_t *self, const char *agent_id, const char *guard,
                 const char *to, const char *op, const char *error);
//  SANDBOX_STATE to every subscriber, TUNNEL_KICK where it applies.
//  SANDBOX_CONNECTED {agent_id, connected} to the api (when it is a
//  subscriber): the sandbox's sandboxd said hello, or its tunnel went.
void ah_lc_connected (self_t *self, const char *agent_id, bool connected);
void ah_lc_publish (self_t *self, const char *agent_id, const char *state,
                    const char *op, const char *error);
//  AGENT_CHANGED to the sleeper (when it subscribes): what the database
//  knows of the agent's use moved; the values written, when known
//  (last_activity_at < 0, idle_minutes NAN: not said).
void ah_lc_changed (self_t *self, const char *agent_id, int64_t last_activity_at, double idle_minutes);
//  self->cause for the length of one call of fn (a request's "by", else
//  its sender).
void ah_lc_caused (self_t *self, const ah_msg_t *msg, void (*fn) (void *, ah_msg_t *));
//  One statement with :id bound. 0 / -1.
int  ah_lc_run (self_t *self, const char *sql, const char *agent_id);
//  The agent's rows are gone: forget what the actor holds for it.
void ah_lc_forget_agent (self_t *self, const char *agent_id);

//  Admission (lifecycle_admit.c)
//  0 when value is a valid kind; else a 400 naming the value and the
//  rule (common/ident.h), and -1.
int  ah_lc_ident (self_t *self, const ah_msg_t *msg, ah_ident_t kind, const char *value);
//  An optional string field: 0 absent or nil, 1 (*out set), -1 not a string.
int  ah_lc_opt_str (const ah_msg_t *msg, const char *key, const char **out);
//  The optional fields of a request, type-checked. 0, or -1 after a 400.
int  ah_lc_desired (self_t *self, const ah_msg_t *msg, desired_t *d);
//  The runtime decides the image and, unless asked, the memory.
void ah_lc_runtime_apply (desired_t *d, const ah_runtime_t *rt);
//  lua/limits.lua's admit (tenant, request, usage, limits) decides a
//  create, a start or an update: op "create", "start" or "update".
//  *out starts as the agent's current values and ends as what it will
//  hold. 0 admitted, 1 refused (*why, a 422), -1 could not decide (*why,
//  a 500). Called inside the actor's one thread, between reading what
//  the tenant holds and the guarded change that follows, so concurrent
//  requests are decided one after another against what the last left.
int  ah_lc_admit (self_t *self, const char *op, const char *name, const char *tenant,
                  const char *except, const desired_t *asked, desired_t *out, char **why);
//  The agents that follow the default idle timeout (agents.idle_default)
//  take the one in force (policy/values.h); the sleeper hears of each
//  moved (AGENT_CHANGED). On POLICY_VALUES and at start.
void ah_lc_idle_defaults (self_t *self);

//  Driver calls (lifecycle_job.c)
//  A worker for op, unless one is in flight for the agent already (the
//  row then says what comes next). -1 when it could not be started (the
//  row went to error).
int  ah_lc_launch (self_t *self, const row_t *row, const char *op, bool cleanup);
//  What the row's transitional state asks for.
void ah_lc_launch_for_row (self_t *self, const row_t *row);
bool ah_lc_busy (self_t *self, const char *agent_id);
//  create or rebuild done: on to starting (from the state `from`).
void ah_lc_begin_start (self_t *self, const row_t *row, const char *from);
//  Wait for sandboxd's hello (hello_timeout_ms), or stop waiting.
void ah_lc_hello_wait (self_t *self, const char *agent_id);
void ah_lc_hello_cancel (self_t *self, const char *agent_id);
//  Forget an idle track.
void ah_lc_forget (self_t *self, const char *agent_id);

//  Readers of sleeping agents' homes (lifecycle_reader.c)
void ah_lc_on_reader_open (void *self, ah_msg_t *msg);
void ah_lc_on_reader_hello (void *self, ah_msg_t *msg);
void ah_lc_on_reader_keep (void *self, ah_msg_t *msg);
void ah_lc_on_reader_lost (void *self, ah_msg_t *msg);
//  A reader job ("reader", "reader-stop") ended: true when op was one.
bool ah_lc_reader_job_done (self_t *self, const ah_msg_t *done, const char *op);
//  The agent's row moved to state: its reader goes unless it sleeps.
void ah_lc_reader_state (self_t *self, const char *agent_id, const char *state);
void ah_lc_readers_destroy (self_t *self);

//  Host agents (lifecycle_host.c)
void ah_lc_on_host_state (void *self, ah_msg_t *msg);
//  1 (with why) when the agent's host does not answer, else 0.
int  ah_lc_unreachable (self_t *self, const char *agent_id, char *why, size_t size);
//  Observed, so its host answers: the flag goes, its state is published.
void ah_lc_reachable (self_t *self, const row_t *row);

//  Warm pools (lifecycle_pool.c)
//  Load pool.lua and start the fill timer (nothing when there are no
//  warm pools). 0.
int  ah_lc_pool_init (self_t *self);
//  Timer: drain what no longer fits, start what a restart left asleep,
//  make what is missing.
void ah_lc_pool_fill (void *self, void *arg);
//  A create (admitted, its values in d) takes a ready warm sandbox of
//  d's runtime and shape: 1 with *row the agent's (running, or thawing
//  when it was frozen: its thaw launched), 0 none, -1 error.
int  ah_lc_pool_take (self_t *self, const char *name, const char *tenant, const desired_t *d,
                      const char *harness, row_t *row);
//  POOL_LIST {req}: the pools, their sizes and ready counts, hits and misses.
void ah_lc_on_pool_list (void *self, ah_msg_t *msg);
//  A take of a frozen warm sandbox: its create's reply (taken) waits
//  for the thaw (1), or 0 when it cannot be held (answer it now).
int  ah_lc_pool_hold (self_t *self, const char *agent_id, const ah_msg_t *request, ah_msg_t **reply_p);
//  The agent's job came back: a held answer goes now.
void ah_lc_pool_answer (self_t *self, const char *agent_id);
//  self->held's destructor.
void ah_lc_held_free (void **item);
//  RUNTIME_IMAGE {runtime, image, image_id, previous?} from the builder.
void ah_lc_on_runtime_image (void *self, ah_msg_t *msg);
//  A warm row's create is done: the image id its container was made from.
void ah_lc_pool_image_id (self_t *self, const char *agent_id, const char *image_id);
//  A freeze of a warm sandbox failed: it runs instead (1), or 0 when
//  the row is not warm.
int  ah_lc_pool_freeze_failed (self_t *self, const char *agent_id);

//  Observations and repairs (lifecycle_repair.c)
//  What the driver says against what the row says (docs/lifecycle.md,
//  "Repairs"); seen: a SANDBOX_OBSERVED or an inspect's JOB_DONE
//  {exists, running, exit_code, detail, home_gone}; startup: the first
//  look after a restart.
void ah_lc_repair (self_t *self, const char *agent_id, const ah_msg_t *seen, bool startup);
void ah_lc_on_observed (void *self, ah_msg_t *msg);
void ah_lc_on_hello (void *self, ah_msg_t *msg);
void ah_lc_on_tunnel_lost (void *self, ah_msg_t *msg);
//  Timer: transitional and running rows left by a previous run.
void ah_lc_startup_scan (void *self, void *arg);

//  Runtimes (lifecycle_job.c): RUNTIME_READY and RUNTIME_PROGRESS from the builder.
void ah_lc_on_runtime_ready (void *self, ah_msg_t *msg);
void ah_lc_on_runtime_progress (void *self, ah_msg_t *msg);
//  Lifetimes and tombstones (lifecycle_ttl.c)
//  Timer: containers and homes whose lifetime ended, destroys due for a
//  retry (docs/lifecycle.md "Lifetimes", "Tombstones").
void ah_lc_ttl_sweep (void *self, void *arg);
//  Its home's files are gone (detail: the driver's words): home_lost is
//  set once, so a session on it is reported lost (docs/sessions.md).
//  Did the row's sandbox have a home to lose (its state, before a move)?
bool ah_lc_had_home (const row_t *row);
void ah_lc_home_lost (self_t *self, const row_t *row, const char *detail);
//  An expire or expire-home job ended (JOB_DONE {ok, error}).
void ah_lc_expired (self_t *self, const ah_msg_t *done, const char *agent_id, const char *op);
//  A destroy failed: its tombstone learns why and when the next try is.
void ah_lc_tombstone_failed (self_t *self, const char *agent_id, const char *why);
//  TOMBSTONE_FORGET {req, agent}: an admin gives up on a destroy.
void ah_lc_on_tombstone_forget (void *self, ah_msg_t *msg);
//  An audit row from lifecycle itself (actor: self->cause, else "lifecycle").
void ah_lc_record (self_t *self, const char *agent_id, const char *kind, const char *detail,
                   bool ok, const char *error);

//  Requests (lifecycle_request.c)
//  The agent and its sandbox row (creating), in one transaction;
//  harness: an admin's override or NULL; pool: the runtime whose warm
//  pool holds it (tenant ''), NULL for an agent. 0 / -1.
int  ah_lc_insert (self_t *self, const char *id, const char *name, const char *tenant,
                   const desired_t *d, const char *harness, const char *pool);
//  The destroy transition of the row (its guard, the tombstone), and the
//  driver call launched. 1 won, 0 lost, -1 error.
int  ah_lc_destroy (self_t *self, const row_t *row);
void ah_lc_on_create (void *self, ah_msg_t *msg);
void ah_lc_on_update (void *self, ah_msg_t *msg);
//  SANDBOX_START, SANDBOX_STOP, SANDBOX_REBUILD, SANDBOX_DESTROY.
void ah_lc_on_transition (void *self, ah_msg_t *msg);

#endif
