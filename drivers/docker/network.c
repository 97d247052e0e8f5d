/*  drivers/docker/network.c: the network of an agent whose runtime needs
    one, <prefix>-net-<id>: a bridge with a way out (the engine's NAT) on
    the agent's subnet (subnet.c), gateway .1, joined by the server's own
    container at .2 when the server runs in one. Agents whose runtime
    needs no network have none (container.c). Kept across rebuilds;
    destroy removes it.                                                 */
#include "drivers/docker/docker_int.h"
#include "sandboxd/net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_OVERLAPS    8               //  subnets in a row the engine may refuse
#define HOST_ADDRESSES_MS   (10 * 60 * 1000)    //  the host's addresses are read again after

static int64_t
s_mono_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}


long
ah_dk_network_post (docker_t *self, const char *what, const char *name, uint32_t base,
                    bool outward, json_t *labels, char **message, char **err)
{
    char *subnet = ah_dk_subnet_string (self, base);
    char *gw = ah_dk_ip_string (base + 1);
    json_t *req = json_pack ("{s:s s:s s:b s:b s:b s:{s:s s:[{s:s s:s}]} s:o}",
        "Name", name, "Driver", "bridge", "Internal", !outward, "CheckDuplicate", 1,
        "Attachable", 0,
        "IPAM", "Driver", "default", "Config", "Subnet", subnet ? subnet : "", "Gateway", gw ? gw : "",
        "Labels", labels);
    free (subnet);
    free (gw);
    return ah_dk_call_json (self, what, "/networks/create", req, message, err);
}

//  It exists already (a retried create or rebuild): fine if it is on the
//  same subnet (0); on another with nothing on it, removed (2); else -1
//  with *err.
static int
s_network_same (docker_t *self, const char *what, const char *network, uint32_t base, char **err)
{
    char *path = ah_strf ("/networks/%s", network);
    char *subnet = ah_dk_subnet_string (self, base);
    json_t *j = NULL;
    long st = path ? ah_dk_get (self, what, path, false, &j, err) : -1;
    json_t *cfg = json_array_get (json_object_get (json_object_get (j, "IPAM"), "Config"), 0);
    const char *have = json_string_value (json_object_get (cfg, "Subnet"));
    json_t *members = json_object_get (j, "Containers");
    const char *id = json_string_value (json_object_get (j, "Id"));
    int rc = -1;
    if (st == 200 && have && subnet && strcmp (have, subnet) == 0)
        rc = 0;
    else
    if (st == 200 && id && json_object_size (members) == 0) {
        //  Nothing on it: left by a create that was interrupted before
        //  its subnet was ours to keep. Removed, to be made again.
        ah_warn (LOG_AREA, "%s: one exists on subnet %s, not %s, with nothing on it: replacing it",
                 what, have ? have : "(none)", subnet ? subnet : "");
        dk_simple_t how = { .method = "DELETE", .path_fmt = "/networks/%s", .ok1 = 204, .ok2 = 200,
                            .absent_ok = true };
        rc = ah_dk_simple (self, &how, "removing a stray network", id, err) ? -1 : 2;
    }
    else
    if (st == 200)
        ah_dk_err (err, "%s: a network of that name exists on subnet %s, not %s; destroy the "
                   "sandbox to clean it up", what, have ? have : "(none)", subnet ? subnet : "");
    json_decref (j);
    free (subnet);
    free (path);
    return rc;
}

//  Creates (or finds) the agent's network on subnet base. Returns 0, 1 when
//  the engine says the subnet overlaps another network (pick another), or
//  -1 with *err.
static int
s_network_create (docker_t *self, const char *agent_id, uint32_t base, char **err)
{
    dk_names_t n;
    ah_dk_names (self, agent_id, &n);
    char *what = ah_strf ("creating network %s", n.network);
    char *msg = NULL;
    int rc = -1;
    long st = ah_dk_network_post (self, what ? what : "creating a network", n.network, base, true,
                                  ah_dk_labels (self, agent_id), &msg, err);
    if (st == 409 && s_network_same (self, what, n.network, base, err) == 2) {
        free (msg);
        msg = NULL;
        st = ah_dk_network_post (self, what ? what : "creating a network", n.network, base, true,
                                 ah_dk_labels (self, agent_id), &msg, err);
    }
    if (st == 201 || st == 200)
        rc = 0;
    else
    if (st == 409) {
        int same = s_network_same (self, what, n.network, base, err);
        rc = same == 0 ? 0 : -1;
        if (same == 2)
            ah_dk_err (err, "%s: another create of that name is under way; try again", what);
    }
    if (rc == 0)
        ah_dk_network_dedupe (self, agent_id);
    else
    if (st > 0 && msg && strstr (msg, "overlap")) {
        char *subnet = ah_dk_subnet_string (self, base);
        ah_warn (LOG_AREA, "%s: subnet %s overlaps a network not ours (Docker: %s); trying another",
                 what, subnet ? subnet : "", msg);
        free (subnet);
        rc = 1;
    }
    else
    if (st > 0)
        ah_dk_status_err (err, what, st, msg);
    free (msg);
    free (what);
    return rc;
}

//  Docker's check for a duplicate name is not atomic: the create of a
//  server killed mid-request and ours can both succeed. Keeps the network
//  of that exact name on the agent's own subnet (else the oldest) and
//  removes the others by id (the name is ambiguous to the engine then).
//  Best effort.
void
ah_dk_network_dedupe (docker_t *self, const char *agent_id)
{
    dk_names_t n;
    ah_dk_names (self, agent_id, &n);
    uint32_t base = ah_dk_subnet_lookup (self, agent_id);
    char *want = base ? ah_dk_subnet_string (self, base) : NULL;
    char *filters = ah_dk_filters (json_pack ("{s:[s]}", "name", n.network));
    char *path = filters ? ah_strf ("/networks?filters=%s", filters) : NULL;
    free (filters);
    json_t *list = NULL;
    if (!path || ah_dk_get (self, "listing networks by name", path, false, &list, NULL) != 200) {
        free (path);
        free (want);
        json_decref (list);
        return;
    }
    free (path);
    const char *keep = NULL, *keep_created = NULL;
    bool keep_ours = false;
    size_t i;
    json_t *net;
    json_array_foreach (list, i, net) {
        const char *nm = json_string_value (json_object_get (net, "Name"));
        const char *created = json_string_value (json_object_get (net, "Created"));
        json_t *cfg = json_array_get (json_object_get (json_object_get (net, "IPAM"), "Config"), 0);
        const char *subnet = json_string_value (json_object_get (cfg, "Subnet"));
        if (!nm || strcmp (nm, n.network) != 0)
            continue;           //  the filter matches substrings
        bool ours = want && subnet && strcmp (subnet, want) == 0;
        if (!keep || (ours && !keep_ours)
        ||  (ours == keep_ours && created && keep_created && strcmp (created, keep_created) < 0)) {
            keep = json_string_value (json_object_get (net, "Id"));
            keep_created = created;
            keep_ours = ours;
        }
    }
    json_array_foreach (list, i, net) {
        const char *nm = json_string_value (json_object_get (net, "Name"));
        const char *id = json_string_value (json_object_get (net, "Id"));
        if (!nm || !id || strcmp (nm, n.network) != 0 || (keep && strcmp (id, keep) == 0))
            continue;
        ah_warn (LOG_AREA, "network %s exists twice (an interrupted create): removing %.12s", nm, id);
        dk_simple_t how = { .method = "DELETE", .path_fmt = "/networks/%s", .ok1 = 204, .ok2 = 200,
                            .absent_ok = true };
        ah_dk_simple (self, &how, "removing a duplicate network", id, NULL);
    }
    free (want);
    json_decref (list);
}

//  Connects the server's own container to the network at .2.
static int
s_network_join_server (docker_t *self, const char *agent_id, uint32_t base, char **err)
{
    char *server = ah_dk_server_container (self);
    if (!server)
        return 0;
    dk_names_t n;
    ah_dk_names (self, agent_id, &n);
    char *what = ah_strf ("connecting the server's container to network %s", n.network);
    char *addr = ah_dk_ip_string (base + 2);
    json_t *req = json_pack ("{s:s s:{s:{s:s}}}", "Container", server,
                             "EndpointConfig", "IPAMConfig", "IPv4Address", addr ? addr : "");
    char *path = ah_strf ("/networks/%s/connect", n.network);
    char *msg = NULL;
    long st = ah_dk_call_json (self, what, path, req, &msg, err);
    int rc = 0;
    //  403 "already exists in network" is what a repeated connect answers.
    if (st == 200 || (st == 403 && msg && strstr (msg, "already exists")))
        rc = 0;
    else {
        if (st > 0)
            ah_dk_status_err (err, what, st, msg);
        rc = -1;
    }
    free (msg);
    free (path);
    free (addr);
    free (what);
    free (server);
    return rc;
}

int
ah_dk_network_remove (docker_t *self, const char *agent_id, char **err)
{
    dk_names_t n;
    ah_dk_names (self, agent_id, &n);
    char *server = ah_dk_server_container (self);
    if (server) {
        char *path = ah_strf ("/networks/%s/disconnect", n.network);
        char *msg = NULL;
        //  Not connected, or no network: fine.
        if (path)
            ah_dk_call_json (self, "disconnecting the server's container", path,
                             json_pack ("{s:s s:b}", "Container", server, "Force", 1), &msg, NULL);
        free (msg);
        free (path);
        free (server);
    }
    ah_dk_network_dedupe (self, agent_id);
    dk_simple_t how = { .method = "DELETE", .path_fmt = "/networks/%s", .ok1 = 204, .ok2 = 200,
                        .absent_ok = true };
    return ah_dk_simple (self, &how, "removing network", n.network, err);
}

uint32_t
ah_dk_network_ensure (docker_t *self, const char *agent_id, char **err)
{
    uint32_t skip [MAX_OVERLAPS];
    size_t nskip = 0;
    while (true) {
        uint32_t base = ah_dk_subnet_for (self, agent_id, skip, nskip, err);
        if (!base)
            return 0;
        int rc = s_network_create (self, agent_id, base, err);
        if (rc == 0)
            return s_network_join_server (self, agent_id, base, err) ? 0 : base;
        if (rc < 0)
            return 0;
        if (nskip == MAX_OVERLAPS) {
            ah_dk_err (err, "creating the network of agent %s: %zu subnets in a row overlap networks "
                       "the engine already has; choose another sandbox.docker.network_pool",
                       agent_id, nskip + 1);
            ah_dk_subnet_free (self, agent_id, NULL);
            return 0;
        }
        skip [nskip++] = base;
    }
}

//  out + " a.b.c.d/32" unless it would pass DK_BLOCKED_MAX. The new string
//  (out freed), or out when it was left as it was.
static char *
s_block_more (char *out, const char *host)
{
    if (!out || !host || !*host || strlen (out) + strlen (host) + 5 >= DK_BLOCKED_MAX)
        return out;
    char *more = ah_strf ("%s %s/32", out, host);
    if (!more)
        return out;
    free (out);
    return more;
}

//  The host's addresses as a helper container last saw them (read again
//  once they are older than HOST_ADDRESSES_MS). A copy, or NULL (said in
//  the log: sandboxes with a network may then reach the host's own
//  addresses; the gateways are still blocked).
static char *
s_host_addresses (docker_t *self)
{
    pthread_mutex_lock (&self->lock);
    bool fresh = self->host_addresses
              && s_mono_ms () - self->host_addresses_at < HOST_ADDRESSES_MS;
    char *copy = fresh ? strdup (self->host_addresses) : NULL;
    pthread_mutex_unlock (&self->lock);
    if (fresh)
        return copy;
    char *err = NULL;
    char *addrs = ah_dk_host_addresses (self, &err);
    if (!addrs) {
        ah_warn (LOG_AREA, "cannot learn the host's own addresses from a helper container (%s): "
                 "a sandbox with a network may reach services on them", err ? err : "?");
        free (err);
        pthread_mutex_lock (&self->lock);
        copy = self->host_addresses ? strdup (self->host_addresses) : NULL;
        pthread_mutex_unlock (&self->lock);
        return copy;
    }
    pthread_mutex_lock (&self->lock);
    bool changed = !self->host_addresses || strcmp (self->host_addresses, addrs);
    free (self->host_addresses);
    self->host_addresses = strdup (addrs);
    self->host_addresses_at = s_mono_ms ();
    pthread_mutex_unlock (&self->lock);
    if (changed)
        ah_info (LOG_AREA, "the host's own addresses (read by a helper container in its network "
                 "namespace), blocked for sandboxes with a network: %s", addrs);
    return addrs;
}

char *
ah_dk_blocked (docker_t *self, uint32_t base)
{
    //  Link-local (the host's and the cloud's metadata service), the pool,
    //  and on the agent's own subnet the gateway (the host) and .2 (the
    //  server's container). Not every private range: the host's resolver
    //  and the rest of the LAN may sit there, and are the way out.
    char *pool = ah_dk_ip_string (self->pool_base);
    char *gw = ah_dk_ip_string (base + 1);
    char *two = ah_dk_ip_string (base + 2);
    char *out = ah_strf ("169.254.0.0/16 %s/%d %s/32 %s/32", pool ? pool : "10.213.0.0",
                         self->pool_bits, gw ? gw : "", two ? two : "");
    free (pool);
    free (gw);
    free (two);
    //  Every gateway of the engine's networks outside the pool: each is an
    //  address of the host (docker0's 172.17.0.1 and the like).
    json_t *nets = NULL;
    ah_dk_get (self, "listing the engine's networks", "/networks", false, &nets, NULL);
    size_t i, k;
    json_t *n, *cfg;
    json_array_foreach (nets, i, n)
        json_array_foreach (json_object_get (json_object_get (n, "IPAM"), "Config"), k, cfg) {
            const char *g = json_string_value (json_object_get (cfg, "Gateway"));
            struct in_addr ga;
            if (g && inet_pton (AF_INET, g, &ga) == 1
            &&  (ntohl (ga.s_addr) & ~((1u << (32 - self->pool_bits)) - 1)) != self->pool_base)
                out = s_block_more (out, g);
        }
    json_decref (nets);
    //  Each of the host's own IPv4 addresses too: read here on the host;
    //  in a container, by a helper container in the host's network
    //  namespace (helper.c), kept for HOST_ADDRESSES_MS.
    char *server = ah_dk_server_container (self);
    if (server && out) {
        char *addrs = s_host_addresses (self);
        char *save = NULL;
        for (char *a = addrs ? strtok_r (addrs, " ", &save) : NULL; a; a = strtok_r (NULL, " ", &save))
            if (strncmp (a, "127.", 4) != 0)
                out = s_block_more (out, a);
        free (addrs);
    }
    if (!server && out) {
        char *mine = NULL;
        size_t size = 0;
        FILE *f = open_memstream (&mine, &size);
        if (f) {
            ah_net_print_addresses (f);
            fclose (f);
        }
        char *save = NULL;
        for (char *a = mine ? strtok_r (mine, "\n", &save) : NULL; a; a = strtok_r (NULL, "\n", &save))
            out = s_block_more (out, a);
        free (mine);
    }
    free (server);
    return out;
}
