/*  actors/conversations_int.h: what the files of the conversations actor
    share. Internal to the actor: everything here runs on its one thread
    (its DESIGN is in conversations.c).

      conversations.c          the actor: state, start and stop, the log
                               and the turn's watcher, the API's messages
                               (CONV_*), the tick, the handler table
      conversations_harness.c  harnesses: started through the proc
                               channel, stdin within the tunnel's credit,
                               a turn moved on, the tunnel's messages
      conversations_acp.c      what the harness says: lines read as ACP,
                               permissions, updates, answers
      conversations_calls.c    the harness's fs and terminal requests,
                               each its own channel to sandboxd          */
#ifndef AH_CONVERSATIONS_INT_H
#define AH_CONVERSATIONS_INT_H

#include "actors/conversations.h"
#include "catalog/catalog.h"
#include "common/log.h"
#include "common/msg.h"
#include "policy/policy.h"
#include "proto/acp.h"
#include "proto/channel.h"
#include "proto/procchan.h"
#include "store/conversations.h"
#include "store/store.h"

#define AREA            "conversations"
#define PIECE           ((256u << 10) - 8)      //  STDIN payload per CHAN_DATA (a record's prefix fits)
#define CREDIT          (1536u << 10)           //  bytes we keep unacknowledged (the tunnel's is 2 MiB)
#define OUT_MAX         (8u << 20)              //  bytes waiting for credit before the harness is dropped
#define EXIT_MAX        256
#define TICK_MS         500
#define TRAILER_MAX     (4 + AH_CHAN_HEADER_MAX)

typedef struct self_t self_t;

typedef enum { H_OPENING = 1, H_INIT, H_READY, H_GONE } hstate_t;

//  A permission the harness asked that waits for an answer by the API
//  (conversations.permission_timeout, then lua/permission.lua decides).
typedef struct perm_t {
    struct perm_t *next;
    char conv [AH_CONV_ID_LEN + 1];
    int64_t seq;                    //  its permission entry's: the request the API names
    json_t *id;                     //  the harness's request id (held)
    json_t *params;                 //  its params (held)
    int64_t deadline;               //  zclock_mono
} perm_t;

typedef struct {
    self_t *self;
    char agent_id [32];
    char name [72];
    hstate_t state;
    int64_t gen;                    //  the process generation (a new process: +1)
    int64_t open_req;               //  CHAN_OPEN's, while opening
    int64_t chan;                   //  the tunnel's id once open
    int64_t unacked;                //  STDIN bytes the tunnel has not taken yet
    ah_buf_t out;                   //  STDIN records waiting for credit
    ah_rec_reader_t rec;
    ah_acp_reader_t reader;
    ah_acp_pending_t pending;
    ah_acp_open_t open;
    ah_buf_t err;                   //  stderr's last AH_CONV_STDERR_MAX bytes
    uint8_t exit [EXIT_MAX];
    size_t exit_len;
    int64_t init_id;
    int64_t since_ms;               //  when the open or initialize was sent
    bool attached;                  //  sandboxd kept it from an earlier stream: its sessions live
    bool can_load;                  //  initialize said agentCapabilities.loadSession
    bool can_resume;                //  ... agentCapabilities.sessionCapabilities.resume
    perm_t *perms;                  //  permissions waiting for an answer (at most AH_ACP_OPEN_MAX: open ids)
} harness_t;

typedef struct {
    char id [AH_CONV_ID_LEN + 1];
    char agent_id [32];
    char session [AH_CONV_SESSION_MAX + 1];
    int64_t session_gen;            //  the harness generation session belongs to
    bool turn;                      //  a turn runs
    bool cancelling;
    int64_t cancel_at;
    int64_t prompt_id;              //  our session/prompt's id, once sent
    int64_t new_id;                 //  our session/new, load or resume's id, while asked
    bool restoring;                 //  that is a load or a resume of session
    bool reset;                     //  a session was lost: the notice goes with the new one
    int64_t asked_at;
    char *text;                     //  the prompt waiting for a session
    size_t text_size;
    int errors;                     //  error entries of this turn
    char peer [64];                 //  who watches the turn, and its req
    int64_t watch_req;
} conv_t;

struct self_t {
    ah_actor_t *actor;
    ah_store_t *store;
    ah_catalog_t *catalog;
    ah_policy_t *permission;        //  lua/permission.lua
    zhashx_t *harnesses;            //  agent id -> harness_t
    zhashx_t *convs;                //  conversation id -> conv_t
    int64_t next_req;
    int64_t next_gen;               //  harness generations
    int64_t permission_ms;          //  conversations.permission_timeout
    struct call_t *calls;           //  the harness's fs/* and terminal/* requests served
    int64_t next_term;              //  terminal ids
};

//  conversations.c: the log and the watcher
int64_t ah_cv_log (self_t *self, conv_t *c, const char *kind, json_t *body, const char *who, bool end);
void ah_cv_error (self_t *self, conv_t *c, const char *why, bool end);

//  conversations_harness.c
void ah_cv_harness_free (void **item);
harness_t *ah_cv_harness (self_t *self, const char *agent_id, char *why, size_t why_size);
void ah_cv_harness_gone (self_t *self, harness_t *h, const char *why);
void ah_cv_reap (self_t *self);
void ah_cv_send_line (harness_t *h, char *line);
void ah_cv_advance (self_t *self, harness_t *h, conv_t *c);
void ah_cv_on_reply (void *self, ah_msg_t *msg);
void ah_cv_on_data (void *self, ah_msg_t *msg);
void ah_cv_on_ack (void *self, ah_msg_t *msg);
void ah_cv_on_eof (void *self, ah_msg_t *msg);
void ah_cv_on_close (void *self, ah_msg_t *msg);

//  conversations_acp.c
//  The harness's records (ah_rec_read's callback): arg is a recs_t.
typedef struct {
    harness_t *h;
    bool exited;
} recs_t;
int  ah_cv_record (void *arg, uint8_t kind, const uint8_t *data, size_t size, bool last);
void ah_cv_line (void *ud, const char *line, size_t size, const char *error);
json_t *ah_cv_decide (self_t *self, harness_t *h, conv_t *c, json_t *params, const char **option);
void ah_cv_perm_answer (self_t *self, harness_t *h, perm_t *p, const char *option, json_t *body, const char *who);
void ah_cv_perms_cancel (self_t *self, harness_t *h, conv_t *c);

//  conversations_calls.c
bool ah_cv_serve (self_t *self, harness_t *h, conv_t *c, ah_acp_msg_t *msg);
bool ah_cv_call_on_reply (self_t *self, ah_msg_t *msg);
bool ah_cv_call_on_data (self_t *self, ah_msg_t *msg);
bool ah_cv_call_on_close (self_t *self, ah_msg_t *msg);
void ah_cv_calls_sweep (self_t *self);
void ah_cv_calls_destroy (self_t *self);

#endif
