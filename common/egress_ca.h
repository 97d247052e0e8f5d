/*  common/egress_ca.h: the installation's egress CA (docs/egress.md
    "Secrets"). For a host a tenant attached a secret to, the server
    terminates the sandbox's TLS with a certificate of its own, and the
    sandbox trusts it because this CA is in the bundle sandboxd gives what
    it runs (docs/sandboxd.md "The egress CA").

    The CA: an EC P-256 key, <data_dir>/egress-ca.key (PEM, mode 0600: a
    looser one is refused, as the secrets key), and a self-signed
    certificate, <data_dir>/egress-ca.pem (CA:TRUE, pathlen 0, keyCertSign,
    ten years), made together at the server's first start. Leaf
    certificates are minted on demand: a fresh P-256 key each, the host
    as the only subjectAltName (a DNS name, or an IP address for a
    literal), serverAuth, valid from an hour ago for validity_s.

    Thread-safety: a loaded CA is only read; ah_egress_ca_leaf may run in
    several threads at once (OpenSSL's signing with a shared key is).    */
#ifndef AH_EGRESS_CA_H
#define AH_EGRESS_CA_H

#include <openssl/evp.h>
#include <openssl/x509.h>
#include <stdbool.h>

#define AH_EGRESS_CA_KEY_FILE   "egress-ca.key"
#define AH_EGRESS_CA_CERT_FILE  "egress-ca.pem"
#define AH_EGRESS_CA_PEM_MAX    4096        //  what a CA's PEM may be, here and in sandboxd

typedef struct ah_egress_ca_t ah_egress_ca_t;

//  The CA of data_dir; when neither file exists and create is set, made
//  first. NULL with *why (the caller frees): a file missing or unreadable,
//  a key others may read, a certificate that is not the key's.
ah_egress_ca_t *ah_egress_ca_load (const char *data_dir, bool create, char **why);
void ah_egress_ca_destroy (ah_egress_ca_t **self_p);

//  The certificate as PEM text (what sandboxes are given to trust).
const char *ah_egress_ca_pem (const ah_egress_ca_t *self);
X509 *ah_egress_ca_cert (const ah_egress_ca_t *self);

//  A leaf for host (proto/egress.h's normalised form; literal: an IP
//  address) signed by the CA: *cert and *key, the caller's. 0, or -1
//  with *why (static text).
int  ah_egress_ca_leaf (const ah_egress_ca_t *self, const char *host, bool literal, long validity_s,
                        X509 **cert, EVP_PKEY **key, const char **why);

#endif
