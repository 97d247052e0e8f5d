/*  drivers/kubernetes/creds.c: who the server is to the API server: the
    current context of a kubeconfig (libyaml), or the service account of
    the Pod it runs in. A kubeconfig is hostile input like any other: a
    missing or malformed part is a sentence naming it.                  */
#include "drivers/kubernetes/k8s_int.h"
#include "proto/base64.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#define FILE_MAX    (1 << 20)           //  a kubeconfig, certificate or token larger is a mistake

void ah_k8s_err (char **err, const char *fmt, ...)
{
    if (!err)
        return;
    va_list ap;
    va_start (ap, fmt);
    char *text = NULL;
    if (vasprintf (&text, fmt, ap) < 0)
        text = NULL;
    va_end (ap);
    free (*err);
    *err = text ? text : strdup ("out of memory");
}

void ah_k8s_creds_free (k8s_creds_t *c)
{
    if (!c)
        return;
    free (c->server);
    free (c->ca);
    free (c->cert);
    if (c->key)
        memset (c->key, 0, c->key_len);
    free (c->key);
    if (c->token)
        memset (c->token, 0, strlen (c->token));
    free (c->token);
    free (c->ns);
    memset (c, 0, sizeof *c);
}

char *ah_k8s_base64_decode (const char *text, size_t len, size_t *out_len)
{
    return ah_base64_decode (text, len, out_len);
}

//  A whole small file, NUL-terminated. NULL with *err.
static char *s_slurp (const char *path, const char *what, size_t *len, char **err)
{
    FILE *f = fopen (path, "rb");
    if (!f) {
        ah_k8s_err (err, "%s: cannot read %s: %s", what, path, strerror (errno));
        return NULL;
    }
    char *buf = malloc (FILE_MAX + 1);
    size_t n = buf ? fread (buf, 1, FILE_MAX + 1, f) : 0;
    bool bad = ferror (f);
    fclose (f);
    if (!buf || bad || n > FILE_MAX) {
        ah_k8s_err (err, "%s: %s %s", what, path, !buf ? "(out of memory)"
                    : bad ? "cannot be read" : "is larger than 1 MiB");
        free (buf);
        return NULL;
    }
    buf [n] = 0;
    if (len)
        *len = n;
    return buf;
}

//  -------------------------------------------------------------------------
//  The YAML document

typedef struct {
    yaml_document_t *doc;
    const char *base_dir;
    char **err;
} s_kc_t;

static yaml_node_t *s_get (s_kc_t *kc, yaml_node_t *map, const char *key)
{
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node (kc->doc, p->key);
        if (k && k->type == YAML_SCALAR_NODE && strcmp ((const char *) k->data.scalar.value, key) == 0)
            return yaml_document_get_node (kc->doc, p->value);
    }
    return NULL;
}

//  A scalar's text (NULL: absent, not a scalar, or with a NUL inside).
static const char *s_str (yaml_node_t *node)
{
    if (!node || node->type != YAML_SCALAR_NODE)
        return NULL;
    const char *v = (const char *) node->data.scalar.value;
    return strlen (v) == node->data.scalar.length ? v : NULL;
}

//  The item of list (a sequence of mappings) whose name is name, and its
//  inner mapping under key ("cluster", "user", "context").
static yaml_node_t *s_named (s_kc_t *kc, yaml_node_t *root, const char *list, const char *key,
                             const char *name)
{
    yaml_node_t *seq = s_get (kc, root, list);
    if (!seq || seq->type != YAML_SEQUENCE_NODE)
        return NULL;
    for (yaml_node_item_t *i = seq->data.sequence.items.start; i < seq->data.sequence.items.top; i++) {
        yaml_node_t *item = yaml_document_get_node (kc->doc, *i);
        const char *n = s_str (s_get (kc, item, "name"));
        if (n && strcmp (n, name) == 0) {
            yaml_node_t *inner = s_get (kc, item, key);
            return inner && inner->type == YAML_MAPPING_NODE ? inner : NULL;
        }
    }
    return NULL;
}

//  key-data (base64) or key (a file, relative to the kubeconfig's
//  directory): *out (NUL-terminated) and *len. 0 (also when neither is
//  there: *out stays NULL) / -1 with *err.
static int s_blob (s_kc_t *kc, yaml_node_t *map, const char *key, const char *where,
                   char **out, size_t *len)
{
    char data_key [64];
    snprintf (data_key, sizeof data_key, "%s-data", key);
    yaml_node_t *dn = s_get (kc, map, data_key), *fn = s_get (kc, map, key);
    const char *data = s_str (dn), *file = s_str (fn);
    if ((dn && !data) || (fn && !file)) {
        ah_k8s_err (kc->err, "kubeconfig: %s.%s is not a string", where, dn && !data ? data_key : key);
        return -1;
    }
    if (data && *data) {
        *out = ah_k8s_base64_decode (data, strlen (data), len);
        if (!*out) {
            ah_k8s_err (kc->err, "kubeconfig: %s.%s is not base64", where, data_key);
            return -1;
        }
        return 0;
    }
    if (file && *file) {
        if (file [0] != '/' && !kc->base_dir) {
            ah_k8s_err (kc->err, "kubeconfig: %s.%s names a relative file '%.200s'", where, key, file);
            return -1;
        }
        char *path = file [0] == '/' ? strdup (file) : ah_strf ("%s/%s", kc->base_dir, file);
        char *what = ah_strf ("kubeconfig: %s.%s", where, key);
        *out = path && what ? s_slurp (path, what, len, kc->err) : NULL;
        free (path);
        free (what);
        return *out ? 0 : -1;
    }
    return 0;
}

static bool s_is_pem (const char *blob)
{
    return blob && strstr (blob, "-----BEGIN ") != NULL;
}

int ah_k8s_kubeconfig_parse (const char *text, size_t len, const char *base_dir,
                             k8s_creds_t *creds, char **err)
{
    memset (creds, 0, sizeof *creds);
    if (!text || len > FILE_MAX) {
        ah_k8s_err (err, "kubeconfig: empty or larger than 1 MiB");
        return -1;
    }
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize (&parser)) {
        ah_k8s_err (err, "kubeconfig: cannot initialise the YAML parser");
        return -1;
    }
    yaml_parser_set_input_string (&parser, (const unsigned char *) text, len);
    if (!yaml_parser_load (&parser, &doc)) {
        ah_k8s_err (err, "kubeconfig: line %zu: YAML syntax error: %s",
                    parser.problem_mark.line + 1, parser.problem ? parser.problem : "?");
        yaml_parser_delete (&parser);
        return -1;
    }
    s_kc_t kc = { .doc = &doc, .base_dir = base_dir, .err = err };
    yaml_node_t *root = yaml_document_get_root_node (&doc);
    int rc = -1;
    const char *current = s_str (s_get (&kc, root, "current-context"));
    yaml_node_t *ctx = current ? s_named (&kc, root, "contexts", "context", current) : NULL;
    const char *cluster_name = s_str (s_get (&kc, ctx, "cluster"));
    const char *user_name = s_str (s_get (&kc, ctx, "user"));
    yaml_node_t *cluster = cluster_name ? s_named (&kc, root, "clusters", "cluster", cluster_name) : NULL;
    yaml_node_t *user = user_name ? s_named (&kc, root, "users", "user", user_name) : NULL;
    const char *server = s_str (s_get (&kc, cluster, "server"));
    if (!root || root->type != YAML_MAPPING_NODE)
        ah_k8s_err (err, "kubeconfig: not a mapping (apiVersion, clusters, contexts, users)");
    else
    if (!current || !*current)
        ah_k8s_err (err, "kubeconfig: no current-context");
    else
    if (!ctx)
        ah_k8s_err (err, "kubeconfig: current-context '%.100s' is not in contexts", current);
    else
    if (!cluster)
        ah_k8s_err (err, "kubeconfig: context '%.100s' names no cluster of clusters", current);
    else
    if (!server || strncmp (server, "https://", 8) || strlen (server) > 512 || strpbrk (server, " \r\n\t"))
        ah_k8s_err (err, "kubeconfig: cluster '%.100s': server '%.200s' is not an https:// URL",
                    cluster_name, server ? server : "");
    else
    if (user_name && !user)
        ah_k8s_err (err, "kubeconfig: context '%.100s' names user '%.100s', not in users",
                    current, user_name);
    else
    if (s_blob (&kc, cluster, "certificate-authority", "cluster", &creds->ca, &creds->ca_len) == 0
    &&  s_blob (&kc, user, "client-certificate", "user", &creds->cert, &creds->cert_len) == 0
    &&  s_blob (&kc, user, "client-key", "user", &creds->key, &creds->key_len) == 0) {
        creds->server = strdup (server);
        size_t sl = strlen (creds->server);
        while (sl > 8 && creds->server [sl - 1] == '/')
            creds->server [--sl] = 0;
        const char *insecure = s_str (s_get (&kc, cluster, "insecure-skip-tls-verify"));
        creds->insecure = insecure && strcmp (insecure, "true") == 0;
        const char *ns = s_str (s_get (&kc, ctx, "namespace"));
        if (ns && *ns)
            creds->ns = strdup (ns);
        const char *token = s_str (s_get (&kc, user, "token"));
        const char *token_file = s_str (s_get (&kc, user, "tokenFile"));
        if (token && *token)
            creds->token = strdup (token);
        else
        if (token_file && *token_file) {
            char *path = token_file [0] == '/' || !base_dir ? strdup (token_file)
                       : ah_strf ("%s/%s", base_dir, token_file);
            creds->token = path && (token_file [0] == '/' || base_dir)
                         ? s_slurp (path, "kubeconfig: user.tokenFile", NULL, err) : NULL;
            if (!creds->token && !(err && *err))
                ah_k8s_err (err, "kubeconfig: user.tokenFile '%.200s' cannot be read", token_file);
            free (path);
        }
        if (creds->token)
            creds->token [strcspn (creds->token, "\r\n")] = 0;
        if (creds->ca && !s_is_pem (creds->ca))
            ah_k8s_err (err, "kubeconfig: cluster '%.100s': the certificate authority is not PEM",
                        cluster_name);
        else
        if (!creds->cert != !creds->key)
            ah_k8s_err (err, "kubeconfig: user '%.100s': a client certificate needs its key and "
                        "the key its certificate", user_name ? user_name : "");
        else
        if (creds->cert && (!s_is_pem (creds->cert) || !s_is_pem (creds->key)))
            ah_k8s_err (err, "kubeconfig: user '%.100s': the client certificate or key is not PEM",
                        user_name ? user_name : "");
        else
        if (user_name && user && s_get (&kc, user, "exec"))
            ah_k8s_err (err, "kubeconfig: user '%.100s' uses an exec plugin; agenthold runs no "
                        "programs for credentials: give a client certificate or a token",
                        user_name);
        else
        if (creds->token && strpbrk (creds->token, " \t\"\\"))
            ah_k8s_err (err, "kubeconfig: user '%.100s': the token holds spaces or quotes",
                        user_name ? user_name : "");
        else
        if (!creds->cert && !creds->token)
            ah_k8s_err (err, "kubeconfig: context '%.100s' has no credentials (a client "
                        "certificate and key, or a token)", current);
        else
            rc = 0;
    }
    yaml_document_delete (&doc);
    yaml_parser_delete (&parser);
    if (rc)
        ah_k8s_creds_free (creds);
    return rc;
}

int ah_k8s_kubeconfig_load (const char *path, k8s_creds_t *creds, char **err)
{
    memset (creds, 0, sizeof *creds);
    size_t len = 0;
    char *text = s_slurp (path, "sandbox.kubernetes.kubeconfig", &len, err);
    if (!text)
        return -1;
    char *dir = strdup (path);
    char *slash = dir ? strrchr (dir, '/') : NULL;
    if (slash)
        *slash = 0;
    int rc = ah_k8s_kubeconfig_parse (text, len, slash ? (*dir ? dir : "/") : ".", creds, err);
    if (rc && err && *err) {
        char *e = ah_strf ("%s (%s)", *err, path);
        if (e) {
            free (*err);
            *err = e;
        }
    }
    free (dir);
    free (text);
    return rc;
}

int ah_k8s_incluster_load (const char *dir, k8s_creds_t *creds, char **err)
{
    memset (creds, 0, sizeof *creds);
    const char *host = getenv ("KUBERNETES_SERVICE_HOST");
    const char *port = getenv ("KUBERNETES_SERVICE_PORT");
    if (!host || !*host || strpbrk (host, "/ @?#") || (port && strspn (port, "0123456789") != strlen (port))) {
        ah_k8s_err (err, "in-cluster credentials: KUBERNETES_SERVICE_HOST is not set (the server "
                    "does not run in a Pod): set sandbox.kubernetes.kubeconfig");
        return -1;
    }
    char *tp = ah_strf ("%s/token", dir), *cp = ah_strf ("%s/ca.crt", dir), *np = ah_strf ("%s/namespace", dir);
    creds->token = tp ? s_slurp (tp, "in-cluster credentials", NULL, err) : NULL;
    creds->ca = creds->token && cp ? s_slurp (cp, "in-cluster credentials", &creds->ca_len, err) : NULL;
    if (creds->ca && np) {
        creds->ns = s_slurp (np, "in-cluster credentials", NULL, NULL);
        if (creds->ns)
            creds->ns [strcspn (creds->ns, "\r\n")] = 0;
    }
    free (tp);
    free (cp);
    free (np);
    if (!creds->token || !creds->ca) {
        ah_k8s_creds_free (creds);
        return -1;
    }
    creds->token [strcspn (creds->token, "\r\n")] = 0;
    bool v6 = strchr (host, ':') != NULL;
    creds->server = ah_strf ("https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "",
                             port && *port ? port : "443");
    if (!creds->server || !s_is_pem (creds->ca) || !*creds->token) {
        ah_k8s_err (err, "in-cluster credentials in %s: an empty token or a CA that is not PEM", dir);
        ah_k8s_creds_free (creds);
        return -1;
    }
    return 0;
}
