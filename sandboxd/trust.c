/*  sandboxd/trust.c: see trust.h.                                       */
#include "sandboxd/trust.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_PEM_MAX       4096
#define S_SYSTEM_MAX    (8 << 20)

//  The image's own bundle, where the common distributions keep it.
static const char *const s_system [] = {
    "/etc/ssl/certs/ca-certificates.crt",       //  Debian, Ubuntu, Alpine
    "/etc/pki/tls/certs/ca-bundle.crt",         //  Fedora, RHEL
    "/etc/ssl/ca-bundle.pem",                   //  openSUSE
    "/etc/ssl/cert.pem",                        //  Alpine, macOS-likes
    NULL
};

static bool s_pem_ok (const char *pem, size_t n)
{
    static const char begin [] = "-----BEGIN CERTIFICATE-----\n";
    static const char end [] = "-----END CERTIFICATE-----\n";
    if (n < sizeof begin + sizeof end || n > S_PEM_MAX || strncmp (pem, begin, sizeof begin - 1)
    ||  strcmp (pem + n - (sizeof end - 1), end))
        return false;
    for (size_t i = 0; i < n; i++)
        if ((pem [i] < 0x20 && pem [i] != '\n') || (unsigned char) pem [i] >= 0x7f)
            return false;
    //  One certificate only.
    return strstr (pem + 1, "-----BEGIN") == NULL;
}

//  dir/name: data whole, 0644, or nothing. 0 / -1.
static int s_put (const char *dir, const char *name, const char *a, size_t an, const char *b, size_t bn)
{
    char path [512], tmp [520];
    snprintf (path, sizeof path, "%s/%s", dir, name);
    snprintf (tmp, sizeof tmp, "%s.XXXXXX", path);
    int fd = mkostemp (tmp, O_CLOEXEC);
    if (fd < 0)
        return -1;
    bool ok = fchmod (fd, 0644) == 0;
    const char *parts [2] = { a, b };
    size_t sizes [2] = { an, bn };
    for (int p = 0; p < 2 && ok; p++)
        for (size_t done = 0; ok && done < sizes [p]; ) {
            ssize_t w = write (fd, parts [p] + done, sizes [p] - done);
            if (w < 0 && errno == EINTR)
                continue;
            ok = w > 0;
            done += w > 0 ? (size_t) w : 0;
        }
    ok = close (fd) == 0 && ok;
    if (!ok || rename (tmp, path) != 0) {
        unlink (tmp);
        return -1;
    }
    return 0;
}

//  The first system bundle there is, read whole (NULL: none; *n 0).
static char *s_system_bundle (size_t *n)
{
    *n = 0;
    for (int i = 0; s_system [i]; i++) {
        int fd = open (s_system [i], O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0)
            continue;
        char *buf = NULL;
        if (fstat (fd, &st) == 0 && S_ISREG (st.st_mode) && st.st_size > 0 && st.st_size <= S_SYSTEM_MAX
        &&  (buf = malloc ((size_t) st.st_size + 1))) {
            ssize_t r = read (fd, buf, (size_t) st.st_size);
            if (r == st.st_size) {
                close (fd);
                //  A bundle that does not end its last line would glue the CA to it.
                if (buf [r - 1] != '\n')
                    buf [r++] = '\n';
                *n = (size_t) r;
                return buf;
            }
            free (buf);
        }
        close (fd);
    }
    return NULL;
}

int ah_sbd_trust_write (const char *dir, const char *pem, size_t n, bool set_env, const char **why)
{
    if (!pem || !s_pem_ok (pem, n)) {
        *why = "hello's egress_ca is not one PEM certificate of at most 4096 bytes";
        return -1;
    }
    struct stat st;
    if ((mkdir (dir, 0755) != 0 && errno != EEXIST) || lstat (dir, &st) != 0) {
        *why = "cannot make the trust directory";
        return -1;
    }
    if (!S_ISDIR (st.st_mode) || st.st_uid != geteuid () || (st.st_mode & 022)) {
        *why = "the trust directory is not sandboxd's own directory (another user's, a link, or writable by others)";
        return -1;
    }
    size_t sn = 0;
    char *system = s_system_bundle (&sn);
    int rc = s_put (dir, AH_SBD_TRUST_CA, pem, n, NULL, 0) == 0
          && s_put (dir, AH_SBD_TRUST_BUNDLE, system ? system : "", sn, pem, n) == 0 ? 0 : -1;
    free (system);
    if (rc) {
        *why = "cannot write the CA files in the trust directory";
        return -1;
    }
    if (set_env) {
        char bundle [512], ca [512];
        snprintf (bundle, sizeof bundle, "%s/%s", dir, AH_SBD_TRUST_BUNDLE);
        snprintf (ca, sizeof ca, "%s/%s", dir, AH_SBD_TRUST_CA);
        static const char *const names [] = { "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                                              "GIT_SSL_CAINFO", "PIP_CERT", NULL };
        for (int i = 0; names [i]; i++)
            setenv (names [i], bundle, 1);
        setenv ("NODE_EXTRA_CA_CERTS", ca, 1);
    }
    return 0;
}
