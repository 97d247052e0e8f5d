/*  cli/server_cmds.c: the server's commands, in agenthold-server (see
    server_cmds.h). */
#include "actors/api.h"
#include "cli/doctor.h"
#include "cli/server_cmds.h"
#include "cli/tap.h"
#include "config/config.h"
#include "hostd/hostd.h"
#include "server/privsep.h"
#include "server/serve.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int s_cmd_doctor (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    (void) co;
    const char *config_path = getenv ("AGENTHOLD_CONFIG");
    if (config_path && !*config_path)
        config_path = NULL;
    bool json = false;
    ah_opt_t opts [] = { { "--config", &config_path, NULL }, { "--json", NULL, &json },
                         { NULL, NULL, NULL } };
    const char *pos [1];
    int npos, rc = ah_cmd_parse (c, argc, argv, opts, pos, 0, &npos);
    if (rc)
        return rc > 0 ? (ah_cmd_usage (c, stdout), 0) : AH_EXIT_USAGE;
    return ah_cli_doctor (config_path, json);
}

static int s_cmd_serve (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    (void) co;
    bool hostd = !strcmp (c->name, "hostd");
    const char *config_path = getenv ("AGENTHOLD_CONFIG");
    if (config_path && !*config_path)
        config_path = NULL;
    ah_opt_t opts [] = { { "--config", &config_path, NULL }, { NULL, NULL, NULL } };
    const char *pos [1];
    int npos, rc = ah_cmd_parse (c, argc, argv, opts, pos, 0, &npos);
    if (rc)
        return rc > 0 ? (ah_cmd_usage (c, stdout), 0) : AH_EXIT_USAGE;
    char *err = NULL;
    ah_config_t *config = ah_config_load (config_path, &err);
    if (!config) {
        fprintf (stderr, "agenthold %s: %s\n", c->name, err ? err : "cannot load the configuration");
        free (err);
        return 1;
    }
    int status = hostd ? ah_hostd_run (config) : ah_serve_main (config);
    ah_config_destroy (&config);
    return status;
}

static int s_cmd_routes (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    ah_opt_t opts [] = { { "--json", NULL, &co->json }, { NULL, NULL, NULL } };
    const char *pos [1];
    int npos, rc = ah_cmd_parse (c, argc, argv, opts, pos, 0, &npos);
    if (rc)
        return rc > 0 ? (ah_cmd_usage (c, stdout), 0) : AH_EXIT_USAGE;
    char *text = ah_api_routes ();
    json_t *routes = text ? json_loads (text, 0, NULL) : NULL;
    if (!routes) {
        fprintf (stderr, "agenthold routes: out of memory\n");
        free (text);
        return 1;
    }
    if (co->json)
        printf ("%s\n", text);
    else {
        size_t i;
        json_t *r;
        json_array_foreach (routes, i, r)
            printf ("%-7s %s%s%s%s\n", json_string_value (json_object_get (r, "method")),
                    json_string_value (json_object_get (r, "pattern")),
                    json_is_true (json_object_get (r, "admin")) ? " admin" : "",
                    json_is_true (json_object_get (r, "public")) ? " public" : "",
                    json_is_true (json_object_get (r, "body")) ? " json-body" : "");
    }
    json_decref (routes);
    free (text);
    return 0;
}

static int s_cmd_tap (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    const char *endpoint = NULL, *glob = NULL, *count = NULL;
    ah_opt_t opts [] = {
        { "--endpoint", &endpoint, NULL }, { "--type", &glob, NULL }, { "--count", &count, NULL },
        { "--json", NULL, &co->json }, { "--config", &co->config, NULL }, { NULL, NULL, NULL }
    };
    const char *pos [1];
    int npos, rc = ah_cmd_parse (c, argc, argv, opts, pos, 0, &npos);
    if (rc)
        return rc > 0 ? (ah_cmd_usage (c, stdout), 0) : AH_EXIT_USAGE;
    long n = 0;
    if (count) {
        char *end = NULL;
        errno = 0;
        n = strtol (count, &end, 10);
        if (errno || end == count || *end || n < 1) {
            fprintf (stderr, "agenthold tap: --count wants a whole number greater than 0, got '%s'\n", count);
            return AH_EXIT_USAGE;
        }
    }
    char *owned = NULL;
    if (!endpoint) {
        char *err = NULL;
        ah_config_t *config = ah_config_load (co->config, &err);
        if (!config) {
            fprintf (stderr, "agenthold tap: configuration: %s\n", err ? err : "cannot load");
            free (err);
            return 1;
        }
        if (config->tap_endpoint && *config->tap_endpoint)
            owned = strdup (config->tap_endpoint);
        ah_config_destroy (&config);
        if (!owned) {
            fprintf (stderr, "agenthold tap: the tap is off: set tap.endpoint in the server's "
                     "configuration (or AGENTHOLD_TAP_ENDPOINT), or give --endpoint\n");
            return 1;
        }
        endpoint = owned;
    }
    int status = ah_cli_tap (endpoint, glob, n);
    free (owned);
    return status;
}

int ah_cli_server_cmd (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    if (!strcmp (c->name, "serve") || !strcmp (c->name, "hostd"))
        return s_cmd_serve (c, argc, argv, co);
    if (!strcmp (c->name, "doctor"))
        return s_cmd_doctor (c, argc, argv, co);
    if (!strcmp (c->name, "routes"))
        return s_cmd_routes (c, argc, argv, co);
    if (!strcmp (c->name, "tap"))
        return s_cmd_tap (c, argc, argv, co);
    fprintf (stderr, "agenthold: '%s' is not a server command\n", c->name);
    return AH_EXIT_USAGE;
}
