/*  proto/base64.c: base64 (RFC 4648, the standard alphabet, padded), see
    base64.h.                                                           */
#include "proto/base64.h"

#include <stdint.h>

void ah_base64_encode (const void *in_bytes, size_t n, char *out)
{
    const uint8_t *in = in_bytes;
    static const char tab [] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t) in [i] << 16;
        if (i + 1 < n) v |= (uint32_t) in [i + 1] << 8;
        if (i + 2 < n) v |= in [i + 2];
        out [o++] = tab [(v >> 18) & 63];
        out [o++] = tab [(v >> 12) & 63];
        out [o++] = i + 1 < n ? tab [(v >> 6) & 63] : '=';
        out [o++] = i + 2 < n ? tab [v & 63] : '=';
    }
    out [o] = 0;
}
