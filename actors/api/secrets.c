/*  actors/api/secrets.c: a tenant's egress secrets, for an admin
    (docs/api.md "Egress secrets", docs/egress.md "Secrets"): a header
    attached to one host and port, which the server adds to each request
    the tenant's sandboxes send there through its proxy, terminating
    their TLS. The value goes in and never comes out: the listing names
    the host, the port, the header and when it was set.

    The value is sealed (common/secretbox.h) with the installation's key,
    <data_dir>/secrets.key, made at its first need, in the writer's
    worker (a file to make, a row to write: neither on the network
    thread). The body is wiped once the job has it; the log and the
    answer name the host and the header, never the value.               */
#include "actors/api/api_int.h"
#include "common/file.h"
#include "common/secretbox.h"
#include "common/str.h"
#include "proto/egress.h"

#include <openssl/crypto.h>
#include <string.h>

#define SECRETS_MAX     64          //  a tenant's secrets

//  One secret being set (the writer's job owns it; wiped when freed).
typedef struct {
    char tenant [128];
    char host [AH_EGRESS_HOST_MAX + 1];
    int port;
    char header [AH_EGRESS_SECRET_NAME_MAX + 1];
    char *value;                    //  wiped and freed
    size_t value_n;
    char key_path [4096];
    int64_t created_at;
} secret_put_t;

static void s_put_free (secret_put_t *p)
{
    if (!p)
        return;
    if (p->value)
        OPENSSL_cleanse (p->value, p->value_n);
    free (p->value);
    free (p);
}

void api_egress_changed (api_t *api, const char *tenant)
{
    ah_msg_t *m = ah_msg_new ("EGRESS_CHANGED");
    ah_msg_set_str (m, "tenant", tenant);
    if (api_send (api, "tunnel", &m))
        ah_warn (AREA, "tenant '%s': the tunnel could not be told its egress changed", tenant);
}

//  {tenant} names a tenant that exists: 0, or -1 answered.
static int s_tenant (req_t *r)
{
    const char *name = r->params [0];
    const char *why = ah_ident_check (AH_IDENT_TENANT, name);
    if (why) {
        api_respond_error (r, 400, "tenant name '%s' %s", name, why);
        return -1;
    }
    sqlite3_stmt *st = ah_store_prepare (r->api->store, "SELECT 1 FROM tenants WHERE name = :name");
    int rc = st && !ah_store_bind_text (st, ":name", name) ? ah_store_step (r->api->store, st) : SQLITE_ERROR;
    if (st)
        sqlite3_reset (st);
    if (rc != SQLITE_ROW) {
        api_respond_error (r, rc == SQLITE_DONE ? 404 : 500, rc == SQLITE_DONE ? "no tenant '%s'"
                           : "cannot read tenant '%s'", name);
        return -1;
    }
    return 0;
}

//  {host}: the host a secret is for. 0, or -1 answered.
static int s_target (req_t *r, char host [AH_EGRESS_HOST_MAX + 1], int *port)
{
    bool literal;
    const char *why = NULL;
    if (ah_egress_secret_target (r->params [1], host, port, &literal, &why)) {
        char shown [80];
        const char *p = r->params [1];
        api_respond_error (r, 400, "host '%s' %s", api_show (p, strlen (p), shown, sizeof shown), why);
        return -1;
    }
    return 0;
}

static json_t *s_row (const char *host, int port, const char *header, int64_t created_at)
{
    return json_pack ("{s:o, s:i, s:o, s:o}", "host", api_json_text (host), "port", port,
                      "header", api_json_text (header), "created_at", api_json_time (created_at));
}

//  The writer's job: the key (made at its first need), the value
//  sealed, the row written (replacing the host's secret).
static int s_put_write (ah_store_t *store, void *arg, char *why, size_t size)
{
    secret_put_t *p = arg;
    uint8_t key [AH_SECRETBOX_KEY];
    char *err = NULL;
    if (ah_keyfile_load (p->key_path, key, sizeof key, true, &err)) {
        snprintf (why, size, "the secrets key cannot be used: %s", err ? err : "?");
        free (err);
        return 500;
    }
    size_t aad_n = 0, sealed_n = 0;
    uint8_t *sealed = NULL;
    char *aad = ah_secretbox_egress_aad (p->tenant, p->host, p->port, p->header, &aad_n);
    int sealed_rc = aad ? ah_secretbox_seal (key, p->value, p->value_n, aad, aad_n, &sealed, &sealed_n) : -1;
    OPENSSL_cleanse (key, sizeof key);
    OPENSSL_cleanse (p->value, p->value_n);
    free (aad);
    if (sealed_rc) {
        snprintf (why, size, "cannot seal the value");
        return 500;
    }
    sqlite3_stmt *st = ah_store_prepare (store,
        "INSERT OR REPLACE INTO egress_secrets (tenant, host, port, header, value, created_at)"
        " VALUES (:tenant, :host, :port, :header, :value, :now)");
    bool ok = st && !ah_store_bind_text (st, ":tenant", p->tenant) && !ah_store_bind_text (st, ":host", p->host)
           && !ah_store_bind_int64 (st, ":port", p->port) && !ah_store_bind_text (st, ":header", p->header)
           && !ah_store_bind_blob (st, ":value", sealed, sealed_n)
           && !ah_store_bind_int64 (st, ":now", p->created_at)
           && ah_store_step (store, st) == SQLITE_DONE;
    if (st)
        sqlite3_reset (st);
    free (sealed);
    if (!ok) {
        snprintf (why, size, "cannot write the secret (is tenant '%s' still there?)", p->tenant);
        return 500;
    }
    return 0;
}

static void s_put_written (api_t *api, req_t *r, void *arg, int status, const char *why)
{
    secret_put_t *p = arg;
    api_egress_changed (api, p->tenant);
    if (!status)
        ah_info (AREA, "tenant '%s': egress secret for %s:%d (header %s) set by %s", p->tenant, p->host,
                 p->port, p->header, r ? r->who.token_name : "a client that left");
    if (r && status)
        api_respond_error (r, status, "%s", why);
    else if (r)
        api_respond (r, 200, s_row (p->host, p->port, p->header, p->created_at));
    s_put_free (p);
}

//  A JSON string's bytes wiped (the body's value, once copied).
static void s_wipe (json_t *v)
{
    const char *text = json_string_value (v);
    if (text)
        OPENSSL_cleanse ((char *) text, json_string_length (v));
}

static int64_t s_count (api_t *api, const char *tenant, const char *host, int port, bool *exists)
{
    sqlite3_stmt *st = ah_store_prepare (api->store, "SELECT count(*), sum(host = :host AND port = :port)"
                                                     " FROM egress_secrets WHERE tenant = :tenant");
    int64_t n = -1;
    if (st && !ah_store_bind_text (st, ":tenant", tenant) && !ah_store_bind_text (st, ":host", host)
    &&  !ah_store_bind_int64 (st, ":port", port) && ah_store_step (api->store, st) == SQLITE_ROW) {
        n = sqlite3_column_int64 (st, 0);
        *exists = sqlite3_column_int64 (st, 1) > 0;
    }
    if (st)
        sqlite3_reset (st);
    return n;
}

static void s_put (req_t *r)
{
    json_t *obj = api_body_object (r, false);
    if (!obj)
        return;
    json_t *jv = json_object_get (obj, "value");
    const char *header = json_string_value (json_object_get (obj, "header"));
    const char *value = json_string_value (jv);
    char host [AH_EGRESS_HOST_MAX + 1];
    int port = 443;
    const char *why = NULL;
    bool exists = false;
    int64_t held;
    secret_put_t *p = NULL;
    if (s_tenant (r) || s_target (r, host, &port))
        goto out;
    if (!header || !value) {
        api_respond_error (r, 400, "fields 'header' (an HTTP field name) and 'value' (its value) are required");
        goto out;
    }
    if (ah_egress_secret_name_check (header, &why)) {
        char shown [80];
        api_respond_error (r, 400, "field 'header': '%s' %s", api_show (header, strlen (header), shown,
                           sizeof shown), why);
        goto out;
    }
    if (ah_egress_secret_value_check (value, json_string_length (jv), &why)) {
        api_respond_error (r, 400, "field 'value' %s", why);     //  never shown back
        goto out;
    }
    held = s_count (r->api, r->params [0], host, port, &exists);
    if (held < 0) {
        api_respond_error (r, 500, "cannot read the tenant's secrets");
        goto out;
    }
    if (!exists && held >= SECRETS_MAX) {
        api_respond_error (r, 409, "tenant '%s' has %lld egress secrets, the most it may have: remove one first",
                           r->params [0], (long long) held);
        goto out;
    }
    if (!r->api->config || !r->api->config->data_dir) {
        api_respond_error (r, 503, "this server has no data directory for its secrets key");
        goto out;
    }
    p = calloc (1, sizeof *p);
    if (!p || !(p->value = malloc (json_string_length (jv) + 1))) {
        api_respond_error (r, 503, "out of memory");
        goto out;
    }
    snprintf (p->tenant, sizeof p->tenant, "%s", r->params [0]);
    snprintf (p->host, sizeof p->host, "%s", host);
    p->port = port;
    snprintf (p->header, sizeof p->header, "%s", header);
    p->value_n = json_string_length (jv);
    memcpy (p->value, value, p->value_n + 1);
    snprintf (p->key_path, sizeof p->key_path, "%s/%s", r->api->config->data_dir, AH_SECRETBOX_FILE);
    p->created_at = ah_store_now_ms ();
    if (api_write (r, r->api, s_put_write, s_put_written, p)) {
        api_respond_error (r, 503, "out of memory");
        goto out;
    }
    p = NULL;
out:
    s_put_free (p);
    s_wipe (jv);
    json_decref (obj);
}

static void s_list (req_t *r)
{
    if (s_tenant (r))
        return;
    sqlite3_stmt *st = ah_store_prepare (r->api->store, "SELECT host, port, header, created_at FROM egress_secrets"
                                                        " WHERE tenant = :tenant ORDER BY host, port");
    json_t *list = json_array ();
    int rc = st && !ah_store_bind_text (st, ":tenant", r->params [0]) ? SQLITE_ROW : SQLITE_ERROR;
    while (rc == SQLITE_ROW && (rc = ah_store_step (r->api->store, st)) == SQLITE_ROW)
        json_array_append_new (list, s_row ((const char *) sqlite3_column_text (st, 0), sqlite3_column_int (st, 1),
                                            (const char *) sqlite3_column_text (st, 2),
                                            sqlite3_column_int64 (st, 3)));
    if (st)
        sqlite3_reset (st);
    if (rc != SQLITE_DONE) {
        json_decref (list);
        api_respond_error (r, 500, "cannot read the tenant's secrets");
        return;
    }
    api_respond (r, 200, json_pack ("{s:s, s:o}", "tenant", r->params [0], "secrets", list));
}

//  A secret being removed: its tenant, and what the log and a 404 name.
typedef struct {
    char tenant [128];
    char what [AH_EGRESS_HOST_MAX + 200];
} secret_del_t;

static void s_deleted (api_t *api, req_t *r, void *arg, int status, const char *why)
{
    secret_del_t *d = api_stmt_ctx (arg);
    const char *what = d->what;
    api_egress_changed (api, d->tenant);
    if (status) {
        if (r)
            api_respond_error (r, 500, "cannot remove the secret: %s", why);
    }
    else
    if (!api_stmt_changes (arg)) {
        if (r)
            api_respond_error (r, 404, "no egress secret for %s", what);
    }
    else {
        ah_info (AREA, "egress secret for %s removed by %s", what, r ? r->who.token_name : "a client that left");
        if (r)
            api_respond (r, 200, json_pack ("{s:b}", "removed", 1));
    }
    free (d);
}

static void s_delete (req_t *r)
{
    char host [AH_EGRESS_HOST_MAX + 1];
    int port = 443;
    if (s_tenant (r) || s_target (r, host, &port))
        return;
    api_stmt_t *st = api_stmt ("DELETE FROM egress_secrets WHERE tenant = :tenant AND host = :host AND port = :port");
    st = api_stmt_int (api_stmt_text (api_stmt_text (st, ":tenant", r->params [0]), ":host", host), ":port", port);
    secret_del_t *d = calloc (1, sizeof *d);
    if (d) {
        snprintf (d->tenant, sizeof d->tenant, "%s", r->params [0]);
        snprintf (d->what, sizeof d->what, strchr (host, ':') ? "[%s]:%d of tenant '%s'" : "%s:%d of tenant '%s'",
                  host, port, d->tenant);
    }
    if (!d || api_stmt_write (r, r->api, st, s_deleted, d)) {
        free (d);
        api_respond_error (r, 503, "out of memory");
    }
}

static const body_field_t s_put_fields [] = {
    { "header", B_STR, NULL }, { "value", B_STR, NULL }, { NULL, 0, NULL }
};

const route_t api_secret_routes [] = {
    { M_GET, "/api/v1/tenants/{tenant}/egress/secrets", s_list, R_ADMIN, "", NULL },
    { M_PUT, "/api/v1/tenants/{tenant}/egress/secrets/{host}", s_put, R_BODY | R_ADMIN, "", s_put_fields },
    { M_DELETE, "/api/v1/tenants/{tenant}/egress/secrets/{host}", s_delete, R_ADMIN, "", NULL },
    { 0 }
};
