/*  common/token.h: secrets and their hashes (boot tokens, API tokens).

    Tokens are 32 random bytes (getrandom) as 64 lowercase hex characters.
    Only the SHA-256 (hex) of a token is ever stored; comparison of hashes
    is constant-time.                                                     */
#ifndef AH_TOKEN_H
#define AH_TOKEN_H

#include <stdbool.h>
#include <stddef.h>

#define AH_TOKEN_HEX 65      //  64 hex characters and the NUL

//  A fresh token into out. 0 / -1 (no entropy).
int  ah_token_new (char out [AH_TOKEN_HEX]);
//  Hex SHA-256 of data into out.
void ah_token_hash (const char *data, char out [AH_TOKEN_HEX]);
//  Constant-time equality of two NUL-terminated strings of the same length
//  (different lengths compare unequal at once: lengths are not secret).
bool ah_token_equal (const char *a, const char *b);
//  Random lowercase hex id of n characters (n < size). 0 / -1.
int  ah_token_id (char *out, size_t size, size_t n);

#endif
