/*  tests/common/test_egress_ca.c: the installation's egress CA
    (common/egress_ca.h): made at the first load with create, its key
    0600 and the same CA read back; without create nothing is made; a
    key others may read, a half-made CA refused with a sentence; leaves
    for a name and for IPv4 and IPv6 literals verify against the CA with
    their host, not with another, and are CA:FALSE serverAuth.          */
#include "common/egress_ca.h"
#include "tests/common/check.h"

#include <openssl/x509v3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

//  Does cert verify against ca for host (a name or an IP literal)?
static bool s_verifies (X509 *ca, X509 *cert, const char *host, bool ip)
{
    X509_STORE *store = X509_STORE_new ();
    X509_STORE_CTX *ctx = X509_STORE_CTX_new ();
    X509_STORE_add_cert (store, ca);
    X509_STORE_CTX_init (ctx, store, cert, NULL);
    X509_VERIFY_PARAM *param = X509_STORE_CTX_get0_param (ctx);
    X509_VERIFY_PARAM_set_purpose (param, X509_PURPOSE_SSL_SERVER);
    if (ip)
        X509_VERIFY_PARAM_set1_ip_asc (param, host);
    else
        X509_VERIFY_PARAM_set1_host (param, host, 0);
    bool ok = X509_verify_cert (ctx) == 1;
    X509_STORE_CTX_free (ctx);
    X509_STORE_free (store);
    return ok;
}

int main (void)
{
    char dir [] = "/tmp/ah-test-egress-ca-XXXXXX";
    CHECK (mkdtemp (dir) != NULL);
    char key [256], cert [256];
    snprintf (key, sizeof key, "%s/%s", dir, AH_EGRESS_CA_KEY_FILE);
    snprintf (cert, sizeof cert, "%s/%s", dir, AH_EGRESS_CA_CERT_FILE);
    char *why = NULL;
    CHECK (ah_egress_ca_load (dir, false, &why) == NULL && why);
    free (why);
    CHECK (access (key, F_OK) != 0);
    ah_egress_ca_t *ca = ah_egress_ca_load (dir, true, &why);
    CHECK (ca && !why);
    struct stat st;
    CHECK (stat (key, &st) == 0 && (st.st_mode & 0777) == 0600);
    CHECK (stat (cert, &st) == 0 && (st.st_mode & 0777) == 0644);
    const char *pem = ah_egress_ca_pem (ca);
    CHECK (pem && strstr (pem, "-----BEGIN CERTIFICATE-----") && strlen (pem) < AH_EGRESS_CA_PEM_MAX);
    ah_egress_ca_t *again = ah_egress_ca_load (dir, true, &why);
    CHECK (again && pem && !strcmp (ah_egress_ca_pem (again), pem));
    ah_egress_ca_destroy (&again);
    CHECK (again == NULL);

    X509 *leaf = NULL;
    EVP_PKEY *lkey = NULL;
    const char *lwhy = NULL;
    CHECK (ah_egress_ca_leaf (ca, "api.example.com", false, 86400, &leaf, &lkey, &lwhy) == 0);
    CHECK (leaf && s_verifies (ah_egress_ca_cert (ca), leaf, "api.example.com", false));
    CHECK (leaf && !s_verifies (ah_egress_ca_cert (ca), leaf, "other.example.com", false));
    CHECK (leaf && X509_check_private_key (leaf, lkey) == 1);
    CHECK (leaf && X509_check_ca (leaf) == 0);
    X509_free (leaf);
    EVP_PKEY_free (lkey);
    CHECK (ah_egress_ca_leaf (ca, "127.0.0.2", true, 86400, &leaf, &lkey, &lwhy) == 0);
    CHECK (leaf && s_verifies (ah_egress_ca_cert (ca), leaf, "127.0.0.2", true));
    CHECK (leaf && !s_verifies (ah_egress_ca_cert (ca), leaf, "127.0.0.3", true));
    X509_free (leaf);
    EVP_PKEY_free (lkey);
    CHECK (ah_egress_ca_leaf (ca, "2001:db8::1", true, 86400, &leaf, &lkey, &lwhy) == 0);
    CHECK (leaf && s_verifies (ah_egress_ca_cert (ca), leaf, "2001:db8::1", true));
    X509_free (leaf);
    EVP_PKEY_free (lkey);
    CHECK (ah_egress_ca_leaf (ca, "", false, 86400, &leaf, &lkey, &lwhy) == -1 && !leaf);
    ah_egress_ca_destroy (&ca);

    //  Refused: a key others may read; a half-made CA.
    CHECK (chmod (key, 0644) == 0);
    CHECK (ah_egress_ca_load (dir, true, &why) == NULL && why && strstr (why, "0644"));
    free (why);
    CHECK (chmod (key, 0600) == 0);
    unlink (cert);
    CHECK (ah_egress_ca_load (dir, true, &why) == NULL && why && strstr (why, "without"));
    free (why);
    CHECK (access (cert, F_OK) != 0);           //  not made again over the key
    unlink (key);
    rmdir (dir);
    return CHECK_DONE ();
}
