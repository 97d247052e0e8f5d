/*  config/check.c: the configuration's checks once it is loaded (see
    config.h and docs/configuration.md): listeners, endpoints, the host
    agent's keys, the Kubernetes driver's, every number against the
    bounds table (common/bounds.h), and the tunnel's TCP listener.
    config.c loads (the key table, YAML, environment) and asks
    ah_config_check; each failure is one sentence naming the key.
    Single-threaded: called once at start, before any actor exists.    */
#include "common/str.h"
#include "config/config.h"
#include "config/config_int.h"
#include "common/bounds.h"
#include "proto/egress.h"
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

int ah_config_split_listen (const char *listen, char *host, size_t host_size, int *port)
{
    if (!listen || !host || host_size == 0 || !port)
        return -1;
    const char *colon = strrchr (listen, ':');
    if (!colon || !colon [1])
        return -1;
    const char *host_start = listen;
    size_t host_length = (size_t) (colon - listen);
    if (host_length >= 2 && listen [0] == '[' && colon [-1] == ']') {
        host_start++;                   //  [::1]:8080
        host_length -= 2;
    }
    else
    if (memchr (listen, ':', host_length))
        return -1;                      //  a bare IPv6 address needs brackets
    if (host_length >= host_size)
        return -1;
    for (size_t i = 0; i < host_length; i++)
        if (isspace ((unsigned char) host_start [i]) || host_start [i] == '/')
            return -1;
    long value = 0;
    for (const char *p = colon + 1; *p; p++) {
        if (!isdigit ((unsigned char) *p))
            return -1;
        value = value * 10 + (*p - '0');
        if (value > 65535)
            return -1;
    }
    memcpy (host, host_start, host_length);
    host [host_length] = 0;
    *port = (int) value;
    return 0;
}

//  "a.b.c.d/n" -> address and prefix length; host bits must be zero.
static bool s_parse_cidr (const char *text, uint32_t *address, int *prefix)
{
    unsigned a, b, c, d;
    int n, consumed = 0;
    if (sscanf (text, "%3u.%3u.%3u.%3u/%2d%n", &a, &b, &c, &d, &n, &consumed) != 5
    ||  text [consumed] || a > 255 || b > 255 || c > 255 || d > 255 || n < 1 || n > 32)
        return false;
    //  sscanf accepts signs and spaces: insist on digits, dots and one slash
    for (const char *p = text; *p; p++)
        if (!isdigit ((unsigned char) *p) && *p != '.' && *p != '/')
            return false;
    uint32_t value = (a << 24) | (b << 16) | (c << 8) | d;
    uint32_t mask = n == 32 ? 0xffffffffu : ~(0xffffffffu >> n);
    if (value & ~mask)
        return false;
    *address = value;
    *prefix = n;
    return true;
}

static char *s_check_listen (const char *key, const char *value)
{
    char host [256];
    int port;
    if (ah_config_split_listen (value, host, sizeof host, &port))
        return ah_strf ("%s = '%s': not a valid host:port (e.g. 127.0.0.1:8080 or :8090)",
                          key, value);
    struct in_addr v4;
    struct in6_addr v6;
    if (host [0] && inet_pton (AF_INET, host, &v4) != 1 && inet_pton (AF_INET6, host, &v6) != 1)
        return ah_strf ("%s = '%s': the host must be an IP address (127.0.0.1, [::1], 0.0.0.0) "
                        "or empty for every address (:8090)", key, value);
    return NULL;
}

//  A ZeroMQ endpoint of the host agent: ipc://PATH (absolute) or
//  tcp://HOST:PORT.
static char *s_check_endpoint (const char *key, const char *value)
{
    if (!strncmp (value, "ipc://", 6)) {
        if (value [6] != '/' || strlen (value) > 6 + 100)
            return ah_strf ("%s = '%s': an ipc:// endpoint names an absolute path of at most "
                            "100 characters (ipc:///run/agenthold-hostd/hostd.sock)", key, value);
        return NULL;
    }
    if (!strncmp (value, "tcp://", 6)) {
        const char *colon = strrchr (value + 6, ':');
        char *end = NULL;
        long port = colon ? strtol (colon + 1, &end, 10) : 0;
        if (!colon || colon == value + 6 || !end || *end || port <= 0 || port > 65535)
            return ah_strf ("%s = '%s': a tcp:// endpoint is tcp://HOST:PORT "
                            "(tcp://10.0.0.5:7070)", key, value);
        return NULL;
    }
    return ah_strf ("%s = '%s': must start with ipc:// (this machine) or tcp:// "
                    "(another machine, with CURVE keys)", key, value);
}

//  "tcp://HOST:PORT" or "tls://HOST:PORT" (HOST may be [v6]) into parts.
int ah_config_relay_target (const char *target, bool *tls, char **host, char **port)
{
    if (!target)
        return -1;
    if (!strncmp (target, "tcp://", 6))
        *tls = false;
    else
    if (!strncmp (target, "tls://", 6))
        *tls = true;
    else
        return -1;
    const char *h = target + 6;
    const char *colon = strrchr (h, ':');
    if (!colon || colon == h || !colon [1] || strlen (h) > 255)
        return -1;
    for (const char *p = colon + 1; *p; p++)
        if (*p < '0' || *p > '9')
            return -1;
    long n = atol (colon + 1);
    if (n < 1 || n > 65535)
        return -1;
    size_t hl = (size_t) (colon - h);
    if (*h == '[') {
        if (hl < 3 || h [hl - 1] != ']')
            return -1;
        h++;
        hl -= 2;
    }
    for (size_t i = 0; i < hl; i++)
        if (h [i] <= ' ' || h [i] > '~' || h [i] == '/' || h [i] == '@')
            return -1;
    *host = strndup (h, hl);
    *port = strdup (colon + 1);
    if (*host && *port)
        return 0;
    free (*host);
    free (*port);
    *host = *port = NULL;
    return -1;
}

static char *s_check_hostd (const ah_config_t *self)
{
    char *why;
    if ((why = s_check_endpoint ("sandbox.remote.endpoint", self->remote_endpoint))
    ||  (why = s_check_endpoint ("hostd.endpoint", self->hostd_endpoint)))
        return why;
    if (self->remote_server_key) {
        bool z85 = strlen (self->remote_server_key) == 40;
        for (const char *p = self->remote_server_key; *p && z85; p++)
            z85 = isalnum ((unsigned char) *p) || strchr (".-:+=^!/*?&<>()[]{}@%$#", *p);
        if (!z85)
            return ah_strf ("sandbox.remote.server_key: not a CURVE public key (40 characters "
                            "of Z85, the public-key line of hostd's hostd.cert)");
    }
    if (!strcmp (self->driver, "remote") && !strncmp (self->remote_endpoint, "tcp://", 6)
    &&  !self->remote_server_key)
        return ah_strf ("sandbox.remote.server_key is needed with a tcp:// endpoint ('%s'): "
                        "the host agent's public key (docs/hostd.md)", self->remote_endpoint);
    if (!(self->remote_timeout_s >= 0.5 && self->remote_timeout_s <= 3600))
        return ah_strf ("sandbox.remote.timeout = %gs: must be between 500ms and 1h",
                        self->remote_timeout_s);
    if (self->hostd_tunnel_relay) {
        bool tls;
        char *host = NULL, *port = NULL;
        int bad = ah_config_relay_target (self->hostd_tunnel_relay, &tls, &host, &port);
        free (host);
        free (port);
        if (bad)
            return ah_strf ("hostd.tunnel_relay = '%s': tcp://HOST:PORT or tls://HOST:PORT (the "
                            "server's sandbox.tunnel_listen as this host reaches it)",
                            self->hostd_tunnel_relay);
    }
    if (self->hostd_tunnel_ca && access (self->hostd_tunnel_ca, R_OK) != 0)
        return ah_strf ("hostd.tunnel_ca = '%s': cannot be read: %s", self->hostd_tunnel_ca,
                        strerror (errno));
    if (self->tunnel_tls && strcmp (self->tunnel_tls, "on"))
        return ah_strf ("sandbox.tunnel_tls = '%s': on or off", self->tunnel_tls);
    if (self->tunnel_tls && !self->tls_cert)
        return strdup ("sandbox.tunnel_tls: on needs server.tls_cert and server.tls_key (the "
                       "tunnel's TCP listener serves that certificate)");
    if (self->hostd_name) {
        bool ok = *self->hostd_name && strlen (self->hostd_name) <= 63;
        for (const char *p = self->hostd_name; *p && ok; p++)
            ok = isalnum ((unsigned char) *p) || *p == '-' || *p == '.' || *p == '_';
        if (!ok)
            return ah_strf ("hostd.name = '%s': up to 63 letters, digits, '-', '.' or '_'",
                            self->hostd_name);
    }
    return NULL;
}

//  A Kubernetes name (RFC 1123 label): [a-z0-9-], 1..max, alphanumeric at both ends.
static bool s_k8s_label (const char *text, size_t max)
{
    size_t n = text ? strlen (text) : 0;
    if (n == 0 || n > max || text [0] == '-' || text [n - 1] == '-')
        return false;
    for (const char *p = text; *p; p++)
        if (!(islower ((unsigned char) *p) || isdigit ((unsigned char) *p) || *p == '-'))
            return false;
    return true;
}

//  A label key or value of node_selector: [A-Za-z0-9._/-], 1..253.
static bool s_k8s_word (const char *text, size_t n)
{
    if (n == 0 || n > 253)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(isalnum ((unsigned char) text [i]) || strchr ("._/-", text [i])))
            return false;
    return true;
}

//  "key=value[,key=value]" of label keys and values (NULL: none).
static char *s_check_selector (const char *key, const char *text)
{
    for (const char *p = text; p; ) {
        size_t len = strcspn (p, ",");
        const char *eq = memchr (p, '=', len);
        if (!eq || !s_k8s_word (p, (size_t) (eq - p))
        ||  (eq + 1 < p + len && !s_k8s_word (eq + 1, (size_t) (p + len - eq - 1))))
            return ah_strf ("%s = '%s': want key=value[,key=value] of label keys and values", key, text);
        p = p [len] ? p + len + 1 : NULL;
    }
    return NULL;
}

static char *s_check_kubernetes (const ah_config_t *self)
{
    char *why;
    if (!s_k8s_label (self->k8s_namespace, 63))
        return ah_strf ("sandbox.kubernetes.namespace = '%s': a Kubernetes namespace name "
                        "(lower-case letters, digits, '-', at most 63)", self->k8s_namespace);
    if (self->k8s_storage_class && !s_k8s_word (self->k8s_storage_class, strlen (self->k8s_storage_class)))
        return ah_strf ("sandbox.kubernetes.storage_class = '%s': not a storage class name",
                        self->k8s_storage_class);
    //  A quantity: digits, then an optional binary or decimal suffix.
    const char *q = self->k8s_home_size;
    size_t digits = strspn (q, "0123456789");
    static const char *suffixes [] = { "", "Ki", "Mi", "Gi", "Ti", "Pi", "k", "M", "G", "T", "P" };
    bool size_ok = digits > 0 && digits <= 12;
    bool suffix_ok = false;
    for (size_t i = 0; size_ok && i < sizeof suffixes / sizeof suffixes [0]; i++)
        suffix_ok = suffix_ok || strcmp (q + digits, suffixes [i]) == 0;
    if (!size_ok || !suffix_ok)
        return ah_strf ("sandbox.kubernetes.home_size = '%s': a size like 10Gi or 500Mi", q);
    const char *img = self->k8s_sandboxd_image;
    bool img_ok = *img && strlen (img) <= 255;
    for (const char *p = img; *p && img_ok; p++)
        img_ok = isalnum ((unsigned char) *p) || strchr ("._/:@-", *p);
    if (!img_ok)
        return ah_strf ("sandbox.kubernetes.sandboxd_image = '%s': not an image reference", img);
    const char *pol = self->k8s_image_pull_policy;
    if (strcmp (pol, "IfNotPresent") && strcmp (pol, "Always") && strcmp (pol, "Never"))
        return ah_strf ("sandbox.kubernetes.image_pull_policy = '%s': must be IfNotPresent, "
                        "Always or Never", pol);
    //  A reader Pod lives for its idle time after the last read: at least
    //  a second (a listing is followed by reads), at most an hour.
    if (!(self->k8s_reader_idle_s >= 1 && self->k8s_reader_idle_s <= 3600))
        return ah_strf ("sandbox.kubernetes.reader_idle = %gs: between 1s and 1h (how long a "
                        "sleeping agent's reader Pod is kept after its last read)",
                        self->k8s_reader_idle_s);
    if ((why = s_check_selector ("sandbox.kubernetes.node_selector", self->k8s_node_selector))
    ||  (why = s_check_selector ("sandbox.kubernetes.tunnel_pods", self->k8s_tunnel_pods)))
        return why;
    if (self->k8s_tunnel_url) {
        //  ws://IPv4:PORT/PATH: an IP literal (a scratch image has no
        //  resolver, and the NetworkPolicy names it as an ipBlock).
        const char *u = self->k8s_tunnel_url;
        char host [64] = "";
        unsigned port = 0;
        int used = 0;
        struct in_addr v4;
        if (strncmp (u, "ws://", 5) || sscanf (u + 5, "%63[0-9.]:%5u%n", host, &port, &used) != 2
        ||  inet_pton (AF_INET, host, &v4) != 1 || port == 0 || port > 65535
        ||  u [5 + used] != '/' || strlen (u) > 200 || strpbrk (u, " \"\\"))
            return ah_strf ("sandbox.kubernetes.tunnel_url = '%s': want ws://IPv4:PORT/tunnel, "
                            "the tunnel as the pods reach it (e.g. ws://10.0.0.5:8090/tunnel)", u);
    }
    else
    if (!strcmp (self->driver, "kubernetes"))
        return ah_strf ("sandbox.kubernetes.tunnel_url is needed with sandbox.driver: kubernetes: "
                        "where the pods reach the server's tunnel (sandbox.tunnel_listen), "
                        "e.g. ws://10.0.0.5:8090/tunnel");
    if (self->k8s_kubeconfig && access (self->k8s_kubeconfig, R_OK) != 0)
        return ah_strf ("sandbox.kubernetes.kubeconfig = '%s': cannot be read: %s",
                        self->k8s_kubeconfig, strerror (errno));
    return NULL;
}

//  The keys whose numbers a client may give too: the same bounds
//  (common/bounds.h), so no default or maximum is one a client could not
//  ask for, and none becomes 0 or "no limit" in a driver.
static char *s_check_bounds (const ah_config_t *self)
{
    const struct { const char *key; const char *bound; double v; } keys [] = {
        { "sandbox.default_cpus", "cpus", self->default_cpus },
        { "sandbox.max_cpus", "cpus", self->max_cpus },
        { "sandbox.default_memory_mb", "memory_mb", (double) self->default_memory_mb },
        { "sandbox.max_memory_mb", "memory_mb", (double) self->max_memory_mb },
        { "sandbox.pids_limit", "pids_limit", (double) self->pids_limit },
        { "sandbox.idle_minutes", "idle_minutes", self->idle_minutes },
        { "limits.tenant_max_sandboxes", "tenant_max_sandboxes", (double) self->tenant_max_sandboxes },
        { "limits.pool_max_sandboxes", "pool_max_sandboxes", (double) self->pool_max_sandboxes },
        { "limits.tenant_max_running", "tenant_max_running", (double) self->tenant_max_running },
        { "limits.pool_max_running", "pool_max_running", (double) self->pool_max_running },
        { "sandbox.idle_check_interval", "check_interval", self->idle_check_interval_s },
        { "sandbox.ttl_check_interval", "check_interval", self->ttl_check_interval_s },
        { "sandbox.container_ttl", "container_ttl", self->container_ttl_s },
        { "sandbox.workspace_ttl", "workspace_ttl", self->workspace_ttl_s },
        { "sandbox.destroy_retry_min", "destroy_retry", self->destroy_retry_min_s },
        { "sandbox.destroy_retry_max", "destroy_retry", self->destroy_retry_max_s },
        { "audit.retention_days", "retention_days", self->audit_retention_days },
        { "audit.terminal_bytes_interval", "terminal_bytes_interval", self->audit_terminal_bytes_s },
        { "conversations.permission_timeout", "permission_timeout", self->permission_timeout_s },
        { "sandbox.max_exec_timeout", "max_exec_timeout", self->max_exec_timeout_s },
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys [0]; i++) {
        char why [300], rule [200], got [40];
        const ah_bound_t *b = ah_bound (keys [i].bound);
        if (ah_bound_check (b, keys [i].v, why, sizeof why))
            return ah_strf ("%s = %s: must be %s", keys [i].key, ah_bound_number (keys [i].v, got, sizeof got),
                            ah_bound_rule (b, rule, sizeof rule));
    }
    return NULL;
}

char *ah_config_check (const ah_config_t *self)
{
    char *why;
    if ((why = s_check_listen ("server.listen", self->listen)))
        return why;
    const char *tcp_why = NULL;
    const char *tcp = ah_config_tunnel_tcp (self, &tcp_why);
    if (tcp && (why = s_check_listen ("sandbox.tunnel_listen", tcp))) {
        char *more = ah_strf ("%s (or auto, the default, or none)", why);
        free (why);
        return more;
    }
    if (!tcp && (!strcmp (self->driver, "fake") || !strcmp (self->driver, "kubernetes")))
        return ah_strf ("sandbox.tunnel_listen = none: the %s driver's sandboxes dial the tunnel "
                        "over TCP; give host:port, or auto (the default)", self->driver);
    if (!self->tls_cert != !self->tls_key)
        return ah_strf ("server.tls_cert and server.tls_key go together: give both (HTTPS) or "
                        "neither (plain HTTP)");
    for (int i = 0; i < 2 && self->tls_cert; i++) {
        const char *path = i ? self->tls_key : self->tls_cert;
        if (access (path, R_OK) != 0)
            return ah_strf ("%s = '%s': cannot be read: %s", i ? "server.tls_key" : "server.tls_cert",
                            path, strerror (errno));
    }
    if (self->tap_endpoint
    &&  strncmp (self->tap_endpoint, "ipc://", 6) && strncmp (self->tap_endpoint, "tcp://", 6))
        return ah_strf ("tap.endpoint = '%s': must start with ipc:// or tcp:// (or be off)",
                          self->tap_endpoint);
    if (strcmp (self->driver, "docker") && strcmp (self->driver, "fake")
    &&  strcmp (self->driver, "remote") && strcmp (self->driver, "kubernetes"))
        return ah_strf ("sandbox.driver = '%s': must be docker, kubernetes, remote or fake",
                        self->driver);
    if (strcmp (self->fake_sandboxd, "in-process") && strcmp (self->fake_sandboxd, "external"))
        return ah_strf ("sandbox.fake_sandboxd = '%s': must be in-process or external", self->fake_sandboxd);
    if ((why = s_check_hostd (self)) || (why = s_check_kubernetes (self)))
        return why;
    if ((why = s_check_bounds (self)))
        return why;
    if (!(self->freeze_minutes >= 0 && self->freeze_minutes <= 525600))
        return ah_strf ("sandbox.freeze_minutes = %g: must be from 0 (never frozen) to 525600",
                        self->freeze_minutes);
    if (self->frozen_memory_mb < 0 || self->frozen_memory_mb > (INT64_C (1) << 40))
        return ah_strf ("sandbox.frozen_memory_mb = %lld: must be from 0 (no ceiling) to 2^40",
                        (long long) self->frozen_memory_mb);
    if (self->warm_pool_max < 0 || self->warm_pool_max > 1000)
        return ah_strf ("sandbox.warm_pool_max = %lld: must be from 0 (no warm pools) to 1000",
                        (long long) self->warm_pool_max);
    if (self->default_cpus > self->max_cpus)
        return ah_strf ("sandbox.default_cpus = %g: is over sandbox.max_cpus = %g",
                          self->default_cpus, self->max_cpus);
    if (self->default_memory_mb > self->max_memory_mb)
        return ah_strf ("sandbox.default_memory_mb = %lld: is over sandbox.max_memory_mb = %lld",
                          (long long) self->default_memory_mb, (long long) self->max_memory_mb);
    if (self->tree_max_depth < 1 || self->tree_max_depth > 64)
        return ah_strf ("files.tree_max_depth = %lld: must be from 1 to 64",
                          (long long) self->tree_max_depth);
    if (self->tree_max_entries < 1 || self->tree_max_entries > 1000000)
        return ah_strf ("files.tree_max_entries = %lld: must be from 1 to 1000000",
                          (long long) self->tree_max_entries);
    if (self->max_read_bytes < 1 || self->max_read_bytes > AH_CONFIG_MAX_READ_CEILING)
        return ah_strf ("files.max_read_bytes = %lld: must be from 1 to %lld bytes (256 MiB)",
                          (long long) self->max_read_bytes, (long long) AH_CONFIG_MAX_READ_CEILING);
    if (self->terminal_scrollback_lines < 0 || self->terminal_scrollback_lines > 1000000)
        return ah_strf ("terminal.scrollback_lines = %lld: must be from 0 to 1000000",
                          (long long) self->terminal_scrollback_lines);
    if (!(self->terminal_detached_s >= 0 && self->terminal_detached_s <= 7 * 86400))
        return ah_strf ("terminal.detached_counts_for = %g s: must be from 0 to 7 days",
                        self->terminal_detached_s);
    if (!(self->ports_answer_timeout_s >= 0.1 && self->ports_answer_timeout_s <= 3600))
        return ah_strf ("ports.answer_timeout = %g s: must be from 0.1 s to 1 h", self->ports_answer_timeout_s);
    if (self->egress_max_connections < 1 || self->egress_max_connections > AH_EGRESS_CONN_MAX)
        return ah_strf ("sandbox.egress_max_connections = %lld: must be from 1 to %d (sandboxd's proxy "
                        "holds at most %d connections at once)", (long long) self->egress_max_connections,
                        AH_EGRESS_CONN_MAX, AH_EGRESS_CONN_MAX);
    //  Under sandboxd's 30 s wait for the server's answer (docs/egress.md).
    if (!(self->egress_connect_timeout_s >= 0.1 && self->egress_connect_timeout_s <= 25))
        return ah_strf ("sandbox.egress_connect_timeout = %g s: must be from 0.1 s to 25 s (sandboxd "
                        "waits 30 s for the answer)", self->egress_connect_timeout_s);
    if (self->tmp_mb < 1 || self->tmp_mb > (INT64_C (1) << 20))
        return ah_strf ("sandbox.docker.tmp_mb = %lld: must be between 1 and 1048576",
                          (long long) self->tmp_mb);
    if (!self->docker_egress
    ||  (strcmp (self->docker_egress, "bridge") && strcmp (self->docker_egress, "tunnel")))
        return ah_strf ("sandbox.docker.egress = '%s': must be bridge or tunnel",
                          self->docker_egress ? self->docker_egress : "");
    char *sock = ah_config_tunnel_socket (self);
    size_t sock_len = sock ? strlen (sock) : 0;
    bool sock_abs = sock && sock [0] == '/';
    free (sock);
    if (!sock_abs || sock_len >= 108)
        return ah_strf ("sandbox.tunnel_socket: must be an absolute path shorter than 108 bytes "
                        "(a unix socket's limit; the default is <server.data_dir>/run/tunnel.sock)");
    if (!(self->destroy_retry_min_s >= 0.1) || !(self->destroy_retry_max_s >= self->destroy_retry_min_s))
        return ah_strf ("sandbox.destroy_retry_min = %gs, sandbox.destroy_retry_max = %gs: the first must be"
                        " at least 100ms and the second at least the first",
                        self->destroy_retry_min_s, self->destroy_retry_max_s);
    const char *prefix = self->name_prefix;
    bool prefix_ok = isalnum ((unsigned char) prefix [0]) && strlen (prefix) <= 32;
    for (const char *p = prefix; *p && prefix_ok; p++)
        if (!isalnum ((unsigned char) *p) && *p != '_' && *p != '.' && *p != '-')
            prefix_ok = false;
    if (!prefix_ok)
        return ah_strf ("sandbox.docker.name_prefix = '%s': must be up to 32 letters, digits,"
                          " '_', '.' or '-', starting with a letter or digit", prefix);
    uint32_t pool;
    int pool_prefix;
    if (!s_parse_cidr (self->network_pool, &pool, &pool_prefix))
        return ah_strf ("sandbox.docker.network_pool = '%s': not an IPv4 network in CIDR form"
                          " (e.g. 10.213.0.0/16, host bits zero)", self->network_pool);
    if (self->subnet_bits < 16 || self->subnet_bits > 30)
        return ah_strf ("sandbox.docker.subnet_bits = %d: must be between 16 and 30",
                          self->subnet_bits);
    if (self->subnet_bits <= pool_prefix)
        return ah_strf ("sandbox.docker.subnet_bits = %d: must be larger than the prefix of"
                          " sandbox.docker.network_pool = '%s'",
                          self->subnet_bits, self->network_pool);
    return NULL;
}

//  ---------------------------------------------------------------------

