/*  common/secretbox.h: values kept encrypted at rest (the tenants'
    egress secrets, docs/egress.md "Secrets"): AES-256-GCM (OpenSSL EVP)
    under the installation's secrets key, <data_dir>/secrets.key (32
    random bytes, mode 0600, made at its first need: common/file.h
    ah_keyfile_load), a fresh random 96-bit nonce per value.

    A sealed value: version (1 byte, 1), nonce (12), ciphertext (as long
    as the value), tag (16). The associated data binds it to its row
    (tenant, host, port, header): a value moved to another row in the
    database does not open.                                              */
#ifndef AH_SECRETBOX_H
#define AH_SECRETBOX_H

#include <stddef.h>
#include <stdint.h>

#define AH_SECRETBOX_KEY        32
#define AH_SECRETBOX_FILE       "secrets.key"
#define AH_SECRETBOX_OVERHEAD   (1 + 12 + 16)

//  plain (n bytes) sealed under key with aad: *out (the caller frees),
//  *out_n. 0, or -1 (no entropy, out of memory, OpenSSL refused).
int ah_secretbox_seal (const uint8_t key [AH_SECRETBOX_KEY], const void *plain, size_t n,
                       const void *aad, size_t aad_n, uint8_t **out, size_t *out_n);

//  blob opened: *plain (n bytes and a NUL after them; the caller wipes
//  and frees), *plain_n. 0, or -1 when it is not a sealed value of this
//  version, or the key, the aad or a byte of it differ.
int ah_secretbox_open (const uint8_t key [AH_SECRETBOX_KEY], const uint8_t *blob, size_t n,
                       const void *aad, size_t aad_n, char **plain, size_t *plain_n);

//  The associated data of an egress secret's value (docs/schema.md,
//  egress_secrets): its row. The caller frees; NULL out of memory.
char *ah_secretbox_egress_aad (const char *tenant, const char *host, int port, const char *header, size_t *n);

#endif
