/*  common/token.c: see token.h.  */
#include "common/token.h"

#include <openssl/sha.h>
#include <string.h>
#include <sys/random.h>

static const char s_hex [] = "0123456789abcdef";

static int s_random (void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom ((char *) buf + got, n - got, 0);
        if (r < 0)
            return -1;
        got += (size_t) r;
    }
    return 0;
}

int ah_token_new (char out [AH_TOKEN_HEX])
{
    unsigned char raw [32];
    if (s_random (raw, sizeof raw))
        return -1;
    for (int i = 0; i < 32; i++) {
        out [2 * i] = s_hex [raw [i] >> 4];
        out [2 * i + 1] = s_hex [raw [i] & 15];
    }
    out [64] = 0;
    return 0;
}

void ah_token_hash (const char *data, char out [AH_TOKEN_HEX])
{
    unsigned char md [SHA256_DIGEST_LENGTH];
    SHA256 ((const unsigned char *) data, strlen (data), md);
    for (int i = 0; i < 32; i++) {
        out [2 * i] = s_hex [md [i] >> 4];
        out [2 * i + 1] = s_hex [md [i] & 15];
    }
    out [64] = 0;
}

bool ah_token_equal (const char *a, const char *b)
{
    if (!a || !b)
        return false;
    size_t n = strlen (a);
    if (n != strlen (b))
        return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char) a [i] ^ (unsigned char) b [i];
    return diff == 0;
}

int ah_token_id (char *out, size_t size, size_t n)
{
    if (n >= size)
        return -1;
    unsigned char raw [64];
    if (n > 2 * sizeof raw || s_random (raw, (n + 1) / 2))
        return -1;
    for (size_t i = 0; i < n; i++)
        out [i] = s_hex [(raw [i / 2] >> (i % 2 ? 0 : 4)) & 15];
    out [n] = 0;
    return 0;
}
