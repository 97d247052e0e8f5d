/*  drivers/driver.c: what every backend shares: freeing id lists, and the
    factory that picks a backend by sandbox.driver.                    */
#include "common/str.h"
#include "drivers/driver.h"
#include "drivers/fake.h"
#include "drivers/docker.h"
#include "drivers/remote.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ah_driver_free_ids (char ***ids_p)
{
    if (!ids_p || !*ids_p)
        return;
    for (char **id = *ids_p; *id; id++)
        free (*id);
    free (*ids_p);
    *ids_p = NULL;
}


ah_driver_t *ah_driver_new (const ah_config_t *config, char **err)
{
    if (err)
        *err = NULL;
    const char *name = config && config->driver ? config->driver : "";
    if (strcmp (name, "fake") == 0)
        return ah_fake_driver_new (config, err);
    if (strcmp (name, "docker") == 0) {
        return ah_docker_driver_new (config, err);
    }
    if (strcmp (name, "remote") == 0)
        return ah_remote_driver_new (config, err);
    if (err)
        *err = ah_strf ("sandbox.driver '%s' is unknown (want docker, remote or fake)", name);
    return NULL;
}
