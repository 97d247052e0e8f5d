/*  drivers/docker/facts.c: what `agenthold doctor` asks of the engine
    (drivers/docker.h, ah_docker_engine_facts): its version, the
    isolation it enforces, the runtime the sandboxes ask for, and the
    free disk where it keeps volumes. Read-only: nothing is made.      */
#include "drivers/docker/docker_int.h"

#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>

int
ah_docker_engine_facts (ah_driver_t *driver, ah_engine_facts_t *facts, char **err)
{
    docker_t *self = driver->impl;
    memset (facts, 0, sizeof *facts);
    facts->free_bytes = facts->total_bytes = -1;
    if (ah_dk_ensure_engine (self, err))
        return -1;
    json_t *version = NULL, *info = NULL;
    if (ah_dk_get (self, "reading the engine's version", "/version", false, &version, err) != 200
    ||  ah_dk_get (self, "reading the engine's facts", "/info", false, &info, err) != 200) {
        json_decref (version);
        return -1;
    }
    snprintf (facts->api_version, sizeof facts->api_version, "%s",
              json_string_value (json_object_get (version, "ApiVersion")) ?: "");
    snprintf (facts->version, sizeof facts->version, "%s",
              json_string_value (json_object_get (version, "Version")) ?: "");
    snprintf (facts->root_dir, sizeof facts->root_dir, "%s",
              json_string_value (json_object_get (info, "DockerRootDir")) ?: "");
    size_t i;
    json_t *opt;
    json_array_foreach (json_object_get (info, "SecurityOptions"), i, opt) {
        const char *o = json_string_value (opt);
        if (!o)
            continue;
        facts->seccomp |= strstr (o, "name=seccomp") != NULL && !strstr (o, "profile=unconfined");
        facts->apparmor |= strstr (o, "name=apparmor") != NULL;
        facts->userns |= strstr (o, "name=userns") != NULL;
        facts->rootless |= strstr (o, "name=rootless") != NULL;
    }
    const char *runtime = self->config->runtime;
    snprintf (facts->runtime, sizeof facts->runtime, "%s", runtime ? runtime : "");
    facts->runtime_ok = !runtime || json_object_get (json_object_get (info, "Runtimes"), runtime);
    //  The disk of the engine's root (volumes live under it), seen from
    //  this process: true where the driver runs next to the engine (hostd,
    //  or the server holding the socket), absent otherwise.
    struct statvfs vfs;
    if (*facts->root_dir && statvfs (facts->root_dir, &vfs) == 0) {
        facts->free_bytes = (int64_t) vfs.f_bavail * (int64_t) vfs.f_frsize;
        facts->total_bytes = (int64_t) vfs.f_blocks * (int64_t) vfs.f_frsize;
    }
    facts->firewall = ah_docker_isolation_report (driver, facts->firewall_report,
                                                  sizeof facts->firewall_report);
    json_decref (version);
    json_decref (info);
    return 0;
}
