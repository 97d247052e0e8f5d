/*  actors/conversations.h: the conversations actor (bus name
    "conversations"), the server's ACP client (docs/conversations.md).

    For an agent with a harness (an admin's override of the agent, else
    its runtime's in the catalog: docs/conversations.md "Choosing the
    harness") it starts that harness through sandboxd's proc channel (key "harness") on the
    first prompt after a boot, speaks ACP with it (initialize, then
    session/new per conversation, session/prompt, session/cancel),
    answers the harness's session/request_permission as
    lua/permission.lua decides (else the compiled rule, the shipped
    script's: allow reads, reject the rest), serves its fs and terminal
    requests in the agent's home (conversations_calls.c), and writes every prompt, update, tool
    call, permission, answer, stop reason and error to the conversation's
    log (store/conversations.h). It is the log's one writer.

    Messages in docs/messages.md ("conversations").                   */
#ifndef AH_CONVERSATIONS_H
#define AH_CONVERSATIONS_H

#include "common/actor.h"
#include "config/config.h"

#define AH_CONV_PROMPT_MAX          (256u << 10)    //  bytes of one prompt's text
#define AH_CONV_STDERR_MAX          (64u << 10)     //  the harness's stderr kept (its last bytes)
#define AH_CONV_REQUEST_TIMEOUT_MS  30000           //  initialize, session/new: answered within
#define AH_CONV_CANCEL_GRACE_MS     10000           //  a cancelled turn ends within, or by us
#define AH_CONV_ERRORS_PER_TURN     50              //  error entries one turn logs at most
#define AH_CONV_FS_READ_MAX         (1u << 20)      //  bytes of a file fs/read_text_file reads
#define AH_CONV_FS_WRITE_MAX        (1u << 20)      //  bytes of content fs/write_text_file writes
#define AH_CONV_TERMINALS_MAX       8               //  terminals of one agent's harness at a time
#define AH_CONV_TERM_OUTPUT_MAX     (256u << 10)    //  output a terminal keeps (its last bytes)
#define AH_CONV_TERM_TIMEOUT_S      600             //  a terminal's command is killed after
#define AH_CONV_PERMISSION_RULE     "allow reads, reject the rest"
#define AH_CONV_RESET_NOTICE        "The sandbox restarted and the harness could not restore this conversation; its context was reset."
#define AH_CONV_WAKE_NOTICE         "Starting the sandbox\xe2\x80\xa6"   //  ... an ellipsis, UTF-8

typedef struct {
    const ah_config_t *config;      //  borrowed: catalog_path
    const char *db_path;            //  the database (opened, not migrated)
} ah_conversations_args_t;

extern const ah_actor_def_t ah_conversations_actor;

#endif
