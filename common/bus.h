/*  common/bus.h: the message bus that routes between actors by name.

    DESIGN. The bus is an actor (common/actor.h) that is not itself on
    the bus: it owns a ROUTER socket bound at AH_BUS_ENDPOINT, served by
    a reader. Each actor connects one DEALER with its name as the
    routing identity (ah_bus_connect). An actor sends [dest][type][map];
    the bus delivers [sender][type][map] to dest's DEALER. A message for
    an actor that is not connected is answered to the sender with a
    REPLY ok=false status=503 naming the destination (if it carried a
    "req"), and logged.

    The tap: when tap_endpoint is non-NULL the bus also binds a PUB socket
    there and publishes every routed message as [type][sender][dest][map].
    Data never goes there: a CHAN_DATA is published with its metadata
    only, {chan, bytes} (bytes: the length of its data), never the data.
    PUB drops at its high-water mark, so a slow or absent subscriber never
    slows the bus.

    The bus owns nothing but its sockets.                              */
#ifndef AH_BUS_H
#define AH_BUS_H

#include <czmq.h>
#include "common/actor.h"

#define AH_BUS_ENDPOINT "inproc://agenthold-bus"

typedef struct {
    const char *tap_endpoint;       //  NULL or "" for no tap; borrowed until started
} ah_bus_args_t;

//  ah_actor_new (&ah_bus_actor, &args, &err). The bus is ready (bound)
//  when that returns; a bus or tap that cannot bind is a start-up
//  failure with its reason.
extern const ah_actor_def_t ah_bus_actor;

//  A DEALER connected to the bus with identity name. NULL on failure.
//  Use ah_msg_send (&m, sock, "dest") and ah_msg_recv (sock, true, &err).
zsock_t *ah_bus_connect (const char *name);

#endif
