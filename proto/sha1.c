/*  proto/sha1.c: SHA-1 (FIPS 180-4), see sha1.h.                      */
#include "proto/sha1.h"

#include <string.h>

typedef struct { uint32_t h [5]; } s_sha1_t;

#define ROL(x, n) (((x) << (n)) | ((x) >> (32 - (n))))

static void s_sha1_block (s_sha1_t *s, const uint8_t *p)
{
    uint32_t w [80];
    for (int i = 0; i < 16; i++)
        w [i] = (uint32_t) p [4 * i] << 24 | (uint32_t) p [4 * i + 1] << 16
              | (uint32_t) p [4 * i + 2] << 8 | p [4 * i + 3];
    for (int i = 16; i < 80; i++)
        w [i] = ROL (w [i - 3] ^ w [i - 8] ^ w [i - 14] ^ w [i - 16], 1);
    uint32_t a = s->h [0], b = s->h [1], c = s->h [2], d = s->h [3], e = s->h [4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20)      { f = (b & c) | (~b & d);           k = 0x5A827999; }
        else if (i < 40) { f = b ^ c ^ d;                    k = 0x6ED9EBA1; }
        else if (i < 60) { f = (b & c) | (b & d) | (c & d);  k = 0x8F1BBCDC; }
        else             { f = b ^ c ^ d;                    k = 0xCA62C1D6; }
        uint32_t t = ROL (a, 5) + f + e + k + w [i];
        e = d; d = c; c = ROL (b, 30); b = a; a = t;
    }
    s->h [0] += a; s->h [1] += b; s->h [2] += c; s->h [3] += d; s->h [4] += e;
}

void ah_sha1 (const void *data_in, size_t size, uint8_t out [AH_SHA1_SIZE])
{
    const uint8_t *data = data_in;
    s_sha1_t s = { { 0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0 } };
    uint64_t bits = (uint64_t) size * 8;
    while (size >= 64) {
        s_sha1_block (&s, data);
        data += 64;
        size -= 64;
    }
    uint8_t tail [128] = { 0 };
    memcpy (tail, data, size);
    tail [size] = 0x80;
    size_t total = size + 9 <= 64 ? 64 : 128;
    for (int i = 0; i < 8; i++)
        tail [total - 1 - i] = (uint8_t) (bits >> (8 * i));
    s_sha1_block (&s, tail);
    if (total == 128)
        s_sha1_block (&s, tail + 64);
    for (int i = 0; i < 5; i++) {
        out [4 * i] = (uint8_t) (s.h [i] >> 24);
        out [4 * i + 1] = (uint8_t) (s.h [i] >> 16);
        out [4 * i + 2] = (uint8_t) (s.h [i] >> 8);
        out [4 * i + 3] = (uint8_t) s.h [i];
    }
}
