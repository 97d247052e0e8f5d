/*  tests/api/fake_actors.h: a zactor that plays, on the bus, the actors
    the API talks to: "lifecycle" answers like the real one (and writes
    the rows the real one would, in the database at args, a path),
    "recorder", "builder", "sleeper" and "tunnel" answer what the API asks
    of them. Pipe commands (each answered with one string): RELOADS (the
    policy reloads asked), LAST (the JSON of the last AGENT_CREATE),
    RECORDS ("N JSON": rows recorded, the last one), TUNNEL ("ACKED EOFS
    CLOSES STDIN-HEX": what the API sent a channel), OTHER (the JSON of the
    last OP_LIST, TURN_* or BRIEFING), EGRESS ("tenant;" for each
    EGRESS_CHANGED the tunnel got since the last EGRESS).                                  */
#ifndef AH_TESTS_API_FAKE_ACTORS_H
#define AH_TESTS_API_FAKE_ACTORS_H

#include <czmq.h>

void fake_actors (zsock_t *pipe, void *args);

#endif
