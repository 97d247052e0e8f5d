/*  common/egress_ca.c: see egress_ca.h.                                */
#include "common/egress_ca.h"
#include "common/file.h"
#include "common/str.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_FILE_MAX      16384
#define S_CA_YEARS      10

struct ah_egress_ca_t {
    EVP_PKEY *key;
    X509 *cert;
    char *pem;
};

void ah_egress_ca_destroy (ah_egress_ca_t **self_p)
{
    ah_egress_ca_t *self = self_p ? *self_p : NULL;
    if (!self)
        return;
    EVP_PKEY_free (self->key);
    X509_free (self->cert);
    free (self->pem);
    free (self);
    *self_p = NULL;
}

const char *ah_egress_ca_pem (const ah_egress_ca_t *self)
{
    return self ? self->pem : NULL;
}

X509 *ah_egress_ca_cert (const ah_egress_ca_t *self)
{
    return self ? self->cert : NULL;
}

//  A memory BIO's bytes as a string (the caller frees).
static char *s_bio_text (BIO *bio)
{
    char *data = NULL;
    long n = bio ? BIO_get_mem_data (bio, &data) : 0;
    char *out = n > 0 ? malloc ((size_t) n + 1) : NULL;
    if (out) {
        memcpy (out, data, (size_t) n);
        out [n] = 0;
    }
    return out;
}

static int s_ext (X509 *cert, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb (&ctx);
    X509V3_set_ctx (&ctx, issuer, cert, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid (NULL, &ctx, nid, value);
    int rc = ext && X509_add_ext (cert, ext, -1) == 1 ? 0 : -1;
    X509_EXTENSION_free (ext);
    return rc;
}

//  A certificate for key's public half: serial, validity, subject.
static X509 *s_cert_new (EVP_PKEY *key, const char *cn, long before_s, long after_s)
{
    X509 *cert = X509_new ();
    uint8_t serial [16];
    BIGNUM *bn = NULL;
    X509_NAME *name = NULL;
    bool ok = cert && RAND_bytes (serial, sizeof serial) == 1;
    if (ok) {
        serial [0] &= 0x7f;                 //  positive
        bn = BN_bin2bn (serial, sizeof serial, NULL);
        ok = bn && BN_to_ASN1_INTEGER (bn, X509_get_serialNumber (cert)) != NULL;
    }
    ok = ok && X509_set_version (cert, 2) == 1
       && X509_gmtime_adj (X509_getm_notBefore (cert), -before_s)
       && X509_gmtime_adj (X509_getm_notAfter (cert), after_s)
       && X509_set_pubkey (cert, key) == 1
       && (name = X509_get_subject_name (cert))
       && X509_NAME_add_entry_by_txt (name, "O", MBSTRING_ASC, (const unsigned char *) "agenthold", -1, -1, 0) == 1
       && X509_NAME_add_entry_by_txt (name, "CN", MBSTRING_ASC, (const unsigned char *) cn, -1, -1, 0) == 1;
    BN_free (bn);
    if (!ok)
        X509_free (cert);
    return ok ? cert : NULL;
}

//  A file of at most S_FILE_MAX bytes into a memory BIO; private: its
//  mode must give nothing to the group or others. NULL with *why.
static BIO *s_read (const char *path, bool private, char **why)
{
    int fd = open (path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    char *buf = NULL;
    BIO *bio = NULL;
    if (fd < 0 || fstat (fd, &st) != 0) {
        *why = ah_strf ("cannot read %s: %s", path, strerror (errno));
        goto out;
    }
    if (!S_ISREG (st.st_mode) || st.st_size <= 0 || st.st_size > S_FILE_MAX) {
        *why = ah_strf ("%s is not a file of 1 to %d bytes", path, S_FILE_MAX);
        goto out;
    }
    if (private && (st.st_mode & 077)) {
        *why = ah_strf ("%s has mode %04o: a key others may read is not used (chmod 600 %s; and if someone "
                        "else may have read it, remove %s and its certificate beside it: a new CA is made at "
                        "the next start, and every sandbox trusts it from its next start)", path,
                        (unsigned) (st.st_mode & 07777), path, path);
        goto out;
    }
    buf = malloc ((size_t) st.st_size);
    if (!buf || read (fd, buf, (size_t) st.st_size) != (ssize_t) st.st_size) {
        *why = ah_strf ("cannot read %s", path);
        goto out;
    }
    bio = BIO_new (BIO_s_mem ());
    if (bio && BIO_write (bio, buf, (int) st.st_size) != (int) st.st_size) {
        BIO_free (bio);
        bio = NULL;
    }
    if (!bio)
        *why = ah_strf ("out of memory reading %s", path);
out:
    if (buf)
        OPENSSL_cleanse (buf, (size_t) st.st_size);
    free (buf);
    if (fd >= 0)
        close (fd);
    return bio;
}

//  A new CA into key_path (0600) and cert_path (0644). 0, or -1 with *why.
static int s_make (const char *key_path, const char *cert_path, char **why)
{
    EVP_PKEY *key = EVP_EC_gen ("P-256");
    uint8_t id [4];
    char cn [64];
    X509 *cert = NULL;
    BIO *kb = BIO_new (BIO_s_mem ()), *cb = BIO_new (BIO_s_mem ());
    char *ktext = NULL, *ctext = NULL;
    int rc = -1;
    if (!key || RAND_bytes (id, sizeof id) != 1) {
        *why = ah_strf ("cannot make the egress CA's key");
        goto out;
    }
    snprintf (cn, sizeof cn, "agenthold egress CA %02x%02x%02x%02x", id [0], id [1], id [2], id [3]);
    cert = s_cert_new (key, cn, 3600, 86400L * 366 * S_CA_YEARS);
    if (!cert || X509_set_issuer_name (cert, X509_get_subject_name (cert)) != 1
    ||  s_ext (cert, cert, NID_basic_constraints, "critical,CA:TRUE,pathlen:0")
    ||  s_ext (cert, cert, NID_key_usage, "critical,keyCertSign,cRLSign")
    ||  s_ext (cert, cert, NID_subject_key_identifier, "hash")
    ||  X509_sign (cert, key, EVP_sha256 ()) <= 0
    ||  !kb || !cb || PEM_write_bio_PrivateKey (kb, key, NULL, NULL, 0, NULL, NULL) != 1
    ||  PEM_write_bio_X509 (cb, cert) != 1 || !(ktext = s_bio_text (kb)) || !(ctext = s_bio_text (cb))) {
        *why = ah_strf ("cannot make the egress CA's certificate");
        goto out;
    }
    //  The key first: a certificate is never there without its key.
    if (ah_file_put (key_path, ktext, strlen (ktext), 0600, true)
    ||  ah_file_put (cert_path, ctext, strlen (ctext), 0644, true)) {
        *why = ah_strf ("cannot write the egress CA (%s, %s): %s", key_path, cert_path, strerror (errno));
        unlink (key_path);
        goto out;
    }
    rc = 0;
out:
    if (ktext)
        OPENSSL_cleanse (ktext, strlen (ktext));
    free (ktext);
    free (ctext);
    BIO_free (kb);
    BIO_free (cb);
    X509_free (cert);
    EVP_PKEY_free (key);
    return rc;
}

ah_egress_ca_t *ah_egress_ca_load (const char *data_dir, bool create, char **why)
{
    *why = NULL;
    char *key_path = ah_strf ("%s/%s", data_dir, AH_EGRESS_CA_KEY_FILE);
    char *cert_path = ah_strf ("%s/%s", data_dir, AH_EGRESS_CA_CERT_FILE);
    ah_egress_ca_t *self = calloc (1, sizeof *self);
    BIO *kb = NULL, *cb = NULL, *out = NULL;
    if (!key_path || !cert_path || !self) {
        *why = ah_strf ("out of memory");
        goto fail;
    }
    bool has_key = access (key_path, F_OK) == 0, has_cert = access (cert_path, F_OK) == 0;
    if (!has_key && !has_cert && create && s_make (key_path, cert_path, why))
        goto fail;
    if (!has_key && !has_cert && !create) {
        *why = ah_strf ("there is no egress CA in %s (the server makes it at its start)", data_dir);
        goto fail;
    }
    if (has_key != has_cert) {
        *why = ah_strf ("%s is there without %s: remove the one left and restart (a new CA is made; every "
                        "sandbox trusts it from its next start)", has_key ? key_path : cert_path,
                        has_key ? cert_path : key_path);
        goto fail;
    }
    if (!(kb = s_read (key_path, true, why)) || !(cb = s_read (cert_path, false, why)))
        goto fail;
    self->key = PEM_read_bio_PrivateKey (kb, NULL, NULL, NULL);
    self->cert = PEM_read_bio_X509 (cb, NULL, NULL, NULL);
    if (!self->key || !self->cert || X509_check_private_key (self->cert, self->key) != 1
    ||  X509_check_ca (self->cert) < 1) {
        *why = ah_strf ("the egress CA in %s and %s cannot be used (unreadable, not a CA, or the certificate "
                        "is not the key's): remove both and restart", key_path, cert_path);
        goto fail;
    }
    out = BIO_new (BIO_s_mem ());
    if (!out || PEM_write_bio_X509 (out, self->cert) != 1 || !(self->pem = s_bio_text (out))
    ||  strlen (self->pem) > AH_EGRESS_CA_PEM_MAX) {
        *why = ah_strf ("the egress CA's certificate cannot be written out as PEM (or is over %d bytes)",
                        AH_EGRESS_CA_PEM_MAX);
        goto fail;
    }
    BIO_free (kb);
    BIO_free (cb);
    BIO_free (out);
    free (key_path);
    free (cert_path);
    ERR_clear_error ();
    return self;
fail:
    BIO_free (kb);
    BIO_free (cb);
    BIO_free (out);
    free (key_path);
    free (cert_path);
    ah_egress_ca_destroy (&self);
    ERR_clear_error ();
    if (!*why)
        *why = ah_strf ("out of memory");
    return NULL;
}

int ah_egress_ca_leaf (const ah_egress_ca_t *self, const char *host, bool literal, long validity_s,
                       X509 **cert_p, EVP_PKEY **key_p, const char **why)
{
    *cert_p = NULL;
    *key_p = NULL;
    char san [300], cn [65];
    if (!self || !host || !*host || strlen (host) > 253) {
        *why = "no CA or no host";
        return -1;
    }
    snprintf (san, sizeof san, "%s:%s", literal ? "IP" : "DNS", host);
    snprintf (cn, sizeof cn, "%s", host);
    EVP_PKEY *key = EVP_EC_gen ("P-256");
    X509 *cert = key ? s_cert_new (key, cn, 3600, validity_s) : NULL;
    if (!cert || X509_set_issuer_name (cert, X509_get_subject_name (self->cert)) != 1
    ||  s_ext (cert, self->cert, NID_basic_constraints, "critical,CA:FALSE")
    ||  s_ext (cert, self->cert, NID_key_usage, "critical,digitalSignature")
    ||  s_ext (cert, self->cert, NID_ext_key_usage, "serverAuth")
    ||  s_ext (cert, self->cert, NID_subject_alt_name, san)
    ||  s_ext (cert, self->cert, NID_authority_key_identifier, "keyid:always")
    ||  X509_sign (cert, self->key, EVP_sha256 ()) <= 0) {
        X509_free (cert);
        EVP_PKEY_free (key);
        ERR_clear_error ();
        *why = "cannot mint a certificate for the host";
        return -1;
    }
    *cert_p = cert;
    *key_p = key;
    return 0;
}
