/*  cli/follow.h: how create, start, stop, rebuild and rm wait for their
    agent's transition to end: on the server's event stream
    (GET /api/v1/events, docs/api.md), opened BEFORE the operation is sent
    so that no state change is missed, and returning the moment one says
    the agent settled (docs/cli.md "Waiting").

    Use: ah_follow_new before the request; ah_follow_wait once the
    request was accepted; ah_follow_destroy. When the stream cannot be
    opened, or breaks while waiting (the server restarted, a proxy cut
    it, nothing came for AH_FOLLOW_SILENCE_MS), the wait says so on stderr
    and goes on by asking the server for the agent every 0.5 s; a server
    that cannot be reached then ends the wait with its error.         */
#ifndef AH_CLI_FOLLOW_H
#define AH_CLI_FOLLOW_H

#include "cli/cmd.h"

#include <jansson.h>

//  The server sends a keep-alive comment after 15 s without an event: a
//  stream silent for three of them is taken as broken.
#define AH_FOLLOW_SILENCE_MS    45000

typedef struct ah_follow_t ah_follow_t;

//  Subscribes to agent's events (an id or a name), or to every agent of
//  the scope when agent is NULL (create: the agent does not exist yet),
//  and returns once the server said the stream is open. Never NULL but
//  for want of memory: a stream that could not be opened is remembered,
//  and ah_follow_wait then polls (saying why).
ah_follow_t *ah_follow_new (const ah_common_t *co, const char *agent);
void ah_follow_destroy (ah_follow_t **self_p);

//  Waits until the agent of reply (the accepted request's answer, which
//  names its id) is no longer in a transition, at most wait_s seconds,
//  telling on stderr what preparing its sandbox does ("Preparing the
//  sandbox… Step 3/7 : RUN apt-get update"). Returns the agent as it
//  ended (a destroyed one as {"id", "name", "state": "destroyed"}), or
//  NULL with *exit_code 1 (said why). self may be NULL (no memory): polls.
json_t *ah_follow_wait (ah_follow_t *self, const ah_common_t *co, json_t *reply, long wait_s,
                        int *exit_code);

#endif
