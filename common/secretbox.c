/*  common/secretbox.c: see secretbox.h.                                */
#include "common/secretbox.h"

#include "common/str.h"

#include <openssl/crypto.h>
#include <stdbool.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define S_VERSION   1
#define S_NONCE     12
#define S_TAG       16

//  One pass of AES-256-GCM over in (n bytes) into out; tag written
//  (seal) or checked (open). 0 / -1.
static int s_gcm (bool seal, const uint8_t *key, const uint8_t *nonce, const void *aad, size_t aad_n,
                  const uint8_t *in, size_t n, uint8_t *out, uint8_t *tag)
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new ();
    int len = 0, ok = ctx != NULL && n <= INT32_MAX && aad_n <= INT32_MAX
        && EVP_CipherInit_ex (ctx, EVP_aes_256_gcm (), NULL, NULL, NULL, seal) == 1
        && EVP_CIPHER_CTX_ctrl (ctx, EVP_CTRL_GCM_SET_IVLEN, S_NONCE, NULL) == 1
        && EVP_CipherInit_ex (ctx, NULL, NULL, key, nonce, seal) == 1
        && (!aad_n || EVP_CipherUpdate (ctx, NULL, &len, aad, (int) aad_n) == 1)
        && (!n || EVP_CipherUpdate (ctx, out, &len, in, (int) n) == 1)
        && (seal || EVP_CIPHER_CTX_ctrl (ctx, EVP_CTRL_GCM_SET_TAG, S_TAG, tag) == 1)
        && EVP_CipherFinal_ex (ctx, out + (n ? len : 0), &len) == 1
        && (!seal || EVP_CIPHER_CTX_ctrl (ctx, EVP_CTRL_GCM_GET_TAG, S_TAG, tag) == 1);
    EVP_CIPHER_CTX_free (ctx);
    return ok ? 0 : -1;
}

int ah_secretbox_seal (const uint8_t key [AH_SECRETBOX_KEY], const void *plain, size_t n,
                       const void *aad, size_t aad_n, uint8_t **out, size_t *out_n)
{
    *out = NULL;
    *out_n = 0;
    if (n > (1u << 24))
        return -1;
    uint8_t *blob = malloc (AH_SECRETBOX_OVERHEAD + n);
    if (!blob)
        return -1;
    blob [0] = S_VERSION;
    uint8_t *nonce = blob + 1, *ct = nonce + S_NONCE, *tag = ct + n;
    if (getrandom (nonce, S_NONCE, 0) != S_NONCE
    ||  s_gcm (true, key, nonce, aad, aad_n, plain, n, ct, tag)) {
        OPENSSL_cleanse (blob, AH_SECRETBOX_OVERHEAD + n);
        free (blob);
        return -1;
    }
    *out = blob;
    *out_n = AH_SECRETBOX_OVERHEAD + n;
    return 0;
}

int ah_secretbox_open (const uint8_t key [AH_SECRETBOX_KEY], const uint8_t *blob, size_t n,
                       const void *aad, size_t aad_n, char **plain, size_t *plain_n)
{
    *plain = NULL;
    *plain_n = 0;
    if (!blob || n < AH_SECRETBOX_OVERHEAD || blob [0] != S_VERSION)
        return -1;
    size_t len = n - AH_SECRETBOX_OVERHEAD;
    const uint8_t *nonce = blob + 1, *ct = nonce + S_NONCE;
    uint8_t tag [S_TAG];
    memcpy (tag, ct + len, S_TAG);
    char *out = malloc (len + 1);
    if (!out || s_gcm (false, key, nonce, aad, aad_n, ct, len, (uint8_t *) out, tag)) {
        if (out)
            OPENSSL_cleanse (out, len + 1);
        free (out);
        return -1;
    }
    out [len] = 0;
    *plain = out;
    *plain_n = len;
    return 0;
}

char *ah_secretbox_egress_aad (const char *tenant, const char *host, int port, const char *header, size_t *n)
{
    char *aad = ah_strf ("agenthold-egress-secret-v1\n%s\n%s\n%d\n%s", tenant, host, port, header);
    *n = aad ? strlen (aad) : 0;
    return aad;
}
