/*  tests/config/test_config.c: defaults, the YAML file, AGENTHOLD_*
    overrides, and the message for each bad key or value.             */
#include "config/config.h"
#include "tests/common/check.h"
#include <stdlib.h>
#include <unistd.h>

static char s_dir [] = "/tmp/ah-test-config-XXXXXX";
static char s_file [256];

static void s_write (const char *text)
{
    FILE *file = fopen (s_file, "w");
    if (!file)
        return;
    fputs (text, file);
    fclose (file);
}

//  Load `yaml` and expect a failure whose message holds every one of `wants`.
static void s_expect_error (int line, const char *yaml, const char *want1, const char *want2)
{
    s_write (yaml);
    char *err = NULL;
    ah_config_t *config = ah_config_load (s_file, &err);
    CHECK (config == NULL);
    CHECK (err != NULL);
    if (err && ((want1 && !strstr (err, want1)) || (want2 && !strstr (err, want2)))) {
        fprintf (stderr, "  line %d: error was '%s', wanted '%s' and '%s'\n",
                 line, err, want1, want2 ? want2 : "");
        CHECK (0);
    }
    if (!err && config)
        fprintf (stderr, "  line %d: loaded, but wanted '%s'\n", line, want1);
    free (err);
    ah_config_destroy (&config);
}
#define EXPECT_ERROR(yaml, a, b) s_expect_error (__LINE__, yaml, a, b)

static void s_test_defaults (void)
{
    ah_config_t *config = ah_config_new_defaults ();
    CHECK (config != NULL);
    CHECK_STR (config->listen, "127.0.0.1:8080");
    CHECK (config->tap_endpoint == NULL);
    CHECK_STR (config->driver, "docker");
    CHECK_STR (config->default_image, "debian:bookworm-slim");
    CHECK (config->default_cpus == 2);
    CHECK (config->default_memory_mb == 4096);
    CHECK (config->max_cpus == 8);
    CHECK (config->max_memory_mb == 16384);
    CHECK (config->pids_limit == 4096);
    CHECK (config->idle_minutes == 15);
    CHECK (config->idle_check_interval_s == 30);
    CHECK_STR (config->tunnel_listen, "auto");
    CHECK_STR (config->docker_socket, "/var/run/docker.sock");
    CHECK_STR (config->name_prefix, "agenthold");
    CHECK_STR (config->network_pool, "10.213.0.0/16");
    CHECK (config->subnet_bits == 28);
    CHECK (config->runtime == NULL);
    CHECK (config->server_container == NULL);
    CHECK (config->sandboxd_volume == NULL);
    //  Computed defaults
    CHECK (config->sandboxd_path && strstr (config->sandboxd_path, "/sandboxd"));
    CHECK (config->data_dir && strstr (config->data_dir, "agenthold"));
    char lua [512];
    snprintf (lua, sizeof lua, "%s/lua", AH_SOURCE_DIR);
    CHECK_STR (config->lua_dir, lua);           //  a build tree finds the source tree's lua/
    CHECK (config->catalog_path && strstr (config->catalog_path, "catalog/runtimes.json"));
    ah_config_destroy (&config);
    CHECK (config == NULL);
    ah_config_destroy (&config);

    //  data_dir follows XDG_DATA_HOME for a non-root user
    if (geteuid () != 0) {
        setenv ("XDG_DATA_HOME", "/srv/xdg", 1);
        config = ah_config_new_defaults ();
        CHECK_STR (config->data_dir, "/srv/xdg/agenthold");
        ah_config_destroy (&config);
        unsetenv ("XDG_DATA_HOME");
        setenv ("HOME", "/home/someone", 1);
        config = ah_config_new_defaults ();
        CHECK_STR (config->data_dir, "/home/someone/.local/share/agenthold");
        ah_config_destroy (&config);
    }
}

static void s_test_shipped_file (void)
{
    char path [512];
    snprintf (path, sizeof path, "%s/etc/agenthold.yaml", AH_SOURCE_DIR);
    char *err = NULL;
    ah_config_t *config = ah_config_load (path, &err);
    CHECK (config != NULL);
    if (!config) {
        fprintf (stderr, "  shipped file: %s\n", err);
        free (err);
        return;
    }
    //  The shipped file documents the defaults: loading it changes nothing
    ah_config_t *defaults = ah_config_new_defaults ();
    CHECK_STR (config->listen, defaults->listen);
    CHECK_STR (config->data_dir, defaults->data_dir);
    CHECK (config->tap_endpoint == NULL);
    CHECK_STR (config->driver, defaults->driver);
    CHECK_STR (config->default_image, defaults->default_image);
    CHECK (config->default_cpus == defaults->default_cpus);
    CHECK (config->default_memory_mb == defaults->default_memory_mb);
    CHECK (config->max_cpus == defaults->max_cpus);
    CHECK (config->max_memory_mb == defaults->max_memory_mb);
    CHECK (config->pids_limit == defaults->pids_limit);
    CHECK (config->idle_minutes == defaults->idle_minutes);
    CHECK (config->idle_check_interval_s == defaults->idle_check_interval_s);
    CHECK_STR (config->tunnel_listen, defaults->tunnel_listen);
    CHECK_STR (config->sandboxd_path, defaults->sandboxd_path);
    CHECK_STR (config->docker_socket, defaults->docker_socket);
    CHECK_STR (config->name_prefix, defaults->name_prefix);
    CHECK_STR (config->network_pool, defaults->network_pool);
    CHECK (config->subnet_bits == defaults->subnet_bits);
    CHECK (config->runtime == NULL);
    CHECK (config->server_container == NULL);
    CHECK (config->sandboxd_volume == NULL);
    CHECK_STR (config->lua_dir, defaults->lua_dir);
    CHECK_STR (config->catalog_path, defaults->catalog_path);
    CHECK (config->tls_cert == NULL && config->tls_key == NULL);
    CHECK (config->tenant_max_sandboxes == defaults->tenant_max_sandboxes);
    CHECK (config->pool_max_sandboxes == defaults->pool_max_sandboxes);
    CHECK (config->tenant_max_running == defaults->tenant_max_running);
    CHECK (config->pool_max_running == defaults->pool_max_running);
    CHECK (config->max_exec_timeout_s == 300 && defaults->max_exec_timeout_s == 300);
    CHECK (config->max_read_bytes == 8 << 20 && defaults->max_read_bytes == 8 << 20);
    ah_config_destroy (&defaults);
    //  ... and names every key, set or commented out ("  leaf:" in its section).
    FILE *f = fopen (path, "r");
    CHECK (f != NULL);
    static char text [65536];
    size_t size = f ? fread (text, 1, sizeof text - 1, f) : 0;
    text [size] = 0;
    if (f)
        fclose (f);
    for (size_t i = 0; ah_config_key (i); i++) {
        const char *key = ah_config_key (i);
        const char *leaf = strrchr (key, '.');
        char want [128];
        snprintf (want, sizeof want, " %s:", leaf ? leaf + 1 : key);
        if (!strstr (text, want))
            fprintf (stderr, "  etc/agenthold.yaml does not name %s\n", key);
        CHECK (strstr (text, want) != NULL);
    }
    ah_config_destroy (&config);

    //  Without a path: etc/agenthold.yaml under the working directory if there is one
    char here [512];
    if (getcwd (here, sizeof here) && chdir (AH_SOURCE_DIR) == 0) {
        setenv ("AGENTHOLD_SANDBOX_DRIVER", "fake", 1);
        FILE *probe = fopen ("etc/agenthold.yaml", "r");
        CHECK (probe != NULL);
        if (probe)
            fclose (probe);
        config = ah_config_load (NULL, &err);
        CHECK (config != NULL);
        ah_config_destroy (&config);
        CHECK (chdir (s_dir) == 0);
        s_write ("sandbox: {driver: docker, max_cpus: 3}\n");   //  not etc/: not read
        config = ah_config_load (NULL, &err);
        CHECK (config && config->max_cpus == 8);
        CHECK (config && strcmp (config->driver, "fake") == 0);
        ah_config_destroy (&config);
        unsetenv ("AGENTHOLD_SANDBOX_DRIVER");
        CHECK (chdir (here) == 0);
    }
}

static void s_test_file_values (void)
{
    s_write (
        "server:\n"
        "  listen: \"[::1]:9000\"\n"
        "  data_dir: /srv/agenthold\n"
        "tap:\n"
        "  endpoint: tcp://127.0.0.1:5599\n"
        "sandbox:\n"
        "  driver: fake\n"
        "  default_cpus: 0.5\n"
        "  idle_minutes: 0.05\n"
        "  idle_check_interval: 500ms\n"
        "  docker:\n"
        "    runtime: runsc\n"
        "    server_container: abc123\n"
        "    subnet_bits: 24\n"
        "policy:\n"
        "  lua_dir: ~\n"                   //  null: keep the default
        "catalog:\n");
    char *err = NULL;
    ah_config_t *config = ah_config_load (s_file, &err);
    CHECK (config != NULL);
    if (!config) {
        fprintf (stderr, "  %s\n", err);
        free (err);
        return;
    }
    CHECK_STR (config->listen, "[::1]:9000");
    CHECK_STR (config->data_dir, "/srv/agenthold");
    CHECK_STR (config->tap_endpoint, "tcp://127.0.0.1:5599");
    CHECK_STR (config->driver, "fake");
    CHECK (config->default_cpus == 0.5);
    CHECK (config->idle_minutes == 0.05);
    CHECK (config->idle_check_interval_s > 0.499 && config->idle_check_interval_s < 0.501);
    CHECK_STR (config->runtime, "runsc");
    CHECK_STR (config->server_container, "abc123");
    CHECK (config->subnet_bits == 24);
    CHECK (config->lua_dir != NULL);
    ah_config_destroy (&config);

    //  Durations
    const struct { const char *text; double seconds; } durations [] = {
        { "30", 30 }, { "1.5s", 1.5 }, { "2m", 120 }, { "1h", 3600 }, { "100ms", 0.1 },
    };
    for (size_t i = 0; i < sizeof durations / sizeof durations [0]; i++) {
        char yaml [128];
        snprintf (yaml, sizeof yaml, "sandbox:\n  idle_check_interval: %s\n", durations [i].text);
        s_write (yaml);
        config = ah_config_load (s_file, NULL);
        CHECK (config && config->idle_check_interval_s > durations [i].seconds - 1e-9
                      && config->idle_check_interval_s < durations [i].seconds + 1e-9);
        ah_config_destroy (&config);
    }
    //  An empty file is all defaults
    s_write ("");
    config = ah_config_load (s_file, &err);
    CHECK (config != NULL);
    ah_config_destroy (&config);
}

static void s_test_env (void)
{
    s_write ("sandbox:\n  docker:\n    name_prefix: fromfile\n  max_cpus: 4\n");
    setenv ("AGENTHOLD_SANDBOX_DOCKER_NAME_PREFIX", "fromenv", 1);
    setenv ("AGENTHOLD_SANDBOX_IDLE_CHECK_INTERVAL", "2m", 1);
    setenv ("AGENTHOLD_TAP_ENDPOINT", "ipc:///tmp/tap", 1);
    setenv ("AGENTHOLD_SERVER_LISTEN", ":0", 1);
    setenv ("AGENTHOLD_URL", "http://x", 1);             //  the CLI's, not ours
    setenv ("AGENTHOLD_TOKEN", "secret", 1);
    char *err = NULL;
    ah_config_t *config = ah_config_load (s_file, &err);
    CHECK (config != NULL);
    if (config) {
        CHECK_STR (config->name_prefix, "fromenv");       //  env wins over the file
        CHECK (config->max_cpus == 4);                    //  the file still counts
        CHECK (config->idle_check_interval_s == 120);
        CHECK_STR (config->tap_endpoint, "ipc:///tmp/tap");
        CHECK_STR (config->listen, ":0");
    }
    else {
        fprintf (stderr, "  env: %s\n", err);
        free (err);
        err = NULL;
    }
    ah_config_destroy (&config);

    //  Empty means off for an optional key
    setenv ("AGENTHOLD_TAP_ENDPOINT", "", 1);
    config = ah_config_load (s_file, NULL);
    CHECK (config && config->tap_endpoint == NULL);
    ah_config_destroy (&config);

    //  A bad value from the environment names the variable
    setenv ("AGENTHOLD_SANDBOX_MAX_CPUS", "lots", 1);
    config = ah_config_load (s_file, &err);
    CHECK (config == NULL);
    CHECK (err && strstr (err, "sandbox.max_cpus = 'lots'"));
    CHECK (err && strstr (err, "AGENTHOLD_SANDBOX_MAX_CPUS"));
    free (err);
    err = NULL;
    unsetenv ("AGENTHOLD_SANDBOX_MAX_CPUS");

    //  A variable that names no key is refused, with a suggestion
    setenv ("AGENTHOLD_SANDBOX_DEFAULT_CPU", "3", 1);
    config = ah_config_load (s_file, &err);
    CHECK (config == NULL);
    CHECK (err && strstr (err, "AGENTHOLD_SANDBOX_DEFAULT_CPU names no configuration key"));
    CHECK (err && strstr (err, "did you mean AGENTHOLD_SANDBOX_DEFAULT_CPUS?"));
    free (err);
    err = NULL;
    unsetenv ("AGENTHOLD_SANDBOX_DEFAULT_CPU");
    setenv ("AGENTHOLD_WHATEVER", "1", 1);
    config = ah_config_load (s_file, &err);
    CHECK (config == NULL);
    CHECK (err && strstr (err, "AGENTHOLD_WHATEVER names no configuration key"));
    free (err);
    unsetenv ("AGENTHOLD_WHATEVER");

    unsetenv ("AGENTHOLD_SANDBOX_DOCKER_NAME_PREFIX");
    unsetenv ("AGENTHOLD_SANDBOX_IDLE_CHECK_INTERVAL");
    unsetenv ("AGENTHOLD_TAP_ENDPOINT");
    unsetenv ("AGENTHOLD_SERVER_LISTEN");
    config = ah_config_load (s_file, NULL);
    CHECK (config && strcmp (config->name_prefix, "fromfile") == 0);
    ah_config_destroy (&config);
    unsetenv ("AGENTHOLD_URL");
    unsetenv ("AGENTHOLD_TOKEN");
}

static void s_test_errors (void)
{
    //  Unknown keys, with and without a suggestion
    EXPECT_ERROR ("sandbox:\n  defualt_cpus: 2\n",
                  "unknown key 'sandbox.defualt_cpus'", "did you mean 'sandbox.default_cpus'?");
    EXPECT_ERROR ("sandbox:\n  docker:\n    name_prefx: x\n",
                  "unknown key 'sandbox.docker.name_prefx'", "did you mean 'sandbox.docker.name_prefix'");
    EXPECT_ERROR ("server:\n  listen: :1\n  zzzzzzzzzzzz: 1\n", "unknown key 'server.zzzzzzzzzzzz'", "line 3");
    EXPECT_ERROR ("sandboxes:\n  driver: fake\n", "unknown key 'sandboxes'", "did you mean 'sandbox'?");
    EXPECT_ERROR ("qqqqqqq: 1\n", "unknown key 'qqqqqqq'", "docs/configuration.md");
    //  Wrong types
    EXPECT_ERROR ("sandbox:\n  default_cpus: two\n", "sandbox.default_cpus = 'two'", "not a number");
    EXPECT_ERROR ("sandbox:\n  max_memory_mb: 1.5\n", "sandbox.max_memory_mb = '1.5'", "not a whole number");
    EXPECT_ERROR ("sandbox:\n  pids_limit: [1, 2]\n", "sandbox.pids_limit", "not a list");
    EXPECT_ERROR ("sandbox: fake\n", "sandbox", "wants a mapping");
    EXPECT_ERROR ("sandbox:\n  idle_check_interval: 5 minutes\n",
                  "sandbox.idle_check_interval = '5 minutes'", "not a duration");
    EXPECT_ERROR ("sandbox:\n  idle_check_interval: 5d\n", "not a duration", NULL);
    EXPECT_ERROR ("sandbox:\n  default_image: \"\"\n", "sandbox.default_image", "must not be empty");
    EXPECT_ERROR ("- a\n- b\n", "must be a mapping", NULL);
    EXPECT_ERROR ("sandbox:\n  driver: fake\n  driver: docker\n", "sandbox.driver", "appears twice");
    //  Ranges
    //  ... each the bound clients are held to too (common/bounds.h):
    //  never a value a driver would turn into 0 or "no limit".
    EXPECT_ERROR ("sandbox:\n  default_cpus: 0\n", "sandbox.default_cpus = 0", "from 0.01 to 1024 CPUs in steps of 0.01");
    EXPECT_ERROR ("sandbox:\n  max_cpus: -1\n", "sandbox.max_cpus = -1", "from 0.01 to 1024");
    EXPECT_ERROR ("sandbox:\n  default_cpus: 1e-12\n", "sandbox.default_cpus = 1e-12", "from 0.01");
    EXPECT_ERROR ("sandbox:\n  default_cpus: 5e-324\n", "sandbox.default_cpus = '5e-324'", "not a number");
    EXPECT_ERROR ("sandbox:\n  default_cpus: 0.001\n", "sandbox.default_cpus = 0.001", "from 0.01");
    EXPECT_ERROR ("sandbox:\n  default_cpus: 0.015\n", "sandbox.default_cpus = 0.015", "steps of 0.01");
    EXPECT_ERROR ("sandbox:\n  max_cpus: 1e308\n", "sandbox.max_cpus = 1e+308", "to 1024");
    EXPECT_ERROR ("sandbox:\n  max_memory_mb: 5\n", "sandbox.max_memory_mb = 5", "from 6 to");
    EXPECT_ERROR ("sandbox:\n  max_memory_mb: 9007199254740993\n", "sandbox.max_memory_mb", "to 1099511627776 MiB");
    EXPECT_ERROR ("sandbox:\n  pids_limit: -1\n", "sandbox.pids_limit = -1", "from 1 to 4194304");
    EXPECT_ERROR ("sandbox:\n  idle_minutes: 0.001\n", "sandbox.idle_minutes = 0.001", "steps of 0.01");
    EXPECT_ERROR ("limits:\n  tenant_max_running: -1\n", "limits.tenant_max_running = -1", "0 (no limit) or");
    EXPECT_ERROR ("limits:\n  pool_max_sandboxes: 100001\n", "limits.pool_max_sandboxes = 100001", "to 100000");
    EXPECT_ERROR ("sandbox:\n  default_cpus: 12\n", "sandbox.default_cpus = 12", "sandbox.max_cpus = 8");
    EXPECT_ERROR ("sandbox:\n  default_memory_mb: 20000\n", "sandbox.default_memory_mb = 20000",
                  "sandbox.max_memory_mb = 16384");
    EXPECT_ERROR ("sandbox:\n  pids_limit: 0\n", "sandbox.pids_limit = 0", NULL);
    //  The seed's caps on a command and on a read answered in JSON
    //  sandboxd's proxy holds at most AH_EGRESS_CONN_MAX: no more can be asked.
    EXPECT_ERROR ("sandbox:\n  egress_max_connections: 257\n", "sandbox.egress_max_connections = 257",
                  "must be from 1 to 256 (sandboxd's proxy holds at most 256");
    EXPECT_ERROR ("sandbox:\n  egress_max_connections: 0\n", "sandbox.egress_max_connections = 0", "from 1 to 256");
    EXPECT_ERROR ("sandbox:\n  max_exec_timeout: -1\n", "sandbox.max_exec_timeout = -1", "from 0.001 to 604800 seconds");
    EXPECT_ERROR ("sandbox:\n  max_exec_timeout: 0\n", "sandbox.max_exec_timeout = 0", "from 0.001 to 604800 seconds");
    EXPECT_ERROR ("sandbox:\n  max_exec_timeout: 1e308\n", "sandbox.max_exec_timeout", "to 604800 seconds");
    EXPECT_ERROR ("sandbox:\n  max_exec_timeout: 8d\n", "sandbox.max_exec_timeout", NULL);
    EXPECT_ERROR ("sandbox:\n  max_exec_timeout: lots\n", "sandbox.max_exec_timeout", NULL);
    EXPECT_ERROR ("files:\n  max_read_bytes: -1\n", "files.max_read_bytes = -1", "from 1 to 268435456 bytes");
    EXPECT_ERROR ("files:\n  max_read_bytes: 0\n", "files.max_read_bytes = 0", "from 1 to 268435456 bytes");
    EXPECT_ERROR ("files:\n  max_read_bytes: 268435457\n", "files.max_read_bytes = 268435457", "256 MiB");
    EXPECT_ERROR ("files:\n  max_read_bytes: 1e30\n", "files.max_read_bytes", NULL);
    EXPECT_ERROR ("files:\n  max_read_bytes: 8MiB\n", "files.max_read_bytes = '8MiB'", "not");
    EXPECT_ERROR ("files:\n  max_read_bytes: [1]\n", "files.max_read_bytes", NULL);
    EXPECT_ERROR ("sandbox:\n  idle_minutes: 0\n", "sandbox.idle_minutes = 0", "from 0.01 to 525600 minutes");
    EXPECT_ERROR ("sandbox:\n  idle_check_interval: 50ms\n", "sandbox.idle_check_interval", "from 0.1 to 86400 seconds");
    EXPECT_ERROR ("sandbox:\n  idle_check_interval: 1e308\n", "sandbox.idle_check_interval", "from 0.1 to 86400 seconds");
    EXPECT_ERROR ("sandbox:\n  workspace_ttl: 1e-300\n", "sandbox.workspace_ttl", "0 (never) or a number from 1");
    EXPECT_ERROR ("sandbox:\n  container_ttl: 0.5\n", "sandbox.container_ttl = 0.5", "0 (never) or");
    EXPECT_ERROR ("sandbox:\n  ttl_check_interval: 1e6\n", "sandbox.ttl_check_interval = 1e+06", "to 86400");
    EXPECT_ERROR ("audit:\n  retention_days: 1e-300\n", "audit.retention_days", "from 0.01 to 36500 days");
    EXPECT_ERROR ("audit:\n  terminal_bytes_interval: 50ms\n", "audit.terminal_bytes_interval = 0.05",
                  "0 (at close only) or");
    EXPECT_ERROR ("sandbox:\n  driver: podman\n", "sandbox.driver = 'podman'", "docker, kubernetes, remote or fake");
    //  The host agent's keys
    EXPECT_ERROR ("sandbox:\n  remote: {endpoint: 'http://x:1'}\n", "sandbox.remote.endpoint = 'http://x:1'", "ipc://");
    EXPECT_ERROR ("sandbox:\n  remote: {endpoint: 'ipc://relative'}\n", "sandbox.remote.endpoint", "absolute path");
    EXPECT_ERROR ("sandbox:\n  remote: {endpoint: 'tcp://host'}\n", "sandbox.remote.endpoint", "tcp://HOST:PORT");
    EXPECT_ERROR ("sandbox:\n  remote: {endpoint: 'tcp://h:0'}\n", "sandbox.remote.endpoint", "tcp://HOST:PORT");
    EXPECT_ERROR ("sandbox:\n  driver: remote\n  remote: {endpoint: 'tcp://10.0.0.5:7070'}\n",
                  "sandbox.remote.server_key is needed", "tcp://10.0.0.5:7070");
    EXPECT_ERROR ("sandbox:\n  remote: {server_key: 'short'}\n", "sandbox.remote.server_key", "40 characters");
    EXPECT_ERROR ("sandbox:\n  remote: {server_key: '0123456789012345678901234567890123456 \"x'}\n",
                  "sandbox.remote.server_key", "Z85");
    EXPECT_ERROR ("sandbox:\n  remote: {timeout: 100ms}\n", "sandbox.remote.timeout = 0.1s", "500ms");
    EXPECT_ERROR ("hostd:\n  endpoint: 'udp://x:1'\n", "hostd.endpoint = 'udp://x:1'", NULL);
    EXPECT_ERROR ("hostd:\n  name: 'b 1'\n", "hostd.name = 'b 1'", "63 letters");
    EXPECT_ERROR ("hostd:\n  nmae: b1\n", "hostd.nmae", NULL);
    EXPECT_ERROR ("server:\n  listen: localhost\n", "server.listen = 'localhost'", "host:port");
    EXPECT_ERROR ("server:\n  listen: 127.0.0.1:99999\n", "server.listen = '127.0.0.1:99999'", NULL);
    EXPECT_ERROR ("sandbox:\n  tunnel_listen: ':80x'\n", "sandbox.tunnel_listen = ':80x'", NULL);
    EXPECT_ERROR ("sandbox:\n  docker:\n    network_pool: 10.213.0.0\n",
                  "sandbox.docker.network_pool = '10.213.0.0'", "CIDR");
    EXPECT_ERROR ("sandbox:\n  docker:\n    network_pool: 10.213.0.1/16\n", "network_pool", "host bits");
    EXPECT_ERROR ("sandbox:\n  docker:\n    network_pool: 300.1.0.0/16\n", "network_pool", NULL);
    EXPECT_ERROR ("sandbox:\n  docker:\n    subnet_bits: 31\n", "sandbox.docker.subnet_bits = 31", "16 and 30");
    EXPECT_ERROR ("sandbox:\n  docker:\n    subnet_bits: 8\n", "sandbox.docker.subnet_bits = 8", "16 and 30");
    EXPECT_ERROR ("sandbox:\n  docker:\n    network_pool: 10.0.0.0/24\n    subnet_bits: 20\n",
                  "sandbox.docker.subnet_bits = 20", "larger than the prefix");
    EXPECT_ERROR ("sandbox:\n  docker:\n    name_prefix: \"bad name\"\n", "sandbox.docker.name_prefix", NULL);
    EXPECT_ERROR ("tap:\n  endpoint: http://x\n", "tap.endpoint = 'http://x'", "ipc:// or tcp://");
    //  A listen host must be an IP address or nothing: what is bound is
    //  exactly what was written.
    EXPECT_ERROR ("server:\n  listen: localhost:8080\n", "server.listen = 'localhost:8080'", "must be an IP address");
    EXPECT_ERROR ("sandbox:\n  tunnel_listen: example.org:8090\n", "sandbox.tunnel_listen", "must be an IP address");
    EXPECT_ERROR ("server:\n  listen: 127.0.0.1.5:8080\n", "server.listen", "must be an IP address");
    //  YAML syntax errors say where
    //  sandbox.kubernetes.*
    EXPECT_ERROR ("sandbox:\n  driver: kubernetes\n", "sandbox.kubernetes.tunnel_url is needed", NULL);
    EXPECT_ERROR ("sandbox:\n  kubernetes:\n    tunnel_url: ws://server.example:8090/tunnel\n",
                  "sandbox.kubernetes.tunnel_url = 'ws://server.example:8090/tunnel'", "IPv4");
    EXPECT_ERROR ("sandbox:\n  kubernetes:\n    tunnel_url: wss://10.0.0.5:8090/tunnel\n",
                  "sandbox.kubernetes.tunnel_url", "ws://IPv4:PORT");
    EXPECT_ERROR ("sandbox:\n  kubernetes:\n    tunnel_url: ws://10.0.0.5:99999/tunnel\n",
                  "sandbox.kubernetes.tunnel_url", NULL);
    EXPECT_ERROR ("sandbox:\n  kubernetes:\n    tunnel_url: \"ws://10.0.0.5:8090/t\\\"x\"\n",
                  "sandbox.kubernetes.tunnel_url", NULL);
    EXPECT_ERROR ("sandbox:\n  kubernetes:\n    namespace: Agent_Hold\n",
                  "sandbox.kubernetes.namespace = 'Agent_Hold'", NULL);
    EXPECT_ERROR ("sandbox:\n  kubernetes:\n    home_size: lots\n", "sandbox.kubernetes.home_size = 'lots'", NULL);
    EXPECT_ERROR ("sandbox:\n  kubernetes:\n    home_size: 10Gb\n", "sandbox.kubernetes.home_size", NULL);
    EXPECT_ERROR ("sandbox:\n  kubernetes:\n    image_pull_policy: Sometimes\n",
                  "sandbox.kubernetes.image_pull_policy = 'Sometimes'", NULL);
    EXPECT_ERROR ("sandbox:\n  kubernetes:\n    node_selector: disk\n", "sandbox.kubernetes.node_selector", NULL);
    EXPECT_ERROR ("sandbox:\n  kubernetes:\n    reader_idle: 500ms\n", "sandbox.kubernetes.reader_idle = 0.5s",
                  "between 1s and 1h");
    EXPECT_ERROR ("sandbox:\n  kubernetes:\n    reader_idle: 2h\n", "sandbox.kubernetes.reader_idle = 7200s", NULL);
    EXPECT_ERROR ("sandbox:\n  kubernetes:\n    reader_idle: soon\n", "sandbox.kubernetes.reader_idle", NULL);
    EXPECT_ERROR ("sandbox:\n  kubernetes:\n    node_selector: \"a=b,c d=e\"\n", "sandbox.kubernetes.node_selector", NULL);
    EXPECT_ERROR ("sandbox:\n  kubernetes:\n    tunnel_pods: \"app=agenthold,\"\n", "sandbox.kubernetes.tunnel_pods", NULL);
    EXPECT_ERROR ("sandbox:\n  kubernetes:\n    sandboxd_image: \"x y\"\n", "sandbox.kubernetes.sandboxd_image", NULL);
    EXPECT_ERROR ("sandbox:\n  kubernetes:\n    kubeconfig: /nonexistent/kubeconfig\n",
                  "sandbox.kubernetes.kubeconfig = '/nonexistent/kubeconfig'", "cannot be read");
    EXPECT_ERROR ("sandbox:\n  kubernetes:\n    namespce: x\n", "unknown key", "sandbox.kubernetes.namespace");
    EXPECT_ERROR ("server:\n  listen: [1, 2\n", "line 3 column", "YAML syntax error");
    EXPECT_ERROR ("server:\n  listen: x\n bad: indent\n", "line 3 column", "YAML syntax error");
    //  A file that cannot be read
    char *err = NULL;
    ah_config_t *config = ah_config_load ("/nonexistent/agenthold.yaml", &err);
    CHECK (config == NULL);
    CHECK (err && strstr (err, "cannot read config file /nonexistent/agenthold.yaml"));
    free (err);
}

static void s_test_split_listen (void)
{
    char host [64];
    int port = -1;
    CHECK (ah_config_split_listen ("127.0.0.1:8080", host, sizeof host, &port) == 0);
    CHECK_STR (host, "127.0.0.1");
    CHECK (port == 8080);
    CHECK (ah_config_split_listen (":8090", host, sizeof host, &port) == 0);
    CHECK_STR (host, "");
    CHECK (port == 8090);
    CHECK (ah_config_split_listen ("[::1]:7", host, sizeof host, &port) == 0);
    CHECK_STR (host, "::1");
    CHECK (port == 7);
    CHECK (ah_config_split_listen ("::1:7", host, sizeof host, &port) == -1);
    CHECK (ah_config_split_listen ("host", host, sizeof host, &port) == -1);
    CHECK (ah_config_split_listen ("host:", host, sizeof host, &port) == -1);
    CHECK (ah_config_split_listen ("host:65536", host, sizeof host, &port) == -1);
    CHECK (ah_config_split_listen ("host:-1", host, sizeof host, &port) == -1);
}

//  The tunnel's TCP listener: only where the configured driver's
//  sandboxes dial TCP (auto), as given, or nowhere (none).
static void s_expect_tcp (int line, const char *yaml, const char *want, const char *why)
{
    s_write (yaml);
    char *err = NULL;
    ah_config_t *config = ah_config_load (s_file, &err);
    CHECK (config != NULL);
    if (!config) {
        fprintf (stderr, "  line %d: %s\n", line, err ? err : "?");
        free (err);
        return;
    }
    const char *said = NULL;
    const char *tcp = ah_config_tunnel_tcp (config, &said);
    if (!(want ? tcp && !strcmp (tcp, want) : !tcp) || !said || !strstr (said, why)) {
        fprintf (stderr, "  line %d: TCP %s (%s), wanted %s (%s)\n", line, tcp ? tcp : "none",
                 said ? said : "?", want ? want : "none", why);
        CHECK (0);
    }
    ah_config_destroy (&config);
}
#define EXPECT_TCP(yaml, want, why) s_expect_tcp (__LINE__, yaml, want, why)

static void s_test_tunnel_tcp (void)
{
    //  The default (docker): no TCP, sandboxes dial the socket.
    EXPECT_TCP ("", NULL, "unix socket");
    EXPECT_TCP ("sandbox:\n  driver: docker\n", NULL, "unix socket");
    EXPECT_TCP ("sandbox:\n  driver: remote\n", NULL, "unix socket");
    EXPECT_TCP ("sandbox:\n  driver: remote\n  remote: {endpoint: 'ipc:///run/x/h.sock'}\n", NULL,
                "unix socket");
    //  Drivers whose sandboxes dial TCP.
    EXPECT_TCP ("sandbox:\n  driver: fake\n", "127.0.0.1:8090", "fake driver");
    EXPECT_TCP ("sandbox:\n  driver: kubernetes\n  kubernetes: {tunnel_url: 'ws://10.0.0.5:8090/tunnel'}\n",
                ":8090", "kubernetes");
    EXPECT_TCP ("sandbox:\n  driver: remote\n  remote: {endpoint: 'tcp://10.0.0.7:7070', "
                "server_key: '0123456789012345678901234567890123456789'}\n", ":8090", "another machine");
    EXPECT_TCP ("server: {tls_cert: /etc/hostname, tls_key: /etc/hostname}\n"
                "sandbox:\n  tunnel_tls: on\n", ":8090", "tunnel_tls");
    //  Given: as given, whatever the driver; none: nowhere.
    EXPECT_TCP ("sandbox:\n  tunnel_listen: 127.0.0.1:9\n", "127.0.0.1:9", "sandbox.tunnel_listen");
    EXPECT_TCP ("sandbox:\n  driver: fake\n  tunnel_listen: '[::1]:9'\n", "[::1]:9", "sandbox.tunnel_listen");
    EXPECT_TCP ("sandbox:\n  tunnel_listen: none\n", NULL, "none");
    EXPECT_ERROR ("sandbox:\n  driver: fake\n  tunnel_listen: none\n", "sandbox.tunnel_listen = none",
                  "over TCP");
    EXPECT_ERROR ("sandbox:\n  tunnel_listen: automatic\n", "sandbox.tunnel_listen = 'automatic'",
                  "auto");
}

//  server.user: agenthold by default, none turns it off; hostd.data_dir
//  follows server.data_dir unless named.
static void s_test_server_user (void)
{
    char *err = NULL;
    s_write ("server:\n  data_dir: /srv/ah/data//\n");
    ah_config_t *config = ah_config_load (s_file, &err);
    CHECK (config != NULL);
    if (config) {
        CHECK_STR (config->user, "agenthold");
        CHECK_STR (config->hostd_data_dir, "/srv/ah/data-hostd");
        CHECK_STR (config->file, s_file);
    }
    ah_config_destroy (&config);
    s_write ("server:\n  data_dir: /srv/ah/data\n  user: none\nhostd:\n  data_dir: /srv/hostd\n");
    setenv ("AGENTHOLD_SERVER_DATA_DIR", "/srv/other", 1);
    config = ah_config_load (s_file, &err);
    CHECK (config != NULL);
    if (config) {
        CHECK (config->user == NULL);
        CHECK_STR (config->hostd_data_dir, "/srv/hostd");   //  named: kept
    }
    ah_config_destroy (&config);
    s_write ("");
    setenv ("AGENTHOLD_SERVER_USER", "svc", 1);
    config = ah_config_load (s_file, &err);
    CHECK (config != NULL);
    if (config) {
        CHECK_STR (config->user, "svc");
        CHECK_STR (config->hostd_data_dir, "/srv/other-hostd");
    }
    ah_config_destroy (&config);
    unsetenv ("AGENTHOLD_SERVER_USER");
    unsetenv ("AGENTHOLD_SERVER_DATA_DIR");
    free (err);
}

//  The host agent's socket is the installation's: from name_prefix,
//  unless named (seed 000: several installations on one host).
static void s_test_hostd_endpoint (void)
{
    char *err = NULL;
    s_write ("");
    ah_config_t *config = ah_config_load (s_file, &err);
    CHECK (config != NULL);
    if (config) {
        CHECK_STR (config->hostd_endpoint, AH_CONFIG_HOSTD_ENDPOINT);
        CHECK_STR (config->remote_endpoint, AH_CONFIG_HOSTD_ENDPOINT);
    }
    ah_config_destroy (&config);
    s_write ("sandbox:\n  docker:\n    name_prefix: ah2\n");
    config = ah_config_load (s_file, &err);
    CHECK (config != NULL);
    if (config) {
        CHECK_STR (config->hostd_endpoint, "ipc:///run/ah2-hostd/hostd.sock");
        CHECK_STR (config->remote_endpoint, "ipc:///run/ah2-hostd/hostd.sock");
    }
    ah_config_destroy (&config);
    s_write ("sandbox:\n  docker:\n    name_prefix: ah2\n  remote:\n    endpoint: ipc:///srv/h.sock\n");
    setenv ("AGENTHOLD_HOSTD_ENDPOINT", "ipc:///srv/k.sock", 1);
    config = ah_config_load (s_file, &err);
    CHECK (config != NULL);
    if (config) {
        CHECK_STR (config->remote_endpoint, "ipc:///srv/h.sock");     //  named: kept
        CHECK_STR (config->hostd_endpoint, "ipc:///srv/k.sock");
    }
    ah_config_destroy (&config);
    unsetenv ("AGENTHOLD_HOSTD_ENDPOINT");
    free (err);
}

int main (void)
{
    //  A stray AGENTHOLD_* in the caller's environment would fail every load
    extern char **environ;
    for (int again = 1; again; ) {
        again = 0;
        for (char **entry = environ; *entry; entry++)
            if (strncmp (*entry, "AGENTHOLD_", 10) == 0) {
                char name [128];
                snprintf (name, sizeof name, "%.*s", (int) strcspn (*entry, "="), *entry);
                unsetenv (name);
                again = 1;
                break;
            }
    }
    if (!mkdtemp (s_dir)) {
        perror ("mkdtemp");
        return 1;
    }
    snprintf (s_file, sizeof s_file, "%s/agenthold.yaml", s_dir);
    s_test_defaults ();
    s_test_tunnel_tcp ();
    s_test_shipped_file ();
    s_test_file_values ();
    s_test_env ();
    s_test_errors ();
    s_test_split_listen ();
    s_test_server_user ();
    s_test_hostd_endpoint ();
    unlink (s_file);
    rmdir (s_dir);
    return CHECK_DONE ();
}
