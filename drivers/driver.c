/*  drivers/driver.c: what every backend shares: freeing id lists, and the
    factory that picks a backend by sandbox.driver.                    */
#include "common/ident.h"
#include "common/str.h"
#include "drivers/driver.h"
#include "drivers/fake.h"
#include "drivers/docker.h"
#include "drivers/remote.h"
#include "drivers/kubernetes.h"

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

char *ah_driver_home_dir (const ah_config_t *config, const char *agent_id)
{
    if (!config || !config->driver || !config->data_dir || !agent_id
    ||  !ah_ident_ok (AH_IDENT_AGENT_ID, agent_id))
        return NULL;
    if (strcmp (config->driver, "fake") == 0)
        return ah_strf ("%s/fake/%s/home", config->data_dir, agent_id);
    if (strcmp (config->driver, "docker") == 0)
        return ah_docker_home_dir (config, agent_id);
    return NULL;
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
    if (strcmp (name, "kubernetes") == 0)
        return ah_kubernetes_driver_new (config, err);
    if (err)
        *err = ah_strf ("sandbox.driver '%s' is unknown (want docker, kubernetes, remote or fake)", name);
    return NULL;
}
