/*  common/msg.h: sending and receiving proto/msg.h messages on ZeroMQ
    sockets, and rendering them as JSON (the tap, logs).               */
#ifndef AH_MSG_H
#define AH_MSG_H

#include <czmq.h>
#include <jansson.h>
#include "proto/msg.h"

//  Sockets. route != NULL puts a routing frame first (destination).
//  Takes ownership of *self_p and nulls it, even on failure. 0 / -1.
int ah_msg_send (ah_msg_t **self_p, zsock_t *sock, const char *route);
//  Receive one message. with_route: the first frame is the peer's name.
//  NULL on malformed input, with *err set (caller frees) when err != NULL;
//  all frames of the bad message are consumed.
ah_msg_t *ah_msg_recv (zsock_t *sock, bool with_route, char **err);

//  What could be read of a message that was refused, so that it can
//  still be answered: the sender (with_route), its type and its "req".
typedef struct {
    char   *error;                      //  why it was refused (ah_msg_fault_clear frees)
    char    route [AH_MSG_MAX_TYPE + 1];    //  "" when unreadable
    char    type [AH_MSG_MAX_TYPE + 1];     //  "" when unreadable
    int64_t req;
    bool    has_req;
} ah_msg_fault_t;
//  As ah_msg_recv; on NULL, *fault says what was refused.
ah_msg_t *ah_msg_recv_fault (zsock_t *sock, bool with_route, ah_msg_fault_t *fault);
void ah_msg_fault_clear (ah_msg_fault_t *fault);

//  Render as one JSON object line {"type":..,"from":..,"to":..,"fields":{..}}:
//  bin fields become {"bin": N} (their size: contents never reach a log or
//  the tap). Caller frees.
char *ah_msg_to_json (const ah_msg_t *self, const char *to);

//  size bytes as a JSON string; when they are not UTF-8 (or hold a NUL),
//  each byte >= 0x80 and each NUL becomes '?'. Never NULL but out of memory.
json_t *ah_json_bytes (const char *data, size_t size);

#endif
