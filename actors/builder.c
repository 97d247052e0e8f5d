/*  actors/builder.c: the runtime catalog, its images and briefings (see
    builder.h for the messages and the threads).                       */
#include "actors/builder.h"
#include "catalog/catalog.h"
#include "common/log.h"
#include "common/msg.h"
#include "common/str.h"
#include "policy/policy.h"
#include "proto/buf.h"
#include "store/store.h"

#include <jansson.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define AREA "builder"
#define PREWARM_ATTEMPTS    3
#define DEMAND_ATTEMPTS     2
#define PROGRESS_EVERY_MS   500         //  at most this often to lifecycle, per runtime

//  One runtime's image, as the builder knows it.
typedef struct {
    char  state [16];               //  unknown | checking | present | missing | building | error
    char *error;                    //  the last build's error (kept after a later success? no: cleared)
    char  progress [256];           //  the last progress line while building
    int   queued;                   //  > 0: a job waits, with that many attempts; -1: a check only
    bool  waited_for;               //  someone sent RUNTIME_ENSURE: tell them the outcome
    int64_t progress_sent_ms;
    char  id [80];                  //  the engine's id of the image, as last told to lifecycle ("": none yet)
} s_image_t;

//  One job of the worker: a runtime's image checked, and built or pulled
//  when missing, with attempts and backoff. Borrowed pointers outlive the
//  worker: the builder joins it before freeing the catalog.
typedef struct {
    ah_driver_t        *driver;
    const ah_runtime_t *rt;
    const ah_config_t  *config;
    int                 attempts;   //  0: check only
    int                 backoff_ms; //  first pause between attempts (doubles)
    char                endpoint [64];  //  the builder's PULL
    volatile int        stop;       //  set by the builder's thread, read by the worker and the driver
    zsock_t            *push;       //  the worker's own, made and closed in the worker
} s_job_t;

//  A look at the images believed present (RUNTIME_CHECK), in a thread of
//  its own so that it never waits behind a build: image_exists for each,
//  [GONE][alias] for those the driver no longer has, then
//  [CHECKED][""]. The runtimes are the builder's catalog's (borrowed:
//  the builder joins the thread before freeing the catalog); the array
//  is the builder's, untouched while the thread runs.
typedef struct {
    ah_driver_t         *driver;
    const ah_runtime_t **rts;
    size_t               n;
    char                 endpoint [64];
} s_check_t;

typedef struct {
    ah_actor_t       *actor;
    const ah_config_t *config;
    ah_driver_t      *driver;
    ah_store_t       *store;
    ah_catalog_t     *catalog;
    ah_policy_t      *policy;
    s_image_t        *images;       //  one per catalog entry
    zsock_t          *results;      //  the worker's reports (PULL)
    char              endpoint [64];
    bool              working;      //  the worker thread runs (join it)
    pthread_t         worker;
    s_job_t           job;
    int               backoff_ms;
    bool              prewarm;      //  keep every image present: one gone is made again at once
    bool              checking;     //  the check thread runs (join it)
    bool              recheck;      //  RUNTIME_CHECK came while it ran: once more after
    pthread_t         checker;
    s_check_t         check;
} self_t;

//  ---------------------------------------------------------------------
//  The Dockerfile of a base_image runtime

//  A JSON string (Dockerfile exec form and ENV values take JSON quoting);
//  env: an ENV value, where the Dockerfile would also substitute $NAME, so
//  every $ is escaped and the value stays what the catalog says.
static void
s_quoted (ah_buf_t *out, const char *s, bool env)
{
    json_t *v = json_string (s);
    char *q = v ? json_dumps (v, JSON_ENCODE_ANY) : NULL;
    json_decref (v);
    for (const char *c = q ? q : "\"\""; *c; c++)
        ah_buf_appendf (out, env && *c == '$' ? "\\$" : "%c", *c);
    free (q);
}

static void
s_json_str (ah_buf_t *out, const char *s)
{
    s_quoted (out, s, false);
}

//  The account script: an `agent` user, uid 10001, with a real home,
//  whichever tools the base has (useradd, busybox adduser, or by hand).
static const char s_account [] =
    "set -e; sh=/bin/sh; [ -x /bin/bash ] && sh=/bin/bash; "
    "if ! grep -q '^agent:' /etc/passwd; then "
    "if command -v useradd >/dev/null 2>&1; then useradd -u 10001 -U -m -d /home/agent -s $sh agent; "
    "elif command -v adduser >/dev/null 2>&1; then adduser -D -u 10001 -h /home/agent -s $sh agent; "
    "else echo \"agent:x:10001:10001:agent:/home/agent:$sh\" >> /etc/passwd; "
    "echo 'agent:x:10001:' >> /etc/group; fi; fi; "
    "mkdir -p /home/agent /tmp /etc/agenthold; chown 10001:10001 /home/agent; chmod 755 /home/agent; "
    "chmod 1777 /tmp";

char *
ah_builder_dockerfile (const ah_runtime_t *rt)
{
    if (!rt || !rt->base_image)
        return NULL;
    ah_buf_t out;
    ah_buf_init (&out, 0);
    ah_buf_appendf (&out, "# agenthold runtime %s, recipe %s (made by the builder from catalog/runtimes.json)\n",
                    rt->alias, rt->recipe);
    ah_buf_appendf (&out, "FROM %s\n", rt->base_image);
    //  Setup commands run as root with the base's shell, before the packages.
    for (size_t i = 0; i < rt->setup_count; i++) {
        ah_buf_appendf (&out, "RUN [\"/bin/sh\", \"-c\", ");
        s_json_str (&out, rt->setup_commands [i]);
        ah_buf_appendf (&out, "]\n");
    }
    if (rt->package_count) {
        //  pip as root into the system's site (importable by every user);
        //  the packages are arguments, never shell text. The index comes
        //  from the build args (catalog.pip_index_url), not the image.
        ah_buf_appendf (&out, "ARG PIP_INDEX_URL\nARG PIP_TRUSTED_HOST\n");
        ah_buf_appendf (&out, "RUN [\"/bin/sh\", \"-c\", \"PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore "
                        "PIP_DISABLE_PIP_VERSION_CHECK=1 python3 -m pip install --no-cache-dir --no-input \\\"$@\\\"\", \"pip\"");
        for (size_t i = 0; i < rt->package_count; i++) {
            ah_buf_appendf (&out, ", ");
            s_json_str (&out, rt->packages [i]);
        }
        ah_buf_appendf (&out, "]\n");
    }
    ah_buf_appendf (&out, "RUN [\"/bin/sh\", \"-c\", ");
    s_json_str (&out, s_account);
    ah_buf_appendf (&out, "]\n");
    //  The env vars last: they are the sandbox's, not the build's (PIP_USER
    //  would send the packages above into root's home).
    ah_buf_appendf (&out, "ENV HOME=\"/home/agent\"\n");
    for (size_t i = 0; i < rt->env_count; i++) {
        ah_buf_appendf (&out, "ENV %s=", rt->env [i].name);
        s_quoted (&out, rt->env [i].value, true);
        ah_buf_appendf (&out, "\n");
    }
    ah_buf_appendf (&out, "WORKDIR /home/agent\n");
    //  The labels last: the layers before them are shared (from the build
    //  cache) by every runtime whose first steps are the same.
    ah_buf_appendf (&out, "LABEL agenthold.managed=\"true\" agenthold.runtime=\"%s\" agenthold.recipe=\"%s\"\n",
                    rt->alias, rt->recipe);
    return ah_buf_cstr (&out);
}

//  ---------------------------------------------------------------------
//  The worker: one image checked, built or pulled, off the actor's loop.

static void
s_report (s_job_t *job, const char *state, const char *error)
{
    zstr_sendx (job->push, "IMAGE", job->rt->alias, state, error ? error : "", NULL);
}

//  [ID][runtime][id]: the engine's id of the image the runtime's
//  reference names now (drivers with an image_id hook).
static void
s_send_id (zsock_t *push, ah_driver_t *driver, const ah_runtime_t *rt)
{
    char *id = NULL, *err = NULL;
    if (!driver->image_id)
        return;
    if (driver->image_id (driver, rt->image, &id, &err) != 0)
        ah_warn (AREA, "runtime %s: cannot read the id of image %s: %s", rt->alias, rt->image,
                 err ? err : "?");
    else
    if (id)
        zstr_sendx (push, "ID", rt->alias, id, NULL);
    free (id);
    free (err);
}

static void
s_on_progress (void *arg, const char *text)
{
    s_job_t *job = arg;
    zstr_sendx (job->push, "PROGRESS", job->rt->alias, text, NULL);
}

//  The host of an http:// URL, for PIP_TRUSTED_HOST ("" otherwise).
static void
s_http_host (const char *url, char *host, size_t size)
{
    *host = 0;
    if (url && !strncmp (url, "http://", 7)) {
        const char *h = url + 7;
        size_t n = strcspn (h, ":/");
        snprintf (host, size, "%.*s", (int) (n < size ? n : size - 1), h);
    }
}

int
ah_builder_build (ah_driver_t *driver, const ah_runtime_t *rt, const char *pip_index_url,
                  void (*on_progress) (void *arg, const char *text), void *arg,
                  volatile int *stop, char **err)
{
    ah_image_build_t build = {
        .image = rt->image, .on_progress = on_progress, .progress_arg = arg };
    const char **names = NULL, **paths = NULL;
    char *dockerfile = NULL;
    char index [1100] = "", trusted [300] = "";
    const char *args [2];
    if (rt->base_image) {
        dockerfile = ah_builder_dockerfile (rt);
        build.dockerfile = dockerfile;
        build.base_image = rt->base_image;
        const char *url = pip_index_url;
        if (url && *url) {
            char host [256];
            s_http_host (url, host, sizeof host);
            snprintf (index, sizeof index, "PIP_INDEX_URL=%s", url);
            snprintf (trusted, sizeof trusted, "PIP_TRUSTED_HOST=%s", host);
            args [0] = index;
            args [1] = trusted;
            build.build_args = args;
            build.n_build_args = *host ? 2 : 1;
        }
    }
    else
    if (rt->context_dir) {
        names = calloc (rt->host_file_count + 1, sizeof (char *));
        paths = calloc (rt->host_file_count + 1, sizeof (char *));
        for (size_t f = 0; names && paths && f < rt->host_file_count; f++) {
            names [f] = rt->host_files [f].name;
            paths [f] = rt->host_files [f].host_path;
        }
        build.context_dir = rt->context_dir;
        build.file_names = names;
        build.file_paths = paths;
        build.n_files = rt->host_file_count;
    }
    int rc = -1;
    if ((rt->base_image && !dockerfile) || (rt->context_dir && (!names || !paths)))
        *err = strdup ("out of memory");
    else
        rc = driver->image_build (driver, &build, stop, err);
    free (names);
    free (paths);
    free (dockerfile);
    return rc;
}

//  One attempt: 0 present, -1 with *err.
static int
s_build_once (s_job_t *job, char **err)
{
    return ah_builder_build (job->driver, job->rt, job->config ? job->config->pip_index_url : NULL,
                             s_on_progress, job, &job->stop, err);
}

static void *
s_worker (void *args)
{
    s_job_t *job = args;
    const ah_runtime_t *rt = job->rt;
    pthread_setname_np (pthread_self (), "ah-build-work");
    job->push = zsock_new_push (job->endpoint);
    if (!job->push) {
        ah_error (AREA, "the image worker cannot reach the builder");
        return NULL;
    }
    zsock_set_linger (job->push, 1000);
    char *err = NULL;
    bool exists = false;
    if (job->driver->image_exists (job->driver, rt->image, &exists, &err) != 0)
        s_report (job, "error", err ? err : "cannot ask the driver about the image");
    else
    if (exists)
        s_report (job, "present", NULL);
    else
    if (job->attempts <= 0 || !job->driver->image_build)
        s_report (job, "missing", NULL);
    else {
        int pause = job->backoff_ms;
        for (int a = 1; a <= job->attempts && !job->stop; a++) {
            free (err);
            err = NULL;
            char *what = a > 1 ? ah_strf ("attempt %d of %d", a, job->attempts) : NULL;
            s_report (job, "building", NULL);
            if (what)
                s_on_progress (job, what);
            free (what);
            if (s_build_once (job, &err) == 0) {
                free (err);
                err = NULL;
                break;
            }
            ah_warn (AREA, "runtime %s: attempt %d of %d: %s", rt->alias, a, job->attempts,
                     err ? err : "the image could not be made");
            if (a < job->attempts) {
                char *text = ah_strf ("attempt %d of %d failed (%.200s); trying again in %d s", a,
                                      job->attempts, err ? err : "?", pause / 1000);
                s_on_progress (job, text ? text : "attempt failed; trying again");
                free (text);
                for (int slept = 0; slept < pause && !job->stop; slept += 100)
                    usleep (100 * 1000);
                pause *= 2;
            }
            else
            if (!err)
                err = strdup ("the image could not be made");
        }
        if (job->stop && !err)
            err = strdup ("stopped: the server is shutting down");
        s_report (job, err ? "error" : "present", err);
    }
    if (!err)
        s_send_id (job->push, job->driver, rt);
    free (err);
    zstr_sendx (job->push, "DONE", rt->alias, NULL);
    zsock_destroy (&job->push);
    return NULL;
}

static void *
s_checker (void *args)
{
    s_check_t *check = args;
    pthread_setname_np (pthread_self (), "ah-build-check");
    zsock_t *push = zsock_new_push (check->endpoint);
    if (!push) {
        ah_error (AREA, "the image check cannot reach the builder");
        return NULL;
    }
    zsock_set_linger (push, 1000);
    for (size_t i = 0; i < check->n; i++) {
        char *err = NULL;
        bool exists = true;
        //  A driver that cannot answer says nothing about the image: it
        //  stays as it was (the next create that meets it asks again).
        if (check->driver->image_exists (check->driver, check->rts [i]->image, &exists, &err) != 0)
            ah_warn (AREA, "runtime %s: cannot check image %s: %s", check->rts [i]->alias,
                     check->rts [i]->image, err ? err : "?");
        else
        if (!exists)
            zstr_sendx (push, "GONE", check->rts [i]->alias, NULL);
        else
            //  Present: under the same reference, maybe another image
            //  (a tag moved onto it, a build by hand).
            s_send_id (push, check->driver, check->rts [i]);
        free (err);
    }
    zstr_sendx (push, "CHECKED", "", NULL);
    zsock_destroy (&push);
    return NULL;
}

//  ---------------------------------------------------------------------
//  The actor: queue, outcomes, messages.

static void
s_set_error (s_image_t *img, const char *error)
{
    free (img->error);
    img->error = error && *error ? strdup (error) : NULL;
}

//  Start the next queued job, unless one runs.
static void
s_next (self_t *self)
{
    if (self->working || !self->driver || !self->driver->image_exists)
        return;
    for (size_t i = 0; i < ah_catalog_size (self->catalog); i++) {
        s_image_t *img = &self->images [i];
        if (!img->queued)
            continue;
        s_job_t *job = &self->job;
        *job = (s_job_t) { .driver = self->driver, .rt = ah_catalog_at (self->catalog, i),
                           .config = self->config, .attempts = img->queued < 0 ? 0 : img->queued,
                           .backoff_ms = self->backoff_ms };
        snprintf (job->endpoint, sizeof job->endpoint, "%s", self->endpoint);
        img->queued = 0;
        if (pthread_create (&self->worker, NULL, s_worker, job) == 0) {
            self->working = true;
            snprintf (img->state, sizeof img->state, "checking");
        }
        else {
            snprintf (img->state, sizeof img->state, "error");
            s_set_error (img, "cannot start the image worker");
        }
        return;
    }
}

static int
s_index (self_t *self, const char *alias)
{
    for (size_t i = 0; alias && i < ah_catalog_size (self->catalog); i++)
        if (streq (ah_catalog_at (self->catalog, i)->alias, alias))
            return (int) i;
    return -1;
}

//  The briefing of rt composed by briefing.lua: the caller frees; NULL
//  with *err.
static char *s_briefing (self_t *self, const ah_runtime_t *rt, char **err);

//  Tell lifecycle how the image of runtime i ended.
static void
s_tell_ready (self_t *self, size_t i)
{
    s_image_t *img = &self->images [i];
    if (!img->waited_for)
        return;
    img->waited_for = false;
    const ah_runtime_t *rt = ah_catalog_at (self->catalog, i);
    ah_msg_t *msg = ah_msg_new ("RUNTIME_READY");
    ah_msg_set_str (msg, "runtime", rt->alias);
    bool ok = streq (img->state, "present") || streq (img->state, "unknown");
    ah_msg_set_bool (msg, "ok", ok);
    if (!ok)
        ah_msg_set_str (msg, "error", img->error ? img->error
                        : streq (img->state, "missing") ? "the image is missing and cannot be made"
                        : "the image could not be made");
    else {
        //  What the sandbox is told, written into it at every start.
        char *err = NULL;
        char *text = s_briefing (self, rt, &err);
        if (text)
            ah_msg_set_str (msg, "briefing", text);
        else
            ah_warn (AREA, "briefing for %s: %s", rt->alias, err ? err : "failed");
        free (text);
        free (err);
    }
    ah_actor_send (self->actor, "lifecycle", &msg);
}

//  The image of runtime i, believed present, is not there (how: what
//  said so): "missing" at once, for CATALOG_LIST and the API, and, with
//  prewarm, made again as at start. Any other state is the worker's (a
//  check or a build under way says what it finds).
static void
s_gone (self_t *self, size_t i, const char *how)
{
    s_image_t *img = &self->images [i];
    const ah_runtime_t *rt = ah_catalog_at (self->catalog, i);
    if (!streq (img->state, "present"))
        return;
    snprintf (img->state, sizeof img->state, "missing");
    img->progress [0] = 0;
    s_set_error (img, NULL);
    ah_warn (AREA, "runtime %s: image %s is gone (%s)%s", rt->alias, rt->image, how,
             self->prewarm ? "; making it again" : "; it is made when an agent asks for it");
    if (self->prewarm && img->queued <= 0)
        img->queued = PREWARM_ATTEMPTS;
    s_next (self);
}

//  A check of the runtimes believed present, in the check thread, unless
//  one runs (then once more when it ends).
static void
s_check_start (self_t *self)
{
    if (!self->driver)
        return;
    if (self->checking) {
        self->recheck = true;
        return;
    }
    size_t n = ah_catalog_size (self->catalog), k = 0;
    const ah_runtime_t **rts = calloc (n + 1, sizeof *rts);
    for (size_t i = 0; rts && i < n; i++)
        if (streq (self->images [i].state, "present"))
            rts [k++] = ah_catalog_at (self->catalog, i);
    if (!rts || k == 0) {
        free (rts);
        return;
    }
    self->check = (s_check_t) { .driver = self->driver, .rts = rts, .n = k };
    snprintf (self->check.endpoint, sizeof self->check.endpoint, "%s", self->endpoint);
    if (pthread_create (&self->checker, NULL, s_checker, &self->check) == 0)
        self->checking = true;
    else {
        ah_error (AREA, "cannot start the image check");
        free (rts);
        self->check.rts = NULL;
    }
}

static void
s_check_done (self_t *self)
{
    if (!self->checking)
        return;
    pthread_join (self->checker, NULL);
    self->checking = false;
    free (self->check.rts);
    self->check.rts = NULL;
    if (self->recheck) {
        self->recheck = false;
        s_check_start (self);
    }
}

//  RUNTIME_CHECK {why}: the engine untagged or deleted an image (it names
//  none), or its event stream (re)connected: the images believed present
//  are looked at again.
static void
s_on_check (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *why = ah_msg_str (msg, "why");
    ah_debug (AREA, "checking the runtime images (%s)", why ? why : "asked");
    s_check_start (self);
}

//  The engine's id of runtime i's image is id: lifecycle hears of a new
//  one (RUNTIME_IMAGE), whose warm sandboxes made from another go.
static void
s_image_id (self_t *self, size_t i, const char *id)
{
    s_image_t *img = &self->images [i];
    if (!*id || streq (img->id, id) || strlen (id) >= sizeof img->id)
        return;
    const ah_runtime_t *rt = ah_catalog_at (self->catalog, i);
    if (*img->id)
        ah_info (AREA, "runtime %s: image %s is another image now (%s, was %s)", rt->alias, rt->image,
                 id, img->id);
    ah_msg_t *msg = ah_msg_new ("RUNTIME_IMAGE");
    ah_msg_set_str (msg, "runtime", rt->alias);
    ah_msg_set_str (msg, "image", rt->image);
    ah_msg_set_str (msg, "image_id", id);
    if (*img->id)
        ah_msg_set_str (msg, "previous", img->id);
    snprintf (img->id, sizeof img->id, "%s", id);
    ah_actor_send (self->actor, "lifecycle", &msg);
}

//  From the worker: [IMAGE][runtime][state][error], [PROGRESS][runtime][text], [DONE][runtime];
//  from the check thread: [GONE][runtime], [CHECKED][]; from both: [ID][runtime][id].
static void
s_on_worker (void *self_, zsock_t *results)
{
    self_t *self = self_;
    char *kind = NULL, *alias = NULL, *state = NULL, *error = NULL;
    if (zstr_recvx (results, &kind, &alias, &state, &error, NULL) < 2 || !kind || !alias)
        goto out;
    if (streq (kind, "CHECKED")) {
        s_check_done (self);
        goto out;
    }
    int i = s_index (self, alias);
    if (i < 0)
        goto out;
    const ah_runtime_t *rt = ah_catalog_at (self->catalog, (size_t) i);
    s_image_t *img = &self->images [i];
    if (streq (kind, "GONE"))
        s_gone (self, (size_t) i, "removed from the engine");
    else
    if (streq (kind, "ID") && state)
        s_image_id (self, (size_t) i, state);
    else
    if (streq (kind, "DONE")) {
        if (self->working) {
            pthread_join (self->worker, NULL);
            self->working = false;
        }
        img->progress [0] = 0;
        s_tell_ready (self, (size_t) i);
        s_next (self);
    }
    else
    if (streq (kind, "PROGRESS") && state) {
        snprintf (img->progress, sizeof img->progress, "%s", state);
        int64_t now = zclock_mono ();
        //  Attempts and their failures always go out; build steps at most
        //  every PROGRESS_EVERY_MS.
        bool always = !strncmp (state, "attempt ", 8);
        if (img->waited_for && (always || now - img->progress_sent_ms >= PROGRESS_EVERY_MS)) {
            img->progress_sent_ms = now;
            ah_msg_t *msg = ah_msg_new ("RUNTIME_PROGRESS");
            ah_msg_set_str (msg, "runtime", alias);
            ah_msg_set_str (msg, "text", state);
            ah_actor_send (self->actor, "lifecycle", &msg);
        }
    }
    else
    if (streq (kind, "IMAGE") && state) {
        snprintf (img->state, sizeof img->state, "%s", state);
        if (streq (state, "error") || streq (state, "present"))
            s_set_error (img, error);
        if (streq (state, "error"))
            ah_warn (AREA, "runtime %s: image %s: %s", rt->alias, rt->image, img->error);
        else
        if (streq (state, "missing"))
            ah_warn (AREA, "runtime %s: image %s is not present (it is made when an agent asks for it)",
                     rt->alias, rt->image);
        else
            ah_info (AREA, "runtime %s: image %s %s", rt->alias, rt->image, state);
    }
out:
    zstr_free (&kind);
    zstr_free (&alias);
    zstr_free (&state);
    zstr_free (&error);
}

//  RUNTIME_ENSURE {runtime}: make the runtime's image present (a build or
//  a pull on demand, 2 attempts), then RUNTIME_READY {runtime, ok, error}
//  to lifecycle. Present already: at once.
static void
s_on_ensure (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    int i = s_index (self, ah_msg_str (msg, "runtime"));
    if (i < 0) {
        ah_msg_t *no = ah_msg_new ("RUNTIME_READY");
        ah_msg_set_str (no, "runtime", ah_msg_str (msg, "runtime"));
        ah_msg_set_bool (no, "ok", false);
        ah_msg_set_str (no, "error", "no such runtime in the catalog");
        ah_actor_send (self->actor, "lifecycle", &no);
        return;
    }
    s_image_t *img = &self->images [i];
    img->waited_for = true;
    //  The driver met the image missing (a create, start or rebuild
    //  failed on it): whatever was believed, it is made again.
    if (ah_msg_bool (msg, "gone", false))
        s_gone (self, (size_t) i, "a sandbox's driver call found it missing");
    if (streq (img->state, "present") || streq (img->state, "unknown")) {
        s_tell_ready (self, (size_t) i);
        return;
    }
    bool busy = (self->working && self->job.rt == ah_catalog_at (self->catalog, (size_t) i));
    if (!busy && img->queued <= 0)
        img->queued = DEMAND_ATTEMPTS;
    s_next (self);
    //  Not there yet: the agent is preparing; say so at once.
    const ah_runtime_t *rt = ah_catalog_at (self->catalog, (size_t) i);
    char *text = img->progress [0] ? strdup (img->progress)
               : ah_strf ("making the image of the %s runtime (%s)", rt->alias, rt->image);
    ah_msg_t *progress = ah_msg_new ("RUNTIME_PROGRESS");
    ah_msg_set_str (progress, "runtime", rt->alias);
    ah_msg_set_str (progress, "text", text);
    ah_actor_send (self->actor, "lifecycle", &progress);
    img->progress_sent_ms = zclock_mono ();
    free (text);
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
s_pack_list (msgpack_packer *pk, char **list, size_t n)
{
    msgpack_pack_array (pk, (uint32_t) n);
    for (size_t t = 0; t < n; t++)
        s_pack_str (pk, list [t]);
}

static void
s_pack_env (msgpack_packer *pk, const ah_runtime_t *rt)
{
    msgpack_pack_map (pk, (uint32_t) rt->env_count);
    for (size_t i = 0; i < rt->env_count; i++) {
        s_pack_str (pk, rt->env [i].name);
        s_pack_str (pk, rt->env [i].value);
    }
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
        const s_image_t *img = &self->images [i];
        msgpack_pack_map (&pk, 15);
        s_pack_str (&pk, "alias");          s_pack_str (&pk, rt->alias);
        s_pack_str (&pk, "default");        i == 0 ? msgpack_pack_true (&pk) : msgpack_pack_false (&pk);
        s_pack_str (&pk, "description");    s_pack_str (&pk, rt->description);
        s_pack_str (&pk, "image");          s_pack_str (&pk, rt->image);
        s_pack_str (&pk, "base_image");     s_pack_str (&pk, rt->base_image);
        s_pack_str (&pk, "setup_commands"); s_pack_list (&pk, rt->setup_commands, rt->setup_count);
        s_pack_str (&pk, "packages");       s_pack_list (&pk, rt->packages, rt->package_count);
        s_pack_str (&pk, "env_vars");       s_pack_env (&pk, rt);
        s_pack_str (&pk, "mem_limit_mb");
        rt->mem_limit_mb ? msgpack_pack_int64 (&pk, rt->mem_limit_mb) : msgpack_pack_nil (&pk);
        s_pack_str (&pk, "needs_network");  rt->needs_network ? msgpack_pack_true (&pk) : msgpack_pack_false (&pk);
        s_pack_str (&pk, "built_locally");  ah_runtime_built (rt) ? msgpack_pack_true (&pk) : msgpack_pack_false (&pk);
        s_pack_str (&pk, "image_state");    s_pack_str (&pk, img->state);
        s_pack_str (&pk, "image_error");    s_pack_str (&pk, img->error);
        s_pack_str (&pk, "progress");       s_pack_str (&pk, img->progress [0] ? img->progress : NULL);
        s_pack_str (&pk, "briefing");       s_pack_list (&pk, rt->briefing, rt->briefing_count);
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
s_set_list (ah_msg_t *arg, const char *key, char **list, size_t n)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init (&buf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &buf, msgpack_sbuffer_write);
    s_pack_list (&pk, list, n);
    ah_msg_set_raw (arg, key, buf.data, buf.size);
    msgpack_sbuffer_destroy (&buf);
}

//  Whether a runtime that needs a network goes out through sandboxd's
//  egress proxy (docs/egress.md): on every driver but Docker (and the host
//  agent's Docker) under sandbox.docker.egress bridge.
static bool
s_egress_proxy (const ah_config_t *config)
{
    bool docker = config->driver && (!strcmp (config->driver, "docker") || !strcmp (config->driver, "remote"));
    return !(docker && config->docker_egress && !strcmp (config->docker_egress, "bridge"));
}

static char *
s_briefing (self_t *self, const ah_runtime_t *rt, char **err)
{
    //  The argument briefing.lua gets: docs/policy.md "briefing".
    ah_msg_t *arg = ah_msg_new ("RUNTIME");
    ah_msg_set_str (arg, "alias", rt->alias);
    ah_msg_set_str (arg, "name", rt->alias);
    ah_msg_set_str (arg, "image", rt->image);
    ah_msg_set_str (arg, "base_image", rt->base_image);
    ah_msg_set_str (arg, "description", rt->description);
    s_set_list (arg, "setup_commands", rt->setup_commands, rt->setup_count);
    s_set_list (arg, "packages", rt->packages, rt->package_count);
    s_set_list (arg, "briefing", rt->briefing, rt->briefing_count);
    char **names = calloc (rt->env_count + 1, sizeof (char *));
    for (size_t i = 0; names && i < rt->env_count; i++)
        names [i] = rt->env [i].name;
    s_set_list (arg, "env_vars", names, names ? rt->env_count : 0);
    free (names);
    ah_msg_set_bool (arg, "needs_network", rt->needs_network);
    ah_msg_set_bool (arg, "egress_proxy", rt->needs_network && s_egress_proxy (self->config));
    s_set_list (arg, "egress", rt->egress, rt->egress_count);
    if (rt->mem_limit_mb)
        ah_msg_set_int (arg, "mem_limit_mb", rt->mem_limit_mb);
    ah_msg_t *result = NULL;
    char *text = NULL;
    if (ah_policy_call (self->policy, "briefing", arg, NULL, &result, err) != 0) {
        if (!*err)
            *err = strdup ("briefing.lua failed");
    }
    else
    if (!ah_msg_str (result, "text") || !*ah_msg_str (result, "text"))
        *err = strdup ("briefing.lua: briefing() returned no \"text\"");
    else
        text = strdup (ah_msg_str (result, "text"));
    ah_msg_destroy (&result);
    ah_msg_destroy (&arg);
    return text;
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
        char *err = NULL;
        char *text = s_briefing (self, rt, &err);
        if (!text) {
            reply = ah_msg_reply_error (msg, 500, "%s", err ? err : "briefing.lua failed");
            ah_warn (AREA, "briefing for %s: %s", rt->alias, err ? err : "failed");
        }
        else {
            reply = ah_msg_reply_ok (msg);
            ah_msg_set_int (reply, "status", 200);
            ah_msg_set_str (reply, "runtime", rt->alias);
            ah_msg_set_str (reply, "text", text);
        }
        free (text);
        free (err);
    }
    ah_actor_reply (self->actor, msg, reply);
}

static void
s_on_policy_reload (void *self_, ah_msg_t *msg)
{
    (void) msg;
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
        __atomic_store_n (&self->job.stop, 1, __ATOMIC_SEQ_CST);
        pthread_join (self->worker, NULL);
    }
    if (self->checking)
        pthread_join (self->checker, NULL);     //  a few image_exists calls
    free (self->check.rts);
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
    self->config = config;
    self->backoff_ms = a->backoff_ms > 0 ? a->backoff_ms : 5000;
    self->prewarm = a->prewarm;
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
    self->driver = hooks ? a->driver : NULL;
    for (size_t i = 0; i < n; i++) {
        snprintf (self->images [i].state, sizeof self->images [i].state, hooks ? "checking" : "unknown");
        //  Prewarm: every runtime's image made at start, 3 attempts; else
        //  only looked at (a missing one is made at first need).
        self->images [i].queued = a->prewarm ? PREWARM_ATTEMPTS : -1;
    }
    if (hooks) {
        snprintf (self->endpoint, sizeof self->endpoint, "inproc://agenthold-builder-%p", (void *) self);
        self->results = zsock_new_pull (self->endpoint);
        if (!self->results || ah_actor_reader (actor, self->results, s_on_worker)) {
            ah_actor_fail (actor, "cannot start the image worker");
            s_destroy (self);
            return NULL;
        }
        s_next (self);
    }
    else
        ah_info (AREA, "the %s driver has no image hooks: runtime images are not checked",
                 a->driver ? a->driver->name : "(none)");
    ah_info (AREA, "%zu runtimes in %s; the default is %s", n, config->catalog_path,
             ah_catalog_default (self->catalog)->alias);
    return self;
}

static const ah_actor_handler_t s_handlers [] = {
    { "CATALOG_LIST", s_on_catalog_list },
    { "BRIEFING", s_on_briefing },
    { "RUNTIME_ENSURE", s_on_ensure },
    { "RUNTIME_CHECK", s_on_check },
    { "POLICY_RELOAD", s_on_policy_reload },
    { NULL, NULL }
};

const ah_actor_def_t ah_builder_actor = {
    .name = AREA, .on_bus = true, .init = s_init, .destroy = s_destroy, .handlers = s_handlers,
};
