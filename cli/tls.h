/*  cli/tls.h: a TLS session (OpenSSL) as a proto/ws transport, for
    `agenthold term` against an https server (wss://).

    The handshake happens here, with the socket still blocking and a
    deadline; the peer's certificate must chain to ca (a PEM file) or,
    when ca is NULL, to the system's authorities, and must name host (a
    DNS name or an IP address). Afterwards the socket is non-blocking and
    the transport maps OpenSSL's want-read/want-write to EAGAIN, as
    ah_ws_io_t asks.                                                    */
#ifndef AH_CLI_TLS_H
#define AH_CLI_TLS_H

#include "proto/ws.h"

//  Takes over fd (closed on failure). 0 with *io set, or -1 with err.
int ah_tls_io (int fd, const char *host, const char *ca, int timeout_ms, ah_ws_io_t *io,
               char *err, size_t err_size);

#endif
