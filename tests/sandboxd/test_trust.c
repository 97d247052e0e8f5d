/*  tests/sandboxd/test_trust.c: the egress CA made trusted in a sandbox
    (sandboxd/trust.h): hello's PEM written alone and after the system's
    bundle, each 0644, and the variables pointing at them; refused: what
    is not one PEM certificate (junk, two, a control byte, over 4 KiB),
    a trust directory that is a link, another user's, or writable by
    others (what the agent left in /tmp does not stand in for it).     */
#include "sandboxd/trust.h"
#include "tests/common/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PEM "-----BEGIN CERTIFICATE-----\nMIIBdzCCAR2gAwIBAgIQ\n-----END CERTIFICATE-----\n"

static char *s_read (const char *path)
{
    FILE *f = fopen (path, "r");
    if (!f)
        return NULL;
    char *buf = calloc (1, 1 << 24);
    size_t n = fread (buf, 1, (1 << 24) - 1, f);
    buf [n] = 0;
    fclose (f);
    return buf;
}

int main (void)
{
    char base [] = "/tmp/ah-test-trust-XXXXXX", dir [300], path [400];
    CHECK (mkdtemp (base) != NULL);
    snprintf (dir, sizeof dir, "%s/ca", base);
    const char *why = NULL;
    unsetenv ("SSL_CERT_FILE");
    CHECK (ah_sbd_trust_write (dir, PEM, strlen (PEM), true, &why) == 0);
    snprintf (path, sizeof path, "%s/%s", dir, AH_SBD_TRUST_CA);
    char *ca = s_read (path);
    CHECK (ca && !strcmp (ca, PEM));
    struct stat st;
    CHECK (stat (path, &st) == 0 && (st.st_mode & 0777) == 0644);
    snprintf (path, sizeof path, "%s/%s", dir, AH_SBD_TRUST_BUNDLE);
    char *bundle = s_read (path);
    size_t bn = bundle ? strlen (bundle) : 0;
    CHECK (bundle && bn >= strlen (PEM) && !strcmp (bundle + bn - strlen (PEM), PEM));
    //  The system's bundle first, when the machine has one.
    if (access ("/etc/ssl/certs/ca-certificates.crt", R_OK) == 0)
        CHECK (bn > strlen (PEM) + 1000);
    CHECK (getenv ("SSL_CERT_FILE") && !strcmp (getenv ("SSL_CERT_FILE"), path));
    CHECK (getenv ("CURL_CA_BUNDLE") && getenv ("REQUESTS_CA_BUNDLE") && getenv ("GIT_SSL_CAINFO")
           && getenv ("PIP_CERT") && strstr (getenv ("NODE_EXTRA_CA_CERTS"), AH_SBD_TRUST_CA));
    free (ca);
    free (bundle);
    //  Not one PEM certificate.
    const char *bad [] = { "", "junk", PEM PEM, "-----BEGIN CERTIFICATE-----\nA\x01\n-----END CERTIFICATE-----\n",
                           "-----BEGIN PRIVATE KEY-----\nAA\n-----END PRIVATE KEY-----\n", NULL };
    for (int i = 0; bad [i]; i++)
        CHECK (ah_sbd_trust_write (dir, bad [i], strlen (bad [i]), false, &why) == -1 && why);
    char *big = malloc (5000);
    snprintf (big, 5000, "-----BEGIN CERTIFICATE-----\n%4900d\n-----END CERTIFICATE-----\n", 0);
    CHECK (ah_sbd_trust_write (dir, big, strlen (big), false, &why) == -1);
    free (big);
    //  A directory writable by others; a link; another user's.
    CHECK (chmod (dir, 0777) == 0);
    CHECK (ah_sbd_trust_write (dir, PEM, strlen (PEM), false, &why) == -1 && strstr (why, "not sandboxd's own"));
    CHECK (chmod (dir, 0755) == 0);
    char link [400];
    snprintf (link, sizeof link, "%s/link", base);
    CHECK (symlink (dir, link) == 0);
    CHECK (ah_sbd_trust_write (link, PEM, strlen (PEM), false, &why) == -1);
    if (geteuid () == 0) {
        CHECK (chown (dir, 4321, 4321) == 0);
        CHECK (ah_sbd_trust_write (dir, PEM, strlen (PEM), false, &why) == -1 && strstr (why, "not sandboxd's own"));
    }
    char rm [400];
    snprintf (rm, sizeof rm, "rm -rf '%s'", base);
    CHECK (system (rm) == 0);
    return CHECK_DONE ();
}
