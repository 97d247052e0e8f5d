/*  common/bus.h: the message bus that routes between actors by name.

    DESIGN. The bus is a zactor owning a ROUTER socket bound at
    AH_BUS_ENDPOINT. Each actor connects one DEALER with its name as the
    routing identity (ah_bus_connect). An actor sends [dest][type][map];
    the bus delivers [sender][type][map] to dest's DEALER. A message for
    an actor that is not connected is answered to the sender with a
    REPLY ok=false status=503 naming the destination (if it carried a
    "req"), and logged.

    The tap: when tap_endpoint is non-NULL the bus also binds a PUB socket
    there and publishes every routed message as
    [type][sender][dest][map]. PUB drops at its high-water mark, so a
    slow or absent subscriber never slows the bus.

    The bus owns nothing but its sockets; its pipe accepts "$TERM".     */
#ifndef AH_BUS_H
#define AH_BUS_H

#include <czmq.h>

#define AH_BUS_ENDPOINT "inproc://agenthold-bus"

typedef struct {
    const char *tap_endpoint;       //  NULL or "" for no tap; borrowed until signal
} ah_bus_args_t;

//  zactor body: zactor_new (ah_bus_actor, &args). The bus is ready (bound)
//  when zactor_new returns; a tap that cannot bind makes the actor signal
//  failure (status 1) and exit, after logging why.
void ah_bus_actor (zsock_t *pipe, void *args);

//  A DEALER connected to the bus with identity name. NULL on failure.
//  Use ah_msg_send (&m, sock, "dest") and ah_msg_recv (sock, true, &err).
zsock_t *ah_bus_connect (const char *name);

#endif
