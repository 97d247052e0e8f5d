/*  tests/lifecycle/lc_harness.c: the lifecycle actor's test harness (see
    lc_harness.h).                                                      */
#include "tests/lifecycle/lc_harness.h"

// --------------------------------------------------------------------------
//  A driver that counts and can slow down the fake one

//  What the docker driver says when the image was removed behind our back.
int c_gone (counting_t *c, const char *image, char **err)
{
    if (!atomic_load (&c->image_gone) && !atomic_exchange (&c->gone_once, 0))
        return 0;
    *err = zsys_sprintf ("creating container x: image '%s' not found (Docker: No such image)", image);
    return -1;
}

int c_create (ah_driver_t *d, const ah_sandbox_spec_t *spec, char **err)
{
    counting_t *c = d->impl;
    atomic_fetch_add (&c->creates, 1);
    if (c_gone (c, spec->image, err))
        return -1;
    return c->inner->create (c->inner, spec, err);
}

int c_image_exists (ah_driver_t *d, const char *image, bool *exists, char **err)
{
    counting_t *c = d->impl;
    atomic_fetch_add (&c->image_checks, 1);
    *exists = !atomic_load (&c->image_gone);
    return 0;
}

int c_start (ah_driver_t *d, const ah_boot_t *boot, char **err)
{
    counting_t *c = d->impl;
    atomic_fetch_add (&c->starts, 1);
    int delay = atomic_load (&c->start_delay_ms);
    if (delay)
        zclock_sleep (delay);
    if (atomic_load (&c->start_fails)) {
        *err = strdup ("starting container x: the engine is unwell");
        return -1;
    }
    return c->inner->start (c->inner, boot, err);
}

int c_stop (ah_driver_t *d, const char *id, char **err)
{
    counting_t *c = d->impl;
    atomic_fetch_add (&c->stops, 1);
    return c->inner->stop (c->inner, id, err);
}

int c_freeze (ah_driver_t *d, const char *id, char **err)
{
    counting_t *c = d->impl;
    atomic_fetch_add (&c->freezes, 1);
    return c->inner->freeze (c->inner, id, err);
}

int c_thaw (ah_driver_t *d, const char *id, char **err)
{
    counting_t *c = d->impl;
    atomic_fetch_add (&c->thaws, 1);
    return c->inner->thaw (c->inner, id, err);
}

int c_rebuild (ah_driver_t *d, const ah_sandbox_spec_t *spec, char **err)
{
    counting_t *c = d->impl;
    atomic_fetch_add (&c->rebuilds, 1);
    if (c_gone (c, spec->image, err))
        return -1;
    return c->inner->rebuild (c->inner, spec, err);
}

int c_destroy (ah_driver_t *d, const char *id, char **err)
{
    counting_t *c = d->impl;
    atomic_fetch_add (&c->destroys, 1);
    return c->inner->destroy (c->inner, id, err);
}

int c_inspect (ah_driver_t *d, const char *id, ah_sandbox_status_t *st, char **err)
{
    counting_t *c = d->impl;
    int rc = c->inner->inspect (c->inner, id, st, err);
    int gen = atomic_load (&c->image_gen);
    if (rc == 0 && st->exists && gen > 0)
        snprintf (st->image_id, sizeof st->image_id, "sha256:gen%d", gen);
    return rc;
}

int c_reader_start (ah_driver_t *d, const ah_boot_t *boot, char **err)
{
    counting_t *c = d->impl;
    snprintf (c->reader_token, sizeof c->reader_token, "%s", boot->token ? boot->token : "");
    atomic_fetch_add (&c->reader_starts, 1);
    return 0;
}

int c_reader_stop (ah_driver_t *d, const char *id, char **err)
{
    counting_t *c = d->impl;
    int delay = atomic_load (&c->reader_stop_delay_ms);
    if (delay)
        zclock_sleep (delay);
    atomic_fetch_add (&c->reader_stops, 1);
    return 0;
}

int c_list (ah_driver_t *d, char ***ids, char **err)
{
    counting_t *c = d->impl;
    return c->inner->list (c->inner, ids, err);
}

// --------------------------------------------------------------------------
//  Harness

char lc_dir [64];
char lc_db_path [128];
ah_config_t *lc_config;
counting_t lc_drv;
zactor_t *lc_bus, *lc_lifecycle;
zsock_t *lc_client, *lc_watch;
ah_store_t *lc_store;
int64_t lc_req = 1;
const char *lc_subscribers [] = { "watch", "sleeper", NULL };

static ah_driver_t *s_fake;

int lc_setup (const char *name, int tunnel_port)
{
    snprintf (lc_dir, sizeof lc_dir, "/tmp/%s-XXXXXX", name);
    if (!mkdtemp (lc_dir)) {
        perror ("mkdtemp");
        return -1;
    }
    snprintf (lc_db_path, sizeof lc_db_path, "%s/agenthold.db", lc_dir);
    lc_config = ah_config_new_defaults ();
    free (lc_config->data_dir);
    lc_config->data_dir = strdup (lc_dir);
    free (lc_config->driver);
    lc_config->driver = strdup ("fake");
    free (lc_config->tunnel_listen);
    lc_config->tunnel_listen = zsys_sprintf ("127.0.0.1:%d", tunnel_port);
    free (lc_config->lua_dir);
    lc_config->lua_dir = strdup (AH_SOURCE_DIR "/lua");

    char *err = NULL;
    lc_store = ah_store_open (lc_db_path, true, &err);
    CHECK (lc_store != NULL);
    s_fake = lc_store ? ah_driver_new (lc_config, &err) : NULL;
    CHECK (s_fake != NULL && streq (s_fake->name, "fake"));
    if (!lc_store || !s_fake) {
        fprintf (stderr, "setup: %s\n", err ? err : "?");
        free (err);
        return -1;
    }
    lc_drv.inner = s_fake;
    lc_drv.base = (ah_driver_t) { .name = "counting", .waits_for_hello = false,
        .create = c_create, .start = c_start, .stop = c_stop, .rebuild = c_rebuild,
        .destroy = c_destroy, .inspect = c_inspect, .list = c_list, .impl = &lc_drv,
        .freeze = c_freeze, .thaw = c_thaw };

    ah_bus_args_t bus_args = { NULL };
    lc_bus = ah_actor_new (&ah_bus_actor, &bus_args, NULL);
    lc_client = ah_bus_connect ("api");
    lc_watch = ah_bus_connect ("watch");
    zsock_set_rcvtimeo (lc_client, 5000);
    return 0;
}

static int s_rm (const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    return remove (path);
}

void lc_teardown (void)
{
    zactor_destroy (&lc_lifecycle);
    zsock_destroy (&lc_client);
    zsock_destroy (&lc_watch);
    zactor_destroy (&lc_bus);
    ah_store_close (&lc_store);
    if (s_fake)
        s_fake->destroy_driver (&s_fake);
    ah_config_destroy (&lc_config);
    nftw (lc_dir, s_rm, 16, FTW_DEPTH | FTW_PHYS);
}

void lc_start_lifecycle_with (int hello_timeout_ms, bool ensure_images)
{
    ah_lifecycle_args_t args = { .config = lc_config, .driver = &lc_drv.base, .db_path = lc_db_path,
                                 .subscribers = lc_subscribers, .hello_timeout_ms = hello_timeout_ms,
                                 .ensure_images = ensure_images };
    lc_lifecycle = ah_actor_new (&ah_lifecycle_actor, &args, NULL);
    CHECK (lc_lifecycle != NULL);
}

void lc_start_lifecycle (int hello_timeout_ms)
{
    lc_start_lifecycle_with (hello_timeout_ms, false);
}

//  Send to lifecycle and wait for the REPLY with our req (others dropped).
ah_msg_t *lc_call (ah_msg_t *msg)
{
    int64_t req = lc_req++;
    ah_msg_set_int (msg, "req", req);
    ah_msg_send (&msg, lc_client, "lifecycle");
    zpoller_t *poller = zpoller_new (lc_client, NULL);
    ah_msg_t *reply = NULL;
    int64_t until = zclock_mono () + 10000;
    while (!reply && zclock_mono () < until) {
        if (!zpoller_wait (poller, 200))
            continue;
        ah_msg_t *m = ah_msg_recv (lc_client, true, NULL);
        if (m && streq (ah_msg_type (m), "REPLY") && ah_msg_int (m, "req", -1) == req)
            reply = m;
        else
            ah_msg_destroy (&m);
    }
    zpoller_destroy (&poller);
    return reply;
}

ah_msg_t *lc_op (const char *type, const char *agent)
{
    ah_msg_t *m = ah_msg_new (type);
    ah_msg_set_str (m, "agent", agent);
    return lc_call (m);
}

int lc_status (ah_msg_t **reply_p)
{
    int status = *reply_p ? (int) ah_msg_int (*reply_p, "status", -1) : -1;
    ah_msg_destroy (reply_p);
    return status;
}

//  A column of the agent's sandbox row as a string ("" for NULL, NULL for no row).
char *lc_col (const char *id, const char *column)
{
    char sql [160];
    snprintf (sql, sizeof sql, "SELECT %s FROM sandboxes WHERE agent_id = :id", column);
    sqlite3_stmt *st = ah_store_prepare (lc_store, sql);
    ah_store_bind_text (st, ":id", id);
    char *value = NULL;
    if (ah_store_step (lc_store, st) == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text (st, 0);
        value = strdup (t ? (const char *) t : "");
    }
    sqlite3_reset (st);
    return value;
}

int64_t lc_count (const char *sql, const char *id)
{
    sqlite3_stmt *st = ah_store_prepare (lc_store, sql);
    ah_store_bind_text (st, ":id", id);
    int64_t n = ah_store_step (lc_store, st) == SQLITE_ROW ? sqlite3_column_int64 (st, 0) : -1;
    sqlite3_reset (st);
    return n;
}

//  One statement with :id bound, on the test's own connection. 0 / -1.
int lc_sql (const char *sql, const char *id)
{
    sqlite3_stmt *st = ah_store_prepare (lc_store, sql);
    int rc = st && !ah_store_bind_text (st, ":id", id) && ah_store_step (lc_store, st) == SQLITE_DONE ? 0 : -1;
    if (st)
        sqlite3_reset (st);
    return rc;
}

bool lc_col_is (const char *id, const char *column, const char *want)
{
    char *v = lc_col (id, column);
    bool yes = v && want && streq (v, want);
    if (!yes && want)
        fprintf (stderr, "  %s.%s is '%s', want '%s'\n", id, column, v ? v : "(no row)", want);
    free (v);
    return yes;
}

//  Wait until the row's state is `state` (NULL: until the row is gone).
bool lc_wait_state (const char *id, const char *state, int ms)
{
    int64_t until = zclock_mono () + ms;
    while (zclock_mono () < until) {
        char *v = lc_col (id, "state");
        bool done = state ? (v && streq (v, state)) : v == NULL;
        free (v);
        if (done)
            return true;
        zclock_sleep (10);
    }
    char *v = lc_col (id, "state");
    fprintf (stderr, "  %s: waited for %s, state is %s\n", id, state ? state : "(gone)", v ? v : "(gone)");
    free (v);
    return false;
}

//  Read SANDBOX_STATE events for id until one with state `state` (true) or timeout.
bool lc_saw_event (const char *id, const char *state, char *error, size_t error_size)
{
    zpoller_t *poller = zpoller_new (lc_watch, NULL);
    bool seen = false;
    int64_t until = zclock_mono () + 5000;
    while (!seen && zclock_mono () < until) {
        if (!zpoller_wait (poller, 100))
            continue;
        ah_msg_t *m = ah_msg_recv (lc_watch, true, NULL);
        if (m && streq (ah_msg_type (m), "SANDBOX_STATE") && streq (ah_msg_str (m, "agent_id"), id)
              && streq (ah_msg_str (m, "state"), state)) {
            seen = true;
            if (error)
                snprintf (error, error_size, "%s", ah_msg_str (m, "error") ? ah_msg_str (m, "error") : "");
        }
        ah_msg_destroy (&m);
    }
    zpoller_destroy (&poller);
    return seen;
}

void lc_drain_events (void)
{
    while (zsock_events (lc_watch) & ZMQ_POLLIN) {
        ah_msg_t *m = ah_msg_recv (lc_watch, true, NULL);
        ah_msg_destroy (&m);
    }
}

char *lc_fake_path (const char *id, const char *leaf)
{
    return zsys_sprintf ("%s/fake/%s%s%s", lc_dir, id, leaf ? "/" : "", leaf ? leaf : "");
}

bool lc_exists (const char *path)
{
    struct stat st;
    return stat (path, &st) == 0;
}

void lc_write (const char *path, const char *text)
{
    FILE *f = fopen (path, "w");
    if (f) {
        fputs (text, f);
        fclose (f);
    }
}

char *lc_create (const char *name)
{
    ah_msg_t *m = ah_msg_new ("AGENT_CREATE");
    ah_msg_set_str (m, "name", name);
    ah_msg_t *reply = lc_call (m);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 201);
    char *id = reply && ah_msg_str (reply, "agent_id") ? strdup (ah_msg_str (reply, "agent_id")) : NULL;
    ah_msg_destroy (&reply);
    return id;
}

// --------------------------------------------------------------------------
//  The tests

//  Numbers off their bound (common/bounds.h), whoever sends them: a
//  create (target NULL) or an update of target is a 400 naming the field
//  and its range, and nothing is made or changed.
void lc_off_bounds (const char *target)
{
    static const struct { const char *field; double v; bool whole; } off [] = {
        { "cpus", 1e-12, false }, { "cpus", 5e-324, false }, { "cpus", 1e-9, false }, { "cpus", 0.001, false },
        { "cpus", 0.015, false }, { "cpus", -0.0, false }, { "cpus", 1e308, false }, { "cpus", 0, false },
        { "memory_mb", 5, true }, { "memory_mb", 1.5, false }, { "memory_mb", 9007199254740993.0, true },
        { "idle_minutes", 0.001, false }, { "idle_minutes", 1e-300, false }, { "idle_minutes", 525601, false },
    };
    for (size_t i = 0; i < sizeof off / sizeof off [0]; i++) {
        ah_msg_t *m = ah_msg_new (target ? "AGENT_UPDATE" : "AGENT_CREATE");
        ah_msg_set_str (m, target ? "agent" : "name", target ? target : "tiny");
        if (off [i].whole)
            ah_msg_set_int (m, off [i].field, (int64_t) off [i].v);
        else
            ah_msg_set_double (m, off [i].field, off [i].v);
        ah_msg_t *reply = lc_call (m);
        const char *error = reply ? ah_msg_str (reply, "error") : NULL;
        char named [64];
        snprintf (named, sizeof named, "field '%s' must be", off [i].field);
        bool ok = reply && ah_msg_int (reply, "status", 0) == 400 && error && strstr (error, named)
                  && strstr (error, "from");
        if (!ok)
            fprintf (stderr, "  %s %s = %g: %s\n", target ? "update" : "create", off [i].field, off [i].v,
                     error ? error : "(no error)");
        CHECK (ok);
        ah_msg_destroy (&reply);
    }
}

