/*  hostd/relay.h: hostd's tunnel relay (docs/hostd.md, "Across
    machines: the tunnel").

    A sandbox reaches the server's tunnel through a unix socket mounted
    from the machine it runs on. When that machine is not the server's,
    hostd listens on such a socket of its own and carries each connection,
    byte for byte, to the server's tunnel over TCP (tcp://HOST:PORT) or TLS
    (tls://HOST:PORT, the server's certificate checked against a CA file or
    the system's). sandboxd's WebSocket upgrade, its token and the yamux
    session pass through unchanged: the relay reads nothing of them.

    DESIGN. One accept thread; one thread per connection (a connection is
    a sandbox's whole session, so there are as many as running sandboxes)
    that polls both ends and a stop pipe. ah_relay_stop closes the pipe's
    write end, which every thread sees, and joins them all.            */
#ifndef AH_RELAY_H
#define AH_RELAY_H

typedef struct ah_relay_s ah_relay_t;

//  Listens on socket_path (its directory made 0755, the socket 0666, as
//  the server's own) and relays to target: "tcp://HOST:PORT" or
//  "tls://HOST:PORT". ca_file: the CA that signs the server's certificate
//  (NULL: the system's). NULL with *err (caller frees) when it cannot.
ah_relay_t *ah_relay_start (const char *socket_path, const char *target, const char *ca_file,
                            char **err);

//  Ends every connection and the listener, removes the socket.
void ah_relay_stop (ah_relay_t **self_p);

//  One connection through, now: the relay's target answers a plain HTTP
//  request on its tunnel path (the server's tunnel refuses it with an
//  HTTP status, which is the answer). 0 with *detail ("HTTP 400 from
//  tcp://..."), -1 with *detail saying why not. Caller frees *detail.
int ah_relay_probe_socket (const char *socket_path, char **detail);

#endif
