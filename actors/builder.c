/*  actors/builder.c: the runtime catalog, its images and briefings (see
    builder.h for the messages and the threads).                       */
#include "actors/builder.h"
#include "catalog/catalog.h"
#include "common/log.h"
#include "common/msg.h"
#include "policy/policy.h"
#include "store/store.h"

#include <msgpack.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define AREA "builder"

//  One runtime's image, as the builder knows it.
typedef struct {
    char  state [16];               //  unknown | checking | present | missing | building | error
    char *error;                    //  why, when state is error
} s_image_t;

//  What the worker thread borrows. The catalog it points into outlives
//  the worker: the builder joins the worker before freeing either.
typedef struct {
    ah_driver_t        *driver;
    const ah_catalog_t *catalog;
    bool                prewarm;
    char                endpoint [64];  //  the builder's PULL
    volatile int        stop;       //  set by the builder's thread, read by the worker and the driver
} s_worker_args_t;

typedef struct {
    ah_actor_t       *actor;
    ah_store_t       *store;
    ah_catalog_t     *catalog;
    ah_policy_t      *policy;
    s_image_t        *images;       //  one per catalog entry
    zsock_t          *results;      //  the worker's reports (PULL)
    bool              working;      //  the worker thread runs (join it)
    pthread_t         worker;
    s_worker_args_t   worker_args;
} self_t;

//  ---------------------------------------------------------------------
//  The worker: image checks and builds, one at a time, off the actor's loop.

static void
s_report (zsock_t *push, const char *runtime, const char *state, const char *error)
{
    zstr_sendx (push, "IMAGE", runtime, state, error ? error : "", NULL);
}

static void *
s_worker (void *args)
{
    s_worker_args_t *w = args;
    zsock_t *push = zsock_new_push (w->endpoint);
    pthread_setname_np (pthread_self (), "ah-build-work");
    if (!push) {
        ah_error (AREA, "the image worker cannot reach the builder");
        return NULL;
    }
    zsock_set_linger (push, 1000);
    for (size_t i = 0; i < ah_catalog_size (w->catalog) && !w->stop; i++) {
        const ah_runtime_t *rt = ah_catalog_at (w->catalog, i);
        char *err = NULL;
        bool exists = false;
        if (w->driver->image_exists (w->driver, rt->image, &exists, &err) != 0) {
            s_report (push, rt->name, "error", err ? err : "cannot ask the driver about the image");
            free (err);
            continue;
        }
        if (exists) {
            s_report (push, rt->name, "present", NULL);
            continue;
        }
        if (!w->prewarm || !w->driver->image_build) {
            s_report (push, rt->name, "missing", NULL);
            continue;
        }
        s_report (push, rt->name, "building", NULL);
        const char **names = calloc (rt->host_file_count + 1, sizeof (char *));
        const char **paths = calloc (rt->host_file_count + 1, sizeof (char *));
        if (!names || !paths) {
            free (names);
            free (paths);
            s_report (push, rt->name, "error", "out of memory");
            continue;
        }
        for (size_t f = 0; f < rt->host_file_count; f++) {
            names [f] = rt->host_files [f].name;
            paths [f] = rt->host_files [f].host_path;
        }
        ah_image_build_t build = {
            .image = rt->image, .context_dir = rt->context_dir,
            .file_names = names, .file_paths = paths, .n_files = rt->host_file_count };
        int rc = w->driver->image_build (w->driver, &build, &w->stop, &err);
        free (names);
        free (paths);
        if (rc == 0)
            s_report (push, rt->name, "present", NULL);
        else
            s_report (push, rt->name, "error", err ? err : "the image could not be built");
        free (err);
    }
    zstr_sendx (push, "DONE", NULL);
    zsock_destroy (&push);
    return NULL;
}

//  ---------------------------------------------------------------------
//  The actor.

static void
s_pack_str (msgpack_packer *pk, const char *s)
{
    if (s)
        msgpack_pack_str_with_body (pk, s, strlen (s));
    else
        msgpack_pack_nil (pk);
}

static void
s_pack_tools (msgpack_packer *pk, const ah_runtime_t *rt)
{
    msgpack_pack_array (pk, (uint32_t) rt->tool_count);
    for (size_t t = 0; t < rt->tool_count; t++)
        s_pack_str (pk, rt->tools [t]);
}

//  From the worker: [IMAGE][runtime][state][error] or [DONE].
static void
s_on_worker (void *self_, zsock_t *results)
{
    self_t *self = self_;
    char *kind = NULL, *runtime = NULL, *state = NULL, *error = NULL;
    if (zstr_recvx (results, &kind, &runtime, &state, &error, NULL) < 1 || !kind)
        return;
    if (streq (kind, "DONE"))
        ah_debug (AREA, "image pass done");
    else
    if (streq (kind, "IMAGE") && runtime && state) {
        for (size_t i = 0; i < ah_catalog_size (self->catalog); i++) {
            const ah_runtime_t *rt = ah_catalog_at (self->catalog, i);
            if (!streq (rt->name, runtime))
                continue;
            s_image_t *img = &self->images [i];
            snprintf (img->state, sizeof img->state, "%s", state);
            free (img->error);
            img->error = error && *error ? strdup (error) : NULL;
            if (streq (state, "error"))
                ah_warn (AREA, "runtime %s: image %s: %s", rt->name, rt->image, img->error);
            else
            if (streq (state, "missing"))
                ah_warn (AREA, "runtime %s: image %s is not present (sandboxes on it cannot be created until it is)",
                         rt->name, rt->image);
            else
                ah_info (AREA, "runtime %s: image %s %s", rt->name, rt->image, state);
        }
    }
    zstr_free (&kind);
    zstr_free (&runtime);
    zstr_free (&state);
    zstr_free (&error);
}

static void
s_on_catalog_list (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    msgpack_sbuffer buf;
    msgpack_sbuffer_init (&buf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &buf, msgpack_sbuffer_write);
    size_t n = ah_catalog_size (self->catalog);
    msgpack_pack_array (&pk, (uint32_t) n);
    for (size_t i = 0; i < n; i++) {
        const ah_runtime_t *rt = ah_catalog_at (self->catalog, i);
        msgpack_pack_map (&pk, 7);
        s_pack_str (&pk, "name");
        s_pack_str (&pk, rt->name);
        s_pack_str (&pk, "image");
        s_pack_str (&pk, rt->image);
        s_pack_str (&pk, "description");
        s_pack_str (&pk, rt->description);
        s_pack_str (&pk, "tools");
        s_pack_tools (&pk, rt);
        s_pack_str (&pk, "built_locally");
        rt->context_dir ? msgpack_pack_true (&pk) : msgpack_pack_false (&pk);
        s_pack_str (&pk, "image_state");
        s_pack_str (&pk, self->images [i].state);
        s_pack_str (&pk, "image_error");
        s_pack_str (&pk, self->images [i].error);
    }
    ah_msg_t *reply = ah_msg_reply_ok (msg);
    ah_msg_set_int (reply, "status", 200);
    if (ah_msg_set_raw (reply, "runtimes", buf.data, buf.size) != 0) {
        ah_msg_destroy (&reply);
        reply = ah_msg_reply_error (msg, 500, "the catalog could not be encoded");
    }
    msgpack_sbuffer_destroy (&buf);
    ah_actor_reply (self->actor, msg, reply);
}

static void
s_on_briefing (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *name = ah_msg_str (msg, "runtime");
    ah_msg_t *reply = NULL;
    const ah_runtime_t *rt = name ? ah_catalog_find (self->catalog, name) : NULL;
    if (!name)
        reply = ah_msg_reply_error (msg, 400, "BRIEFING: \"runtime\" must be a string");
    else
    if (!rt)
        reply = ah_msg_reply_error (msg, 404, "no runtime named '%.64s' in the catalog", name);
    else {
        //  The argument briefing.lua gets: { name, image, description, tools = {...} }.
        ah_msg_t *arg = ah_msg_new ("RUNTIME");
        ah_msg_set_str (arg, "name", rt->name);
        ah_msg_set_str (arg, "image", rt->image);
        ah_msg_set_str (arg, "description", rt->description);
        msgpack_sbuffer buf;
        msgpack_sbuffer_init (&buf);
        msgpack_packer pk;
        msgpack_packer_init (&pk, &buf, msgpack_sbuffer_write);
        s_pack_tools (&pk, rt);
        ah_msg_set_raw (arg, "tools", buf.data, buf.size);
        msgpack_sbuffer_destroy (&buf);
        ah_msg_t *result = NULL;
        char *err = NULL;
        if (ah_policy_call (self->policy, "briefing", arg, NULL, &result, &err) != 0)
            reply = ah_msg_reply_error (msg, 500, "%s", err ? err : "briefing.lua failed");
        else
        if (!ah_msg_str (result, "text") || !*ah_msg_str (result, "text"))
            reply = ah_msg_reply_error (msg, 500, "briefing.lua: briefing() returned no \"text\"");
        else {
            reply = ah_msg_reply_ok (msg);
            ah_msg_set_int (reply, "status", 200);
            ah_msg_set_str (reply, "runtime", rt->name);
            ah_msg_set_str (reply, "text", ah_msg_str (result, "text"));
        }
        if (err)
            ah_warn (AREA, "briefing for %s: %s", rt->name, err);
        free (err);
        ah_msg_destroy (&result);
        ah_msg_destroy (&arg);
    }
    ah_actor_reply (self->actor, msg, reply);
}

static void
s_on_policy_reload (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    int rc = ah_policy_reload (self->policy, true);
    if (rc < 0)
        ah_warn (AREA, "briefing.lua not reloaded, the previous version stays: %s",
                 ah_policy_error (self->policy));
    else
        ah_info (AREA, "briefing.lua reloaded");
}

static void
s_destroy (void *self_)
{
    self_t *self = self_;
    if (self->working) {
        //  A build in progress polls the flag and gives up; then join.
        __atomic_store_n (&self->worker_args.stop, 1, __ATOMIC_SEQ_CST);
        pthread_join (self->worker, NULL);
    }
    zsock_destroy (&self->results);
    for (size_t i = 0; self->images && i < ah_catalog_size (self->catalog); i++)
        free (self->images [i].error);
    free (self->images);
    ah_policy_destroy (&self->policy);
    ah_catalog_destroy (&self->catalog);
    ah_store_close (&self->store);
    free (self);
}

static void *
s_init (ah_actor_t *actor, void *args)
{
    const ah_builder_args_t *a = args;
    const ah_config_t *config = a ? a->config : NULL;
    if (!config || !config->catalog_path || !config->lua_dir || !a->db_path) {
        ah_actor_fail (actor, "no configuration (catalog.path, policy.lua_dir) or database given");
        return NULL;
    }
    self_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->actor = actor;
    char *err = NULL;
    if (!(self->catalog = ah_catalog_load (config->catalog_path, &err)))
        ah_actor_fail (actor, "the runtime catalog is invalid: %s", err ? err : "?");
    else
    if (!(self->store = ah_store_open (a->db_path, false, &err)))
        ah_actor_fail (actor, "cannot open the database: %s", err ? err : "?");
    else
    if (!(self->policy = ah_policy_new (config->lua_dir, "briefing.lua", AREA, self->store, &err)))
        ah_actor_fail (actor, "cannot load briefing.lua: %s", err ? err : "?");
    free (err);
    size_t n = self->policy ? ah_catalog_size (self->catalog) : 0;
    if (!self->policy || !(self->images = calloc (n, sizeof (s_image_t)))) {
        s_destroy (self);
        return NULL;
    }
    bool hooks = a->driver && a->driver->image_exists;
    for (size_t i = 0; i < n; i++)
        snprintf (self->images [i].state, sizeof self->images [i].state, hooks ? "checking" : "unknown");
    if (hooks) {
        s_worker_args_t *w = &self->worker_args;
        *w = (s_worker_args_t) { .driver = a->driver, .catalog = self->catalog, .prewarm = a->prewarm };
        snprintf (w->endpoint, sizeof w->endpoint, "inproc://agenthold-builder-%p", (void *) self);
        self->results = zsock_new_pull (w->endpoint);
        self->working = self->results && ah_actor_reader (actor, self->results, s_on_worker) == 0
                     && pthread_create (&self->worker, NULL, s_worker, w) == 0;
        if (!self->working) {
            ah_actor_fail (actor, "cannot start the image worker");
            s_destroy (self);
            return NULL;
        }
    }
    else
        ah_info (AREA, "the %s driver has no image hooks: runtime images are not checked",
                 a->driver ? a->driver->name : "(none)");
    ah_info (AREA, "%zu runtimes in %s", n, config->catalog_path);
    return self;
}

static const ah_actor_handler_t s_handlers [] = {
    { "CATALOG_LIST", s_on_catalog_list },
    { "BRIEFING", s_on_briefing },
    { "POLICY_RELOAD", s_on_policy_reload },
    { NULL, NULL }
};

const ah_actor_def_t ah_builder_actor = {
    .name = AREA, .on_bus = true, .init = s_init, .destroy = s_destroy, .handlers = s_handlers,
};
