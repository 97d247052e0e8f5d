/*  drivers/docker/subnet.c: one /subnet_bits block of
    sandbox.docker.network_pool per agent, recorded in the networks table
    (docs/schema.md) over the driver's own SQLite connection, which the
    driver's mutex guards. An allocation is one BEGIN IMMEDIATE
    transaction: the first free block, or the agent's own one.          */
#include "drivers/docker/docker_int.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *
ah_dk_ip_string (uint32_t host_order)
{
    struct in_addr a = { .s_addr = htonl (host_order) };
    char buf [INET_ADDRSTRLEN];
    inet_ntop (AF_INET, &a, buf, sizeof buf);
    return strdup (buf);
}

int
ah_dk_parse_cidr (const char *cidr, uint32_t *base, int *bits)
{
    char addr [INET_ADDRSTRLEN + 1];
    const char *slash = cidr ? strchr (cidr, '/') : NULL;
    if (!slash || (size_t) (slash - cidr) >= sizeof addr)
        return -1;
    memcpy (addr, cidr, slash - cidr);
    addr [slash - cidr] = 0;
    struct in_addr a;
    if (inet_pton (AF_INET, addr, &a) != 1)
        return -1;
    char *end;
    long b = strtol (slash + 1, &end, 10);
    if (*end || end == slash + 1 || b < 0 || b > 32)
        return -1;
    *base = ntohl (a.s_addr);
    *bits = (int) b;
    return 0;
}

char *
ah_dk_subnet_string (const docker_t *self, uint32_t base)
{
    char *ip = ah_dk_ip_string (base);
    char *cidr = ip ? ah_strf ("%s/%d", ip, self->subnet_bits) : NULL;
    free (ip);
    return cidr;
}

//  The block index of base in the pool, or UINT32_MAX when outside it.
static uint32_t
s_index (const docker_t *self, uint32_t base)
{
    uint32_t size = 1u << (32 - self->subnet_bits);
    if (base < self->pool_base || (base - self->pool_base) / size >= self->subnet_count)
        return UINT32_MAX;
    return (base - self->pool_base) / size;
}

//  The agent's recorded subnet when it is usable (not in skip[]): 1 with
//  *base; 0 when there is none (an unusable one is deleted); -1 when the
//  table cannot be updated. Inside the transaction.
static int
s_recorded (docker_t *self, const char *agent_id, const uint32_t *skip, size_t nskip, uint32_t *base)
{
    ah_store_t *store = self->store;
    sqlite3_stmt *st = ah_store_prepare (store, "SELECT subnet FROM networks WHERE agent_id = :agent_id");
    if (!st || ah_store_bind_text (st, ":agent_id", agent_id) || ah_store_step (store, st) != SQLITE_ROW) {
        if (st)
            sqlite3_reset (st);
        return 0;
    }
    int bits;
    const char *subnet = (const char *) sqlite3_column_text (st, 0);
    bool usable = subnet && ah_dk_parse_cidr (subnet, base, &bits) == 0;
    for (size_t i = 0; usable && i < nskip; i++)
        if (skip [i] == *base)
            usable = false;
    sqlite3_reset (st);
    if (usable)
        return 1;
    //  Unusable (malformed, or it clashes with the engine): replace it.
    sqlite3_stmt *del = ah_store_prepare (store, "DELETE FROM networks WHERE agent_id = :agent_id");
    if (!del || ah_store_bind_text (del, ":agent_id", agent_id) || ah_store_step (store, del) != SQLITE_DONE)
        return -1;
    return 0;
}

//  The first block neither recorded nor in skip[]: its index, or
//  UINT32_MAX when all are taken (or out of memory). Inside the transaction.
static uint32_t
s_first_free (docker_t *self, const uint32_t *skip, size_t nskip)
{
    uint8_t *taken = calloc ((self->subnet_count + 7) / 8, 1);
    if (!taken)
        return UINT32_MAX;
    sqlite3_stmt *all = ah_store_prepare (self->store, "SELECT subnet FROM networks");
    while (all && ah_store_step (self->store, all) == SQLITE_ROW) {
        uint32_t base, i;
        int bits;
        const char *subnet = (const char *) sqlite3_column_text (all, 0);
        if (subnet && ah_dk_parse_cidr (subnet, &base, &bits) == 0
        &&  (i = s_index (self, base)) != UINT32_MAX)
            taken [i / 8] |= 1u << (i % 8);
    }
    if (all)
        sqlite3_reset (all);
    for (size_t k = 0; k < nskip; k++) {
        uint32_t i = s_index (self, skip [k]);
        if (i != UINT32_MAX)
            taken [i / 8] |= 1u << (i % 8);
    }
    uint32_t pick = UINT32_MAX;
    for (uint32_t i = 0; i < self->subnet_count && pick == UINT32_MAX; i++)
        if (!(taken [i / 8] & (1u << (i % 8))))
            pick = i;
    free (taken);
    return pick;
}

uint32_t
ah_dk_subnet_for (docker_t *self, const char *agent_id, const uint32_t *skip, size_t nskip, char **err)
{
    uint32_t result = 0, base = 0;
    pthread_mutex_lock (&self->lock);
    ah_store_t *store = self->store;
    if (ah_store_begin (store)) {
        ah_dk_err (err, "allocating a subnet for agent %s: cannot begin a transaction on the database",
                   agent_id);
        goto out;
    }
    int have = s_recorded (self, agent_id, skip, nskip, &base);
    if (have == 1) {
        ah_store_commit (store);
        result = base;
        goto out;
    }
    if (have < 0) {
        ah_store_rollback (store);
        ah_dk_err (err, "allocating a subnet for agent %s: cannot update the networks table", agent_id);
        goto out;
    }
    uint32_t pick = s_first_free (self, skip, nskip);
    if (pick == UINT32_MAX) {
        ah_store_rollback (store);
        ah_dk_err (err, "allocating a subnet for agent %s: all %u /%d subnets of %s are in use "
                   "(raise sandbox.docker.network_pool or subnet_bits)", agent_id,
                   self->subnet_count, self->subnet_bits, self->config->network_pool);
        goto out;
    }
    base = self->pool_base + pick * (1u << (32 - self->subnet_bits));
    char *cidr = ah_dk_subnet_string (self, base);
    sqlite3_stmt *ins = ah_store_prepare (store,
        "INSERT INTO networks (agent_id, subnet) VALUES (:agent_id, :subnet)");
    if (!cidr || !ins || ah_store_bind_text (ins, ":agent_id", agent_id)
    ||  ah_store_bind_text (ins, ":subnet", cidr) || ah_store_step (store, ins) != SQLITE_DONE
    ||  ah_store_commit (store)) {
        ah_store_rollback (store);
        ah_dk_err (err, "allocating a subnet for agent %s: cannot record it in the networks table",
                   agent_id);
    }
    else
        result = base;
    free (cidr);
out:
    pthread_mutex_unlock (&self->lock);
    return result;
}

uint32_t
ah_dk_subnet_lookup (docker_t *self, const char *agent_id)
{
    uint32_t result = 0;
    pthread_mutex_lock (&self->lock);
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "SELECT subnet FROM networks WHERE agent_id = :agent_id");
    if (st && ah_store_bind_text (st, ":agent_id", agent_id) == 0
    &&  ah_store_step (self->store, st) == SQLITE_ROW) {
        uint32_t base; int bits;
        const char *subnet = (const char *) sqlite3_column_text (st, 0);
        if (subnet && ah_dk_parse_cidr (subnet, &base, &bits) == 0)
            result = base;
    }
    if (st)
        sqlite3_reset (st);
    pthread_mutex_unlock (&self->lock);
    return result;
}

int
ah_dk_subnet_free (docker_t *self, const char *agent_id, char **err)
{
    int rc = 0;
    pthread_mutex_lock (&self->lock);
    sqlite3_stmt *st = ah_store_prepare (self->store, "DELETE FROM networks WHERE agent_id = :agent_id");
    if (!st || ah_store_bind_text (st, ":agent_id", agent_id)
    ||  ah_store_step (self->store, st) != SQLITE_DONE) {
        ah_dk_err (err, "freeing the subnet of agent %s: cannot update the networks table", agent_id);
        rc = -1;
    }
    pthread_mutex_unlock (&self->lock);
    return rc;
}

bool
ah_dk_subnet_taken (docker_t *self, uint32_t base)
{
    char *subnet = ah_dk_subnet_string (self, base);
    bool taken = true;
    pthread_mutex_lock (&self->lock);
    sqlite3_stmt *q = ah_store_prepare (self->store, "SELECT 1 FROM networks WHERE subnet = :subnet");
    if (q && subnet && ah_store_bind_text (q, ":subnet", subnet) == 0)
        taken = ah_store_step (self->store, q) != SQLITE_DONE;
    if (q)
        sqlite3_reset (q);
    pthread_mutex_unlock (&self->lock);
    free (subnet);
    return taken;
}
