/*  proto/base64.h: base64 (RFC 4648: the standard alphabet, padded
    with '='), for the WebSocket handshake (proto/ws.c), the Kubernetes
    driver's credentials and MCP's file blobs (actors/api/mcp.c).
    Dependency-free (sandboxd links it).                                */
#ifndef AH_PROTO_BASE64_H
#define AH_PROTO_BASE64_H

#include <stddef.h>

//  The length of n bytes encoded, without the NUL.
#define AH_BASE64_LEN(n) (((n) + 2) / 3 * 4)

//  n bytes at in as base64 into out, NUL-terminated: out holds
//  AH_BASE64_LEN (n) + 1 bytes.
void ah_base64_encode (const void *in, size_t n, char *out);
//  Standard base64 (padding optional, whitespace skipped) into a new
//  NUL-terminated buffer (the caller's), its length in *out_len. NULL:
//  not base64 (a stray byte, data after padding, a cut group) or no memory.
char *ah_base64_decode (const char *text, size_t len, size_t *out_len);

#endif
