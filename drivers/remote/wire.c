/*  drivers/remote/wire.c: what both ends of the host agent's link share. */
#include "drivers/remote/wire.h"
#include "common/str.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool
ah_hostd_name_ok (const char *name)
{
    if (!name || !*name || strlen (name) > 63)
        return false;
    for (const char *p = name; *p; p++)
        if (!isalnum ((unsigned char) *p) && *p != '-' && *p != '.' && *p != '_')
            return false;
    return true;
}

char *
ah_hostd_mismatch (const char *host, const char *hostd_version, int64_t hostd_protocol)
{
    if (!host)
        return ah_strf ("the host agent runs agenthold hostd %s (protocol %lld); this server "
                        "speaks protocol %d: install agenthold %s there and restart hostd",
                        hostd_version && *hostd_version ? hostd_version : "of an unknown version",
                        (long long) hostd_protocol, AH_HOSTD_PROTOCOL, AH_VERSION);
    return ah_strf ("host %s runs agenthold hostd %s (protocol %lld); this server speaks "
                    "protocol %d: install agenthold %s on %s and restart hostd",
                    host, hostd_version && *hostd_version ? hostd_version : "of an unknown version",
                    (long long) hostd_protocol, AH_HOSTD_PROTOCOL, AH_VERSION, host);
}

int
ah_hostd_put_spec (ah_msg_t *msg, const ah_sandbox_spec_t *spec)
{
    ah_msg_set_str (msg, "agent_id", spec->agent_id);
    ah_msg_set_str (msg, "image", spec->image);
    ah_msg_set_double (msg, "cpus", spec->cpus);
    ah_msg_set_int (msg, "memory_mb", spec->memory_mb);
    ah_msg_set_int (msg, "pids_limit", spec->pids_limit);
    ah_msg_set_bool (msg, "needs_network", spec->needs_network);
    size_t size = 1;
    for (size_t i = 0; i < spec->n_env; i++) {
        if (!spec->env [i] || strchr (spec->env [i], '\n'))
            return -1;
        size += strlen (spec->env [i]) + 1;
    }
    char *env = calloc (1, size);
    if (!env)
        return -1;
    for (size_t i = 0; i < spec->n_env; i++) {
        strcat (env, spec->env [i]);
        strcat (env, "\n");
    }
    ah_msg_set_str (msg, "env", env);
    free (env);
    return 0;
}

char **
ah_hostd_get_spec (const ah_msg_t *msg, ah_sandbox_spec_t *spec)
{
    memset (spec, 0, sizeof *spec);
    spec->agent_id = ah_msg_str (msg, "agent_id");
    spec->image = ah_msg_str (msg, "image");
    spec->cpus = ah_msg_double (msg, "cpus", 0);
    spec->memory_mb = ah_msg_int (msg, "memory_mb", 0);
    spec->pids_limit = ah_msg_int (msg, "pids_limit", 0);
    spec->needs_network = ah_msg_bool (msg, "needs_network", false);
    const char *text = ah_msg_str (msg, "env");
    size_t lines = 0;
    for (const char *p = text; p && *p; p++)
        lines += *p == '\n';
    char **env = calloc (lines + 1, sizeof (char *));
    size_t n = 0;
    for (const char *p = text; env && p && *p; ) {
        const char *nl = strchr (p, '\n');
        size_t len = nl ? (size_t) (nl - p) : strlen (p);
        if (len && n < lines)
            env [n++] = strndup (p, len);
        p += len + (nl != NULL);
    }
    spec->env = (const char *const *) env;
    spec->n_env = n;
    return env;
}

void
ah_hostd_put_facts (ah_msg_t *msg, const ah_engine_facts_t *f)
{
    ah_msg_set_str (msg, "api_version", f->api_version);
    ah_msg_set_str (msg, "engine_version", f->version);
    ah_msg_set_str (msg, "root_dir", f->root_dir);
    ah_msg_set_int (msg, "free_bytes", f->free_bytes);
    ah_msg_set_int (msg, "total_bytes", f->total_bytes);
    ah_msg_set_bool (msg, "seccomp", f->seccomp);
    ah_msg_set_bool (msg, "apparmor", f->apparmor);
    ah_msg_set_bool (msg, "userns", f->userns);
    ah_msg_set_bool (msg, "rootless", f->rootless);
    ah_msg_set_str (msg, "runtime", f->runtime);
    ah_msg_set_bool (msg, "runtime_ok", f->runtime_ok);
    ah_msg_set_int (msg, "firewall", f->firewall);
    ah_msg_set_str (msg, "firewall_report", f->firewall_report);
}

static void
s_copy (char *to, size_t size, const char *from)
{
    snprintf (to, size, "%s", from ? from : "");
}

void
ah_hostd_get_facts (const ah_msg_t *msg, ah_engine_facts_t *f)
{
    memset (f, 0, sizeof *f);
    s_copy (f->api_version, sizeof f->api_version, ah_msg_str (msg, "api_version"));
    s_copy (f->version, sizeof f->version, ah_msg_str (msg, "engine_version"));
    s_copy (f->root_dir, sizeof f->root_dir, ah_msg_str (msg, "root_dir"));
    f->free_bytes = ah_msg_int (msg, "free_bytes", -1);
    f->total_bytes = ah_msg_int (msg, "total_bytes", -1);
    f->seccomp = ah_msg_bool (msg, "seccomp", false);
    f->apparmor = ah_msg_bool (msg, "apparmor", false);
    f->userns = ah_msg_bool (msg, "userns", false);
    f->rootless = ah_msg_bool (msg, "rootless", false);
    s_copy (f->runtime, sizeof f->runtime, ah_msg_str (msg, "runtime"));
    f->runtime_ok = ah_msg_bool (msg, "runtime_ok", false);
    f->firewall = (int) ah_msg_int (msg, "firewall", AH_FIREWALL_PENDING);
    if (f->firewall < AH_FIREWALL_PENDING || f->firewall > 1)
        f->firewall = AH_FIREWALL_PENDING;
    s_copy (f->firewall_report, sizeof f->firewall_report, ah_msg_str (msg, "firewall_report"));
}
