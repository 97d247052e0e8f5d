/*  tests/lifecycle/test_lifecycle.c: the lifecycle actor alone, with the
    bus, a real SQLite file in a temporary directory, the fake driver
    wrapped in one that counts calls, and lua/limits.lua. We talk to it
    as "api" through a DEALER on the bus, listen to its SANDBOX_STATE
    events as "watch", and look at the database and the fake driver's
    files after each step.                                             */
#include "actors/lifecycle.h"
#include "common/bus.h"
#include "common/log.h"
#include "common/msg.h"
#include "common/token.h"
#include "drivers/fake.h"
#include "config/config.h"
#include "store/store.h"
#include "tests/common/check.h"
#include "tests/common/actor_probe.h"
#include "tests/common/ident_cases.h"

#include <ftw.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <unistd.h>

// --------------------------------------------------------------------------
//  A driver that counts and can slow down the fake one

typedef struct {
    ah_driver_t base;
    ah_driver_t *inner;
    atomic_int creates, starts, stops, rebuilds, destroys;
    atomic_int start_delay_ms;
    atomic_int reader_starts, reader_stops;
    atomic_int reader_stop_delay_ms;
    atomic_int image_gone;          //  create, rebuild and start fail: the runtime's image is gone
    atomic_int image_checks;
    atomic_int start_fails;         //  start fails (for a reason of its own)
    atomic_int gone_once;           //  the next create or rebuild meets the image gone, which is
                                    //  back (made again by the builder) when it is asked after
    char reader_token [AH_TOKEN_HEX];   //  the last reader_start's (written before the count moves)
} counting_t;

//  What the docker driver says when the image was removed behind our back.
static int c_gone (counting_t *c, const char *image, char **err)
{
    if (!atomic_load (&c->image_gone) && !atomic_exchange (&c->gone_once, 0))
        return 0;
    *err = zsys_sprintf ("creating container x: image '%s' not found (Docker: No such image)", image);
    return -1;
}

static int c_create (ah_driver_t *d, const ah_sandbox_spec_t *spec, char **err)
{
    counting_t *c = d->impl;
    atomic_fetch_add (&c->creates, 1);
    if (c_gone (c, spec->image, err))
        return -1;
    return c->inner->create (c->inner, spec, err);
}

static int c_image_exists (ah_driver_t *d, const char *image, bool *exists, char **err)
{
    counting_t *c = d->impl;
    atomic_fetch_add (&c->image_checks, 1);
    *exists = !atomic_load (&c->image_gone);
    return 0;
}

static int c_start (ah_driver_t *d, const ah_boot_t *boot, char **err)
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

static int c_stop (ah_driver_t *d, const char *id, char **err)
{
    counting_t *c = d->impl;
    atomic_fetch_add (&c->stops, 1);
    return c->inner->stop (c->inner, id, err);
}

static int c_rebuild (ah_driver_t *d, const ah_sandbox_spec_t *spec, char **err)
{
    counting_t *c = d->impl;
    atomic_fetch_add (&c->rebuilds, 1);
    if (c_gone (c, spec->image, err))
        return -1;
    return c->inner->rebuild (c->inner, spec, err);
}

static int c_destroy (ah_driver_t *d, const char *id, char **err)
{
    counting_t *c = d->impl;
    atomic_fetch_add (&c->destroys, 1);
    return c->inner->destroy (c->inner, id, err);
}

static int c_inspect (ah_driver_t *d, const char *id, ah_sandbox_status_t *st, char **err)
{
    counting_t *c = d->impl;
    return c->inner->inspect (c->inner, id, st, err);
}

static int c_reader_start (ah_driver_t *d, const ah_boot_t *boot, char **err)
{
    counting_t *c = d->impl;
    snprintf (c->reader_token, sizeof c->reader_token, "%s", boot->token ? boot->token : "");
    atomic_fetch_add (&c->reader_starts, 1);
    return 0;
}

static int c_reader_stop (ah_driver_t *d, const char *id, char **err)
{
    counting_t *c = d->impl;
    int delay = atomic_load (&c->reader_stop_delay_ms);
    if (delay)
        zclock_sleep (delay);
    atomic_fetch_add (&c->reader_stops, 1);
    return 0;
}

static int c_list (ah_driver_t *d, char ***ids, char **err)
{
    counting_t *c = d->impl;
    return c->inner->list (c->inner, ids, err);
}

// --------------------------------------------------------------------------
//  Harness

static char s_dir [64];
static char s_db_path [128];
static ah_config_t *s_config;
static counting_t s_drv;
static zactor_t *s_bus, *s_lifecycle;
static zsock_t *s_client, *s_watch;
static ah_store_t *s_store;
static int64_t s_req = 1;
static const char *s_subscribers [] = { "watch", "sleeper", NULL };

static void s_start_lifecycle_with (int hello_timeout_ms, bool ensure_images)
{
    ah_lifecycle_args_t args = { .config = s_config, .driver = &s_drv.base, .db_path = s_db_path,
                                 .subscribers = s_subscribers, .hello_timeout_ms = hello_timeout_ms,
                                 .ensure_images = ensure_images };
    s_lifecycle = ah_actor_new (&ah_lifecycle_actor, &args, NULL);
    CHECK (s_lifecycle != NULL);
}

static void s_start_lifecycle (int hello_timeout_ms)
{
    s_start_lifecycle_with (hello_timeout_ms, false);
}

//  Send to lifecycle and wait for the REPLY with our req (others dropped).
static ah_msg_t *s_call (ah_msg_t *msg)
{
    int64_t req = s_req++;
    ah_msg_set_int (msg, "req", req);
    ah_msg_send (&msg, s_client, "lifecycle");
    zpoller_t *poller = zpoller_new (s_client, NULL);
    ah_msg_t *reply = NULL;
    int64_t until = zclock_mono () + 10000;
    while (!reply && zclock_mono () < until) {
        if (!zpoller_wait (poller, 200))
            continue;
        ah_msg_t *m = ah_msg_recv (s_client, true, NULL);
        if (m && streq (ah_msg_type (m), "REPLY") && ah_msg_int (m, "req", -1) == req)
            reply = m;
        else
            ah_msg_destroy (&m);
    }
    zpoller_destroy (&poller);
    return reply;
}

static ah_msg_t *s_op (const char *type, const char *agent)
{
    ah_msg_t *m = ah_msg_new (type);
    ah_msg_set_str (m, "agent", agent);
    return s_call (m);
}

static int s_status (ah_msg_t **reply_p)
{
    int status = *reply_p ? (int) ah_msg_int (*reply_p, "status", -1) : -1;
    ah_msg_destroy (reply_p);
    return status;
}

//  A column of the agent's sandbox row as a string ("" for NULL, NULL for no row).
static char *s_col (const char *id, const char *column)
{
    char sql [160];
    snprintf (sql, sizeof sql, "SELECT %s FROM sandboxes WHERE agent_id = :id", column);
    sqlite3_stmt *st = ah_store_prepare (s_store, sql);
    ah_store_bind_text (st, ":id", id);
    char *value = NULL;
    if (ah_store_step (s_store, st) == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text (st, 0);
        value = strdup (t ? (const char *) t : "");
    }
    sqlite3_reset (st);
    return value;
}

static int64_t s_count (const char *sql, const char *id)
{
    sqlite3_stmt *st = ah_store_prepare (s_store, sql);
    ah_store_bind_text (st, ":id", id);
    int64_t n = ah_store_step (s_store, st) == SQLITE_ROW ? sqlite3_column_int64 (st, 0) : -1;
    sqlite3_reset (st);
    return n;
}

//  One statement with :id bound, on the test's own connection. 0 / -1.
static int s_sql (const char *sql, const char *id)
{
    sqlite3_stmt *st = ah_store_prepare (s_store, sql);
    int rc = st && !ah_store_bind_text (st, ":id", id) && ah_store_step (s_store, st) == SQLITE_DONE ? 0 : -1;
    if (st)
        sqlite3_reset (st);
    return rc;
}

static bool s_col_is (const char *id, const char *column, const char *want)
{
    char *v = s_col (id, column);
    bool yes = v && want && streq (v, want);
    if (!yes && want)
        fprintf (stderr, "  %s.%s is '%s', want '%s'\n", id, column, v ? v : "(no row)", want);
    free (v);
    return yes;
}

//  Wait until the row's state is `state` (NULL: until the row is gone).
static bool s_wait_state (const char *id, const char *state, int ms)
{
    int64_t until = zclock_mono () + ms;
    while (zclock_mono () < until) {
        char *v = s_col (id, "state");
        bool done = state ? (v && streq (v, state)) : v == NULL;
        free (v);
        if (done)
            return true;
        zclock_sleep (10);
    }
    char *v = s_col (id, "state");
    fprintf (stderr, "  %s: waited for %s, state is %s\n", id, state ? state : "(gone)", v ? v : "(gone)");
    free (v);
    return false;
}

//  Read SANDBOX_STATE events for id until one with state `state` (true) or timeout.
static bool s_saw_event (const char *id, const char *state, char *error, size_t error_size)
{
    zpoller_t *poller = zpoller_new (s_watch, NULL);
    bool seen = false;
    int64_t until = zclock_mono () + 5000;
    while (!seen && zclock_mono () < until) {
        if (!zpoller_wait (poller, 100))
            continue;
        ah_msg_t *m = ah_msg_recv (s_watch, true, NULL);
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

static void s_drain_events (void)
{
    while (zsock_events (s_watch) & ZMQ_POLLIN) {
        ah_msg_t *m = ah_msg_recv (s_watch, true, NULL);
        ah_msg_destroy (&m);
    }
}

static char *s_fake_path (const char *id, const char *leaf)
{
    return zsys_sprintf ("%s/fake/%s%s%s", s_dir, id, leaf ? "/" : "", leaf ? leaf : "");
}

static bool s_exists (const char *path)
{
    struct stat st;
    return stat (path, &st) == 0;
}

static void s_write (const char *path, const char *text)
{
    FILE *f = fopen (path, "w");
    if (f) {
        fputs (text, f);
        fclose (f);
    }
}

static char *s_create (const char *name)
{
    ah_msg_t *m = ah_msg_new ("AGENT_CREATE");
    ah_msg_set_str (m, "name", name);
    ah_msg_t *reply = s_call (m);
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
static void s_off_bounds (const char *target)
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
        ah_msg_t *reply = s_call (m);
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

static void test_malformed (void)
{
    //  A map the decoder refuses (a duplicate key), with a req to answer.
    uint8_t body [] = { 0x83, 0xa3, 'r', 'e', 'q', 0x2a, 0xa5, 'a', 'g', 'e', 'n', 't', 0xa1, 'x',
                        0xa5, 'a', 'g', 'e', 'n', 't', 0xa1, 'y' };
    zmsg_t *z = zmsg_new ();
    zmsg_addstr (z, "lifecycle");
    zmsg_addstr (z, "SANDBOX_START");
    zmsg_addmem (z, body, sizeof body);
    zmsg_send (&z, s_client);
    ah_msg_t *reply = ah_msg_recv (s_client, true, NULL);
    CHECK (reply && ah_msg_int (reply, "req", 0) == 42);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 400 && !ah_msg_bool (reply, "ok", true));
    ah_msg_destroy (&reply);

    //  Unknown type, missing field, field of the wrong type.
    ah_msg_t *m = ah_msg_new ("SANDBOX_FLY");
    reply = s_call (m);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 400);
    CHECK (reply && strstr (ah_msg_str (reply, "error"), "SANDBOX_FLY"));
    ah_msg_destroy (&reply);
    CHECK (s_status ((reply = s_call (ah_msg_new ("SANDBOX_START")), &reply)) == 400);
    m = ah_msg_new ("SANDBOX_STOP");
    ah_msg_set_int (m, "agent", 7);
    CHECK (s_status ((reply = s_call (m), &reply)) == 400);
    CHECK (s_status ((reply = s_op ("SANDBOX_START", "nobody"), &reply)) == 404);

    //  Bad create requests.
    m = ah_msg_new ("AGENT_CREATE");
    ah_msg_set_str (m, "name", "Bad Name");
    CHECK (s_status ((reply = s_call (m), &reply)) == 400);
    m = ah_msg_new ("AGENT_CREATE");
    ah_msg_set_str (m, "name", "ok-name");
    ah_msg_set_str (m, "cpus", "two");
    CHECK (s_status ((reply = s_call (m), &reply)) == 400);
    s_off_bounds (NULL);
    CHECK (s_count ("SELECT count(*) FROM agents WHERE name <> :id", "") == 0);
    //  Over the limit: refused by limits.lua with its sentence.
    m = ah_msg_new ("AGENT_CREATE");
    ah_msg_set_str (m, "name", "greedy");
    ah_msg_set_double (m, "cpus", 64);
    reply = s_call (m);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 422);
    CHECK (reply && ah_msg_str (reply, "error") && strstr (ah_msg_str (reply, "error"), "max_cpus"));
    ah_msg_destroy (&reply);
    CHECK (s_count ("SELECT count(*) FROM agents WHERE name <> :id", "") == 0);

    //  What the skeleton refuses, at once, and lifecycle goes on serving.
    actor_probe_refusals ("lifecycle");
    CHECK (s_status ((reply = s_op ("SANDBOX_START", "nobody"), &reply)) == 404);
}

//  The shared identifier table (tests/common/ident_cases.h) through
//  AGENT_CREATE (names, tenants) and AGENT_UPDATE (images): good values
//  are taken, bad ones refused with 400 and the grammar's own sentence.
static void test_idents (void)
{
    char *target = s_create ("ident-target");
    CHECK (target != NULL);
    if (!target)
        return;
    for (size_t i = 0; i < IDENT_CASES; i++) {
        const ident_case_t *c = &ident_cases [i];
        ah_msg_t *m;
        if (c->kind == AH_IDENT_AGENT_NAME || c->kind == AH_IDENT_TENANT) {
            m = ah_msg_new ("AGENT_CREATE");
            ah_msg_set_str (m, "name", c->kind == AH_IDENT_AGENT_NAME ? c->value : "ident-tenant");
            if (c->kind == AH_IDENT_TENANT)
                ah_msg_set_str (m, "tenant", c->value);
        }
        else
        if (c->kind == AH_IDENT_IMAGE) {
            m = ah_msg_new ("AGENT_UPDATE");
            ah_msg_set_str (m, "agent", target);
            ah_msg_set_str (m, "image", c->value);
        }
        else
            continue;
        bool create = streq (ah_msg_type (m), "AGENT_CREATE");
        ah_msg_t *reply = s_call (m);
        int status = reply ? (int) ah_msg_int (reply, "status", 0) : 0;
        const char *error = reply ? ah_msg_str (reply, "error") : NULL;
        const char *rule = ah_ident_check (c->kind, c->value);
        bool ok = c->good ? status == (create ? 201 : 200)
                          : status == 400 && error && strstr (error, rule)
                            && strstr (error, ah_ident_what (c->kind));
        if (!ok)
            fprintf (stderr, "  %s '%s' (%s): %d %s\n", ah_ident_what (c->kind), c->value,
                     c->good ? "good" : "bad", status, error ? error : "");
        CHECK (ok);
        const char *made = create && status == 201 ? ah_msg_str (reply, "agent_id") : NULL;
        if (made) {
            char id [32];
            snprintf (id, sizeof id, "%s", made);
            ah_msg_t *r = s_op ("SANDBOX_DESTROY", id);
            CHECK (s_status (&r) == 202);
            CHECK (s_wait_state (id, NULL, 5000));
        }
        ah_msg_destroy (&reply);
    }
    //  The target keeps what it had through refused numbers.
    int64_t cpus_before = s_count ("SELECT cpus * 1000 FROM agents WHERE id = :id", target);
    s_off_bounds (target);
    CHECK (s_count ("SELECT cpus * 1000 FROM agents WHERE id = :id", target) == cpus_before);
    ah_msg_t *r = s_op ("SANDBOX_DESTROY", target);
    CHECK (s_status (&r) == 202);
    CHECK (s_wait_state (target, NULL, 5000));
    free (target);
    s_drain_events ();
}

static char *test_create (void)
{
    int creates = atomic_load (&s_drv.creates), starts = atomic_load (&s_drv.starts);
    char *id = s_create ("alpha");
    CHECK (id && strlen (id) == 12 && strspn (id, "0123456789abcdef") == 12);
    if (!id)
        return NULL;
    CHECK (s_saw_event (id, "creating", NULL, 0));
    CHECK (s_wait_state (id, "running", 5000));
    CHECK (s_saw_event (id, "running", NULL, 0));
    CHECK (atomic_load (&s_drv.creates) == creates + 1 && atomic_load (&s_drv.starts) == starts + 1);
    //  No runtime named: the catalog's first entry decides the image.
    CHECK (s_count ("SELECT a.runtime = 'debian' AND a.image LIKE 'agenthold/rt-debian:%' AND s.runtime = 'debian'"
                    " AND a.memory_mb = 2048 FROM agents a JOIN sandboxes s ON s.agent_id = a.id WHERE a.id = :id", id) == 1);
    CHECK (s_col_is (id, "needs_rebuild", "0"));
    CHECK (s_col_is (id, "op", ""));
    char *home = s_fake_path (id, "home");
    CHECK (s_exists (home));
    free (home);
    //  boot.json holds the token whose hash alone is stored.
    char *boot = s_fake_path (id, "boot.json");
    FILE *f = fopen (boot, "r");
    char text [512] = "", token [AH_TOKEN_HEX] = "", hash [AH_TOKEN_HEX];
    if (f) {
        size_t n = fread (text, 1, sizeof text - 1, f);
        text [n] = 0;
        fclose (f);
    }
    const char *t = strstr (text, "\"token\": \"");
    if (t)
        snprintf (token, sizeof token, "%.64s", t + 10);
    ah_token_hash (token, hash);
    CHECK (strlen (token) == 64);
    CHECK (s_col_is (id, "boot_token_hash", hash));
    CHECK (strstr (text, "ws://127.0.0.1:18401/tunnel") != NULL);
    free (boot);

    //  The name is taken now.
    ah_msg_t *m = ah_msg_new ("AGENT_CREATE");
    ah_msg_set_str (m, "name", "alpha");
    ah_msg_t *reply;
    CHECK (s_status ((reply = s_call (m), &reply)) == 409);
    return id;
}

static void test_stop_and_concurrent_start (const char *id)
{
    ah_msg_t *reply = s_op ("SANDBOX_STOP", "alpha");      //  by name
    CHECK (reply && ah_msg_int (reply, "status", 0) == 202);
    CHECK (reply && streq (ah_msg_str (reply, "state"), "stopping"));
    ah_msg_destroy (&reply);
    CHECK (s_wait_state (id, "sleeping", 5000));
    CHECK (s_col_is (id, "boot_token_hash", ""));
    char *state = s_fake_path (id, "state");
    char line [64] = "";
    FILE *f = fopen (state, "r");
    if (f) {
        if (!fgets (line, sizeof line, f))
            line [0] = 0;
        fclose (f);
    }
    CHECK (strncmp (line, "exited 143", 10) == 0);
    free (state);
    reply = s_op ("SANDBOX_STOP", id);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 200 && streq (ah_msg_str (reply, "state"), "sleeping"));
    ah_msg_destroy (&reply);

    //  50 clients ask to start at once: one driver start, 49 "already".
    int starts = atomic_load (&s_drv.starts);
    atomic_store (&s_drv.start_delay_ms, 300);
    zsock_t *clients [50];
    for (int i = 0; i < 50; i++) {
        char name [16];
        snprintf (name, sizeof name, "api-%d", i);
        clients [i] = ah_bus_connect (name);
    }
    zclock_sleep (50);          //  let the bus learn the identities
    for (int i = 0; i < 50; i++) {
        ah_msg_t *m = ah_msg_new ("SANDBOX_START");
        ah_msg_set_str (m, "agent", id);
        ah_msg_set_int (m, "req", 1000 + i);
        ah_msg_send (&m, clients [i], "lifecycle");
    }
    int won = 0, already = 0, conflict = 0, other = 0;
    for (int i = 0; i < 50; i++) {
        zsock_set_rcvtimeo (clients [i], 5000);
        ah_msg_t *r = ah_msg_recv (clients [i], true, NULL);
        int status = r ? (int) ah_msg_int (r, "status", 0) : 0;
        if (status == 202) won++;
        else if (status == 200) already++;
        else if (status == 409) conflict++;
        else other++;
        ah_msg_destroy (&r);
        zsock_destroy (&clients [i]);
    }
    CHECK (won == 1);
    CHECK (already + conflict == 49);
    CHECK (other == 0);
    CHECK (s_wait_state (id, "running", 5000));
    CHECK (atomic_load (&s_drv.starts) == starts + 1);
    atomic_store (&s_drv.start_delay_ms, 0);
}

static void test_failure_and_retry (const char *id)
{
    ah_msg_t *reply = s_op ("SANDBOX_STOP", id);
    CHECK (s_status (&reply) == 202);
    CHECK (s_wait_state (id, "sleeping", 5000));
    s_drain_events ();
    char *fail = s_fake_path (id, "fail-start");
    s_write (fail, "the disk is on fire\n");
    reply = s_op ("SANDBOX_START", id);
    CHECK (s_status (&reply) == 202);
    CHECK (s_wait_state (id, "error", 5000));
    CHECK (s_col_is (id, "error", "the disk is on fire"));
    CHECK (s_col_is (id, "op", "start"));
    char error [256] = "";
    CHECK (s_saw_event (id, "error", error, sizeof error));
    CHECK (streq (error, "the disk is on fire"));
    //  Start retries from error once the cause is gone.
    unlink (fail);
    free (fail);
    reply = s_op ("SANDBOX_START", id);
    CHECK (s_status (&reply) == 202);
    CHECK (s_wait_state (id, "running", 5000));
    CHECK (s_col_is (id, "error", ""));
}

static void test_update_and_rebuild (const char *id)
{
    ah_msg_t *m = ah_msg_new ("AGENT_UPDATE");
    ah_msg_set_str (m, "agent", id);
    ah_msg_set_str (m, "image", "busybox:latest");
    ah_msg_set_double (m, "idle_minutes", 3);
    ah_msg_t *reply = s_call (m);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 200);
    CHECK (reply && ah_msg_bool (reply, "needs_rebuild", false));
    ah_msg_destroy (&reply);
    CHECK (s_col_is (id, "needs_rebuild", "1"));
    CHECK (s_count ("SELECT image LIKE 'agenthold/rt-debian:%' FROM sandboxes WHERE agent_id = :id", id) == 1);  //  not yet
    CHECK (s_count ("SELECT idle_minutes = 3 FROM agents WHERE id = :id", id) == 1);
    //  Refused update: nothing changes.
    m = ah_msg_new ("AGENT_UPDATE");
    ah_msg_set_str (m, "agent", id);
    ah_msg_set_int (m, "memory_mb", 1 << 30);
    CHECK (s_status ((reply = s_call (m), &reply)) == 422);
    CHECK (s_count ("SELECT memory_mb < 1073741824 FROM agents WHERE id = :id", id) == 1);

    //  Rebuild from running: stop, rebuild, start.
    int rebuilds = atomic_load (&s_drv.rebuilds);
    reply = s_op ("SANDBOX_REBUILD", id);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 202 && streq (ah_msg_str (reply, "state"), "rebuilding"));
    ah_msg_destroy (&reply);
    CHECK (s_wait_state (id, "running", 5000));
    CHECK (atomic_load (&s_drv.rebuilds) == rebuilds + 1);
    CHECK (s_col_is (id, "needs_rebuild", "0"));
    CHECK (s_col_is (id, "image", "busybox:latest"));
    char *image = s_fake_path (id, "image");
    FILE *f = fopen (image, "r");
    char line [64] = "";
    if (f) {
        if (!fgets (line, sizeof line, f))
            line [0] = 0;
        fclose (f);
    }
    CHECK (strncmp (line, "busybox:latest", 14) == 0);
    free (image);
    //  Rebuild is refused while rebuilding is not possible to see here;
    //  from a conflicting state (stopping) it is a 409 naming the state.
    reply = s_op ("SANDBOX_STOP", id);
    ah_msg_destroy (&reply);
    reply = s_op ("SANDBOX_REBUILD", id);
    int status = reply ? (int) ah_msg_int (reply, "status", 0) : 0;
    //  stop may have finished already (sleeping: rebuild allowed, 202).
    CHECK (status == 409 || status == 202);
    if (status == 409)
        CHECK (strstr (ah_msg_str (reply, "error"), "is stopping; rebuild needs") != NULL);
    ah_msg_destroy (&reply);
    CHECK (s_wait_state (id, status == 409 ? "sleeping" : "running", 5000));
}

static void test_hello (const char *id)
{
    //  A driver whose sandboxes say hello: starting until SANDBOX_HELLO.
    ah_msg_t *reply = s_op ("SANDBOX_STOP", id);
    ah_msg_destroy (&reply);
    CHECK (s_wait_state (id, "sleeping", 5000));
    s_drv.base.waits_for_hello = true;
    reply = s_op ("SANDBOX_START", id);
    CHECK (s_status (&reply) == 202);
    zclock_sleep (300);
    CHECK (s_col_is (id, "state", "starting"));
    zsock_t *tunnel = ah_bus_connect ("tunnel");
    ah_msg_t *hello = ah_msg_new ("SANDBOX_HELLO");
    ah_msg_set_str (hello, "agent_id", id);
    ah_msg_send (&hello, tunnel, "lifecycle");
    CHECK (s_wait_state (id, "running", 5000));
    zclock_sleep (50);
    CHECK (s_col_is (id, "connected", "1"));
    //  The connection lost (a server restart, a network loss): still
    //  running, not connected; sandboxd's redial says hello again.
    for (int i = 0; i < 3; i++) {
        ah_msg_t *m = ah_msg_new ("TUNNEL_LOST");
        ah_msg_set_str (m, "agent_id", id);
        ah_msg_set_str (m, "reason", "sandbox connection lost");
        ah_msg_set_bool (m, "fatal", false);
        ah_msg_send (&m, tunnel, "lifecycle");
        zclock_sleep (100);
        CHECK (s_col_is (id, "state", "running") && s_col_is (id, "connected", "0"));
        hello = ah_msg_new ("SANDBOX_HELLO");
        ah_msg_set_str (hello, "agent_id", id);
        ah_msg_send (&hello, tunnel, "lifecycle");
        zclock_sleep (100);
        CHECK (s_col_is (id, "state", "running") && s_col_is (id, "connected", "1"));
    }
    zsock_destroy (&tunnel);

    //  No hello within the (test's 1 s) timeout: error, and stopped again.
    reply = s_op ("SANDBOX_STOP", id);
    ah_msg_destroy (&reply);
    CHECK (s_wait_state (id, "sleeping", 5000));
    CHECK (s_col_is (id, "connected", "0"));        //  every move away from running clears it
    int stops = atomic_load (&s_drv.stops);
    reply = s_op ("SANDBOX_START", id);
    CHECK (s_status (&reply) == 202);
    CHECK (s_wait_state (id, "error", 5000));
    CHECK (s_col_is (id, "error", "sandboxd did not connect within 1 s"));
    int64_t until = zclock_mono () + 5000;
    while (atomic_load (&s_drv.stops) == stops && zclock_mono () < until)
        zclock_sleep (10);
    CHECK (atomic_load (&s_drv.stops) == stops + 1);
    s_drv.base.waits_for_hello = false;
    reply = s_op ("SANDBOX_START", id);
    CHECK (s_status (&reply) == 202);
    CHECK (s_wait_state (id, "running", 5000));
}

//  READER_OPEN sent (not waited for): its req.
static int64_t s_reader_open (const char *id)
{
    ah_msg_t *m = ah_msg_new ("READER_OPEN");
    ah_msg_set_str (m, "agent_id", id);
    int64_t req = s_req++;
    ah_msg_set_int (m, "req", req);
    ah_msg_send (&m, s_client, "lifecycle");
    return req;
}

//  The REPLY to req within ms: its status (-1: none).
static int s_reply_status (int64_t req, int ms, char *error, size_t size)
{
    int64_t until = zclock_mono () + ms;
    while (zclock_mono () < until) {
        zsock_set_rcvtimeo (s_client, (int) (until - zclock_mono ()) + 1);
        ah_msg_t *m = ah_msg_recv (s_client, true, NULL);
        if (m && streq (ah_msg_type (m), "REPLY") && ah_msg_int (m, "req", -1) == req) {
            int status = (int) ah_msg_int (m, "status", -1);
            if (error)
                snprintf (error, size, "%s", ah_msg_str (m, "error") ? ah_msg_str (m, "error") : "");
            ah_msg_destroy (&m);
            zsock_set_rcvtimeo (s_client, 5000);
            return status;
        }
        ah_msg_destroy (&m);
    }
    zsock_set_rcvtimeo (s_client, 5000);
    return -1;
}

//  The next message to the "tunnel" within ms: its type ("" none), its hash if any.
static void s_tunnel_next (zsock_t *tunnel, int ms, char *type, char *hash)
{
    zsock_set_rcvtimeo (tunnel, ms);
    ah_msg_t *m = ah_msg_recv (tunnel, true, NULL);
    snprintf (type, 32, "%s", m ? ah_msg_type (m) : "");
    if (hash)
        snprintf (hash, AH_TOKEN_HEX, "%s", m && ah_msg_str (m, "hash") ? ah_msg_str (m, "hash") : "");
    ah_msg_destroy (&m);
}

static void s_reader_hello (zsock_t *tunnel, const char *type, const char *id)
{
    ah_msg_t *m = ah_msg_new (type);
    ah_msg_set_str (m, "agent_id", id);
    ah_msg_set_str (m, "reason", "gone");
    ah_msg_send (&m, tunnel, "lifecycle");
}

//  READER_LOST from the tunnel: lifecycle revokes the reader.
static bool s_reader_lost (zsock_t *tunnel, const char *id)
{
    char type [32];
    s_reader_hello (tunnel, "READER_LOST", id);
    s_tunnel_next (tunnel, 3000, type, NULL);
    return streq (type, "READER_REVOKE");
}

//  *count reaches want within 5 s.
static bool s_wait_count (atomic_int *count, int want)
{
    int64_t until = zclock_mono () + 5000;
    while (atomic_load (count) != want && zclock_mono () < until)
        zclock_sleep (10);
    return atomic_load (count) == want;
}

static void test_reader (const char *id)
{
    //  A sleeping agent's reader (docs/kubernetes.md): only on a driver
    //  that has readers, only while it sleeps; the agent stays asleep.
    char error [512], type [32], hash [AH_TOKEN_HEX];
    int64_t req = s_reader_open (id);
    CHECK (s_reply_status (req, 5000, error, sizeof error) == 409);
    CHECK (strstr (error, "has no readers"));
    s_drv.base.reader_start = c_reader_start;
    s_drv.base.reader_stop = c_reader_stop;
    CHECK (s_col_is (id, "state", "running"));
    req = s_reader_open (id);
    CHECK (s_reply_status (req, 5000, error, sizeof error) == 409);
    CHECK (strstr (error, "is running: a reader serves a sleeping agent only"));
    ah_msg_t *reply = s_op ("SANDBOX_STOP", id);
    ah_msg_destroy (&reply);
    CHECK (s_wait_state (id, "sleeping", 5000));
    char *boot_hash = s_col (id, "boot_token_hash");
    s_config->k8s_reader_idle_s = 1;
    zsock_t *tunnel = ah_bus_connect ("tunnel");

    //  The first read makes one: its token's hash to the tunnel alone.
    req = s_reader_open (id);
    int64_t req2 = s_reader_open (id);
    s_tunnel_next (tunnel, 5000, type, hash);
    CHECK_STR (type, "READER_ALLOW");
    CHECK (s_wait_count (&s_drv.reader_starts, 1));
    int64_t until;
    char want [AH_TOKEN_HEX];
    ah_token_hash (s_drv.reader_token, want);
    CHECK_STR (hash, want);
    CHECK (s_col_is (id, "boot_token_hash", boot_hash));        //  never the sandbox's token
    CHECK (s_reply_status (req, 300, NULL, 0) == -1);           //  waits for the hello
    s_reader_hello (tunnel, "READER_HELLO", id);
    CHECK (s_reply_status (req, 5000, NULL, 0) == 200);
    CHECK (s_reply_status (req2, 5000, NULL, 0) == 200);
    req = s_reader_open (id);                                   //  there: at once, no new one
    CHECK (s_reply_status (req, 5000, NULL, 0) == 200);
    CHECK (atomic_load (&s_drv.reader_starts) == 1);
    CHECK (s_col_is (id, "state", "sleeping"));
    //  A download still streaming keeps it (READER_KEEP) past its idle time.
    for (int i = 0; i < 6; i++) {
        s_reader_hello (tunnel, "READER_KEEP", id);
        s_tunnel_next (tunnel, 400, type, NULL);
        CHECK_STR (type, "");
    }
    CHECK (atomic_load (&s_drv.reader_stops) == 0);
    //  Idle for reader_idle (1 s): revoked and removed.
    s_tunnel_next (tunnel, 3000, type, NULL);
    CHECK_STR (type, "READER_REVOKE");
    CHECK (s_wait_count (&s_drv.reader_stops, 1));
    CHECK (s_col_is (id, "state", "sleeping"));

    //  No hello within the hello timeout (1 s here): 504, removed.
    zclock_sleep (100);
    req = s_reader_open (id);
    s_tunnel_next (tunnel, 5000, type, NULL);
    CHECK_STR (type, "READER_ALLOW");
    CHECK (s_reply_status (req, 5000, error, sizeof error) == 504);
    CHECK (strstr (error, "did not connect within 1 s"));
    s_tunnel_next (tunnel, 3000, type, NULL);
    CHECK_STR (type, "READER_REVOKE");
    CHECK (s_wait_count (&s_drv.reader_stops, 2));

    //  A lost reader connection: removed too.  The driver's reader_start
    //  runs on a worker after READER_ALLOW, so its count is awaited before
    //  the next read counts on it.
    zclock_sleep (100);
    int starts = atomic_load (&s_drv.reader_starts);
    req = s_reader_open (id);
    s_tunnel_next (tunnel, 5000, type, NULL);
    CHECK (s_wait_count (&s_drv.reader_starts, starts + 1));
    s_reader_hello (tunnel, "READER_HELLO", id);
    CHECK (s_reply_status (req, 5000, NULL, 0) == 200);
    atomic_store (&s_drv.reader_stop_delay_ms, 500);
    CHECK (s_reader_lost (tunnel, id));
    //  A read while it is being removed waits for a new one.
    starts = atomic_load (&s_drv.reader_starts);
    req = s_reader_open (id);
    CHECK (s_reply_status (req, 200, NULL, 0) == -1);
    CHECK (s_wait_count (&s_drv.reader_stops, 3));
    s_tunnel_next (tunnel, 5000, type, hash);
    CHECK_STR (type, "READER_ALLOW");
    CHECK (s_wait_count (&s_drv.reader_starts, starts + 1));
    ah_token_hash (s_drv.reader_token, want);
    CHECK_STR (hash, want);                                      //  a new token
    s_reader_hello (tunnel, "READER_HELLO", id);
    CHECK (s_reply_status (req, 5000, NULL, 0) == 200);
    atomic_store (&s_drv.reader_stop_delay_ms, 0);
    CHECK (s_reader_lost (tunnel, id));
    CHECK (s_wait_count (&s_drv.reader_stops, 4));

    //  A wake while a read waits for its reader: the read is told (409),
    //  the token revoked, the agent runs (the driver's start removes the
    //  reader's Pod itself).
    zclock_sleep (100);
    req = s_reader_open (id);
    s_tunnel_next (tunnel, 5000, type, NULL);
    CHECK_STR (type, "READER_ALLOW");
    ah_msg_t *start = ah_msg_new ("SANDBOX_START");
    ah_msg_set_str (start, "agent", id);
    int64_t start_req = s_req++;
    ah_msg_set_int (start, "req", start_req);
    ah_msg_send (&start, s_client, "lifecycle");
    int start_status = -1, read_status = -1;
    until = zclock_mono () + 5000;
    while ((start_status < 0 || read_status < 0) && zclock_mono () < until) {
        ah_msg_t *m = ah_msg_recv (s_client, true, NULL);
        if (m && ah_msg_int (m, "req", -1) == start_req)
            start_status = (int) ah_msg_int (m, "status", -1);
        if (m && ah_msg_int (m, "req", -1) == req) {
            read_status = (int) ah_msg_int (m, "status", -1);
            snprintf (error, sizeof error, "%s", ah_msg_str (m, "error") ? ah_msg_str (m, "error") : "");
        }
        ah_msg_destroy (&m);
    }
    CHECK (start_status == 202);
    CHECK (read_status == 409);
    CHECK (strstr (error, "is starting now: its reader went"));
    s_tunnel_next (tunnel, 3000, type, NULL);
    CHECK_STR (type, "READER_REVOKE");
    CHECK (s_wait_state (id, "running", 5000));
    s_reader_hello (tunnel, "READER_HELLO", id);                 //  late: revoked again, no reply
    s_tunnel_next (tunnel, 3000, type, NULL);
    CHECK_STR (type, "READER_REVOKE");
    CHECK (s_col_is (id, "state", "running"));
    zsock_destroy (&tunnel);
    free (boot_hash);
    s_config->k8s_reader_idle_s = 60;
    s_drv.base.reader_start = NULL;
    s_drv.base.reader_stop = NULL;
}

//  SANDBOX_OBSERVED as the reconciler sends it (source "event").
//  at_ms: when the driver was asked (0: not said).
static void s_observe_at (zsock_t *rec, const char *id, bool exists, bool running, int exit_code,
                          int64_t at_ms)
{
    ah_msg_t *m = ah_msg_new ("SANDBOX_OBSERVED");
    ah_msg_set_str (m, "agent_id", id);
    ah_msg_set_bool (m, "exists", exists);
    ah_msg_set_bool (m, "running", running);
    ah_msg_set_int (m, "exit_code", exit_code);
    ah_msg_set_str (m, "source", "event");
    if (at_ms)
        ah_msg_set_int (m, "at_ms", at_ms);
    ah_msg_send (&m, rec, "lifecycle");
}

static void s_observe (zsock_t *rec, const char *id, bool exists, bool running, int exit_code)
{
    s_observe_at (rec, id, exists, running, exit_code, 0);
}

static void test_observed (const char *id)
{
    zsock_t *rec = ah_bus_connect ("reconciler");
    //  A look taken before the row's last change (the engine said
    //  "exited" while sandboxd's hello made it running) is stale: ignored.
    int64_t last_change = s_count ("SELECT updated_at FROM sandboxes WHERE agent_id = :id", id);
    s_observe_at (rec, id, true, false, 0, last_change - 1);
    zclock_sleep (200);
    CHECK (s_col_is (id, "state", "running"));
    //  Died on its own (a look after the change): error naming the exit code.
    s_observe_at (rec, id, true, false, 3, last_change);
    CHECK (s_wait_state (id, "error", 5000));
    CHECK (s_col_is (id, "error", "sandbox exited with code 3"));
    ah_msg_t *reply = s_op ("SANDBOX_START", id);
    CHECK (s_status (&reply) == 202);
    CHECK (s_wait_state (id, "running", 5000));
    //  Stopped by hand (137): asleep.
    s_observe (rec, id, true, false, 137);
    CHECK (s_wait_state (id, "sleeping", 5000));
    //  Removed behind our back: error; a start re-creates it.
    s_observe (rec, id, false, false, -1);
    CHECK (s_wait_state (id, "error", 5000));
    CHECK (s_col_is (id, "error", "sandbox container was removed outside agenthold"));
    int creates = atomic_load (&s_drv.creates);
    char *dir = s_fake_path (id, NULL);
    char *cmd = zsys_sprintf ("rm -rf '%s'", dir);
    CHECK (system (cmd) == 0);
    free (cmd);
    free (dir);
    reply = s_op ("SANDBOX_START", id);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 202 && streq (ah_msg_str (reply, "state"), "creating"));
    ah_msg_destroy (&reply);
    CHECK (s_wait_state (id, "running", 5000));
    CHECK (atomic_load (&s_drv.creates) == creates + 1);
    //  Started by hand while asleep: stopped again, stays sleeping.
    reply = s_op ("SANDBOX_STOP", id);
    ah_msg_destroy (&reply);
    CHECK (s_wait_state (id, "sleeping", 5000));
    int stops = atomic_load (&s_drv.stops);
    char *state = s_fake_path (id, "state");
    s_write (state, "running\n");
    s_observe (rec, id, true, true, -1);
    int64_t until = zclock_mono () + 5000;
    while (atomic_load (&s_drv.stops) == stops && zclock_mono () < until)
        zclock_sleep (10);
    CHECK (atomic_load (&s_drv.stops) == stops + 1);
    zclock_sleep (100);
    CHECK (s_col_is (id, "state", "sleeping"));
    ah_sandbox_status_t status;
    CHECK (s_drv.inner->inspect (s_drv.inner, id, &status, NULL) == 0 && !status.running);
    free (state);
    //  An event about a row in a transitional state is left to its operation.
    CHECK (ah_store_exec (s_store, "UPDATE sandboxes SET state = 'rebuilding', op = 'rebuild'", NULL) == 0);
    s_observe (rec, id, false, false, -1);
    zclock_sleep (200);
    CHECK (s_col_is (id, "state", "rebuilding"));
    CHECK (ah_store_exec (s_store, "UPDATE sandboxes SET state = 'sleeping', op = NULL", NULL) == 0);
    reply = s_op ("SANDBOX_START", id);
    CHECK (s_status (&reply) == 202);
    CHECK (s_wait_state (id, "running", 5000));
    //  Activity moves last_activity_at (in a batch, within a second).
    //  The sleeper (a subscriber) is told, so its due index asks again.
    zsock_t *sleeper = ah_bus_connect ("sleeper");
    int64_t before = s_count ("SELECT last_activity_at FROM sandboxes WHERE agent_id = :id", id);
    zclock_sleep (20);
    ah_msg_t *m = ah_msg_new ("AGENT_ACTIVITY");
    ah_msg_set_str (m, "agent_id", id);
    ah_msg_set_str (m, "what", "turn");
    ah_msg_send (&m, rec, "lifecycle");
    zclock_sleep (1500);
    CHECK (s_count ("SELECT last_activity_at FROM sandboxes WHERE agent_id = :id", id) > before);
    //  The sleeper is told, with the use written (it keeps it unread).
    bool changed = false;
    zsock_set_rcvtimeo (sleeper, 500);
    while (!changed && (m = ah_msg_recv (sleeper, true, NULL))) {
        changed = streq (ah_msg_type (m), "AGENT_CHANGED") && ah_msg_str (m, "agent_id")
               && streq (ah_msg_str (m, "agent_id"), id)
               && ah_msg_int (m, "last_activity_at", -1)
                  == s_count ("SELECT last_activity_at FROM sandboxes WHERE agent_id = :id", id);
        ah_msg_destroy (&m);
    }
    CHECK (changed);
    //  So is an update, with the idle_minutes it wrote.
    m = ah_msg_new ("AGENT_UPDATE");
    ah_msg_set_str (m, "agent", id);
    ah_msg_set_double (m, "idle_minutes", 7.5);
    ah_msg_t *reply2 = s_call (m);
    CHECK (reply2 && ah_msg_int (reply2, "status", 0) == 200);
    ah_msg_destroy (&reply2);
    changed = false;
    while (!changed && (m = ah_msg_recv (sleeper, true, NULL))) {
        changed = streq (ah_msg_type (m), "AGENT_CHANGED") && ah_msg_str (m, "agent_id")
               && streq (ah_msg_str (m, "agent_id"), id) && ah_msg_double (m, "idle_minutes", -1) == 7.5
               && ah_msg_int (m, "last_activity_at", -1) == -1;
        ah_msg_destroy (&m);
    }
    CHECK (changed);
    zsock_destroy (&sleeper);
    zsock_destroy (&rec);
}

//  HOST_STATE as the reconciler sends it with the remote driver.
static void s_host_state (zsock_t *rec, const char *state, const char *error)
{
    ah_msg_t *m = ah_msg_new ("HOST_STATE");
    ah_msg_set_str (m, "host", "b1");
    ah_msg_set_str (m, "endpoint", "ipc:///run/agenthold-hostd/hostd.sock");
    ah_msg_set_str (m, "state", state);
    ah_msg_set_str (m, "version", "0.1.0");
    ah_msg_set_int (m, "protocol", 1);
    if (error)
        ah_msg_set_str (m, "error", error);
    ah_msg_send (&m, rec, "lifecycle");
}

//  A host agent away: the sandbox at rest shows unreachable with why, its
//  state kept underneath; requests but destroy are refused; back, the
//  flag goes and its state is published again. Nothing is re-created.
static void test_unreachable (const char *id)
{
    //  Another name than test_observed's (a bus name is taken until its
    //  old connection is gone).
    zsock_t *rec = ah_bus_connect ("reconciler-host");
    s_drain_events ();
    int creates = atomic_load (&s_drv.creates), starts = atomic_load (&s_drv.starts);
    const char *why = "host b1 (ipc:///x) does not answer";
    s_host_state (rec, "unreachable", why);
    char error [256] = "";
    CHECK (s_saw_event (id, "unreachable", error, sizeof error) && streq (error, why));
    CHECK (s_col_is (id, "state", "running") && s_col_is (id, "unreachable", why));
    CHECK (s_count ("SELECT count(*) FROM hosts WHERE name = 'b1' AND state = 'unreachable'"
                    " AND :id IS NOT NULL", id) == 1);
    ah_msg_t *reply = s_op ("SANDBOX_START", id);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 409
           && strstr (ah_msg_str (reply, "error"), "is unreachable")
           && strstr (ah_msg_str (reply, "error"), why));
    ah_msg_destroy (&reply);
    reply = s_op ("SANDBOX_STOP", id);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 409);
    ah_msg_destroy (&reply);
    //  Hostile: no state, an unknown state; nothing moves.
    s_host_state (rec, "exploded", NULL);
    ah_msg_t *m = ah_msg_new ("HOST_STATE");
    ah_msg_send (&m, rec, "lifecycle");
    zclock_sleep (100);
    CHECK (s_col_is (id, "unreachable", why));
    //  Back: the flag goes, running is published again.
    s_host_state (rec, "up", NULL);
    CHECK (s_saw_event (id, "running", NULL, 0));
    CHECK (s_count ("SELECT count(*) FROM sandboxes WHERE agent_id = :id AND unreachable IS NULL", id) == 1);
    CHECK (s_count ("SELECT count(*) FROM hosts WHERE state = 'up' AND seen_at IS NOT NULL"
                    " AND :id IS NOT NULL", id) == 1);
    CHECK (atomic_load (&s_drv.creates) == creates && atomic_load (&s_drv.starts) == starts);
    reply = s_op ("SANDBOX_STOP", id);
    CHECK (s_status (&reply) == 202);
    CHECK (s_wait_state (id, "sleeping", 5000));
    reply = s_op ("SANDBOX_START", id);
    CHECK (s_status (&reply) == 202);
    CHECK (s_wait_state (id, "running", 5000));
    zsock_destroy (&rec);
}

static void test_destroy (const char *id)
{
    s_drain_events ();
    //  A failing destroy: error, and then only destroy may continue.
    char *fail = s_fake_path (id, "fail-destroy");
    s_write (fail, "busy volume");
    ah_msg_t *reply = s_op ("SANDBOX_DESTROY", id);
    CHECK (s_status (&reply) == 202);
    CHECK (s_wait_state (id, "error", 5000));
    CHECK (s_col_is (id, "op", "destroy"));
    CHECK (s_col_is (id, "error", "busy volume"));
    CHECK (s_count ("SELECT count(*) FROM tombstones WHERE agent_id = :id", id) == 1);
    reply = s_op ("SANDBOX_START", id);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 409);
    CHECK (reply && strstr (ah_msg_str (reply, "error"), "only destroy"));
    ah_msg_destroy (&reply);
    unlink (fail);
    free (fail);
    reply = s_op ("SANDBOX_DESTROY", id);
    CHECK (s_status (&reply) == 202);
    CHECK (s_wait_state (id, NULL, 5000));
    CHECK (s_saw_event (id, "destroyed", NULL, 0));
    CHECK (s_count ("SELECT count(*) FROM agents WHERE id = :id", id) == 0);
    CHECK (s_count ("SELECT count(*) FROM tombstones WHERE agent_id = :id", id) == 0);
    char *dir = s_fake_path (id, NULL);
    CHECK (!s_exists (dir));
    free (dir);
    CHECK (s_status ((reply = s_op ("SANDBOX_START", id), &reply)) == 404);
}

static void test_destroy_during_start (void)
{
    char *id = s_create ("beta");
    if (!id)
        return;
    CHECK (s_wait_state (id, "running", 5000));
    ah_msg_t *reply = s_op ("SANDBOX_STOP", id);
    ah_msg_destroy (&reply);
    CHECK (s_wait_state (id, "sleeping", 5000));
    int starts = atomic_load (&s_drv.starts), destroys = atomic_load (&s_drv.destroys);
    atomic_store (&s_drv.start_delay_ms, 400);
    reply = s_op ("SANDBOX_START", id);
    CHECK (s_status (&reply) == 202);
    reply = s_op ("SANDBOX_DESTROY", id);
    CHECK (s_status (&reply) == 202);
    CHECK (s_col_is (id, "state", "destroying"));
    CHECK (s_wait_state (id, NULL, 5000));
    CHECK (atomic_load (&s_drv.starts) == starts + 1);
    CHECK (atomic_load (&s_drv.destroys) == destroys + 1);
    char *dir = s_fake_path (id, NULL);
    CHECK (!s_exists (dir));
    free (dir);
    atomic_store (&s_drv.start_delay_ms, 0);
    free (id);
}

static void test_tenant_limits (void)
{
    CHECK (ah_store_exec (s_store, "INSERT INTO tenants (name, max_agents, max_cpus) VALUES ('small', 1, 3)",
                          NULL) == 0);
    ah_msg_t *m = ah_msg_new ("AGENT_CREATE");
    ah_msg_set_str (m, "name", "small-1");
    ah_msg_set_str (m, "tenant", "small");
    ah_msg_set_double (m, "cpus", 2);
    ah_msg_t *reply = s_call (m);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 201);
    char *id = reply && ah_msg_str (reply, "agent_id") ? strdup (ah_msg_str (reply, "agent_id")) : NULL;
    ah_msg_destroy (&reply);
    m = ah_msg_new ("AGENT_CREATE");
    ah_msg_set_str (m, "name", "small-2");
    ah_msg_set_str (m, "tenant", "small");
    reply = s_call (m);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 422);
    CHECK (reply && strstr (ah_msg_str (reply, "error"), "tenant 'small' already holds 1 of 1 sandboxes"));
    ah_msg_destroy (&reply);
    //  Its own update is counted once: 2 -> 3 cpus fits, 4 does not.
    m = ah_msg_new ("AGENT_UPDATE");
    ah_msg_set_str (m, "agent", "small-1");
    ah_msg_set_double (m, "cpus", 3);
    CHECK (s_status ((reply = s_call (m), &reply)) == 200);
    m = ah_msg_new ("AGENT_UPDATE");
    ah_msg_set_str (m, "agent", "small-1");
    ah_msg_set_double (m, "cpus", 4);
    reply = s_call (m);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 422);
    CHECK (reply && strstr (ah_msg_str (reply, "error"), "over its limit of 3"));
    ah_msg_destroy (&reply);
    if (id) {
        CHECK (s_wait_state (id, "running", 5000));
        CHECK (s_status ((reply = s_op ("SANDBOX_DESTROY", id), &reply)) == 202);
        CHECK (s_wait_state (id, NULL, 5000));
    }
    free (id);
}

static void test_restart_repairs (void)
{
    //  Agents left mid-operation by a server that went away: "stopping"
    //  whose sandbox still runs, "destroying", "creating" whose create
    //  never happened, "starting" whose sandbox is stopped.
    const char *names [4] = { "gamma", "delta", "epsilon", "zeta" };
    char *ids [4];
    for (int i = 0; i < 4; i++) {
        ids [i] = s_create (names [i]);
        CHECK (ids [i] && s_wait_state (ids [i], "running", 5000));
    }
    if (!ids [0] || !ids [1] || !ids [2] || !ids [3])
        return;
    zactor_destroy (&s_lifecycle);
    int creates = atomic_load (&s_drv.creates), starts = atomic_load (&s_drv.starts);
    char sql [1024];
    snprintf (sql, sizeof sql,
              "UPDATE sandboxes SET state = 'stopping', op = 'stop' WHERE agent_id = '%s';"
              "UPDATE sandboxes SET state = 'destroying', op = 'destroy' WHERE agent_id = '%s';"
              "INSERT INTO tombstones (agent_id, at) VALUES ('%s', 1);"
              "UPDATE sandboxes SET state = 'creating', op = 'create' WHERE agent_id = '%s';"
              "UPDATE sandboxes SET state = 'starting', op = 'start' WHERE agent_id = '%s';",
              ids [0], ids [1], ids [1], ids [2], ids [3]);
    CHECK (ah_store_exec (s_store, sql, NULL) == 0);
    char *err = NULL;
    CHECK (s_drv.inner->destroy (s_drv.inner, ids [2], &err) == 0);
    CHECK (s_drv.inner->stop (s_drv.inner, ids [3], &err) == 0);
    //  zeta cannot even be looked at: its start is run again regardless.
    char *blind = s_fake_path (ids [3], "fail-inspect");
    s_write (blind, "inspect is broken");
    s_start_lifecycle (1000);
    CHECK (s_wait_state (ids [0], "sleeping", 5000));
    CHECK (s_wait_state (ids [1], NULL, 5000));
    CHECK (s_count ("SELECT count(*) FROM tombstones WHERE agent_id = :id", ids [1]) == 0);
    CHECK (s_wait_state (ids [2], "running", 5000));
    CHECK (s_wait_state (ids [3], "running", 5000));
    unlink (blind);
    free (blind);
    CHECK (atomic_load (&s_drv.creates) == creates + 1);
    CHECK (atomic_load (&s_drv.starts) == starts + 2);
    for (int i = 0; i < 4; i++)
        free (ids [i]);
}

static int s_rm (const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    return remove (path);
}

//  The next message the "builder" socket gets: RUNTIME_ENSURE's runtime ("" none).
static void s_builder_expect (zsock_t *builder, const char *runtime)
{
    zsock_set_rcvtimeo (builder, 5000);
    ah_msg_t *m = ah_msg_recv (builder, true, NULL);
    CHECK (m && streq (ah_msg_type (m), "RUNTIME_ENSURE") && streq (ah_msg_str (m, "runtime"), runtime));
    ah_msg_destroy (&m);
}

static void s_builder_ready (zsock_t *builder, const char *runtime, const char *error)
{
    ah_msg_t *m = ah_msg_new ("RUNTIME_READY");
    ah_msg_set_str (m, "runtime", runtime);
    ah_msg_set_bool (m, "ok", error == NULL);
    ah_msg_set_str (m, error ? "error" : "briefing", error ? error : "# the briefing");
    ah_msg_send (&m, builder, "lifecycle");
}

//  The agent ends in error (within 5 s) from op, its error holding want.
static bool s_ended_in_error (const char *id, const char *op, const char *want)
{
    bool ok = s_wait_state (id, "error", 5000);
    char *error = s_col (id, "error");
    ok = ok && error && strstr (error, want);
    if (!ok)
        fprintf (stderr, "  %s: error '%s', want '%s'\n", id, error ? error : "", want);
    free (error);
    return ok && s_col_is (id, "op", op);
}

//  With the builder (a socket of the test's standing in for it): a create
//  on a runtime waits for its image (RUNTIME_ENSURE, no driver call), shows
//  the builder's progress on the row and in SANDBOX_STATE, goes on once
//  RUNTIME_READY says ok (and the start asks again), and ends in error
//  with the build's reason when it says not ok.
static void test_preparing (void)
{
    zactor_destroy (&s_lifecycle);
    zsock_t *builder = ah_bus_connect ("builder");
    zclock_sleep (50);
    s_start_lifecycle_with (1000, true);
    s_drain_events ();
    int creates = atomic_load (&s_drv.creates);
    ah_msg_t *m = ah_msg_new ("AGENT_CREATE");
    ah_msg_set_str (m, "name", "prep");
    ah_msg_set_str (m, "runtime", "busybox");
    ah_msg_t *reply = s_call (m);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 201 && streq (ah_msg_str (reply, "runtime"), "busybox"));
    char *id = reply && ah_msg_str (reply, "agent_id") ? strdup (ah_msg_str (reply, "agent_id")) : NULL;
    ah_msg_destroy (&reply);
    if (!id) {
        zsock_destroy (&builder);
        return;
    }
    s_builder_expect (builder, "busybox");
    zclock_sleep (100);
    CHECK (atomic_load (&s_drv.creates) == creates);        //  no driver call while preparing
    CHECK (s_col_is (id, "state", "creating"));
    CHECK (s_count ("SELECT runtime = 'busybox' AND memory_mb = 256 FROM agents WHERE id = :id", id) == 1);
    //  The builder's progress: on the row, and as SANDBOX_STATE {progress}.
    s_drain_events ();
    m = ah_msg_new ("RUNTIME_PROGRESS");
    ah_msg_set_str (m, "runtime", "busybox");
    ah_msg_set_str (m, "text", "Step 2/5 : RUN true");
    ah_msg_send (&m, builder, "lifecycle");
    bool seen = false;
    for (int i = 0; i < 50 && !seen; i++) {
        ah_msg_t *e = ah_msg_recv (s_watch, true, NULL);
        seen = e && streq (ah_msg_str (e, "agent_id"), id) && streq (ah_msg_str (e, "state"), "creating")
            && ah_msg_str (e, "progress") && strstr (ah_msg_str (e, "progress"), "Preparing the sandbox")
            && strstr (ah_msg_str (e, "progress"), "Step 2/5");
        ah_msg_destroy (&e);
    }
    CHECK (seen);
    CHECK (s_count ("SELECT progress LIKE 'Preparing the sandbox% Step 2/5 : RUN true' FROM sandboxes"
                    " WHERE agent_id = :id", id) == 1);
    //  Progress of another runtime is not this agent's.
    s_builder_ready (builder, "debian", NULL);
    zclock_sleep (100);
    CHECK (s_col_is (id, "state", "creating"));
    //  Ready: create, then the start asks again (answered at once), then running.
    s_builder_ready (builder, "busybox", NULL);
    s_builder_expect (builder, "busybox");
    s_builder_ready (builder, "busybox", NULL);
    CHECK (s_wait_state (id, "running", 5000));
    CHECK (atomic_load (&s_drv.creates) == creates + 1);
    CHECK (s_count ("SELECT progress IS NULL FROM sandboxes WHERE agent_id = :id", id) == 1);
    free (id);

    //  A build that failed: the agent's error says why; nothing was created.
    id = s_create ("doomed");
    if (id) {
        s_builder_expect (builder, "debian");
        s_builder_ready (builder, "debian", "the disk is full");
        CHECK (s_ended_in_error (id, "create", "preparing the sandbox: runtime debian: the disk is full"));
        CHECK (atomic_load (&s_drv.creates) == creates + 1);
    }
    free (id);
    zsock_destroy (&builder);
}

//  RUNTIME_ENSURE with gone=true for runtime, within 5 s.
static void s_builder_expect_gone (zsock_t *builder, const char *runtime)
{
    zsock_set_rcvtimeo (builder, 5000);
    ah_msg_t *m = ah_msg_recv (builder, true, NULL);
    CHECK (m && streq (ah_msg_type (m), "RUNTIME_ENSURE") && streq (ah_msg_str (m, "runtime"), runtime)
           && ah_msg_bool (m, "gone", false));
    ah_msg_destroy (&m);
}

//  op (202) on the busybox agent id: the builder says the image is
//  there, the driver call meets it gone, lifecycle asks again (gone).
static void s_meets_gone (zsock_t *builder, const char *op, const char *id)
{
    ah_msg_t *reply = s_op (op, id);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 202);
    ah_msg_destroy (&reply);
    s_builder_expect (builder, "busybox");
    s_builder_ready (builder, "busybox", NULL);
    s_builder_expect_gone (builder, "busybox");
}

//  A runtime's image removed behind the builder's back (docker rmi): a
//  create, a start and a rebuild that meet it missing ask the builder to
//  make it again (RUNTIME_ENSURE gone), wait for it in their transitional
//  state and go on; an image still gone after that ends in error with
//  the driver's reason (once per operation, never a loop).
static void test_image_gone (void)
{
    zactor_destroy (&s_lifecycle);
    zsock_t *builder = ah_bus_connect ("builder");
    s_drv.base.image_exists = c_image_exists;
    zclock_sleep (50);
    s_start_lifecycle_with (1000, true);
    int creates = atomic_load (&s_drv.creates);
    ah_msg_t *m = ah_msg_new ("AGENT_CREATE");
    ah_msg_set_str (m, "name", "rmied");
    ah_msg_set_str (m, "runtime", "busybox");
    ah_msg_t *reply = s_call (m);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 201);
    char *id = reply && ah_msg_str (reply, "agent_id") ? strdup (ah_msg_str (reply, "agent_id")) : NULL;
    ah_msg_destroy (&reply);
    if (!id) {
        zsock_destroy (&builder);
        return;
    }
    //  Create: the builder believed the image present; the driver says no.
    atomic_store (&s_drv.image_gone, 1);
    s_builder_expect (builder, "busybox");
    s_builder_ready (builder, "busybox", NULL);
    s_builder_expect_gone (builder, "busybox");
    CHECK (atomic_load (&s_drv.creates) == creates + 1);
    CHECK (s_col_is (id, "state", "creating"));
    atomic_store (&s_drv.image_gone, 0);            //  the builder made it again
    s_builder_ready (builder, "busybox", NULL);
    s_builder_expect (builder, "busybox");          //  the start asks as usual
    s_builder_ready (builder, "busybox", NULL);
    CHECK (s_wait_state (id, "running", 5000));
    CHECK (atomic_load (&s_drv.creates) == creates + 2);

    //  Start of a sleeping agent whose container went (container_ttl):
    //  the container is made again from the image, which is gone.
    reply = s_op ("SANDBOX_STOP", id);
    ah_msg_destroy (&reply);
    CHECK (s_wait_state (id, "sleeping", 5000));
    CHECK (s_sql ("UPDATE sandboxes SET container_removed_at = 1 WHERE agent_id = :id", id) == 0);
    atomic_store (&s_drv.image_gone, 1);
    int starts = atomic_load (&s_drv.starts);
    int rebuilds = atomic_load (&s_drv.rebuilds);
    s_meets_gone (builder, "SANDBOX_START", id);
    CHECK (s_col_is (id, "state", "starting"));
    atomic_store (&s_drv.image_gone, 0);
    s_builder_ready (builder, "busybox", NULL);
    CHECK (s_wait_state (id, "running", 5000));
    CHECK (atomic_load (&s_drv.rebuilds) == rebuilds + 2 && atomic_load (&s_drv.starts) == starts + 1);
    CHECK (s_count ("SELECT container_removed_at IS NULL FROM sandboxes WHERE agent_id = :id", id) == 1);
    //  A start of an existing container needs no image: one that fails
    //  while the image is gone is not taken for the image's fault.
    reply = s_op ("SANDBOX_STOP", id);
    ah_msg_destroy (&reply);
    CHECK (s_wait_state (id, "sleeping", 5000));
    atomic_store (&s_drv.image_gone, 1);
    atomic_store (&s_drv.start_fails, 1);
    reply = s_op ("SANDBOX_START", id);
    ah_msg_destroy (&reply);
    s_builder_expect (builder, "busybox");
    s_builder_ready (builder, "busybox", NULL);
    CHECK (s_ended_in_error (id, "start", "the engine is unwell"));
    atomic_store (&s_drv.start_fails, 0);
    atomic_store (&s_drv.image_gone, 0);

    //  Rebuild whose image stays gone after the builder's answer: asked
    //  once, then error with the driver's reason.
    atomic_store (&s_drv.image_gone, 1);
    rebuilds = atomic_load (&s_drv.rebuilds);
    s_meets_gone (builder, "SANDBOX_REBUILD", id);
    CHECK (s_col_is (id, "state", "rebuilding"));
    s_builder_ready (builder, "busybox", NULL);
    CHECK (s_ended_in_error (id, "rebuild", "image 'agenthold/busybox:2' not found"));
    CHECK (atomic_load (&s_drv.rebuilds) == rebuilds + 2);
    zsock_set_rcvtimeo (builder, 300);
    ah_msg_t *more = ah_msg_recv (builder, true, NULL);
    CHECK (more == NULL);                           //  no third ask
    ah_msg_destroy (&more);
    //  The driver said the image was not found, and it is back when
    //  asked after (the builder made it meanwhile): the driver's words
    //  are enough for a second try.
    atomic_store (&s_drv.image_gone, 0);
    atomic_store (&s_drv.gone_once, 1);
    s_meets_gone (builder, "SANDBOX_REBUILD", id);
    s_builder_ready (builder, "busybox", NULL);
    s_builder_expect (builder, "busybox");          //  the start after the rebuild
    s_builder_ready (builder, "busybox", NULL);
    CHECK (s_wait_state (id, "running", 5000));
    free (id);
    s_drv.base.image_exists = NULL;
    zsock_destroy (&builder);
}

int main (void)
{
    zsys_init ();
    zsys_handler_set (NULL);
    snprintf (s_dir, sizeof s_dir, "/tmp/ah-lifecycle-XXXXXX");
    if (!mkdtemp (s_dir)) {
        perror ("mkdtemp");
        return 1;
    }
    snprintf (s_db_path, sizeof s_db_path, "%s/agenthold.db", s_dir);
    s_config = ah_config_new_defaults ();
    free (s_config->data_dir);
    s_config->data_dir = strdup (s_dir);
    free (s_config->driver);
    s_config->driver = strdup ("fake");
    free (s_config->tunnel_listen);
    s_config->tunnel_listen = strdup ("127.0.0.1:18401");
    free (s_config->lua_dir);
    s_config->lua_dir = strdup (AH_SOURCE_DIR "/lua");

    char *err = NULL;
    s_store = ah_store_open (s_db_path, true, &err);
    CHECK (s_store != NULL);
    ah_driver_t *fake = ah_driver_new (s_config, &err);
    CHECK (fake != NULL && streq (fake->name, "fake"));
    if (!s_store || !fake) {
        fprintf (stderr, "setup: %s\n", err ? err : "?");
        return 1;
    }
    s_drv.inner = fake;
    s_drv.base = (ah_driver_t) { .name = "counting", .waits_for_hello = false,
        .create = c_create, .start = c_start, .stop = c_stop, .rebuild = c_rebuild,
        .destroy = c_destroy, .inspect = c_inspect, .list = c_list, .impl = &s_drv };

    ah_bus_args_t bus_args = { NULL };
    s_bus = ah_actor_new (&ah_bus_actor, &bus_args, NULL);
    s_client = ah_bus_connect ("api");
    s_watch = ah_bus_connect ("watch");
    zsock_set_rcvtimeo (s_client, 5000);
    s_start_lifecycle (1000);
    zclock_sleep (50);

    test_malformed ();
    test_idents ();
    char *id = test_create ();
    if (id) {
        test_stop_and_concurrent_start (id);
        test_failure_and_retry (id);
        test_update_and_rebuild (id);
        test_hello (id);
        test_reader (id);
        test_observed (id);
        test_unreachable (id);
        test_destroy (id);
    }
    free (id);
    test_destroy_during_start ();
    test_tenant_limits ();
    test_restart_repairs ();
    test_preparing ();
    test_image_gone ();

    zactor_destroy (&s_lifecycle);
    zsock_destroy (&s_client);
    zsock_destroy (&s_watch);
    zactor_destroy (&s_bus);
    ah_store_close (&s_store);
    fake->destroy_driver (&fake);
    ah_config_destroy (&s_config);
    nftw (s_dir, s_rm, 16, FTW_DEPTH | FTW_PHYS);
    return CHECK_DONE ();
}
