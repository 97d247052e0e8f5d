/*  tests/kubernetes/test_k8s_kubeconfig.c: the kubernetes driver's
    credentials: a kubeconfig's current context with inline data or files,
    bearer tokens, in-cluster service-account files; and every kind of
    hostile or broken kubeconfig refused with a sentence, never a crash. */
#include "drivers/kubernetes/k8s_int.h"
#include "tests/common/check.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char s_dir [] = "/tmp/ah-test-k8s-kc-XXXXXX";

//  base64 of "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
#define PEM_B64 "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCkFBQUEKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="
#define PEM     "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"

static void s_write (const char *name, const char *text)
{
    char path [256];
    snprintf (path, sizeof path, "%s/%s", s_dir, name);
    FILE *f = fopen (path, "w");
    if (f) {
        fputs (text, f);
        fclose (f);
    }
}

static const char *s_head =
    "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
    "contexts:\n- name: other\n  context: {cluster: x, user: y}\n"
    "- name: c\n  context: {cluster: k, user: u, namespace: team}\n";

static void s_test_inline (void)
{
    char *text = ah_strf ("%s"
        "clusters:\n- name: k\n  cluster:\n    server: https://10.0.0.1:6443/\n"
        "    certificate-authority-data: " PEM_B64 "\n"
        "users:\n- name: u\n  user:\n    client-certificate-data: " PEM_B64 "\n"
        "    client-key-data: " PEM_B64 "\n", s_head);
    k8s_creds_t c;
    char *err = NULL;
    CHECK (ah_k8s_kubeconfig_parse (text, strlen (text), NULL, &c, &err) == 0);
    if (err)
        fprintf (stderr, "  %s\n", err);
    CHECK_STR (c.server, "https://10.0.0.1:6443");
    CHECK_STR (c.ca, PEM);
    CHECK (c.ca_len == strlen (PEM));
    CHECK_STR (c.cert, PEM);
    CHECK_STR (c.key, PEM);
    CHECK (c.token == NULL && !c.insecure);
    CHECK_STR (c.ns, "team");
    ah_k8s_creds_free (&c);
    free (err);
    free (text);
}

static void s_test_files_and_token (void)
{
    s_write ("ca.crt", PEM);
    s_write ("token", "abc.def-ghi\n");
    char *text = ah_strf ("%s"
        "clusters:\n- name: k\n  cluster:\n    server: https://k8s.example:443\n"
        "    certificate-authority: ca.crt\n"
        "users:\n- name: u\n  user:\n    tokenFile: token\n", s_head);
    s_write ("config", text);
    char path [256];
    snprintf (path, sizeof path, "%s/config", s_dir);
    k8s_creds_t c;
    char *err = NULL;
    CHECK (ah_k8s_kubeconfig_load (path, &c, &err) == 0);
    if (err)
        fprintf (stderr, "  %s\n", err);
    CHECK_STR (c.ca, PEM);
    CHECK_STR (c.token, "abc.def-ghi");
    CHECK (c.cert == NULL);
    ah_k8s_creds_free (&c);
    free (err);
    free (text);
    //  A token inline.
    text = ah_strf ("%s"
        "clusters:\n- name: k\n  cluster:\n    server: https://k8s.example\n"
        "users:\n- name: u\n  user:\n    token: sekret\n", s_head);
    err = NULL;
    CHECK (ah_k8s_kubeconfig_parse (text, strlen (text), NULL, &c, &err) == 0);
    CHECK_STR (c.token, "sekret");
    CHECK (c.ca == NULL);
    ah_k8s_creds_free (&c);
    free (err);
    free (text);
}

static void s_test_incluster (void)
{
    char sa [300];
    snprintf (sa, sizeof sa, "%s/sa", s_dir);
    mkdir (sa, 0700);
    s_write ("sa/token", "tok-en\n");
    s_write ("sa/ca.crt", PEM);
    s_write ("sa/namespace", "agenthold\n");
    k8s_creds_t c;
    char *err = NULL;
    unsetenv ("KUBERNETES_SERVICE_HOST");
    CHECK (ah_k8s_incluster_load (sa, &c, &err) == -1);
    CHECK (err && strstr (err, "KUBERNETES_SERVICE_HOST"));
    free (err);
    err = NULL;
    setenv ("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv ("KUBERNETES_SERVICE_PORT", "443", 1);
    CHECK (ah_k8s_incluster_load (sa, &c, &err) == 0);
    CHECK_STR (c.server, "https://10.96.0.1:443");
    CHECK_STR (c.token, "tok-en");
    CHECK_STR (c.ns, "agenthold");
    ah_k8s_creds_free (&c);
    free (err);
    err = NULL;
    setenv ("KUBERNETES_SERVICE_HOST", "evil.example/path?x", 1);
    CHECK (ah_k8s_incluster_load (sa, &c, &err) == -1);
    free (err);
    err = NULL;
    setenv ("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
    CHECK (ah_k8s_incluster_load (sa, &c, &err) == 0);
    CHECK_STR (c.server, "https://[fd00::1]:443");
    ah_k8s_creds_free (&c);
    free (err);
    err = NULL;
    s_write ("sa/ca.crt", "not a certificate");
    CHECK (ah_k8s_incluster_load (sa, &c, &err) == -1);
    CHECK (err && strstr (err, "PEM"));
    free (err);
    unsetenv ("KUBERNETES_SERVICE_HOST");
    unsetenv ("KUBERNETES_SERVICE_PORT");
}

static void s_expect_bad (int line, const char *text, const char *want)
{
    k8s_creds_t c;
    char *err = NULL;
    int rc = ah_k8s_kubeconfig_parse (text, text ? strlen (text) : 0, NULL, &c, &err);
    if (rc == 0 || !err || (want && !strstr (err, want)))
        fprintf (stderr, "  line %d: rc %d, error '%s', wanted '%s'\n", line, rc,
                 err ? err : "(none)", want ? want : "");
    CHECK (rc == -1);
    CHECK (err && (!want || strstr (err, want)));
    CHECK (c.server == NULL && c.token == NULL && c.key == NULL);
    free (err);
}
#define BAD(text, want) s_expect_bad (__LINE__, text, want)

#define CL  "clusters:\n- name: k\n  cluster:\n    server: https://k:6443\n"
#define US  "users:\n- name: u\n  user:\n    token: t\n"

//  What random kubeconfigs are made of: YAML's punctuation and a few letters.
static const char s_junk [] = "ab:- \n\t[]{}\"'&*!|>%@`#,?";

static void s_test_hostile (void)
{
    char buf [4096];
    BAD ("", "not a mapping");
    BAD ("- a list\n", "not a mapping");
    BAD ("key: [unclosed\n", "YAML syntax error");
    BAD ("current-context: [1, 2]\n", "current-context");
    BAD ("current-context: nowhere\ncontexts: []\n", "'nowhere' is not in contexts");
    BAD ("current-context: c\ncontexts: {c: 1}\n", "not in contexts");
    BAD ("current-context: c\ncontexts:\n- name: c\n  context: 5\n", "not in contexts");
    BAD ("current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n" US,
         "names no cluster");
    snprintf (buf, sizeof buf, "%sclusters:\n- name: k\n  cluster:\n    server: http://k:6443\n" US, s_head);
    BAD (buf, "not an https:// URL");
    snprintf (buf, sizeof buf, "%sclusters:\n- name: k\n  cluster:\n    server: \"https://k:6443\\n/x\"\n" US, s_head);
    BAD (buf, "not an https:// URL");
    snprintf (buf, sizeof buf, "%s" CL, s_head);
    BAD (buf, "names user 'u', not in users");
    snprintf (buf, sizeof buf, "%s" CL "users:\n- name: u\n  user: {}\n", s_head);
    BAD (buf, "no credentials");
    snprintf (buf, sizeof buf, "%s" CL "users:\n- name: u\n  user:\n    client-certificate-data: " PEM_B64 "\n", s_head);
    BAD (buf, "needs its key");
    snprintf (buf, sizeof buf, "%s" CL "users:\n- name: u\n  user:\n    client-certificate-data: \"%%%%%%\"\n"
              "    client-key-data: " PEM_B64 "\n", s_head);
    BAD (buf, "not base64");
    snprintf (buf, sizeof buf, "%s" CL "users:\n- name: u\n  user:\n    client-certificate-data: aGVsbG8=\n"
              "    client-key-data: aGVsbG8=\n", s_head);
    BAD (buf, "not PEM");
    snprintf (buf, sizeof buf, "%s" CL "users:\n- name: u\n  user:\n    client-certificate-data: [1]\n", s_head);
    BAD (buf, "not a string");
    snprintf (buf, sizeof buf, "%s" CL "users:\n- name: u\n  user:\n    client-key: relative.key\n"
              "    client-certificate: /etc/hostname\n", s_head);
    BAD (buf, "relative file");
    snprintf (buf, sizeof buf, "%s" CL "users:\n- name: u\n  user:\n    client-key: /nonexistent/k\n"
              "    client-certificate: /nonexistent/c\n", s_head);
    BAD (buf, "cannot read");
    snprintf (buf, sizeof buf, "%s" CL "users:\n- name: u\n  user:\n    exec: {command: /bin/sh}\n    token: t\n", s_head);
    BAD (buf, "exec plugin");
    snprintf (buf, sizeof buf, "%s" CL "users:\n- name: u\n  user:\n    token: \"a b\"\n", s_head);
    BAD (buf, "spaces or quotes");
    snprintf (buf, sizeof buf, "%sclusters:\n- name: k\n  cluster:\n    server: https://k\n"
              "    certificate-authority-data: aGVsbG8=\n" US, s_head);
    BAD (buf, "certificate authority is not PEM");
    //  A NUL inside a scalar, and a document with anchors looping.
    const char nul [] = "current-context: \"c\\0d\"\n";
    BAD (nul, "current-context");
    BAD ("a: &x [*x]\n", NULL);
    //  Base64 edge cases.
    size_t n = 0;
    char *d = ah_k8s_base64_decode ("aGk=", 4, &n);
    CHECK (d && n == 2 && memcmp (d, "hi", 2) == 0);
    free (d);
    d = ah_k8s_base64_decode ("aG k\n=", 6, &n);
    CHECK (d && n == 2);
    free (d);
    CHECK (ah_k8s_base64_decode ("aGk=x", 5, &n) == NULL);
    CHECK (ah_k8s_base64_decode ("a", 1, &n) == NULL);
    CHECK (ah_k8s_base64_decode ("a===", 4, &n) == NULL);
    //  Random bytes never crash the parser.
    unsigned seed = 7;
    for (int i = 0; i < 2000; i++) {
        char junk [200];
        size_t len = (size_t) (rand_r (&seed) % (int) sizeof junk);
        for (size_t k = 0; k < len; k++)
            junk [k] = s_junk [rand_r (&seed) % (int) (sizeof s_junk - 1)];
        k8s_creds_t c;
        char *err = NULL;
        if (ah_k8s_kubeconfig_parse (junk, len, NULL, &c, &err) == 0)
            ah_k8s_creds_free (&c);
        free (err);
    }
}

int main (void)
{
    if (!mkdtemp (s_dir)) {
        perror ("mkdtemp");
        return 1;
    }
    s_test_inline ();
    s_test_files_and_token ();
    s_test_incluster ();
    s_test_hostile ();
    char cmd [300];
    snprintf (cmd, sizeof cmd, "rm -rf %s", s_dir);
    if (system (cmd) != 0)
        fprintf (stderr, "cannot remove %s\n", s_dir);
    return CHECK_DONE ();
}
