/*  actors/builder.c: the runtime catalog, its images and briefings (see
    builder.h for the messages and the threads).                       */
#include "actors/builder.h"
#include "catalog/catalog.h"
#include "common/bus.h"
#include "common/log.h"
#include "common/msg.h"
#include "policy/policy.h"
#include "store/store.h"

#include <msgpack.h>
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
    volatile int        stop;       //  set by the builder's thread, read by the worker and the driver
} s_worker_args_t;

typedef struct {
    zsock_t          *pipe;
    zsock_t          *bus;
    ah_store_t       *store;
    ah_catalog_t     *catalog;
    ah_policy_t      *policy;
    s_image_t        *images;       //  one per catalog entry
    zactor_t         *worker;       //  NULL when there is no image work
    s_worker_args_t   worker_args;
} self_t;

//  ---------------------------------------------------------------------
//  The worker: image checks and builds, one at a time, off the actor's loop.

static void
s_report (zsock_t *pipe, const char *runtime, const char *state, const char *error)
{
    zstr_sendx (pipe, "IMAGE", runtime, state, error ? error : "", NULL);
}

static void
s_worker (zsock_t *pipe, void *args)
{
    s_worker_args_t *w = args;
    zsock_signal (pipe, 0);
    for (size_t i = 0; i < ah_catalog_size (w->catalog) && !w->stop; i++) {
        const ah_runtime_t *rt = ah_catalog_at (w->catalog, i);
        char *err = NULL;
        bool exists = false;
        if (w->driver->image_exists (w->driver, rt->image, &exists, &err) != 0) {
            s_report (pipe, rt->name, "error", err ? err : "cannot ask the driver about the image");
            free (err);
            continue;
        }
        if (exists) {
            s_report (pipe, rt->name, "present", NULL);
            continue;
        }
        if (!w->prewarm || !w->driver->image_build) {
            s_report (pipe, rt->name, "missing", NULL);
            continue;
        }
        s_report (pipe, rt->name, "building", NULL);
        const char **names = calloc (rt->host_file_count + 1, sizeof (char *));
        const char **paths = calloc (rt->host_file_count + 1, sizeof (char *));
        if (!names || !paths) {
            free (names);
            free (paths);
            s_report (pipe, rt->name, "error", "out of memory");
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
            s_report (pipe, rt->name, "present", NULL);
        else
            s_report (pipe, rt->name, "error", err ? err : "the image could not be built");
        free (err);
    }
    zstr_sendx (pipe, "DONE", NULL);
    //  Wait for $TERM (zactor_destroy) so the builder's pipe stays valid.
    while (true) {
        char *cmd = zstr_recv (pipe);
        bool term = !cmd || streq (cmd, "$TERM");
        zstr_free (&cmd);
        if (term)
            break;
    }
}

//  ---------------------------------------------------------------------
//  The actor.

static void
s_send (self_t *self, ah_msg_t **msg_p, const char *to)
{
    if (ah_msg_send (msg_p, self->bus, to) != 0)
        ah_warn (AREA, "could not send to '%s'", to);
}

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

//  On the worker's pipe: [IMAGE][runtime][state][error] or [DONE].
static void
s_on_worker (self_t *self)
{
    char *kind = NULL, *runtime = NULL, *state = NULL, *error = NULL;
    if (zstr_recvx (self->worker, &kind, &runtime, &state, &error, NULL) < 1 || !kind)
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
s_on_catalog_list (self_t *self, ah_msg_t *msg)
{
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
    s_send (self, &reply, ah_msg_peer (msg));
}

static void
s_on_briefing (self_t *self, ah_msg_t *msg)
{
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
    s_send (self, &reply, ah_msg_peer (msg));
}

static void
s_on_bus (self_t *self)
{
    char *err = NULL;
    ah_msg_t *msg = ah_msg_recv (self->bus, true, &err);
    if (!msg) {
        ah_warn (AREA, "malformed message: %s", err ? err : "?");
        free (err);
        return;
    }
    const char *type = ah_msg_type (msg);
    if (streq (type, "CATALOG_LIST"))
        s_on_catalog_list (self, msg);
    else
    if (streq (type, "BRIEFING"))
        s_on_briefing (self, msg);
    else
    if (streq (type, "POLICY_RELOAD")) {
        int rc = ah_policy_reload (self->policy, true);
        if (rc < 0)
            ah_warn (AREA, "briefing.lua not reloaded, the previous version stays: %s",
                     ah_policy_error (self->policy));
        else
            ah_info (AREA, "briefing.lua reloaded");
    }
    else
    if (streq (type, "REPLY"))
        ;                           //  we ask nobody anything
    else {
        ah_warn (AREA, "unknown message %s from '%s'", type, ah_msg_peer (msg));
        if (ah_msg_has (msg, "req")) {
            ah_msg_t *reply = ah_msg_reply_error (msg, 400, "unknown message type %s for the builder", type);
            s_send (self, &reply, ah_msg_peer (msg));
        }
    }
    ah_msg_destroy (&msg);
}

static void
s_destroy (self_t *self)
{
    if (self->worker) {
        //  A build in progress polls the flag and gives up; then join.
        __atomic_store_n (&self->worker_args.stop, 1, __ATOMIC_SEQ_CST);
        zactor_destroy (&self->worker);
    }
    for (size_t i = 0; self->images && i < ah_catalog_size (self->catalog); i++)
        free (self->images [i].error);
    free (self->images);
    ah_policy_destroy (&self->policy);
    ah_catalog_destroy (&self->catalog);
    zsock_destroy (&self->bus);
    ah_store_close (&self->store);
}

static int
s_init (self_t *self, const ah_builder_args_t *a)
{
    char *err = NULL;
    const ah_config_t *config = a ? a->config : NULL;
    if (!config || !config->catalog_path || !config->lua_dir || !a->db_path) {
        ah_error (AREA, "no configuration (catalog.path, policy.lua_dir) or database given");
        return -1;
    }
    self->catalog = ah_catalog_load (config->catalog_path, &err);
    if (!self->catalog) {
        ah_error (AREA, "the runtime catalog is invalid: %s", err ? err : "?");
        free (err);
        return -1;
    }
    self->store = ah_store_open (a->db_path, false, &err);
    if (!self->store) {
        ah_error (AREA, "cannot open the database: %s", err ? err : "?");
        free (err);
        return -1;
    }
    self->policy = ah_policy_new (config->lua_dir, "briefing.lua", "builder", self->store, &err);
    if (!self->policy) {
        ah_error (AREA, "cannot load briefing.lua: %s", err ? err : "?");
        free (err);
        return -1;
    }
    size_t n = ah_catalog_size (self->catalog);
    self->images = calloc (n, sizeof (s_image_t));
    if (!self->images)
        return -1;
    bool hooks = a->driver && a->driver->image_exists;
    for (size_t i = 0; i < n; i++)
        snprintf (self->images [i].state, sizeof self->images [i].state, hooks ? "checking" : "unknown");
    self->bus = ah_bus_connect ("builder");
    if (!self->bus) {
        ah_error (AREA, "cannot connect to the bus");
        return -1;
    }
    if (hooks) {
        self->worker_args = (s_worker_args_t) {
            .driver = a->driver, .catalog = self->catalog, .prewarm = a->prewarm };
        self->worker = zactor_new (s_worker, &self->worker_args);
        if (!self->worker) {
            ah_error (AREA, "cannot start the image worker");
            return -1;
        }
    }
    else
        ah_info (AREA, "the %s driver has no image hooks: runtime images are not checked",
                 a->driver ? a->driver->name : "(none)");
    ah_info (AREA, "%zu runtimes in %s", n, config->catalog_path);
    return 0;
}

void
ah_builder_actor (zsock_t *pipe, void *args)
{
    self_t self = { .pipe = pipe };
    if (s_init (&self, args) != 0) {
        s_destroy (&self);
        zsock_signal (pipe, 1);
        return;
    }
    zsock_signal (pipe, 0);
    zpoller_t *poller = zpoller_new (pipe, self.bus, NULL);
    if (self.worker)
        zpoller_add (poller, self.worker);
    while (true) {
        void *which = zpoller_wait (poller, -1);
        if (which == pipe) {
            char *cmd = zstr_recv (pipe);
            bool term = !cmd || streq (cmd, "$TERM");
            if (!term)
                ah_warn (AREA, "unknown pipe command '%s'", cmd);
            zstr_free (&cmd);
            if (term)
                break;
        }
        else
        if (which == self.bus)
            s_on_bus (&self);
        else
        if (self.worker && which == self.worker)
            s_on_worker (&self);
        else
        if (zpoller_terminated (poller))
            break;
    }
    zpoller_destroy (&poller);
    s_destroy (&self);
}
