/*  tests/catalog/test_builder.c: the builder actor alone on a real bus,
    with the shipped catalog, the real briefing.lua and a driver that
    implements only the image hooks (in memory): the prewarm pass builds
    the base_image runtime from its Dockerfile (FROM the base, setup
    commands, the agent account, env vars last) and the image entry from
    its context and host files; RUNTIME_ENSURE is answered by
    RUNTIME_READY with the briefing; an image removed behind its back
    (RUNTIME_CHECK, RUNTIME_ENSURE gone) is "missing"/"building" at once
    and made again; a build that keeps failing is tried
    3 times at start and 2 on demand, then reported with its reason, in
    CATALOG_LIST and in RUNTIME_READY; CATALOG_LIST and BRIEFING answer;
    an unknown runtime is 404; a driver that names image ids has each
    runtime's told to lifecycle (RUNTIME_IMAGE) at first and whenever a
    check finds another; POLICY_RELOAD takes an edited
    briefing.lua and keeps the previous one when the edit is broken;
    without image hooks the images are "unknown"; a broken catalog stops
    the actor at start.                                                */
#include "actors/builder.h"
#include "common/bus.h"
#include "common/msg.h"
#include "config/config.h"
#include "store/store.h"
#include "check.h"
#include "actor_probe.h"

#include <msgpack.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static char s_dir [64];
static char s_db [128];

//  The stub driver: "debian:bookworm-slim" exists, anything else does not
//  until image_build made it. Called from the builder's worker thread;
//  the test reads the record after the pass is over (mutex anyway).
typedef struct {
    pthread_mutex_t lock;
    int   exists_calls;
    int   build_calls;
    bool  fail;                     //  every build fails
    bool  hold;                     //  builds wait while it is set (or until told to stop)
    char  built [8][128];
    int   nbuilt;
    char  context [512];
    char  file_name [64];
    char  file_path [128];
    char  dockerfile [8192];
    char  base [128];
    int   gen;                      //  image_id names "sha256:g<gen>:<image>"
} s_stub_t;

static int
s_image_exists (ah_driver_t *self, const char *image, bool *exists, char **err)
{
    s_stub_t *stub = self->impl;
    pthread_mutex_lock (&stub->lock);
    stub->exists_calls++;
    *exists = streq (image, "debian:bookworm-slim");
    for (int i = 0; i < stub->nbuilt; i++)
        *exists = *exists || streq (image, stub->built [i]);
    pthread_mutex_unlock (&stub->lock);
    return 0;
}

static int
s_image_build (ah_driver_t *self, const ah_image_build_t *build, volatile int *stop, char **err)
{
    s_stub_t *stub = self->impl;
    pthread_mutex_lock (&stub->lock);
    stub->build_calls++;
    while (stub->hold && !(stop && *stop)) {
        pthread_mutex_unlock (&stub->lock);
        usleep (10 * 1000);
        pthread_mutex_lock (&stub->lock);
    }
    if (build->on_progress)
        build->on_progress (build->progress_arg, "Step 1/7 : FROM something");
    if (stub->fail) {
        pthread_mutex_unlock (&stub->lock);
        *err = strdup ("the disk is full");
        return -1;
    }
    if (stub->nbuilt < 8)
        snprintf (stub->built [stub->nbuilt++], sizeof stub->built [0], "%s", build->image);
    if (build->dockerfile) {
        if (!stub->dockerfile [0]) {                    //  the first one's (debian's)
            snprintf (stub->dockerfile, sizeof stub->dockerfile, "%s", build->dockerfile);
            snprintf (stub->base, sizeof stub->base, "%s", build->base_image ? build->base_image : "");
        }
    }
    else
        snprintf (stub->context, sizeof stub->context, "%s", build->context_dir ? build->context_dir : "");
    if (build->n_files == 1) {
        snprintf (stub->file_name, sizeof stub->file_name, "%s", build->file_names [0]);
        snprintf (stub->file_path, sizeof stub->file_path, "%s", build->file_paths [0]);
    }
    pthread_mutex_unlock (&stub->lock);
    return 0;
}

//  The engine's id of an image present: it changes with stub->gen (the
//  image made again under the same reference).
static int
s_image_id (ah_driver_t *self, const char *image, char **id, char **err)
{
    s_stub_t *stub = self->impl;
    bool exists = false;
    s_image_exists (self, image, &exists, err);
    pthread_mutex_lock (&stub->lock);
    char text [200];
    snprintf (text, sizeof text, "sha256:g%d:%s", stub->gen, image);
    pthread_mutex_unlock (&stub->lock);
    *id = exists ? strdup (text) : NULL;
    return 0;
}

//  The RUNTIME_IMAGEs lifecycle gets within ms: how many, and the last
//  one's image_id and previous for runtime.
static int
s_image_ids (zsock_t *lifecycle, int ms, const char *runtime, char *id, char *previous, size_t size)
{
    int n = 0;
    zsock_set_rcvtimeo (lifecycle, ms);
    ah_msg_t *m;
    while ((m = ah_msg_recv (lifecycle, true, NULL))) {
        if (streq (ah_msg_type (m), "RUNTIME_IMAGE")) {
            n++;
            if (streq (ah_msg_str (m, "runtime"), runtime)) {
                snprintf (id, size, "%s", ah_msg_str (m, "image_id") ? ah_msg_str (m, "image_id") : "");
                snprintf (previous, size, "%s", ah_msg_str (m, "previous") ? ah_msg_str (m, "previous") : "");
            }
        }
        ah_msg_destroy (&m);
    }
    return n;
}

//  The image docker rmi'd behind the builder's back: the stub forgets it.
static void
s_forget (s_stub_t *stub, const char *prefix)
{
    pthread_mutex_lock (&stub->lock);
    for (int i = 0; i < stub->nbuilt; i++)
        if (!strncmp (stub->built [i], prefix, strlen (prefix)))
            snprintf (stub->built [i], sizeof stub->built [i], "(removed)");
    pthread_mutex_unlock (&stub->lock);
}

static void
s_hold (s_stub_t *stub, bool hold)
{
    pthread_mutex_lock (&stub->lock);
    stub->hold = hold;
    pthread_mutex_unlock (&stub->lock);
}

static void
s_check (zsock_t *from, const char *why)
{
    ah_msg_t *check = ah_msg_new ("RUNTIME_CHECK");
    ah_msg_set_str (check, "why", why);
    ah_msg_send (&check, from, "builder");
}

//  RUNTIME_ENSURE {runtime} from the "lifecycle" socket.
static void
s_ensure (zsock_t *lifecycle, const char *runtime)
{
    ah_msg_t *ensure = ah_msg_new ("RUNTIME_ENSURE");
    ah_msg_set_str (ensure, "runtime", runtime);
    ah_msg_send (&ensure, lifecycle, "builder");
}

static int
s_build_calls (s_stub_t *stub)
{
    pthread_mutex_lock (&stub->lock);
    int n = stub->build_calls;
    pthread_mutex_unlock (&stub->lock);
    return n;
}

static ah_msg_t *
s_ask (zsock_t *client, ah_msg_t *request)
{
    ah_msg_send (&request, client, "builder");
    zsock_set_rcvtimeo (client, 5000);
    char *err = NULL;
    ah_msg_t *reply = ah_msg_recv (client, true, &err);
    free (err);
    return reply;
}

//  CATALOG_LIST's image_state for runtime name ("" if absent), and its
//  image_error into s_last_error.
static char s_last_error [512];

static void
s_image_state (zsock_t *client, const char *name, char *state, size_t size)
{
    *state = 0;
    s_last_error [0] = 0;
    ah_msg_t *req = ah_msg_new ("CATALOG_LIST");
    ah_msg_set_int (req, "req", 1);
    ah_msg_t *reply = s_ask (client, req);
    size_t raw_size = 0;
    const void *raw = reply ? ah_msg_raw (reply, "runtimes", &raw_size) : NULL;
    if (!raw) {
        ah_msg_destroy (&reply);
        return;
    }
    msgpack_unpacked up;
    msgpack_unpacked_init (&up);
    if (msgpack_unpack_next (&up, raw, raw_size, NULL) == MSGPACK_UNPACK_SUCCESS
    &&  up.data.type == MSGPACK_OBJECT_ARRAY) {
        for (uint32_t i = 0; i < up.data.via.array.size; i++) {
            msgpack_object_map *m = &up.data.via.array.ptr [i].via.map;
            char rt_name [64] = "", rt_state [32] = "", rt_error [512] = "";
            for (uint32_t k = 0; k < m->size; k++) {
                msgpack_object *key = &m->ptr [k].key, *val = &m->ptr [k].val;
                if (val->type != MSGPACK_OBJECT_STR)
                    continue;
                if (key->via.str.size == 11 && !memcmp (key->via.str.ptr, "image_error", 11))
                    snprintf (rt_error, sizeof rt_error, "%.*s", (int) val->via.str.size, val->via.str.ptr);
                if (key->via.str.size == 5 && !memcmp (key->via.str.ptr, "alias", 5))
                    snprintf (rt_name, sizeof rt_name, "%.*s", (int) val->via.str.size, val->via.str.ptr);
                if (key->via.str.size == 11 && !memcmp (key->via.str.ptr, "image_state", 11))
                    snprintf (rt_state, sizeof rt_state, "%.*s", (int) val->via.str.size, val->via.str.ptr);
            }
            if (streq (rt_name, name)) {
                snprintf (state, size, "%s", rt_state);
                snprintf (s_last_error, sizeof s_last_error, "%s", rt_error);
            }
        }
    }
    msgpack_unpacked_destroy (&up);
    ah_msg_destroy (&reply);
}

static void
s_wait_state (zsock_t *client, const char *name, const char *want, char *state, size_t size)
{
    for (int i = 0; i < 1500; i++) {        //  30 s: a loaded CI machine
        s_image_state (client, name, state, size);
        if (streq (state, want))
            return;
        zclock_sleep (20);
    }
}

static char *
s_briefing (zsock_t *client, const char *runtime, int *status)
{
    ah_msg_t *req = ah_msg_new ("BRIEFING");
    ah_msg_set_int (req, "req", 2);
    ah_msg_set_str (req, "runtime", runtime);
    ah_msg_t *reply = s_ask (client, req);
    *status = reply ? (int) ah_msg_int (reply, "status", 0) : 0;
    char *text = reply && ah_msg_str (reply, "text") ? strdup (ah_msg_str (reply, "text"))
               : reply && ah_msg_str (reply, "error") ? strdup (ah_msg_str (reply, "error")) : NULL;
    ah_msg_destroy (&reply);
    return text;
}

static void
s_write (const char *path, const char *text)
{
    FILE *f = fopen (path, "w");
    CHECK (f != NULL);
    if (f) {
        fputs (text, f);
        fclose (f);
    }
}

static char *
s_read_file (const char *path)
{
    FILE *f = fopen (path, "r");
    if (!f)
        return NULL;
    char *text = calloc (1, 65536);
    size_t n = fread (text, 1, 65535, f);
    text [n] = 0;
    fclose (f);
    return text;
}

//  Write script as briefing.lua, POLICY_RELOAD, then ask for runtime's
//  briefing: want_status, and want in the text (or the error).
static void
s_reload_expect (zsock_t *client, const char *path, const char *script,
                 const char *runtime, int want_status, const char *want)
{
    s_write (path, script);
    ah_msg_t *reload = ah_msg_new ("POLICY_RELOAD");
    ah_msg_send (&reload, client, "builder");
    int status = 0;
    char *text = s_briefing (client, runtime, &status);
    CHECK (status == want_status);
    CHECK (text && strstr (text, want));
    free (text);
}

int
main (int argc, char **argv)
{
    if (argc < 3) {
        fprintf (stderr, "usage: test_builder CATALOG.json LUA_DIR\n");
        return 2;
    }
    snprintf (s_dir, sizeof s_dir, "/tmp/ah-test-builder-XXXXXX");
    if (!mkdtemp (s_dir))
        return 1;
    snprintf (s_db, sizeof s_db, "%s/agenthold.db", s_dir);
    char *err = NULL;
    ah_store_t *store = ah_store_open (s_db, true, &err);
    CHECK (store != NULL);
    ah_store_close (&store);

    //  A private copy of briefing.lua we can edit.
    char lua_dir [160], briefing_path [200], source [300];
    snprintf (lua_dir, sizeof lua_dir, "%s/lua", s_dir);
    mkdir (lua_dir, 0700);
    snprintf (briefing_path, sizeof briefing_path, "%s/briefing.lua", lua_dir);
    snprintf (source, sizeof source, "%s/briefing.lua", argv [2]);
    char *original = s_read_file (source);
    CHECK (original != NULL);
    if (!original)
        return CHECK_DONE ();
    s_write (briefing_path, original);

    ah_config_t *config = ah_config_new_defaults ();
    free (config->catalog_path);
    config->catalog_path = strdup (argv [1]);
    free (config->lua_dir);
    config->lua_dir = strdup (lua_dir);

    zsys_init ();
    ah_bus_args_t bus_args = { 0 };
    zactor_t *bus = ah_actor_new (&ah_bus_actor, &bus_args, NULL);
    zsock_t *client = ah_bus_connect ("api");

    s_stub_t stub = { .lock = PTHREAD_MUTEX_INITIALIZER };
    ah_driver_t driver = { .name = "stub", .impl = &stub,
                           .image_exists = s_image_exists, .image_build = s_image_build };
    ah_builder_args_t args = { .config = config, .db_path = s_db, .driver = &driver, .prewarm = true };
    zactor_t *builder = ah_actor_new (&ah_builder_actor, &args, NULL);
    CHECK (builder != NULL);

    //  The prewarm pass, in catalog order: debian is built from its
    //  Dockerfile on its base, busybox from its context, the workbench on
    //  the same base as debian.
    zsock_t *lifecycle = ah_bus_connect ("lifecycle");
    char state [32];
    s_wait_state (client, "workbench", "present", state, sizeof state);
    CHECK_STR (state, "present");
    s_image_state (client, "debian", state, sizeof state);
    CHECK_STR (state, "present");
    s_image_state (client, "busybox", state, sizeof state);
    CHECK_STR (state, "present");
    pthread_mutex_lock (&stub.lock);
    CHECK (stub.exists_calls == 3);
    CHECK (stub.build_calls == 3);
    CHECK (stub.nbuilt == 3 && !strncmp (stub.built [0], "agenthold/rt-debian:", 20));
    CHECK (stub.nbuilt == 3 && streq (stub.built [1], "agenthold/busybox:2"));
    CHECK (stub.nbuilt == 3 && !strncmp (stub.built [2], "agenthold/rt-workbench:", 23));
    CHECK (strstr (stub.context, "/catalog/images/busybox") != NULL);
    CHECK_STR (stub.file_name, "busybox");
    CHECK_STR (stub.file_path, "/bin/busybox");
    CHECK_STR (stub.base, "debian:bookworm-slim");
    const char *df = stub.dockerfile;
    CHECK (!strncmp (df, "# agenthold runtime debian", 26) && strstr (df, "\nFROM debian:bookworm-slim\n"));
    const char *setup = strstr (df, "RUN [\"/bin/sh\", \"-c\", \"apt-get update\"]");
    const char *account = strstr (df, "useradd -u 10001 -U -m -d /home/agent");
    const char *env = strstr (df, "ENV LANG=\"C.UTF-8\"");
    //  Setup first, the account after it, the env vars last (PIP_USER
    //  must not send the build's pip installs into root's home).
    CHECK (setup && account && env && setup < account && account < env);
    CHECK (strstr (df, "ENV PIP_USER=\"1\"") && strstr (df, "\nWORKDIR /home/agent\nLABEL agenthold.managed="));
    CHECK (!strstr (df, "pip install"));    //  the shipped debian names no packages
    pthread_mutex_unlock (&stub.lock);

    //  The Dockerfile of packages: exec form, each package an argument.
    const char *pip_catalog = "{\"version\":2,\"runtimes\":[{\"alias\":\"py\",\"description\":\"d\","
        "\"base_image\":\"debian:bookworm-slim\",\"packages\":[\"six==1.16.0\",\"tiny-pkg\"],"
        "\"env_vars\":{\"Q\":\"a \\\"quoted\\\" $value\"}}]}";
    ah_catalog_t *pc = ah_catalog_parse (pip_catalog, strlen (pip_catalog), "t", "/", &err);
    CHECK (pc != NULL);
    char *pdf = pc ? ah_builder_dockerfile (ah_catalog_default (pc)) : NULL;
    CHECK (pdf && strstr (pdf, "ARG PIP_INDEX_URL\nARG PIP_TRUSTED_HOST\n"));
    CHECK (pdf && strstr (pdf, "pip install --no-cache-dir --no-input \\\"$@\\\"\", \"pip\", \"six==1.16.0\", \"tiny-pkg\"]"));
    CHECK (pdf && strstr (pdf, "ENV Q=\"a \\\"quoted\\\" \\$value\""));
    if (pdf && !strstr (pdf, "tiny-pkg\"]"))
        fprintf (stderr, "%s\n", pdf);
    free (pdf);
    ah_catalog_destroy (&pc);
    CHECK (ah_builder_dockerfile (NULL) == NULL);

    //  RUNTIME_ENSURE of a present image: RUNTIME_READY at once, with the briefing.
    s_ensure (lifecycle, "debian");
    zsock_set_rcvtimeo (lifecycle, 5000);
    ah_msg_t *ready = ah_msg_recv (lifecycle, true, &err);
    CHECK (ready && streq (ah_msg_type (ready), "RUNTIME_READY") && ah_msg_bool (ready, "ok", false));
    CHECK (ready && ah_msg_str (ready, "briefing") && strstr (ah_msg_str (ready, "briefing"), "the debian runtime"));
    ah_msg_destroy (&ready);

    //  An image removed behind the builder's back (docker rmi): the
    //  engine's event becomes RUNTIME_CHECK; the images believed present
    //  are looked at again, the gone one is "missing" at once and made
    //  again (prewarm), the other one is left alone.
    zsock_t *reconciler = ah_bus_connect ("reconciler");
    zclock_sleep (20);
    s_check (reconciler, "image");                  //  nothing gone: nothing built
    zclock_sleep (200);
    CHECK (s_build_calls (&stub) == 3);
    s_image_state (client, "busybox", state, sizeof state);
    CHECK_STR (state, "present");
    s_hold (&stub, true);
    s_forget (&stub, "agenthold/busybox:");
    s_check (reconciler, "image");
    for (int i = 0; i < 250 && s_build_calls (&stub) < 4; i++)
        zclock_sleep (20);
    CHECK (s_build_calls (&stub) == 4);
    s_wait_state (client, "busybox", "building", state, sizeof state);
    CHECK_STR (state, "building");                  //  not "present" while it is made again
    s_image_state (client, "debian", state, sizeof state);
    CHECK_STR (state, "present");
    s_check (reconciler, "connected");              //  while it builds: no second build
    s_hold (&stub, false);
    s_wait_state (client, "busybox", "present", state, sizeof state);
    CHECK_STR (state, "present");
    zclock_sleep (200);
    CHECK (s_build_calls (&stub) == 4);
    //  A driver call that met the image missing (RUNTIME_ENSURE gone):
    //  whatever the builder believed, the image is made again, with
    //  progress, then RUNTIME_READY ok.
    s_forget (&stub, "agenthold/rt-debian:");
    ah_msg_t *gone = ah_msg_new ("RUNTIME_ENSURE");
    ah_msg_set_str (gone, "runtime", "debian");
    ah_msg_set_bool (gone, "gone", true);
    ah_msg_send (&gone, lifecycle, "builder");
    zsock_set_rcvtimeo (lifecycle, 10000);
    int progresses = 0;
    while ((ready = ah_msg_recv (lifecycle, true, &err)) && streq (ah_msg_type (ready), "RUNTIME_PROGRESS")) {
        progresses++;
        ah_msg_destroy (&ready);
    }
    CHECK (progresses >= 1);
    CHECK (ready && streq (ah_msg_type (ready), "RUNTIME_READY") && ah_msg_bool (ready, "ok", false)
           && streq (ah_msg_str (ready, "runtime"), "debian"));
    ah_msg_destroy (&ready);
    CHECK (s_build_calls (&stub) == 5);
    s_image_state (client, "debian", state, sizeof state);
    CHECK_STR (state, "present");
    zsock_destroy (&reconciler);

    //  Briefings through briefing.lua: the runtime, what setup installed,
    //  the network, the home rule and the entry's own sentences.
    int status = 0;
    char *text = s_briefing (client, "debian", &status);
    CHECK (status == 200);
    CHECK (text && strstr (text, "# Your sandbox: the debian runtime"));
    CHECK (text && strstr (text, "Installed: bash, coreutils, git, curl, python3, pip, venv, ripgrep (rg)"));
    CHECK (text && !strstr (text, "ca-certificates") && !strstr (text, "--no-install"));
    CHECK (text && strstr (text, "Set in your environment: LANG, PIP_BREAK_SYSTEM_PACKAGES, PIP_USER."));
    //  The default egress: out through the proxy alone, the runtime's list said.
    CHECK (text && strstr (text, "Network: out through agenthold's proxy only"));
    CHECK (text && strstr (text, "Allowed: deb.debian.org, security.debian.org, *.debian.org, pypi.org:443"));
    CHECK (text && !strstr (text, "outside world"));
    CHECK (text && strstr (text, "Memory: 2048 MB."));
    CHECK (text && strstr (text, "/home/agent") && strstr (text, "uid 10001"));
    if (text && !strstr (text, "Installed: bash"))
        fprintf (stderr, "%s\n", text);
    free (text);
    text = s_briefing (client, "busybox", &status);
    CHECK (status == 200 && text && strstr (text, "Network: none beyond the agenthold server"));
    CHECK (text && !strstr (text, "Installed:"));
    free (text);
    text = s_briefing (client, "nope", &status);
    CHECK (status == 404);
    CHECK (text && strstr (text, "nope"));
    free (text);

    //  An edited briefing.lua is taken on POLICY_RELOAD ...
    s_reload_expect (client, briefing_path,
                     "function briefing(rt) return { text = 'edited: ' .. rt.alias .. ' ' .. #rt.setup_commands } end\n",
                     "debian", 200, "edited: debian 3");
    //  ... a broken one leaves the previous version in force, and says why in policy_status.
    s_reload_expect (client, briefing_path, "function briefing(rt) return { text = \n",
                     "debian", 200, "edited: debian");
    sqlite3 *db;
    CHECK (sqlite3_open (s_db, &db) == SQLITE_OK);
    sqlite3_stmt *stmt;
    CHECK (sqlite3_prepare_v2 (db, "SELECT error FROM policy_status WHERE holder = 'builder'"
                               " AND script = 'briefing.lua'", -1, &stmt, NULL) == SQLITE_OK);
    CHECK (sqlite3_step (stmt) == SQLITE_ROW && sqlite3_column_text (stmt, 0) != NULL);
    sqlite3_finalize (stmt);
    sqlite3_close (db);
    //  A policy that fails at call time is a 500 naming the script.
    s_reload_expect (client, briefing_path, "function briefing(rt) return { text = rt.nothing.here } end\n",
                     "debian", 500, "briefing");

    //  Bad requests.
    ah_msg_t *req = ah_msg_new ("BRIEFING");
    ah_msg_set_int (req, "req", 9);
    ah_msg_t *reply = s_ask (client, req);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 400);
    ah_msg_destroy (&reply);
    req = ah_msg_new ("BUILD_EVERYTHING");
    ah_msg_set_int (req, "req", 10);
    reply = s_ask (client, req);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 400);
    ah_msg_destroy (&reply);
    actor_probe_refusals ("builder");
    text = s_briefing (client, "debian", &status);
    CHECK (status == 500);                  //  still serving (with the failing script)
    free (text);
    zactor_destroy (&builder);

    //  A build that keeps failing: 3 attempts at start, then "error" with
    //  the reason; a RUNTIME_ENSURE tries twice more and reports it.
    s_stub_t failing = { .lock = PTHREAD_MUTEX_INITIALIZER, .fail = true };
    ah_driver_t failing_driver = { .name = "stub", .impl = &failing,
                                   .image_exists = s_image_exists, .image_build = s_image_build };
    args.driver = &failing_driver;
    args.backoff_ms = 20;
    builder = ah_actor_new (&ah_builder_actor, &args, NULL);
    CHECK (builder != NULL);
    s_wait_state (client, "workbench", "error", state, sizeof state);
    CHECK_STR (state, "error");
    CHECK (strstr (s_last_error, "the disk is full") != NULL);
    s_image_state (client, "busybox", state, sizeof state);
    CHECK_STR (state, "error");
    s_image_state (client, "debian", state, sizeof state);
    CHECK_STR (state, "error");
    CHECK (s_build_calls (&failing) == 9);     //  3 runtimes, 3 attempts each
    s_ensure (lifecycle, "debian");
    zsock_set_rcvtimeo (lifecycle, 10000);
    ah_msg_t *progress = NULL;
    ready = NULL;
    while ((ready = ah_msg_recv (lifecycle, true, &err)) && streq (ah_msg_type (ready), "RUNTIME_PROGRESS")) {
        ah_msg_destroy (&progress);
        progress = ready;
    }
    CHECK (progress && streq (ah_msg_str (progress, "runtime"), "debian") && ah_msg_str (progress, "text"));
    ah_msg_destroy (&progress);
    CHECK (ready && streq (ah_msg_type (ready), "RUNTIME_READY") && !ah_msg_bool (ready, "ok", true));
    CHECK (ready && ah_msg_str (ready, "error") && strstr (ah_msg_str (ready, "error"), "the disk is full"));
    ah_msg_destroy (&ready);
    CHECK (s_build_calls (&failing) == 11);
    //  An unknown runtime is answered too.
    s_ensure (lifecycle, "nope");
    ready = ah_msg_recv (lifecycle, true, &err);
    CHECK (ready && !ah_msg_bool (ready, "ok", true) && strstr (ah_msg_str (ready, "error"), "no such runtime"));
    ah_msg_destroy (&ready);
    zactor_destroy (&builder);
    args.backoff_ms = 0;

    //  No image hooks (the fake driver): images are "unknown", briefings work.
    s_write (briefing_path, original);
    ah_driver_t bare = { .name = "bare" };
    args.driver = &bare;
    builder = ah_actor_new (&ah_builder_actor, &args, NULL);
    s_image_state (client, "busybox", state, sizeof state);
    CHECK_STR (state, "unknown");
    text = s_briefing (client, "busybox", &status);
    CHECK (status == 200 && text && strstr (text, "the busybox runtime"));
    free (text);
    zactor_destroy (&builder);

    //  A driver that names image ids: each runtime's at its first look
    //  (RUNTIME_IMAGE, no previous); a check that finds the same ids says
    //  nothing; one that finds the images made again under the same
    //  references (another id) says each new one with the one before.
    s_stub_t named = { .lock = PTHREAD_MUTEX_INITIALIZER, .gen = 1 };
    ah_driver_t named_driver = { .name = "stub", .impl = &named, .image_exists = s_image_exists,
                                 .image_build = s_image_build, .image_id = s_image_id };
    args.driver = &named_driver;
    builder = ah_actor_new (&ah_builder_actor, &args, NULL);
    CHECK (builder != NULL);
    s_wait_state (client, "workbench", "present", state, sizeof state);
    char id [200] = "", previous [200] = "";
    CHECK (s_image_ids (lifecycle, 1000, "debian", id, previous, sizeof id) == 3);
    CHECK (!strncmp (id, "sha256:g1:agenthold/rt-debian:", 30) && !*previous);
    reconciler = ah_bus_connect ("reconciler");
    zclock_sleep (20);
    s_check (reconciler, "image");
    CHECK (s_image_ids (lifecycle, 500, "debian", id, previous, sizeof id) == 0);
    pthread_mutex_lock (&named.lock);
    named.gen = 2;
    pthread_mutex_unlock (&named.lock);
    s_check (reconciler, "image");
    CHECK (s_image_ids (lifecycle, 1000, "debian", id, previous, sizeof id) == 3);
    CHECK (!strncmp (id, "sha256:g2:agenthold/rt-debian:", 30) && !strncmp (previous, "sha256:g1:", 10));
    CHECK (s_build_calls (&named) == 3);           //  nothing made again: only looked at
    zsock_destroy (&reconciler);
    zactor_destroy (&builder);

    //  A broken catalog: the start fails with the catalog's message.
    char bad_catalog [200];
    snprintf (bad_catalog, sizeof bad_catalog, "%s/bad.json", s_dir);
    s_write (bad_catalog, "{\"version\": 2, \"runtimes\": [{\"alias\": \"x\"}]}");
    free (config->catalog_path);
    config->catalog_path = strdup (bad_catalog);
    err = NULL;
    builder = ah_actor_new (&ah_builder_actor, &args, &err);
    CHECK (builder == NULL);
    CHECK (err && strstr (err, "bad.json") && strstr (err, "runtime 0 (\"x\")"));
    if (err && !strstr (err, "runtime 0"))
        fprintf (stderr, "the start failed with: %s\n", err);
    free (err);

    free (original);
    zsock_destroy (&lifecycle);
    zsock_destroy (&client);
    zactor_destroy (&bus);
    ah_config_destroy (&config);
    char cmd [128];
    snprintf (cmd, sizeof cmd, "rm -rf %s", s_dir);
    if (system (cmd) != 0)
        fprintf (stderr, "could not remove %s\n", s_dir);
    return CHECK_DONE ();
}
