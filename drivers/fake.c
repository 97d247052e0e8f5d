/*  drivers/fake.c: the fake backend (see fake.h). For development and
    tests only: nothing is isolated, and it says so when created.

    DESIGN. Calls come from lifecycle's worker threads, several at once
    (different agents, or the reconciler's inspect). One mutex guards the
    whole driver: every call is a few file operations, so holding it for
    the duration costs nothing and keeps the record files consistent.
    The one thing that can take long, ending an in-process sandboxd
    (joining its thread, which ends its terminals and execs first), is
    done after the lock is let go: the instance is taken out of the table
    under the lock, then stopped. Holding the lock through that join made
    every other agent's calls wait on one slow sandbox (a stop with an open
    terminal under load sat in `stopping` for more than 30 s).
    The truth lives in files, not in memory, so a restarted server (and a
    test) sees what the previous one left.

    Start also
    runs sandboxd in-process on the sandbox's boot.json, one thread per
    sandbox, and the driver waits for its hello over the tunnel; the
    thread handles live in a small table guarded by the same mutex.
    With sandbox.fake_sandboxd = external it runs
    none: a start writes boot.json and the hello must come from a
    sandboxd process someone else started on it (bench/scale runs a
    thousand static ones, so the server's figures are the server's). */
#include "common/file.h"
#include "common/ident.h"
#include "common/str.h"
#include "drivers/fake.h"
#include "common/log.h"
#include "sandboxd/sandboxd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ID_MAX      AH_AGENT_ID_LEN     //  common/ident.h
#define STATE_MAX   64

//  An in-process sandboxd, one per running sandbox.
typedef struct s_instance_t {
    char id [ID_MAX + 1];
    void *sandboxd;                     //  ah_sandboxd_t *
    struct s_instance_t *next;
} s_instance_t;

typedef struct {
    char *root;                         //  <data_dir>/fake
    pthread_mutex_t lock;               //  guards every call (any worker thread)
    s_instance_t *instances;            //  under lock
    bool external;                      //  sandbox.fake_sandboxd = external: no in-process sandboxd
} fake_t;

static void s_set_err (char **err, char *text)
{
    if (err)
        *err = text ? text : strdup ("out of memory");
    else
        free (text);
}

//  Ids become path components: only [a-z0-9-], 1..40, so nothing can climb out.
static int s_mkdir_p (const char *path, mode_t mode)
{
    char buf [4096];
    if (strlen (path) >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy (buf, path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir (buf, mode) && errno != EEXIST)
                return -1;
            *p = '/';
        }
    if (mkdir (buf, mode) && errno != EEXIST)
        return -1;
    return 0;
}

//  First line of a small file into buf; -1 if it cannot be read.
static int s_read_line (const char *path, char *buf, size_t size)
{
    FILE *f = fopen (path, "re");
    if (!f)
        return -1;
    if (!fgets (buf, (int) size, f))
        buf [0] = 0;
    fclose (f);
    buf [strcspn (buf, "\r\n")] = 0;
    return 0;
}

static char *s_path (fake_t *self, const char *id, const char *leaf)
{
    return leaf ? ah_strf ("%s/%s/%s", self->root, id, leaf) : ah_strf ("%s/%s", self->root, id);
}

static bool s_exists (fake_t *self, const char *id)
{
    char *home = s_path (self, id, "home");
    struct stat st;
    bool yes = home && stat (home, &st) == 0 && S_ISDIR (st.st_mode);
    free (home);
    return yes;
}

//  Test hook: fail-<op> in the sandbox's directory or in the root.
static bool s_injected (fake_t *self, const char *id, const char *op, char **err)
{
    char leaf [32], line [512];
    snprintf (leaf, sizeof leaf, "fail-%s", op);
    char *paths [2] = { s_path (self, id, leaf), ah_strf ("%s/%s", self->root, leaf) };
    bool failed = false;
    for (int i = 0; i < 2 && !failed; i++)
        if (paths [i] && s_read_line (paths [i], line, sizeof line) == 0) {
            failed = true;
            s_set_err (err, strdup (*line ? line : "injected failure"));
        }
    free (paths [0]);
    free (paths [1]);
    return failed;
}

static int s_set_state (fake_t *self, const char *id, const char *state, char **err)
{
    char *path = s_path (self, id, "state");
    char line [STATE_MAX];
    snprintf (line, sizeof line, "%s\n", state);
    int rc = path ? ah_file_put (path, line, strlen (line), 0644, false) : -1;
    if (rc)
        s_set_err (err, ah_strf ("fake: cannot write %s: %s", path ? path : id, strerror (errno)));
    free (path);
    return rc;
}

//  Common entry: valid id, the lock taken, the injected failure checked.
#define ENTER(op) \
    fake_t *self = driver->impl; \
    if (!ah_ident_ok (AH_IDENT_AGENT_ID, agent_id)) { \
        s_set_err (err, ah_strf ("fake: agent id '%.48s' %s", agent_id ? agent_id : "", \
                                 ah_ident_check (AH_IDENT_AGENT_ID, agent_id))); \
        return -1; \
    } \
    pthread_mutex_lock (&self->lock); \
    int rc = -1; \
    s_instance_t *gone = NULL;      /*  ended after the lock is let go  */ \
    (void) gone; \
    if (s_injected (self, agent_id, op, err)) \
        goto out;

//  Take the agent's in-process sandboxd out of the table (lock held):
//  the caller ends it with s_instance_end once the lock is let go.
static s_instance_t *s_instance_take (fake_t *self, const char *id)
{
    for (s_instance_t **p = &self->instances; *p; p = &(*p)->next)
        if (strcmp ((*p)->id, id) == 0) {
            s_instance_t *gone = *p;
            *p = gone->next;
            gone->next = NULL;
            return gone;
        }
    return NULL;
}

//  Test hook: slow-stop in the sandbox's directory holds the milliseconds
//  its sandboxd takes to end (a thread slow to join).
static int s_slow_stop_ms (fake_t *self, const char *id)
{
    char *path = s_path (self, id, "slow-stop");
    char line [32] = "";
    int ms = path && s_read_line (path, line, sizeof line) == 0 ? atoi (line) : 0;
    free (path);
    return ms > 0 && ms <= 60000 ? ms : 0;
}

//  End a taken sandboxd (lock NOT held: joining its thread may take long).
static void s_instance_end (fake_t *self, s_instance_t **gone_p)
{
    s_instance_t *gone = *gone_p;
    if (!gone)
        return;
    *gone_p = NULL;
    int slow = s_slow_stop_ms (self, gone->id);
    if (slow)
        usleep ((useconds_t) slow * 1000);
    ah_sandboxd_t *sd = gone->sandboxd;
    ah_sandboxd_stop (&sd);
    free (gone);
}

//  Run sandboxd in-process on the sandbox's boot.json and home (lock
//  held, and no instance of id in the table).
static int s_instance_start (fake_t *self, const char *id, char **err)
{
    if (self->external)
        return 0;                       //  whoever runs sandboxd reads boot.json (bench/scale)
    char *boot = s_path (self, id, "boot.json"), *home = s_path (self, id, "home");
    s_instance_t *inst = calloc (1, sizeof *inst);
    ah_sandboxd_opts_t opts = { .boot_path = boot, .home = home, .switch_user = false,
                                .stats = AH_SANDBOXD_STATS_TREE };
    if (inst && boot && home)
        inst->sandboxd = ah_sandboxd_start (&opts);
    free (boot);
    free (home);
    if (!inst || !inst->sandboxd) {
        free (inst);
        s_set_err (err, ah_strf ("fake: cannot run sandboxd for %s (see the log)", id));
        return -1;
    }
    snprintf (inst->id, sizeof inst->id, "%s", id);
    inst->next = self->instances;
    self->instances = inst;
    return 0;
}

static int s_make (fake_t *self, const ah_sandbox_spec_t *spec, char **err)
{
    const char *agent_id = spec->agent_id;
    char *home = s_path (self, agent_id, "home");
    char *image = s_path (self, agent_id, "image");
    int rc = -1;
    if (!home || !image || s_mkdir_p (home, 0700)) {
        s_set_err (err, ah_strf ("fake: cannot make %s: %s", home ? home : agent_id, strerror (errno)));
        goto out;
    }
    char line [512];
    snprintf (line, sizeof line, "%s\n", spec->image ? spec->image : "");
    if (ah_file_put (image, line, strlen (line), 0644, false)) {
        s_set_err (err, ah_strf ("fake: cannot write %s: %s", image, strerror (errno)));
        goto out;
    }
    rc = s_set_state (self, agent_id, "created", err);
out:
    free (home);
    free (image);
    return rc;
}

static int s_create (ah_driver_t *driver, const ah_sandbox_spec_t *spec, char **err)
{
    const char *agent_id = spec ? spec->agent_id : NULL;
    ENTER ("create");
    if (s_exists (self, agent_id)) {
        s_set_err (err, ah_strf ("fake: sandbox %s exists already", agent_id));
        goto out;
    }
    rc = s_make (self, spec, err);
out:
    pthread_mutex_unlock (&self->lock);
    return rc;
}

static int s_start (ah_driver_t *driver, const ah_boot_t *boot, char **err)
{
    const char *agent_id = boot ? boot->agent_id : NULL;
    ENTER ("start");
    //  A start of a running sandbox: its old sandboxd ends first, with
    //  the lock let go meanwhile (see DESIGN).
    while ((gone = s_instance_take (self, agent_id))) {
        pthread_mutex_unlock (&self->lock);
        s_instance_end (self, &gone);
        pthread_mutex_lock (&self->lock);
    }
    if (!s_exists (self, agent_id)) {
        s_set_err (err, ah_strf ("fake: no sandbox %s (create it first)", agent_id));
        goto out;
    }
    //  Same document as the docker driver writes into the container.
    char *path = s_path (self, agent_id, "boot.json");
    char *json = ah_strf ("{\"agent_id\": \"%s\", \"token\": \"%s\", "
                           "\"tunnel_url\": \"ws://127.0.0.1:%d/tunnel\"}\n",
                           agent_id, boot->token ? boot->token : "", boot->tunnel_port);
    if (!path || !json || ah_file_put (path, json, strlen (json), 0600, false)) {
        s_set_err (err, ah_strf ("fake: cannot write %s: %s", path ? path : "boot.json", strerror (errno)));
        free (path);
        free (json);
        goto out;
    }
    free (path);
    free (json);
    if (s_instance_start (self, agent_id, err) == 0)
        rc = s_set_state (self, agent_id, "running", err);
out:
    pthread_mutex_unlock (&self->lock);
    return rc;
}

static int s_stop (ah_driver_t *driver, const char *agent_id, char **err)
{
    ENTER ("stop");
    if (!s_exists (self, agent_id)) {
        s_set_err (err, ah_strf ("fake: no sandbox %s", agent_id));
        goto out;
    }
    char line [STATE_MAX] = "";
    char *path = s_path (self, agent_id, "state");
    if (path)
        s_read_line (path, line, sizeof line);
    free (path);
    gone = s_instance_take (self, agent_id);
    //  Like `docker stop`: the init process ends on SIGTERM, exit 143.
    rc = strcmp (line, "running") == 0 || strcmp (line, "paused") == 0
       ? s_set_state (self, agent_id, "exited 143", err) : 0;
out:
    pthread_mutex_unlock (&self->lock);
    s_instance_end (self, &gone);
    return rc;
}

//  Freeze and thaw mark the state only ("paused" / "running"): the
//  in-process sandboxd goes on answering (a fake cannot stop a thread
//  where it stands), which is what lifecycle's tests need.
static int s_pause (ah_driver_t *driver, const char *agent_id, bool pause, char **err)
{
    ENTER (pause ? "freeze" : "thaw");
    char line [STATE_MAX] = "";
    char *path = s_path (self, agent_id, "state");
    if (path)
        s_read_line (path, line, sizeof line);
    free (path);
    if (strcmp (line, "running") != 0 && strcmp (line, "paused") != 0)
        s_set_err (err, ah_strf ("fake: sandbox %s is not running (%s)", agent_id, *line ? line : "absent"));
    else
        rc = s_set_state (self, agent_id, pause ? "paused" : "running", err);
out:
    pthread_mutex_unlock (&self->lock);
    return rc;
}

static int s_freeze (ah_driver_t *driver, const char *agent_id, char **err)
{
    return s_pause (driver, agent_id, true, err);
}

static int s_thaw (ah_driver_t *driver, const char *agent_id, char **err)
{
    return s_pause (driver, agent_id, false, err);
}

static int s_rebuild (ah_driver_t *driver, const ah_sandbox_spec_t *spec, char **err)
{
    const char *agent_id = spec ? spec->agent_id : NULL;
    ENTER ("rebuild");
    //  Recreated from the spec (stopped); the home (if any) stays.
    gone = s_instance_take (self, agent_id);
    rc = s_make (self, spec, err);
out:
    pthread_mutex_unlock (&self->lock);
    s_instance_end (self, &gone);
    return rc;
}

//  The "container" of a fake sandbox is its image file and its state:
//  removing it keeps the home; rebuild makes it again.
static int s_remove_container (ah_driver_t *driver, const char *agent_id, char **err)
{
    ENTER ("remove_container");
    gone = s_instance_take (self, agent_id);
    char *image = s_path (self, agent_id, "image");
    if (image && unlink (image) && errno != ENOENT)
        s_set_err (err, ah_strf ("fake: cannot remove %s: %s", image, strerror (errno)));
    else if (image && s_exists (self, agent_id))
        rc = s_set_state (self, agent_id, "removed", err);
    else
        rc = image ? 0 : (s_set_err (err, NULL), -1);
    free (image);
out:
    pthread_mutex_unlock (&self->lock);
    s_instance_end (self, &gone);
    return rc;
}

static int s_rm_one (const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void) st; (void) ftw;
    int rc = type == FTW_DP ? rmdir (path) : unlink (path);
    return rc && errno != ENOENT ? -1 : 0;
}

static int s_destroy (ah_driver_t *driver, const char *agent_id, char **err)
{
    ENTER ("destroy");
    //  Its sandboxd ends before its home goes, with the lock let go.
    while ((gone = s_instance_take (self, agent_id))) {
        pthread_mutex_unlock (&self->lock);
        s_instance_end (self, &gone);
        pthread_mutex_lock (&self->lock);
    }
    char *dir = s_path (self, agent_id, NULL);
    struct stat st;
    if (!dir)
        s_set_err (err, NULL);
    else if (lstat (dir, &st) && errno == ENOENT)
        rc = 0;                         //  absent is success
    else if (nftw (dir, s_rm_one, 16, FTW_DEPTH | FTW_PHYS))
        s_set_err (err, ah_strf ("fake: cannot remove %s: %s", dir, strerror (errno)));
    else
        rc = 0;
    free (dir);
out:
    pthread_mutex_unlock (&self->lock);
    return rc;
}

static int s_inspect (ah_driver_t *driver, const char *agent_id, ah_sandbox_status_t *status, char **err)
{
    if (!status) {
        s_set_err (err, strdup ("fake: inspect needs a status"));
        return -1;
    }
    memset (status, 0, sizeof *status);
    status->exit_code = -1;
    ENTER ("inspect");
    rc = 0;
    status->exists = s_exists (self, agent_id);
    if (!status->exists) {
        status->home_gone = true;           //  the sandbox is its home directory
        snprintf (status->detail, sizeof status->detail, "absent");
        goto out;
    }
    char line [STATE_MAX] = "";
    char *path = s_path (self, agent_id, "state");
    if (path)
        s_read_line (path, line, sizeof line);
    free (path);
    int code;
    if (strcmp (line, "running") == 0)
        status->running = true;
    else if (strcmp (line, "paused") == 0)
        status->running = status->paused = true;
    else if (sscanf (line, "exited %d", &code) == 1)
        status->exit_code = code;
    snprintf (status->detail, sizeof status->detail, "%s", *line ? line : "unknown");
out:
    pthread_mutex_unlock (&self->lock);
    return rc;
}

static int s_list (ah_driver_t *driver, char ***ids, char **err)
{
    fake_t *self = driver->impl;
    *ids = NULL;
    pthread_mutex_lock (&self->lock);
    int rc = -1;
    size_t count = 0, cap = 16;
    char **list = calloc (cap + 1, sizeof *list);
    DIR *dir = opendir (self->root);
    if (!list || !dir) {
        s_set_err (err, ah_strf ("fake: cannot list %s: %s", self->root, strerror (errno)));
        goto out;
    }
    struct dirent *ent;
    while ((ent = readdir (dir))) {
        if (!ah_ident_ok (AH_IDENT_AGENT_ID, ent->d_name) || !s_exists (self, ent->d_name))
            continue;
        if (count == cap) {
            char **bigger = realloc (list, (2 * cap + 1) * sizeof *list);
            if (!bigger) {
                s_set_err (err, NULL);
                goto out;
            }
            list = bigger;
            cap *= 2;
        }
        if (!(list [count] = strdup (ent->d_name))) {
            s_set_err (err, NULL);
            goto out;
        }
        list [++count] = NULL;
    }
    *ids = list;
    list = NULL;
    rc = 0;
out:
    if (dir)
        closedir (dir);
    ah_driver_free_ids (&list);
    pthread_mutex_unlock (&self->lock);
    return rc;
}

//  In-process sandboxd threads die with the process that ran them: a
//  sandbox recorded running by a previous server is stopped now (as if
//  by `docker stop`), and the reconciler/lifecycle see it so.
static void s_settle (fake_t *self)
{
    DIR *dir = opendir (self->root);
    struct dirent *ent;
    while (dir && (ent = readdir (dir))) {
        char line [STATE_MAX] = "";
        char *path = ah_ident_ok (AH_IDENT_AGENT_ID, ent->d_name) ? s_path (self, ent->d_name, "state") : NULL;
        if (path && s_read_line (path, line, sizeof line) == 0 && strcmp (line, "running") == 0)
            s_set_state (self, ent->d_name, "exited 143", NULL);
        free (path);
    }
    if (dir)
        closedir (dir);
}

static void s_destroy_driver (ah_driver_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_driver_t *driver = *self_p;
    fake_t *self = driver->impl;
    if (self) {
        s_instance_t *gone;
        while (self->instances && (gone = s_instance_take (self, self->instances->id)))
            s_instance_end (self, &gone);
        pthread_mutex_destroy (&self->lock);
        free (self->root);
        free (self);
    }
    free (driver);
    *self_p = NULL;
}

ah_driver_t *ah_fake_driver_new (const ah_config_t *config, char **err)
{
    if (err)
        *err = NULL;
    if (!config || !config->data_dir || !*config->data_dir) {
        s_set_err (err, strdup ("fake driver: server.data_dir is not set"));
        return NULL;
    }
    ah_driver_t *driver = calloc (1, sizeof *driver);
    fake_t *self = calloc (1, sizeof *self);
    if (!driver || !self) {
        free (driver);
        free (self);
        s_set_err (err, NULL);
        return NULL;
    }
    pthread_mutex_init (&self->lock, NULL);
    driver->impl = self;
    driver->name = "fake";
    driver->waits_for_hello = true;     //  running = sandboxd said hello over the tunnel
    driver->create = s_create;
    driver->start = s_start;
    driver->stop = s_stop;
    driver->freeze = s_freeze;
    driver->thaw = s_thaw;
    driver->rebuild = s_rebuild;
    driver->destroy = s_destroy;
    driver->inspect = s_inspect;
    driver->list = s_list;
    driver->destroy_driver = s_destroy_driver;
    driver->remove_container = s_remove_container;
    self->root = ah_strf ("%s/fake", config->data_dir);
    if (!self->root || s_mkdir_p (self->root, 0700)) {
        s_set_err (err, ah_strf ("fake driver: cannot make %s/fake: %s", config->data_dir, strerror (errno)));
        s_destroy_driver (&driver);
        return NULL;
    }
    self->external = config->fake_sandboxd && strcmp (config->fake_sandboxd, "external") == 0;
    if (self->external)
        ah_warn ("fake", "sandbox.fake_sandboxd = external: no sandboxd runs in this process; a start "
                 "writes boot.json and waits for a sandboxd started by someone else to say hello");
    s_settle (self);
    ah_warn ("fake", "the fake driver is for development and tests only: sandboxes are "
             "directories under %s and nothing in them is isolated", self->root);
    return driver;
}
