/*  proto/sha1.h: SHA-1, for the WebSocket handshake's
    Sec-WebSocket-Accept (proto/ws.c), nothing that needs a secure hash.
    Dependency-free, so the static sandboxd needs no libcrypto.        */
#ifndef AH_PROTO_SHA1_H
#define AH_PROTO_SHA1_H

#include <stddef.h>
#include <stdint.h>

#define AH_SHA1_SIZE 20

//  The digest of size bytes at data.
void ah_sha1 (const void *data, size_t size, uint8_t out [AH_SHA1_SIZE]);

#endif
