/*  drivers/docker/driver.c: the Docker driver object. Checks the
    sandbox.docker configuration once (name prefix, pool, sandboxd),
    opens the driver's own SQLite connection, fills the entry-point table
    and frees it all; also the names and labels every object of an agent
    carries.                                                            */
#include "drivers/docker/docker_int.h"

#include <ctype.h>
#include <curl/curl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PREFIX      40

void
ah_dk_names (const docker_t *self, const char *agent_id, dk_names_t *names)
{
    snprintf (names->container, sizeof names->container, "%s-%s", self->prefix, agent_id);
    snprintf (names->volume, sizeof names->volume, "%s-home-%s", self->prefix, agent_id);
    snprintf (names->network, sizeof names->network, "%s-net-%s", self->prefix, agent_id);
}

json_t *
ah_dk_labels (const docker_t *self, const char *agent_id)
{
    return json_pack ("{s:s s:s s:s}", "agenthold.managed", "true",
                      "agenthold.agent", agent_id, "agenthold.prefix", self->prefix);
}

//  sandbox.docker.name_prefix starts every Docker name the driver makes
//  (a configuration value, not an identifier a client sends).
static bool
s_valid_prefix (const char *prefix)
{
    if (!prefix || !*prefix || strlen (prefix) > MAX_PREFIX)
        return false;
    if (!isalnum ((unsigned char) prefix [0]))
        return false;
    for (const char *p = prefix; *p; p++)
        if (!(isalnum ((unsigned char) *p) || *p == '-' || *p == '_' || *p == '.'))
            return false;
    return true;
}

//  The configuration the driver needs; 0, or -1 with *err naming the key.
//  *base and *bits: the pool.
static int
s_check_config (const ah_config_t *config, uint32_t *base, int *bits, char **err)
{
    if (!s_valid_prefix (config->name_prefix)) {
        ah_dk_err (err, "sandbox.docker.name_prefix '%s' is not usable in Docker names "
                   "(letters, digits, '-', '_', '.', at most %d, starting with a letter or digit)",
                   config->name_prefix ? config->name_prefix : "", MAX_PREFIX);
        return -1;
    }
    if (ah_dk_parse_cidr (config->network_pool, base, bits)) {
        ah_dk_err (err, "sandbox.docker.network_pool '%s' is not an IPv4 CIDR like 10.213.0.0/16",
                   config->network_pool ? config->network_pool : "");
        return -1;
    }
    if (config->subnet_bits < *bits || config->subnet_bits > 29 || *bits < 8) {
        ah_dk_err (err, "sandbox.docker.subnet_bits %d does not fit network_pool %s "
                   "(needs /%d..29 and a pool of at least /8)", config->subnet_bits,
                   config->network_pool, *bits);
        return -1;
    }
    if (*base & ((*bits ? ~0u << (32 - *bits) : 0) ^ ~0u)) {
        ah_dk_err (err, "sandbox.docker.network_pool '%s' has host bits set", config->network_pool);
        return -1;
    }
    if (!config->data_dir || !*config->data_dir) {
        ah_dk_err (err, "docker driver: server.data_dir is not set");
        return -1;
    }
    bool use_volume = config->sandboxd_volume && *config->sandboxd_volume;
    if (use_volume && (!config->sandboxd_path || !*config->sandboxd_path)) {
        ah_dk_err (err, "sandbox.sandboxd_path is not set: the server copies that file into "
                   "sandbox.docker.sandboxd_volume '%s'", config->sandboxd_volume);
        return -1;
    }
    if (!use_volume && (!config->sandboxd_path || config->sandboxd_path [0] != '/')) {
        ah_dk_err (err, "sandbox.sandboxd_path '%s' must be an absolute path (it is bind-mounted "
                   "into every sandbox) unless sandbox.docker.sandboxd_volume is set",
                   config->sandboxd_path ? config->sandboxd_path : "");
        return -1;
    }
    return 0;
}

static void
s_destroy_driver (ah_driver_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_driver_t *driver = *self_p;
    docker_t *self = driver->impl;
    if (self) {
        if (self->probe_started)
            pthread_join (self->probe_thread, NULL);
        ah_store_close (&self->store);
        pthread_mutex_destroy (&self->lock);
        free (self->socket_path);
        free (self->prefix);
        free (self->sandboxd_file);
        free (self->tunnel_socket);
        free (self->host_addresses);
        free (self->probe_report);
        free (self->server_container);
        free (self);
    }
    free (driver);
    *self_p = NULL;
}

ah_driver_t *
ah_docker_driver_new (const ah_config_t *config, char **err)
{
    if (!config) {
        ah_dk_err (err, "docker driver: no configuration");
        return NULL;
    }
    uint32_t base;
    int bits;
    if (s_check_config (config, &base, &bits, err))
        return NULL;

    curl_global_init (CURL_GLOBAL_DEFAULT);
    ah_driver_t *driver = calloc (1, sizeof *driver);
    docker_t *self = calloc (1, sizeof *self);
    if (!driver || !self) {
        free (driver);
        free (self);
        ah_dk_err (err, "docker driver: out of memory");
        return NULL;
    }
    driver->name = "docker";
    driver->waits_for_hello = true;
    driver->create = ah_dk_create;
    driver->start = ah_dk_start;
    driver->stop = ah_dk_stop;
    driver->freeze = ah_dk_freeze;
    driver->thaw = ah_dk_thaw;
    driver->rebuild = ah_dk_rebuild;
    driver->destroy = ah_dk_destroy;
    driver->inspect = ah_dk_inspect;
    driver->list = ah_dk_list;
    driver->watch = ah_dk_watch;
    driver->image_exists = ah_dk_image_exists;
    driver->image_id = ah_dk_image_id;
    driver->image_build = ah_dk_image_build;
    driver->remove_container = ah_dk_remove_container;
    driver->destroy_driver = s_destroy_driver;
    driver->impl = self;

    pthread_mutex_init (&self->lock, NULL);
    self->config = config;
    self->socket_path = strdup (config->docker_socket && *config->docker_socket
                                ? config->docker_socket : "/var/run/docker.sock");
    self->prefix = strdup (config->name_prefix);
    self->pool_base = base;
    self->pool_bits = bits;
    self->subnet_bits = config->subnet_bits;
    self->subnet_count = 1u << (config->subnet_bits - bits);
    //  sandboxd alone goes in: the file (never its directory, which may
    //  hold the server and anything else of the build or the system).
    if (!(config->sandboxd_volume && *config->sandboxd_volume))
        self->sandboxd_file = strdup (config->sandboxd_path);
    self->tunnel_socket = ah_config_tunnel_socket (config);
    char *db = ah_strf ("%s/agenthold.db", config->data_dir);
    char *serr = NULL;
    self->store = db ? ah_store_open (db, true, &serr) : NULL;
    if (!self->store || !self->socket_path || !self->prefix) {
        ah_dk_err (err, "docker driver: cannot open the database %s: %s", db ? db : "",
                   serr ? serr : "out of memory");
        free (serr);
        free (db);
        s_destroy_driver (&driver);
        return NULL;
    }
    free (db);
    return driver;
}
