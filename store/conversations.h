/*  store/conversations.h: conversations and their logs in SQLite
    (docs/conversations.md, docs/schema.md migration 9): a conversation
    is an id under an agent and its tenant, with the harness's ACP
    session id behind it and whether a turn runs; its log is numbered
    entries (1, 2, 3...), each a kind, a JSON object and who wrote it.

    The conversations actor is the one writer; the API reads. Every
    string that comes from a harness (a session id, an entry's body) is
    bounded here as well as where it was read.                        */
#ifndef AH_STORE_CONVERSATIONS_H
#define AH_STORE_CONVERSATIONS_H

#include "store/store.h"

#define AH_CONV_ID_LEN          16              //  lowercase hex characters
#define AH_CONV_SESSION_MAX     256             //  bytes of an ACP session id
#define AH_CONV_BODY_MAX        ((4u << 20) + (64u << 10))  //  an entry's JSON: a 4 MiB line and our envelope
#define AH_CONV_WHO_MAX         128             //  bytes of an entry's author
#define AH_CONV_LOG_PAGE_MAX    1000            //  entries in one page of the log

typedef struct {
    char id [AH_CONV_ID_LEN + 1];
    char agent_id [16];
    char tenant [64];
    char acp_session_id [AH_CONV_SESSION_MAX + 1];     //  "": none yet
    char turn_state [16];               //  idle, running, cancelling
    int64_t created_at;
    int64_t last_activity_at;
} ah_conversation_t;

typedef struct {
    int64_t seq;
    int64_t at;
    const char *kind;                   //  docs/conversations.md "The log"
    const char *body;                   //  a JSON object
    size_t body_size;
    const char *who;
} ah_conv_entry_t;

//  Called per row; the row is borrowed for the call. Non-zero stops.
typedef int (ah_conv_fn) (void *ud, const ah_conversation_t *conversation);
typedef int (ah_conv_entry_fn) (void *ud, const ah_conv_entry_t *entry);

//  Whether kind is one of the log's kinds (the one list of them).
bool ah_conv_kind_valid (const char *kind);
//  Whether state is a turn state.
bool ah_conv_turn_state_valid (const char *state);

//  A new conversation of agent (in the agent's tenant), idle, no ACP
//  session, at now; its id into id (AH_CONV_ID_LEN + 1 bytes). 1: made;
//  0: no such agent; -1: the database (or the entropy) failed.
int ah_store_conversation_create (ah_store_t *self, const char *agent_id, int64_t now, char *id);
//  The conversation id within tenant (NULL or "": any). 1 / 0 none / -1.
int ah_store_conversation_get (ah_store_t *self, const char *id, const char *tenant,
                               ah_conversation_t *conversation);
//  Agent's conversations within tenant (NULL or "": any), oldest first.
//  The rows given, or -1.
int ah_store_conversations_list (ah_store_t *self, const char *agent_id, const char *tenant,
                                 ah_conv_fn *fn, void *ud);
//  The ACP session behind it (NULL: none any more). 1 / 0 none / -1
//  (also when the id is longer than AH_CONV_SESSION_MAX).
int ah_store_conversation_set_session (ah_store_t *self, const char *id, const char *acp_session_id);
//  Its turn state; last_activity_at moves to now. 1 / 0 none / -1.
int ah_store_conversation_set_turn (ah_store_t *self, const char *id, const char *state, int64_t now);

//  Appends an entry: kind (ah_conv_kind_valid), body (a JSON object of
//  at most AH_CONV_BODY_MAX bytes; SQLite checks it is one), who (1 to
//  AH_CONV_WHO_MAX bytes) at now. Its seq (>= 1), 0 when there is no
//  such conversation, -1 on a refusal or failure (ah_store_error says).
int64_t ah_store_conversation_append (ah_store_t *self, const char *id, const char *kind,
                                      const char *body, size_t body_size, const char *who, int64_t now);
//  The log after seq `after` (0: from the start), at most limit entries
//  (1 to AH_CONV_LOG_PAGE_MAX; beyond: the most), in order. The entries
//  given, or -1.
int ah_store_conversation_log (ah_store_t *self, const char *id, int64_t after, int limit,
                               ah_conv_entry_fn *fn, void *ud);

#endif
