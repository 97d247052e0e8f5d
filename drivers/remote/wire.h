/*  drivers/remote/wire.h: what the remote driver (remote.c) and the host
    agent (hostd/hostd.c) both know of their link (docs/hostd.md).

    The link is a ZeroMQ DEALER (the server, one call at a time per socket) to a
    ROUTER (hostd), ipc:// on one machine or tcp:// with CURVE. Messages
    are the actors' own (proto/msg.h): [type][msgpack map]. Every request
    carries "req", "protocol" and "version"; every REPLY carries hostd's
    "protocol", "version" and "host". While a call works, hostd sends
    HOSTD_WORKING {req} each second, so silence means the host is gone.
    DRIVER_WATCH answers with DRIVER_EVENT {req, agent_id, action} until
    the caller goes away (hostd's next heartbeat to it finds no route).

    AH_HOSTD_PROTOCOL is bumped whenever a message or a field changes.  */
#ifndef AH_REMOTE_WIRE_H
#define AH_REMOTE_WIRE_H

#include "common/version.h"
#include "drivers/docker.h"
#include "drivers/driver.h"
#include "proto/msg.h"

#define AH_HOSTD_PROTOCOL       5       //  2: DRIVER_REMOVE_CONTAINER; 3: HOSTD_TUNNEL, DRIVER_ENGINE's firewall; 4: HOSTD_HOME;
                                        //  5: DRIVER_EVENT action "image"
#define AH_HOSTD_HEARTBEAT_MS   1000
//  HOSTD_REFUSED status: the two sides speak different protocols.
#define AH_HOSTD_STATUS_VERSION 426

//  The sentence for a host agent that speaks another protocol: what runs
//  and what to deploy; host NULL: one that has not said its name (never
//  its endpoint: the sentence may reach a tenant). Caller frees.
char *ah_hostd_mismatch (const char *host, const char *hostd_version, int64_t hostd_protocol);

//  A host name as hostd.name allows it (1..63 of [A-Za-z0-9._-]).
bool ah_hostd_name_ok (const char *name);

//  A spec into a message and back: strings borrowed from msg (NULL when
//  absent: the docker driver refuses them with its own words); the env
//  entries travel as one string, one entry a line. put: -1 when an entry
//  holds a newline. get: the NULL-terminated env array spec->env points
//  into (the caller frees each entry and the array).
int   ah_hostd_put_spec (ah_msg_t *msg, const ah_sandbox_spec_t *spec);
char **ah_hostd_get_spec (const ah_msg_t *msg, ah_sandbox_spec_t *spec);

//  Engine facts into a REPLY and back.
void ah_hostd_put_facts (ah_msg_t *msg, const ah_engine_facts_t *facts);
void ah_hostd_get_facts (const ah_msg_t *msg, ah_engine_facts_t *facts);

#endif
