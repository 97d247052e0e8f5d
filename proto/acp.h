/*  proto/acp.h: the Agent Client Protocol as the server's ACP client
    reads and writes it (docs/conversations.md, "The wire"): JSON-RPC 2.0,
    one message a line, over the harness's stdout and stdin.

    Four pieces, each usable alone, none with threads or I/O of its own:

    - the reader, a line assembler fed whatever chunks the proc channel
      delivers; it holds at most `max` bytes of one unfinished line, and a
      longer line is dropped up to its newline and reported, never held;
    - the parser, which makes one line a request, a notification, a
      result or an error, or says in a sentence what is wrong with it;
    - the builders of the lines the client sends (its requests, its
      answers to the harness's requests), each a heap string ending "\n";
    - the pending table: our outgoing ids and what each was for, bounded,
      telling an answer to an id we never used from one answered twice;
      and the open table, the harness's requests we have not answered
      yet, refusing an id already open.

    Everything here reads bytes a harness wrote, code the agent controls:
    nothing asserts on them, every failure is a value and a sentence.
    Not thread-safe: one owner (the conversations actor's thread).      */
#ifndef AH_PROTO_ACP_H
#define AH_PROTO_ACP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "proto/buf.h"

#define AH_ACP_PROTOCOL_VERSION 1           //  ACP's protocolVersion we speak
#define AH_ACP_LINE_MAX     (4u << 20)      //  bytes of one line, newline excluded
#define AH_ACP_ID_MAX       128             //  bytes of a string id
#define AH_ACP_METHOD_MAX   128             //  bytes of a method name
#define AH_ACP_VALUES_MAX   65536           //  JSON values in one line (jansson's tree stays ~64 B each)
#define AH_ACP_WHY_MAX      256             //  a parse error's sentence, NUL included
#define AH_ACP_PENDING_MAX  256             //  our requests awaiting an answer, per harness
#define AH_ACP_OPEN_MAX     64              //  the harness's requests we have not answered

//  JSON-RPC 2.0's error codes, for our answers to a harness's requests.
#define AH_ACP_PARSE_ERROR      -32700
#define AH_ACP_INVALID_REQUEST  -32600
#define AH_ACP_METHOD_NOT_FOUND -32601
#define AH_ACP_INVALID_PARAMS   -32602
#define AH_ACP_INTERNAL_ERROR   -32603


//  ---------------------------------------------------------------------
//  The reader

typedef struct {
    ah_buf_t line;                  //  the unfinished line (< max bytes)
    size_t max;
    bool discarding;                //  inside a line past max: dropped to its newline
    uint64_t dropped;               //  bytes dropped of that line so far
    uint64_t lines;                 //  lines ended so far (1-based numbers in errors)
} ah_acp_reader_t;

//  Called once per line, without its "\n" (nor a "\r" before it), in
//  order: line and size are the line (borrowed for the call, not NUL-
//  terminated) and error is NULL; or line is NULL and error says why a
//  line was dropped (longer than max; the stream ended inside a line).
//  Empty and blank lines (spaces, tabs) are skipped without a call.
typedef void (ah_acp_line_fn) (void *ud, const char *line, size_t size, const char *error);

//  An empty reader holding at most max bytes of a line (0: AH_ACP_LINE_MAX).
void ah_acp_reader_init (ah_acp_reader_t *self, size_t max);
//  Frees the unfinished line.
void ah_acp_reader_clear (ah_acp_reader_t *self);
//  Feeds size bytes, calling fn for each line they finish. 0, or -1 when
//  out of memory (the unfinished line is dropped and reported to fn).
int  ah_acp_reader_feed (ah_acp_reader_t *self, const void *data, size_t size,
                         ah_acp_line_fn *fn, void *ud);
//  The end of the stream: an unfinished line is reported as an error
//  (a harness that exits mid-line left half a message).
void ah_acp_reader_eof (ah_acp_reader_t *self, ah_acp_line_fn *fn, void *ud);


//  ---------------------------------------------------------------------
//  The parser

typedef enum {
    AH_ACP_REQUEST = 1,             //  method and id: the harness wants an answer
    AH_ACP_NOTIFICATION,            //  method, no id
    AH_ACP_RESULT,                  //  id and result: an answer to one of ours
    AH_ACP_ERROR                    //  id (or null) and error
} ah_acp_kind_t;

typedef struct {
    ah_acp_kind_t kind;
    json_t *root;                   //  the whole message (owned)
    //  Borrowed from root:
    json_t *id;                     //  integer or string; NULL: a notification, or null in an error
    const char *method;             //  request, notification
    json_t *params;                 //  request, notification: an object, or NULL when absent
    json_t *result;                 //  result: any JSON value
    int64_t code;                   //  error
    const char *message;            //  error
    json_t *data;                   //  error: NULL when absent
    //  When parsing failed: the JSON-RPC code to answer with, and (reply
    //  true) id is the request's, so the answer can name it.
    int reply_code;
    bool reply;
} ah_acp_msg_t;

//  One line into msg. 0, or -1 with why (at least AH_ACP_WHY_MAX bytes)
//  naming the problem: not JSON (and where), not an object, "jsonrpc"
//  missing or not "2.0", an id neither an integer nor a string (or too
//  long), a method not a string, params not an object, a result and an
//  error together or neither, an error without an integer code and a
//  string message, a key given twice, a \u0000 in any string (it would
//  cut a method or a path short where read as C text), more than
//  AH_ACP_VALUES_MAX values (counted before jansson builds anything: a
//  4 MiB line of "[0,0,0..." would be a 100 MB tree). Either way call
//  ah_acp_msg_clear.
int  ah_acp_parse (const char *line, size_t size, ah_acp_msg_t *msg, char *why);
void ah_acp_msg_clear (ah_acp_msg_t *msg);
//  An id as text for logs and keys: 17 or "abc" (JSON), into buf.
const char *ah_acp_id_text (const json_t *id, char *buf, size_t size);


//  ---------------------------------------------------------------------
//  The builders: one line each, "\n" included, the caller's to free.
//  NULL when out of memory or a string is not UTF-8. Params given as
//  json_t * are taken over (decref'd even on failure).

//  A request of ours with id, and a notification (no id).
char *ah_acp_request (int64_t id, const char *method, json_t *params);
char *ah_acp_notification (const char *method, json_t *params);

typedef struct {
    bool fs_read;                   //  we answer fs/read_text_file
    bool fs_write;                  //  fs/write_text_file
    bool terminal;                  //  terminal/*
    const char *name;               //  clientInfo
    const char *version;
} ah_acp_client_t;

char *ah_acp_initialize (int64_t id, const ah_acp_client_t *client);
//  session/new in cwd (absolute), no MCP servers.
char *ah_acp_session_new (int64_t id, const char *cwd);
char *ah_acp_session_load (int64_t id, const char *session, const char *cwd);
char *ah_acp_session_resume (int64_t id, const char *session, const char *cwd);
//  session/prompt with one text block of size bytes (UTF-8, no NUL).
char *ah_acp_session_prompt (int64_t id, const char *session, const char *text, size_t size);
//  session/cancel: a notification.
char *ah_acp_session_cancel (const char *session);

//  Answers to a harness's request: id is its id (borrowed: an integer,
//  a string, or NULL for null when its id could not be read).
char *ah_acp_result (const json_t *id, json_t *result);
//  An error answer; message is copied as given (printf-free).
char *ah_acp_error (const json_t *id, int code, const char *message);


//  ---------------------------------------------------------------------
//  The pending table: our requests awaiting an answer

typedef enum {
    AH_ACP_M_INITIALIZE = 1,
    AH_ACP_M_SESSION_NEW,
    AH_ACP_M_SESSION_LOAD,
    AH_ACP_M_SESSION_RESUME,
    AH_ACP_M_SESSION_PROMPT,
    AH_ACP_M_OTHER
} ah_acp_method_t;

//  The method's wire name ("session/load"); "?" for an unknown value.
const char *ah_acp_method_name (ah_acp_method_t method);

#define AH_ACP_TAG_MAX 64           //  a caller's tag: a conversation id, say

typedef struct {
    int64_t id;
    ah_acp_method_t method;
    char tag [AH_ACP_TAG_MAX];
    int64_t sent_at;                //  the caller's clock (ms)
} ah_acp_pending_entry_t;

typedef struct {
    ah_acp_pending_entry_t entries [AH_ACP_PENDING_MAX];
    size_t count;
    int64_t next_id;                //  ids are 1, 2, 3...: never reused
} ah_acp_pending_t;

typedef enum {
    AH_ACP_ANSWERED = 0,            //  *entry: what it answers (taken off the table)
    AH_ACP_UNKNOWN_ID = -1,         //  an id we never sent (not an integer, or too high)
    AH_ACP_REPEATED_ID = -2         //  one we sent, answered (or given up on) already
} ah_acp_match_t;

void ah_acp_pending_init (ah_acp_pending_t *self);
//  A new id for a request of method made for tag (NULL: ""; cut at
//  AH_ACP_TAG_MAX - 1 bytes) at now; -1 when the table is full.
int64_t ah_acp_pending_add (ah_acp_pending_t *self, ah_acp_method_t method,
                            const char *tag, int64_t now);
//  The entry an answer's id names, taken off the table.
ah_acp_match_t ah_acp_pending_take (ah_acp_pending_t *self, const json_t *id,
                                    ah_acp_pending_entry_t *entry);
//  The oldest entry sent before deadline, taken off the table into
//  *entry: 1; 0 when none (a caller's timeout sweep, one at a time).
int ah_acp_pending_expire (ah_acp_pending_t *self, int64_t deadline,
                           ah_acp_pending_entry_t *entry);


//  ---------------------------------------------------------------------
//  The open table: the harness's requests we have not answered yet

typedef struct {
    json_t *ids [AH_ACP_OPEN_MAX];  //  held references; 5 and "5" are two ids
    size_t count;
} ah_acp_open_t;

void ah_acp_open_init (ah_acp_open_t *self);
//  Lets go of every id (the harness is gone).
void ah_acp_open_clear (ah_acp_open_t *self);
//  Notes a request's id as open: 0; -1 when that id is open already (a
//  collision: answer the newcomer with an error, keep the first); -2
//  when AH_ACP_OPEN_MAX are open (answer it with an error).
int  ah_acp_open_add (ah_acp_open_t *self, const json_t *id);
//  Its answer went: 0; -1 when it was not open.
int  ah_acp_open_close (ah_acp_open_t *self, const json_t *id);

#endif
