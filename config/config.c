/*  config/config.c: the configuration (see config.h and docs/configuration.md).

    One table, s_keys, names every key once: its dotted path, its type,
    where it lives in ah_config_t. The YAML walker, the environment reader,
    the "did you mean" suggestions and the documentation all follow that
    table, so a key cannot exist in one place and be missing in another.

    Single-threaded: called once at start, before any actor exists.    */
#include "common/str.h"
#include "config/config.h"
#include "config/config_int.h"
#include "common/bounds.h"
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pwd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

extern char **environ;

#define CONFIG_MAX_BYTES (1 << 20)      //  a config file larger than this is a mistake

typedef enum {
    T_STR,          //  a non-empty string
    T_OPT,          //  a string, or null / the "none word" for NULL
    T_PATH,         //  a non-empty string; null keeps the computed default
    T_DOUBLE,
    T_INT64,
    T_INT,
    T_DURATION,     //  "500ms", "30s", "2m", "1h"; a bare number is seconds
} s_type_t;

typedef struct {
    const char *key;
    s_type_t type;
    size_t offset;
    const char *none_word;          //  T_OPT: the word that means NULL ("off", "none", "detect")
} s_key_t;

#define F(field) offsetof (ah_config_t, field)
static const s_key_t s_keys [] = {
    { "server.listen",                    T_STR,      F (listen), NULL },
    { "server.data_dir",                  T_PATH,     F (data_dir), NULL },
    { "server.user",                      T_OPT,      F (user), "none" },
    { "server.tls_cert",                  T_OPT,      F (tls_cert), "none" },
    { "server.tls_key",                   T_OPT,      F (tls_key), "none" },
    { "tap.endpoint",                     T_OPT,      F (tap_endpoint), "off" },
    { "sandbox.driver",                   T_STR,      F (driver), NULL },
    { "sandbox.default_image",            T_STR,      F (default_image), NULL },
    { "sandbox.default_cpus",             T_DOUBLE,   F (default_cpus), NULL },
    { "sandbox.default_memory_mb",        T_INT64,    F (default_memory_mb), NULL },
    { "sandbox.max_cpus",                 T_DOUBLE,   F (max_cpus), NULL },
    { "sandbox.max_memory_mb",            T_INT64,    F (max_memory_mb), NULL },
    { "sandbox.pids_limit",               T_INT64,    F (pids_limit), NULL },
    { "sandbox.idle_minutes",             T_DOUBLE,   F (idle_minutes), NULL },
    { "sandbox.freeze_minutes",           T_DOUBLE,   F (freeze_minutes), NULL },
    { "sandbox.frozen_memory_mb",         T_INT,      F (frozen_memory_mb), NULL },
    { "sandbox.warm_pool_max",            T_INT64,    F (warm_pool_max), NULL },
    { "sandbox.idle_check_interval",      T_DURATION, F (idle_check_interval_s), NULL },
    { "sandbox.tunnel_listen",            T_STR,      F (tunnel_listen), NULL },
    { "sandbox.tunnel_socket",            T_OPT,      F (tunnel_socket), "default" },
    { "sandbox.tunnel_tls",               T_OPT,      F (tunnel_tls), "off" },
    { "sandbox.sandboxd_path",            T_PATH,     F (sandboxd_path), NULL },
    { "sandbox.fake_sandboxd",            T_STR,      F (fake_sandboxd), NULL },
    { "sandbox.container_ttl",            T_DURATION, F (container_ttl_s), NULL },
    { "sandbox.workspace_ttl",            T_DURATION, F (workspace_ttl_s), NULL },
    { "sandbox.ttl_check_interval",       T_DURATION, F (ttl_check_interval_s), NULL },
    { "sandbox.destroy_retry_min",        T_DURATION, F (destroy_retry_min_s), NULL },
    { "sandbox.destroy_retry_max",        T_DURATION, F (destroy_retry_max_s), NULL },
    { "sandbox.max_exec_timeout",         T_DURATION, F (max_exec_timeout_s), NULL },
    { "sandbox.egress_max_connections",   T_INT64,    F (egress_max_connections), NULL },
    { "sandbox.egress_connect_timeout",   T_DURATION, F (egress_connect_timeout_s), NULL },
    { "sandbox.egress_upstream_ca_file",  T_OPT,      F (egress_upstream_ca_file), "none" },
    { "audit.retention_days",             T_DOUBLE,   F (audit_retention_days), NULL },
    { "audit.terminal_bytes_interval",    T_DURATION, F (audit_terminal_bytes_s), NULL },
    { "conversations.permission_timeout", T_DURATION, F (permission_timeout_s), NULL },
    { "sandbox.docker.socket",            T_STR,      F (docker_socket), NULL },
    { "sandbox.docker.name_prefix",       T_STR,      F (name_prefix), NULL },
    { "sandbox.docker.network_pool",      T_STR,      F (network_pool), NULL },
    { "sandbox.docker.subnet_bits",       T_INT,      F (subnet_bits), NULL },
    { "sandbox.docker.runtime",           T_OPT,      F (runtime), "none" },
    { "sandbox.docker.server_container",  T_OPT,      F (server_container), "detect" },
    { "sandbox.docker.sandboxd_volume",   T_OPT,      F (sandboxd_volume), "none" },
    { "sandbox.docker.tmp_mb",            T_INT64,    F (tmp_mb), NULL },
    { "sandbox.docker.egress",            T_STR,      F (docker_egress), NULL },
    { "sandbox.kubernetes.kubeconfig",    T_OPT,      F (k8s_kubeconfig), "in-cluster" },
    { "sandbox.kubernetes.namespace",     T_STR,      F (k8s_namespace), NULL },
    { "sandbox.kubernetes.storage_class", T_OPT,      F (k8s_storage_class), "default" },
    { "sandbox.kubernetes.home_size",     T_STR,      F (k8s_home_size), NULL },
    { "sandbox.kubernetes.sandboxd_image", T_STR,     F (k8s_sandboxd_image), NULL },
    { "sandbox.kubernetes.tunnel_url",    T_OPT,      F (k8s_tunnel_url), "none" },
    { "sandbox.kubernetes.node_selector", T_OPT,      F (k8s_node_selector), "none" },
    { "sandbox.kubernetes.tunnel_pods",   T_OPT,      F (k8s_tunnel_pods), "none" },
    { "sandbox.kubernetes.image_pull_policy", T_STR,  F (k8s_image_pull_policy), NULL },
    { "sandbox.kubernetes.reader_idle",   T_DURATION, F (k8s_reader_idle_s), NULL },
    { "sandbox.remote.endpoint",          T_STR,      F (remote_endpoint), NULL },
    { "sandbox.remote.server_key",        T_OPT,      F (remote_server_key), "none" },
    { "sandbox.remote.timeout",           T_DURATION, F (remote_timeout_s), NULL },
    { "hostd.endpoint",                   T_STR,      F (hostd_endpoint), NULL },
    { "hostd.name",                       T_OPT,      F (hostd_name), "hostname" },
    { "hostd.data_dir",                   T_PATH,     F (hostd_data_dir), NULL },
    { "hostd.server_user",                T_OPT,      F (hostd_server_user), "none" },
    { "hostd.tunnel_relay",               T_OPT,      F (hostd_tunnel_relay), "none" },
    { "hostd.tunnel_ca",                  T_OPT,      F (hostd_tunnel_ca), "system" },
    { "limits.tenant_max_sandboxes",      T_INT64,    F (tenant_max_sandboxes), NULL },
    { "limits.pool_max_sandboxes",        T_INT64,    F (pool_max_sandboxes), NULL },
    { "limits.tenant_max_running",        T_INT64,    F (tenant_max_running), NULL },
    { "limits.pool_max_running",          T_INT64,    F (pool_max_running), NULL },
    { "files.tree_max_depth",             T_INT64,    F (tree_max_depth), NULL },
    { "files.tree_max_entries",           T_INT64,    F (tree_max_entries), NULL },
    { "files.max_read_bytes",             T_INT64,    F (max_read_bytes), NULL },
    { "terminal.scrollback_lines",        T_INT64,    F (terminal_scrollback_lines), NULL },
    { "terminal.detached_counts_for",     T_DURATION, F (terminal_detached_s), NULL },
    { "ports.answer_timeout",             T_DURATION, F (ports_answer_timeout_s), NULL },
    { "policy.lua_dir",                   T_PATH,     F (lua_dir), NULL },
    { "catalog.path",                     T_PATH,     F (catalog_path), NULL },
    { "catalog.pip_index_url",            T_OPT,      F (pip_index_url), "none" },
};
#undef F
#define KEY_COUNT (sizeof s_keys / sizeof s_keys [0])

//  Environment variables that start with AGENTHOLD_ but are not keys
static const char *s_env_exempt [] = {
    "AGENTHOLD_URL", "AGENTHOLD_TOKEN", "AGENTHOLD_LOG", "AGENTHOLD_CONFIG", "AGENTHOLD_CA",
    "AGENTHOLD_TENANT",
};

static char **s_str_field (ah_config_t *self, const s_key_t *key)
{
    return (char **) ((char *) self + key->offset);
}

static void s_replace (char **field, const char *value)
{
    free (*field);
    *field = value ? strdup (value) : NULL;
}

static bool s_is_dir (const char *path)
{
    struct stat st;
    return stat (path, &st) == 0 && S_ISDIR (st.st_mode);
}

static bool s_is_file (const char *path)
{
    struct stat st;
    return stat (path, &st) == 0 && S_ISREG (st.st_mode);
}

//  Directory of the running binary, or NULL.
//  Half of this machine's memory in MiB (MemTotal in /proc/meminfo): the
//  default ceiling on what frozen sandboxes hold; 0 (none) when unknown.
static int64_t s_half_memory_mb (void)
{
    FILE *f = fopen ("/proc/meminfo", "r");
    long long kb = 0;
    char line [128];
    while (f && fgets (line, sizeof line, f))
        if (sscanf (line, "MemTotal: %lld kB", &kb) == 1)
            break;
    if (f)
        fclose (f);
    return kb > 0 ? (int64_t) (kb / 2048) : 0;
}

static char *s_exe_dir (void)
{
    char path [PATH_MAX];
    ssize_t n = readlink ("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0)
        return NULL;
    path [n] = 0;
    char *slash = strrchr (path, '/');
    if (!slash)
        return NULL;
    *slash = 0;
    return strdup (*path ? path : "/");
}

static char *s_default_data_dir (void)
{
    if (geteuid () == 0)
        return strdup ("/var/lib/agenthold");
    const char *xdg = getenv ("XDG_DATA_HOME");
    if (xdg && *xdg == '/')
        return ah_strf ("%s/agenthold", xdg);
    const char *home = getenv ("HOME");
    if (!home || !*home) {
        struct passwd *pw = getpwuid (geteuid ());
        home = pw && pw->pw_dir ? pw->pw_dir : "/tmp";
    }
    return ah_strf ("%s/.local/share/agenthold", home);
}

char *ah_config_hostd_endpoint (const char *name_prefix)
{
    return ah_strf ("ipc:///run/%s-hostd/hostd.sock", name_prefix);
}

//  hostd's own state, next to the server's data directory and never
//  inside it, whose owner (the unprivileged server) could swap what root
//  reads there: <data_dir>-hostd (/var/lib/agenthold-hostd as root).
static char *s_default_hostd_dir (const char *data_dir)
{
    size_t len = strlen (data_dir);
    while (len > 1 && data_dir [len - 1] == '/')
        len--;
    return ah_strf ("%.*s-hostd", (int) len, data_dir);
}

//  A shipped data file (lua/, catalog/runtimes.json): next to an installed
//  binary (<prefix>/bin -> <prefix>/share/agenthold), then the source tree
//  this binary was built from, then the system location.
static char *s_default_data_path (const char *relative, bool want_dir)
{
    char *candidates [3] = { NULL, NULL, NULL };
    char *exe_dir = s_exe_dir ();
    if (exe_dir)
        candidates [0] = ah_strf ("%s/../share/agenthold/%s", exe_dir, relative);
    free (exe_dir);
#ifdef AH_SOURCE_DIR
    candidates [1] = ah_strf ("%s/%s", AH_SOURCE_DIR, relative);
#endif
    candidates [2] = ah_strf ("/usr/share/agenthold/%s", relative);
    char *found = NULL;
    for (int i = 0; i < 3 && !found; i++)
        if (candidates [i] && (want_dir ? s_is_dir (candidates [i]) : s_is_file (candidates [i])))
            found = candidates [i], candidates [i] = NULL;
    if (!found) {
        found = candidates [2];         //  the system path: the error will name it
        candidates [2] = NULL;
    }
    for (int i = 0; i < 3; i++)
        free (candidates [i]);
    return found;
}

ah_config_t *ah_config_new_defaults (void)
{
    ah_config_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->listen = strdup ("127.0.0.1:8080");
    self->data_dir = s_default_data_dir ();
    self->user = strdup ("agenthold");
    self->tap_endpoint = NULL;
    self->driver = strdup ("docker");
    self->fake_sandboxd = strdup ("in-process");
    self->default_image = strdup ("debian:bookworm-slim");
    self->default_cpus = 2;
    self->default_memory_mb = 4096;
    self->max_cpus = 8;
    self->max_memory_mb = 16384;
    self->pids_limit = 4096;
    self->idle_minutes = 15;
    self->freeze_minutes = 10;
    self->frozen_memory_mb = s_half_memory_mb ();
    self->warm_pool_max = 8;
    self->idle_check_interval_s = 30;
    self->tunnel_listen = strdup ("auto");
    self->container_ttl_s = 86400;
    self->workspace_ttl_s = 0;
    self->ttl_check_interval_s = 60;
    self->destroy_retry_min_s = 120;
    self->destroy_retry_max_s = 21600;
    self->max_exec_timeout_s = 300;
    self->egress_max_connections = 256;
    self->egress_connect_timeout_s = 10;
    self->audit_retention_days = 30;
    self->audit_terminal_bytes_s = 60;
    self->permission_timeout_s = 60;
    char *exe_dir = s_exe_dir ();
    self->sandboxd_path = exe_dir ? ah_strf ("%s/sandboxd", exe_dir) : strdup ("sandboxd");
    free (exe_dir);
    self->docker_socket = strdup ("/var/run/docker.sock");
    self->name_prefix = strdup ("agenthold");
    self->network_pool = strdup ("10.213.0.0/16");
    self->subnet_bits = 28;
    self->runtime = NULL;
    self->server_container = NULL;
    self->sandboxd_volume = NULL;
    self->tmp_mb = 64;
    self->docker_egress = strdup ("tunnel");
    self->k8s_namespace = strdup ("agenthold");
    self->k8s_home_size = strdup ("10Gi");
    self->k8s_sandboxd_image = strdup ("agenthold/sandboxd:latest");
    self->k8s_image_pull_policy = strdup ("IfNotPresent");
    self->k8s_reader_idle_s = 60;
    self->remote_endpoint = strdup (AH_CONFIG_HOSTD_ENDPOINT);
    self->remote_server_key = NULL;
    self->remote_timeout_s = 5;
    self->ports_answer_timeout_s = 60;
    self->hostd_endpoint = strdup (AH_CONFIG_HOSTD_ENDPOINT);
    self->hostd_name = NULL;
    self->hostd_data_dir = self->data_dir ? s_default_hostd_dir (self->data_dir) : NULL;
    self->hostd_server_user = NULL;
    //  The seed's caps count what holds the host (10 a tenant within 20);
    //  the kept ones, asleep too, are bounded far above them.
    self->tenant_max_sandboxes = 200;
    self->pool_max_sandboxes = 2000;
    self->tenant_max_running = 10;
    self->pool_max_running = 20;
    self->tree_max_depth = 6;
    self->tree_max_entries = 2000;
    self->max_read_bytes = AH_CONFIG_MAX_READ_BYTES;
    self->terminal_scrollback_lines = 10000;
    self->terminal_detached_s = 300;
    self->lua_dir = s_default_data_path ("lua", true);
    self->catalog_path = s_default_data_path ("catalog/runtimes.json", false);
    //  One allocation failed: give up cleanly rather than run half-configured
    for (size_t i = 0; i < KEY_COUNT; i++) {
        const s_key_t *key = &s_keys [i];
        if ((key->type == T_STR || key->type == T_PATH) && !*s_str_field (self, key)) {
            ah_config_destroy (&self);
            return NULL;
        }
    }
    return self;
}

void ah_config_destroy (ah_config_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_config_t *self = *self_p;
    for (size_t i = 0; i < KEY_COUNT; i++) {
        const s_key_t *key = &s_keys [i];
        if (key->type == T_STR || key->type == T_OPT || key->type == T_PATH)
            free (*s_str_field (self, key));
    }
    free (self->file);
    free (self);
    *self_p = NULL;
}

//  ---------------------------------------------------------------------
//  Values

static bool s_parse_double (const char *text, double *value)
{
    if (!text || !*text || isspace ((unsigned char) *text))
        return false;
    char *end = NULL;
    errno = 0;
    double d = strtod (text, &end);
    if (errno || end == text || *end || !isfinite (d))
        return false;
    *value = d;
    return true;
}

static bool s_parse_int64 (const char *text, int64_t *value)
{
    if (!text || !*text || isspace ((unsigned char) *text))
        return false;
    char *end = NULL;
    errno = 0;
    long long n = strtoll (text, &end, 10);
    if (errno || end == text || *end)
        return false;
    *value = n;
    return true;
}

//  "500ms", "30s", "2m", "1h", "1.5s", "30" (seconds) -> seconds.
static bool s_parse_duration (const char *text, double *seconds)
{
    if (!text || !*text || isspace ((unsigned char) *text))
        return false;
    char *end = NULL;
    errno = 0;
    double d = strtod (text, &end);
    if (errno || end == text || !isfinite (d))
        return false;
    double scale;
    if (*end == 0 || strcmp (end, "s") == 0) scale = 1;
    else if (strcmp (end, "ms") == 0)       scale = 0.001;
    else if (strcmp (end, "m") == 0)        scale = 60;
    else if (strcmp (end, "h") == 0)        scale = 3600;
    else
        return false;
    *seconds = d * scale;
    return true;
}

//  Set one key from text (NULL = YAML null or an empty variable). `where`
//  says where the value came from, for the message. 0 / -1 with *err.
static int s_set (ah_config_t *self, const s_key_t *key, const char *value,
                  const char *where, char **err)
{
    const char *shown = value ? value : "null";
    switch (key->type) {
        case T_STR:
            if (!value || !*value) {
                *err = ah_strf ("%s (%s): must not be empty", key->key, where);
                return -1;
            }
            s_replace (s_str_field (self, key), value);
            if (s_str_field (self, key) == &self->remote_endpoint)
                self->remote_endpoint_set = true;
            if (s_str_field (self, key) == &self->hostd_endpoint)
                self->hostd_endpoint_set = true;
            return 0;
        case T_PATH:
            if (!value)
                return 0;               //  null: keep the computed default
            if (!*value) {
                *err = ah_strf ("%s (%s): must not be empty (leave it out for the default)",
                                  key->key, where);
                return -1;
            }
            s_replace (s_str_field (self, key), value);
            if (s_str_field (self, key) == &self->hostd_data_dir)
                self->hostd_data_dir_set = true;
            return 0;
        case T_OPT:
            if (!value || !*value || strcmp (value, key->none_word) == 0)
                s_replace (s_str_field (self, key), NULL);
            else
                s_replace (s_str_field (self, key), value);
            return 0;
        case T_DOUBLE: {
            double d;
            if (!s_parse_double (value, &d)) {
                *err = ah_strf ("%s = '%s' (%s): not a number", key->key, shown, where);
                return -1;
            }
            *(double *) ((char *) self + key->offset) = d;
            return 0;
        }
        case T_INT64:
        case T_INT: {
            int64_t n;
            if (!s_parse_int64 (value, &n)
            ||  (key->type == T_INT && (n < INT_MIN || n > INT_MAX))) {
                *err = ah_strf ("%s = '%s' (%s): not a whole number", key->key, shown, where);
                return -1;
            }
            if (key->type == T_INT)
                *(int *) ((char *) self + key->offset) = (int) n;
            else
                *(int64_t *) ((char *) self + key->offset) = n;
            return 0;
        }
        case T_DURATION: {
            double seconds;
            if (!s_parse_duration (value, &seconds)) {
                *err = ah_strf ("%s = '%s' (%s): not a duration (a number with ms, s, m or h;"
                                  " a bare number is seconds)", key->key, shown, where);
                return -1;
            }
            *(double *) ((char *) self + key->offset) = seconds;
            return 0;
        }
    }
    return -1;
}

//  ---------------------------------------------------------------------
//  Suggestions

//  The edit distance of a and b (case aside) when it is at most max,
//  else SIZE_MAX: strings whose lengths differ by more than max are not
//  compared, and a row all above max ends the walk (a file's unknown
//  keys, up to 64 bytes each, cost little however many there are).
static size_t s_distance (const char *a, const char *b, size_t max)
{
    size_t la = strlen (a), lb = strlen (b);
    if (la > 64 || lb > 64 || (la > lb ? la - lb : lb - la) > max)
        return SIZE_MAX;
    size_t row [65];
    for (size_t j = 0; j <= lb; j++)
        row [j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diagonal = row [0];
        row [0] = i;
        size_t low = row [0];
        for (size_t j = 1; j <= lb; j++) {
            size_t above = row [j];
            size_t cost = tolower ((unsigned char) a [i - 1]) == tolower ((unsigned char) b [j - 1]) ? 0 : 1;
            size_t best = diagonal + cost;
            if (row [j] + 1 < best) best = row [j] + 1;
            if (row [j - 1] + 1 < best) best = row [j - 1] + 1;
            row [j] = best;
            diagonal = above;
            if (best < low)
                low = best;
        }
        if (low > max)
            return SIZE_MAX;
    }
    return row [lb] <= max ? row [lb] : SIZE_MAX;
}

static const char *s_last_part (const char *key)
{
    const char *dot = strrchr (key, '.');
    return dot ? dot + 1 : key;
}

//  The known key closest to `unknown`, or NULL if none is close. Compares
//  whole paths and also last parts (a right name in the wrong section).
static const s_key_t *s_closest (const char *unknown)
{
    size_t allowed = strlen (s_last_part (unknown)) / 3;
    if (allowed < 2)
        allowed = 2;
    const s_key_t *best = NULL;
    size_t best_distance = SIZE_MAX;
    for (size_t i = 0; i < KEY_COUNT; i++) {
        size_t d = s_distance (unknown, s_keys [i].key, allowed);
        size_t d_last = s_distance (s_last_part (unknown), s_last_part (s_keys [i].key), allowed);
        if (d_last < d)
            d = d_last;
        if (d < best_distance) {
            best_distance = d;
            best = &s_keys [i];
        }
    }
    return best_distance <= allowed ? best : NULL;
}

static char *s_unknown_key (const char *key, const char *where)
{
    const s_key_t *close = s_closest (key);
    if (close)
        return ah_strf ("unknown key '%s' (%s); did you mean '%s'?", key, where, close->key);
    //  A misspelt section ("polcy:")
    static const char *sections [] = { "server", "tap", "sandbox", "sandbox.docker",
                                       "sandbox.kubernetes", "limits", "audit",
                                       "policy", "catalog", "conversations" };
    for (size_t i = 0; i < sizeof sections / sizeof sections [0]; i++)
        if (s_distance (key, sections [i], 2) <= 2)
            return ah_strf ("unknown key '%s' (%s); did you mean '%s'?", key, where, sections [i]);
    return ah_strf ("unknown key '%s' (%s); docs/configuration.md lists the keys", key, where);
}

const char *
ah_config_key (size_t index)
{
    return index < KEY_COUNT ? s_keys [index].key : NULL;
}

static const s_key_t *s_find (const char *key)
{
    for (size_t i = 0; i < KEY_COUNT; i++)
        if (strcmp (s_keys [i].key, key) == 0)
            return &s_keys [i];
    return NULL;
}

//  Is `path` a section (a prefix of some key followed by a dot)?
static bool s_is_section (const char *path)
{
    size_t length = strlen (path);
    for (size_t i = 0; i < KEY_COUNT; i++)
        if (strncmp (s_keys [i].key, path, length) == 0 && s_keys [i].key [length] == '.')
            return true;
    return false;
}

//  ---------------------------------------------------------------------
//  YAML

typedef struct {
    ah_config_t *config;
    yaml_document_t *document;
    const char *file;
    bool seen [KEY_COUNT];
    char *err;
} s_walk_t;

static bool s_is_null (yaml_node_t *node)
{
    if (node->type != YAML_SCALAR_NODE || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *text = (const char *) node->data.scalar.value;
    return !*text || strcmp (text, "~") == 0 || strcmp (text, "null") == 0
        || strcmp (text, "Null") == 0 || strcmp (text, "NULL") == 0;
}

static int s_walk (s_walk_t *walk, yaml_node_t *mapping, const char *prefix)
{
    for (yaml_node_pair_t *pair = mapping->data.mapping.pairs.start;
         pair < mapping->data.mapping.pairs.top; pair++) {
        yaml_node_t *key_node = yaml_document_get_node (walk->document, pair->key);
        yaml_node_t *value = yaml_document_get_node (walk->document, pair->value);
        if (!key_node || !value)
            continue;
        char where [512];
        snprintf (where, sizeof where, "%s line %zu", walk->file, key_node->start_mark.line + 1);
        if (key_node->type != YAML_SCALAR_NODE) {
            walk->err = ah_strf ("%s: a key must be a plain word", where);
            return -1;
        }
        char *path = *prefix
            ? ah_strf ("%s.%s", prefix, (const char *) key_node->data.scalar.value)
            : strdup ((const char *) key_node->data.scalar.value);
        if (!path) {
            walk->err = strdup ("out of memory");
            return -1;
        }
        int rc = 0;
        const s_key_t *key = s_find (path);
        if (key) {
            size_t index = (size_t) (key - s_keys);
            if (walk->seen [index]) {
                walk->err = ah_strf ("%s (%s): the key appears twice", path, where);
                rc = -1;
            }
            else
            if (value->type != YAML_SCALAR_NODE) {
                walk->err = ah_strf ("%s (%s): wants a single value, not a %s", path, where,
                                       value->type == YAML_MAPPING_NODE ? "mapping" : "list");
                rc = -1;
            }
            else {
                walk->seen [index] = true;
                rc = s_set (walk->config, key,
                            s_is_null (value) ? NULL : (const char *) value->data.scalar.value,
                            where, &walk->err);
            }
        }
        else
        if (s_is_section (path)) {
            if (value->type == YAML_MAPPING_NODE)
                rc = s_walk (walk, value, path);
            else
            if (!s_is_null (value)) {        //  "docker:" with nothing under it is fine
                walk->err = ah_strf ("%s (%s): is a section and wants a mapping of keys",
                                       path, where);
                rc = -1;
            }
        }
        else {
            walk->err = s_unknown_key (path, where);
            rc = -1;
        }
        free (path);
        if (rc)
            return -1;
    }
    return 0;
}

//  YAML text (size bytes) over self; file names it in messages. The one
//  parser of a configuration: the file loader and ah_config_parse (the
//  fuzz target's entry) both come here.
static int s_load_text (ah_config_t *self, const char *text, size_t size, const char *file,
                        char **err)
{
    if (size > CONFIG_MAX_BYTES) {
        *err = ah_strf ("config file %s is %zu bytes; the limit is %d", file, size,
                        CONFIG_MAX_BYTES);
        return -1;
    }
    yaml_parser_t parser;
    yaml_document_t document;
    if (!yaml_parser_initialize (&parser)) {
        *err = strdup ("cannot initialise the YAML parser");
        return -1;
    }
    yaml_parser_set_input_string (&parser, (const unsigned char *) text, size);
    if (!yaml_parser_load (&parser, &document)) {
        *err = ah_strf ("%s line %zu column %zu: YAML syntax error: %s%s%s", file,
                          parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                          parser.problem ? parser.problem : "unknown problem",
                          parser.context ? " " : "", parser.context ? parser.context : "");
        yaml_parser_delete (&parser);
        return -1;
    }
    int rc = 0;
    yaml_node_t *root = yaml_document_get_root_node (&document);
    if (root && !s_is_null (root)) {
        if (root->type != YAML_MAPPING_NODE) {
            *err = ah_strf ("%s line %zu: the file must be a mapping of sections"
                              " (server:, sandbox:, ...)", file, root->start_mark.line + 1);
            rc = -1;
        }
        else {
            s_walk_t walk = { .config = self, .document = &document, .file = file };
            rc = s_walk (&walk, root, "");
            if (rc)
                *err = walk.err;
        }
    }
    //  A second document in the file would be silently ignored
    yaml_document_t extra;
    if (rc == 0 && yaml_parser_load (&parser, &extra)) {
        if (yaml_document_get_root_node (&extra)) {
            *err = ah_strf ("%s: holds more than one YAML document; only one is allowed", file);
            rc = -1;
        }
        yaml_document_delete (&extra);
    }
    yaml_document_delete (&document);
    yaml_parser_delete (&parser);
    return rc;
}

static int s_load_file (ah_config_t *self, const char *file, char **err)
{
    FILE *handle = fopen (file, "rb");
    if (!handle) {
        *err = ah_strf ("cannot read config file %s: %s", file, strerror (errno));
        return -1;
    }
    struct stat st;
    if (fstat (fileno (handle), &st) == 0 && st.st_size > CONFIG_MAX_BYTES) {
        fclose (handle);
        *err = ah_strf ("config file %s is %lld bytes; the limit is %d", file,
                          (long long) st.st_size, CONFIG_MAX_BYTES);
        return -1;
    }
    //  One byte more than the limit: a file that grew past it is refused
    //  by s_load_text, never cut short.
    char *text = malloc (CONFIG_MAX_BYTES + 1);
    if (!text) {
        fclose (handle);
        *err = strdup ("out of memory");
        return -1;
    }
    size_t size = fread (text, 1, CONFIG_MAX_BYTES + 1, handle);
    int rc;
    if (ferror (handle)) {
        *err = ah_strf ("cannot read config file %s: %s", file, strerror (errno));
        rc = -1;
    }
    else
        rc = s_load_text (self, text, size, file, err);
    free (text);
    fclose (handle);
    return rc;
}

//  ---------------------------------------------------------------------
//  Environment

static void s_env_name (const char *key, char *name, size_t size)
{
    size_t n = snprintf (name, size, "AGENTHOLD_");
    for (const char *p = key; *p && n + 1 < size; p++)
        name [n++] = *p == '.' ? '_' : (char) toupper ((unsigned char) *p);
    name [n] = 0;
}

static int s_load_env (ah_config_t *self, char **err)
{
    for (char **entry = environ; entry && *entry; entry++) {
        if (strncmp (*entry, "AGENTHOLD_", 10) != 0)
            continue;
        const char *equals = strchr (*entry, '=');
        if (!equals)
            continue;
        size_t name_length = (size_t) (equals - *entry);
        char name [128];
        if (name_length >= sizeof name) {
            *err = ah_strf ("environment variable %.60s...: names no configuration key", *entry);
            return -1;
        }
        memcpy (name, *entry, name_length);
        name [name_length] = 0;
        bool exempt = false;
        for (size_t i = 0; i < sizeof s_env_exempt / sizeof s_env_exempt [0]; i++)
            if (strcmp (name, s_env_exempt [i]) == 0)
                exempt = true;
        if (exempt)
            continue;
        const s_key_t *key = NULL;
        for (size_t i = 0; i < KEY_COUNT && !key; i++) {
            char candidate [128];
            s_env_name (s_keys [i].key, candidate, sizeof candidate);
            if (strcmp (candidate, name) == 0)
                key = &s_keys [i];
        }
        if (!key) {
            //  Suggest by the key the variable would be, lower-cased
            char guess [128];
            size_t n = 0;
            for (const char *p = name + 10; *p && n + 1 < sizeof guess; p++)
                guess [n++] = (char) tolower ((unsigned char) *p);
            guess [n] = 0;
            const s_key_t *close = s_closest (guess);
            char suggestion [128] = "";
            if (close)
                s_env_name (close->key, suggestion, sizeof suggestion);
            *err = close
                ? ah_strf ("environment variable %s names no configuration key;"
                             " did you mean %s?", name, suggestion)
                : ah_strf ("environment variable %s names no configuration key"
                             " (docs/configuration.md lists them)", name);
            return -1;
        }
        char where [160];
        snprintf (where, sizeof where, "environment %s", name);
        const char *value = equals + 1;
        if (s_set (self, key, *value ? value : NULL, where, err))
            return -1;
    }
    return 0;
}

//  ---------------------------------------------------------------------
//  Validation

//  Defaults, then either a file (NULL: none) and the environment, or
//  text (source names it), then the computed keys and validation.
static ah_config_t *s_config (const char *file, const char *text, size_t size,
                              const char *source, char **err)
{
    if (err)
        *err = NULL;
    char *why = NULL;
    ah_config_t *self = ah_config_new_defaults ();
    if (!self) {
        if (err)
            *err = strdup ("out of memory");
        return NULL;
    }
    if (text) {
        if (s_load_text (self, text, size, source, &why))
            goto fail;
    }
    else
    if ((file && s_load_file (self, file, &why))
    ||  s_load_env (self, &why))
        goto fail;
    if (file && !(self->file = strdup (file)))
        goto fail;
    //  Computed from the data directory as loaded, not the default one.
    if (!self->hostd_data_dir_set) {
        free (self->hostd_data_dir);
        if (!(self->hostd_data_dir = s_default_hostd_dir (self->data_dir)))
            goto fail;
    }
    //  The host agent's socket is the installation's (seed 000: "change
    //  name_prefix to run several installations on one host"), so two
    //  installations' host agents never meet: /run/<prefix>-hostd/.
    if (!self->remote_endpoint_set) {
        free (self->remote_endpoint);
        if (!(self->remote_endpoint = ah_config_hostd_endpoint (self->name_prefix)))
            goto fail;
    }
    if (!self->hostd_endpoint_set) {
        free (self->hostd_endpoint);
        if (!(self->hostd_endpoint = ah_config_hostd_endpoint (self->name_prefix)))
            goto fail;
    }
    if ((why = ah_config_check (self)))
        goto fail;
    return self;

fail:
    if (err)
        *err = why ? why : strdup ("configuration error");
    else
        free (why);
    ah_config_destroy (&self);
    return NULL;
}

bool ah_config_driver_freezes (const ah_config_t *self)
{
    const char *driver = self->driver ? self->driver : "";
    return !strcmp (driver, "docker") || !strcmp (driver, "remote");
}

const char *ah_config_no_freeze (const ah_config_t *self)
{
    const char *driver = self->driver ? self->driver : "";
    if (!strcmp (driver, "kubernetes"))
        return "the kubernetes driver has no pause: an idle agent is stopped at once";
    if (!strcmp (driver, "fake"))
        return "the fake driver does not freeze: an idle agent is stopped at once";
    if (!ah_config_driver_freezes (self))
        return "this driver does not freeze: an idle agent is stopped at once";
    if (self->freeze_minutes <= 0)
        return "sandbox.freeze_minutes is 0: an idle agent is stopped at once";
    return NULL;
}

const char *ah_config_tunnel_tcp (const ah_config_t *self, const char **why)
{
    const char *listen = self->tunnel_listen ? self->tunnel_listen : "auto";
    const char *driver = self->driver ? self->driver : "docker";
    const char *say = "sandbox.tunnel_listen";
    const char *tcp = listen;
    if (!strcmp (listen, "none") || !strcmp (listen, "off")) {
        say = "sandbox.tunnel_listen is none: sandboxes dial the unix socket alone";
        tcp = NULL;
    }
    else
    if (!!strcmp (listen, "auto"))
        ;
    else
    if (!strcmp (driver, "fake")) {
        say = "the fake driver's sandboxes dial it over loopback (sandbox.tunnel_listen auto)";
        tcp = "127.0.0.1:8090";
    }
    else
    if (!strcmp (driver, "kubernetes")) {
        say = "the kubernetes driver's Pods dial it (sandbox.tunnel_listen auto)";
        tcp = ":8090";
    }
    else
    if (self->tunnel_tls) {
        say = "sandbox.tunnel_tls is on: a host agent's relay dials it (sandbox.tunnel_listen auto)";
        tcp = ":8090";
    }
    else
    if (!strcmp (driver, "remote") && self->remote_endpoint
    &&  strncmp (self->remote_endpoint, "ipc://", 6) != 0) {
        say = "a host agent on another machine (sandbox.remote.endpoint) relays its sandboxes' "
              "connections here (hostd.tunnel_relay; sandbox.tunnel_listen auto)";
        tcp = ":8090";
    }
    else {
        say = "no TCP listener: the sandboxes of this driver dial the unix socket (sandbox.tunnel_listen "
              "auto; give host:port for a host agent on another machine to relay to)";
        tcp = NULL;
    }
    if (why)
        *why = say;
    return tcp;
}

ah_config_t *ah_config_load (const char *path, char **err)
{
    const char *file = path;
    if (!file && s_is_file ("etc/agenthold.yaml"))
        file = "etc/agenthold.yaml";
    return s_config (file, NULL, 0, NULL, err);
}

ah_config_t *ah_config_parse (const char *text, size_t size, const char *source, char **err)
{
    return s_config (NULL, text ? text : "", size, source ? source : "(text)", err);
}

char *ah_config_tunnel_socket (const ah_config_t *self)
{
    if (self->tunnel_socket)
        return strdup (self->tunnel_socket);
    return ah_strf ("%s/run/tunnel.sock", self->data_dir ? self->data_dir : ".");
}
