/*  tests/server/serve_main.c: `ah-serve-test [CONFIG.yaml]`, the server's
    start-up exactly as `agenthold serve --config FILE` does it (load the
    configuration, then ah_server_run), for testing server/ without the
    CLI.                                                               */
#include "server/config.h"
#include "server/serve.h"
#include <stdio.h>
#include <stdlib.h>

int
main (int argc, char **argv)
{
    char *err = NULL;
    ah_config_t *config = ah_config_load (argc > 1 ? argv [1] : NULL, &err);
    if (!config) {
        fprintf (stderr, "agenthold: %s\n", err ? err : "bad configuration");
        free (err);
        return 2;
    }
    int status = ah_server_run (config);
    ah_config_destroy (&config);
    return status;
}
