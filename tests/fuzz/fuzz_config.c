/*  tests/fuzz/fuzz_config.c: libFuzzer target for the configuration
    parser (config/config.c ah_config_parse: YAML text to a validated
    configuration, the same path ah_config_load takes for a file).

    Checks beyond "no crash": the result is a configuration or an error
    naming the problem, never both and never neither; a configuration
    that parsed has the keys the rest of the server relies on set.    */
#include "config/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) do { fprintf (stderr, __VA_ARGS__); fputc ('\n', stderr); abort (); } while (0)

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    char *err = NULL;
    ah_config_t *c = ah_config_parse ((const char *) data, size, "fuzz.yaml", &err);
    if (c && err)
        FAIL ("a configuration and an error: %s", err);
    if (!c && (!err || !*err))
        FAIL ("no configuration and no error");
    if (c) {
        if (!c->data_dir || !c->hostd_data_dir)
            FAIL ("a parsed configuration without its directories");
        char *sock = ah_config_tunnel_socket (c);
        if (!sock)
            FAIL ("no tunnel socket");
        free (sock);
    }
    free (err);
    ah_config_destroy (&c);
    return 0;
}
