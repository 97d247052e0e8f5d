/*  tests/common/test_secretbox.c: the egress secrets at rest
    (common/secretbox.h, common/file.h ah_keyfile_load) and their grammar
    (proto/egress.h ah_egress_secret_*): a round trip; a flipped byte, a
    wrong key, another row's associated data, a short or unknown blob do
    not open; two seals of one value differ (a fresh nonce each); the key
    file made 0600 with 32 bytes at its first need, the same key read
    back, a looser mode, a wrong size, a symlink refused; host, header
    name and value checks on hostile input.                             */
#include "common/file.h"
#include "common/secretbox.h"
#include "proto/egress.h"
#include "tests/common/check.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void s_box (void)
{
    uint8_t key [AH_SECRETBOX_KEY], other [AH_SECRETBOX_KEY];
    memset (key, 7, sizeof key);
    memset (other, 8, sizeof other);
    const char *value = "Bearer sk-0123456789";
    size_t aad_n = 0, aad2_n = 0;
    char *aad = ah_secretbox_egress_aad ("acme", "api.example.com", 443, "Authorization", &aad_n);
    char *aad2 = ah_secretbox_egress_aad ("evil", "api.example.com", 443, "Authorization", &aad2_n);
    uint8_t *a = NULL, *b = NULL;
    size_t an = 0, bn = 0;
    CHECK (ah_secretbox_seal (key, value, strlen (value), aad, aad_n, &a, &an) == 0);
    CHECK (ah_secretbox_seal (key, value, strlen (value), aad, aad_n, &b, &bn) == 0);
    CHECK (an == strlen (value) + AH_SECRETBOX_OVERHEAD && bn == an);
    CHECK (a && b && memcmp (a, b, an) != 0);                   //  a fresh nonce each time
    CHECK (a && !memmem (a, an, value, strlen (value)));
    char *plain = NULL;
    size_t pn = 0;
    CHECK (ah_secretbox_open (key, a, an, aad, aad_n, &plain, &pn) == 0);
    CHECK (plain && pn == strlen (value) && !strcmp (plain, value));
    free (plain);
    CHECK (ah_secretbox_open (other, a, an, aad, aad_n, &plain, &pn) == -1 && !plain);
    CHECK (ah_secretbox_open (key, a, an, aad2, aad2_n, &plain, &pn) == -1 && !plain);
    for (size_t i = 0; i < an; i++) {
        a [i] ^= 0x01;
        int rc = ah_secretbox_open (key, a, an, aad, aad_n, &plain, &pn);
        if (rc == 0)
            free (plain);
        CHECK (rc == -1);
        a [i] ^= 0x01;
    }
    CHECK (ah_secretbox_open (key, a, AH_SECRETBOX_OVERHEAD - 1, aad, aad_n, &plain, &pn) == -1);
    CHECK (ah_secretbox_open (key, NULL, 0, aad, aad_n, &plain, &pn) == -1);
    //  Empty value: seals and opens to "".
    uint8_t *e = NULL;
    size_t en = 0;
    CHECK (ah_secretbox_seal (key, "", 0, aad, aad_n, &e, &en) == 0 && en == AH_SECRETBOX_OVERHEAD);
    CHECK (ah_secretbox_open (key, e, en, aad, aad_n, &plain, &pn) == 0 && pn == 0 && plain && !*plain);
    free (plain);
    free (e);
    free (a);
    free (b);
    free (aad);
    free (aad2);
}

static void s_keyfile (void)
{
    char dir [] = "/tmp/ah-test-secretbox-XXXXXX";
    CHECK (mkdtemp (dir) != NULL);
    char path [256], link_path [256];
    snprintf (path, sizeof path, "%s/secrets.key", dir);
    snprintf (link_path, sizeof link_path, "%s/link.key", dir);
    uint8_t k1 [32], k2 [32];
    char *why = NULL;
    CHECK (ah_keyfile_load (path, k1, sizeof k1, false, &why) == 1 && !why);
    CHECK (access (path, F_OK) != 0);
    mode_t old = umask (0);                 //  the file is 0600 whatever the umask
    CHECK (ah_keyfile_load (path, k1, sizeof k1, true, &why) == 0 && !why);
    umask (old);
    struct stat st;
    CHECK (stat (path, &st) == 0 && (st.st_mode & 07777) == 0600 && st.st_size == 32);
    CHECK (ah_keyfile_load (path, k2, sizeof k2, true, &why) == 0 && !memcmp (k1, k2, sizeof k1));
    CHECK (ah_keyfile_load (path, k2, sizeof k2, false, &why) == 0 && !memcmp (k1, k2, sizeof k1));
    //  Looser: refused, saying so.
    CHECK (chmod (path, 0640) == 0);
    CHECK (ah_keyfile_load (path, k2, sizeof k2, false, &why) == -1 && why && strstr (why, "0640")
           && strstr (why, "chmod 600"));
    free (why);
    CHECK (chmod (path, 0604) == 0);
    CHECK (ah_keyfile_load (path, k2, sizeof k2, true, &why) == -1 && why);
    free (why);
    CHECK (chmod (path, 0600) == 0);
    //  A symlink to it: not followed.
    CHECK (symlink (path, link_path) == 0);
    CHECK (ah_keyfile_load (link_path, k2, sizeof k2, false, &why) == -1 && why);
    free (why);
    unlink (link_path);
    //  A wrong size.
    int fd = open (path, O_WRONLY | O_APPEND);
    CHECK (fd >= 0 && write (fd, "x", 1) == 1);
    if (fd >= 0)
        close (fd);
    CHECK (ah_keyfile_load (path, k2, sizeof k2, false, &why) == -1 && why && strstr (why, "32 bytes"));
    free (why);
    unlink (path);
    rmdir (dir);
}

static void s_grammar (void)
{
    char host [AH_EGRESS_HOST_MAX + 1];
    int port = 0;
    bool literal = false;
    const char *why = NULL;
    CHECK (ah_egress_secret_target ("API.Example.COM.", host, &port, &literal, &why) == 0);
    CHECK_STR (host, "api.example.com");
    CHECK (port == 443 && !literal);
    CHECK (ah_egress_secret_target ("api.example.com:8443", host, &port, &literal, &why) == 0 && port == 8443);
    CHECK (ah_egress_secret_target ("127.0.0.2:9", host, &port, &literal, &why) == 0 && literal && port == 9);
    CHECK (ah_egress_secret_target ("[2001:DB8::1]:444", host, &port, &literal, &why) == 0 && port == 444);
    CHECK_STR (host, "2001:db8::1");
    CHECK (ah_egress_secret_target ("[::1]", host, &port, &literal, &why) == 0 && port == 443 && literal);
    const char *bad [] = { "", "*.example.com", "*", "a.example:0", "a.example:65536", "a.example:", "a.example:1x",
                           "a.example:123456", "2001:db8::1", "[2001:db8::1", "a b.example", "a..example",
                           "-a.example", "a/b", "a.example:443:443", "[zz]:443", NULL };
    for (int i = 0; bad [i]; i++) {
        why = NULL;
        int rc = ah_egress_secret_target (bad [i], host, &port, &literal, &why);
        CHECK (rc == -1 && why);
        if (rc == 0)
            fprintf (stderr, "  accepted '%s'\n", bad [i]);
    }
    CHECK (ah_egress_secret_name_check ("Authorization", &why) == 0);
    CHECK (ah_egress_secret_name_check ("X-Api-Key", &why) == 0);
    const char *bad_names [] = { "", "Bad Header", "X:Y", "X\r\nY", "Host", "HOST", "content-length",
                                 "Transfer-Encoding", "Connection", "Upgrade", "TE", "Expect", "é",
                                 "Proxy-Connection", "Keep-Alive", "Trailer", NULL };
    for (int i = 0; bad_names [i]; i++)
        CHECK (ah_egress_secret_name_check (bad_names [i], &why) == -1);
    char longname [80];
    memset (longname, 'X', 65);
    longname [65] = 0;
    CHECK (ah_egress_secret_name_check (longname, &why) == -1);
    longname [64] = 0;
    CHECK (ah_egress_secret_name_check (longname, &why) == 0);
    CHECK (ah_egress_secret_value_check ("Bearer abc", 10, &why) == 0);
    CHECK (ah_egress_secret_value_check ("a\tb \x80\xff", 6, &why) == 0);
    const char *bad_values [] = { "a\rb", "a\nb", "a\r\nX-Injected: 1", "\x01", "a\x7f", " a", "a ", "\ta", NULL };
    for (int i = 0; bad_values [i]; i++)
        CHECK (ah_egress_secret_value_check (bad_values [i], strlen (bad_values [i]), &why) == -1);
    CHECK (ah_egress_secret_value_check ("a\0b", 3, &why) == -1 && strstr (why, "NUL"));
    CHECK (ah_egress_secret_value_check ("", 0, &why) == -1);
    char *big = malloc (AH_EGRESS_SECRET_VALUE_MAX + 1);
    memset (big, 'v', AH_EGRESS_SECRET_VALUE_MAX + 1);
    CHECK (ah_egress_secret_value_check (big, AH_EGRESS_SECRET_VALUE_MAX, &why) == 0);
    CHECK (ah_egress_secret_value_check (big, AH_EGRESS_SECRET_VALUE_MAX + 1, &why) == -1);
    free (big);
}

int main (void)
{
    s_box ();
    s_keyfile ();
    s_grammar ();
    return CHECK_DONE ();
}
