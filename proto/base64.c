/*  proto/base64.c: base64 (RFC 4648, the standard alphabet, padded), see
    base64.h.                                                           */
#include "proto/base64.h"

#include <stdint.h>
#include <stdlib.h>

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

static int s_b64 (int c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

char *ah_base64_decode (const char *text, size_t len, size_t *out_len)
{
    char *out = malloc (len / 4 * 3 + 4);
    if (!out)
        return NULL;
    size_t n = 0;
    uint32_t acc = 0;
    int bits = 0, pad = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char) text [i];
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
            continue;
        if (c == '=') {
            pad++;
            continue;
        }
        int v = s_b64 (c);
        if (v < 0 || pad) {             //  a stray byte, or data after padding
            free (out);
            return NULL;
        }
        acc = (acc << 6) | (uint32_t) v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out [n++] = (char) ((acc >> bits) & 0xff);
        }
    }
    if (pad > 2 || bits >= 6) {
        free (out);
        return NULL;
    }
    out [n] = 0;
    if (out_len)
        *out_len = n;
    return out;
}
