/*  tests/lifecycle/test_fake.c: the driver factory and the fake driver
    alone: its files, its refusals, failure injection, calls from many
    threads at once, and what a second driver on the same directory sees. */
#include "drivers/driver.h"
#include "drivers/fake.h"
#include "common/token.h"
#include "tests/common/check.h"

#define streq(a, b) (strcmp ((a), (b)) == 0)

#include <ftw.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char s_dir [64];

static char *s_path (const char *a, const char *b)
{
    char *p = NULL;
    if (asprintf (&p, "%s/fake/%s%s%s", s_dir, a, b ? "/" : "", b ? b : "") < 0)
        return NULL;
    return p;
}

static bool s_exists (const char *a, const char *b)
{
    char *p = s_path (a, b);
    struct stat st;
    bool yes = p && stat (p, &st) == 0;
    free (p);
    return yes;
}

static void s_put (const char *path, const char *text)
{
    FILE *f = fopen (path, "w");
    if (f) {
        fputs (text, f);
        fclose (f);
    }
}

static bool s_fails_with (int rc, char **err, const char *words)
{
    bool yes = rc == -1 && *err && strstr (*err, words);
    if (!yes)
        fprintf (stderr, "  wanted failure with '%s', got rc %d err '%s'\n", words, rc, *err ? *err : "");
    free (*err);
    *err = NULL;
    return yes;
}

typedef struct {
    ah_driver_t *d;
    int n;
    int failures;
} worker_t;

static void *s_worker (void *arg)
{
    worker_t *w = arg;
    char id [32];
    snprintf (id, sizeof id, "00000000%04x", w->n);
    ah_sandbox_spec_t spec = { .agent_id = id, .image = "img", .cpus = 1, .memory_mb = 64, .pids_limit = 10 };
    ah_boot_t boot = { .agent_id = id, .token = "t0k3n", .tunnel_port = 18402 };
    for (int round = 0; round < 20; round++) {
        char *err = NULL;
        ah_sandbox_status_t st;
        if (w->d->create (w->d, &spec, &err) || w->d->start (w->d, &boot, &err)
                || w->d->inspect (w->d, id, &st, &err) || !st.running
                || w->d->stop (w->d, id, &err) || w->d->destroy (w->d, id, &err))
            w->failures++;
        free (err);
    }
    return NULL;
}

typedef struct {
    ah_driver_t *d;
    const char *id;
    int rc;
} stopper_t;

static void *s_stopper (void *arg)
{
    stopper_t *s = arg;
    char *err = NULL;
    s->rc = s->d->stop (s->d, s->id, &err);
    free (err);
    return NULL;
}

static int64_t s_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

//  A sandboxd slow to end (its terminals, under load) holds up its own
//  stop only: the other agents' calls go on meanwhile (the driver's lock
//  is not held while the thread is joined).
static void s_slow_stop (ah_driver_t *d)
{
    char token [AH_TOKEN_HEX];
    CHECK (ah_token_new (token) == 0);
    const char *slow = "5105105105aa", *other = "5105105105bb";
    char *err = NULL;
    for (int i = 0; i < 2; i++) {
        const char *id = i ? other : slow;
        ah_sandbox_spec_t spec = { .agent_id = id, .image = "img", .cpus = 1, .memory_mb = 64, .pids_limit = 10 };
        ah_boot_t boot = { .agent_id = id, .token = token, .tunnel_port = 18402 };
        CHECK (d->create (d, &spec, &err) == 0 && d->start (d, &boot, &err) == 0);
    }
    char *hook = s_path (slow, "slow-stop");
    s_put (hook, "3000\n");
    free (hook);
    stopper_t stopper = { d, slow, -1 };
    pthread_t thread;
    int64_t t0 = s_ms ();
    CHECK (pthread_create (&thread, NULL, s_stopper, &stopper) == 0);
    usleep (300 * 1000);                //  the slow stop is joining its sandboxd now
    ah_sandbox_status_t st;
    int64_t t1 = s_ms ();
    CHECK (d->inspect (d, other, &st, &err) == 0 && st.running);
    CHECK (d->stop (d, other, &err) == 0);
    CHECK (d->inspect (d, other, &st, &err) == 0 && !st.running);
    int64_t took = s_ms () - t1;
    if (took >= 1500)
        fprintf (stderr, "  another agent's calls waited %lld ms for a slow stop\n", (long long) took);
    CHECK (took < 1500);
    pthread_join (thread, NULL);
    CHECK (stopper.rc == 0 && s_ms () - t0 >= 3000);
    CHECK (d->inspect (d, slow, &st, &err) == 0 && !st.running && st.exit_code == 143);
    CHECK (d->destroy (d, slow, &err) == 0 && d->destroy (d, other, &err) == 0);
    free (err);
}

static int s_rm (const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    return remove (path);
}

int main (void)
{
    snprintf (s_dir, sizeof s_dir, "/tmp/ah-fake-XXXXXX");
    if (!mkdtemp (s_dir))
        return 1;
    ah_config_t config = { .data_dir = s_dir, .driver = "fake", .tunnel_listen = ":18402" };
    char *err = NULL;

    //  The factory.
    config.driver = "nope";
    CHECK (ah_driver_new (&config, &err) == NULL && err && strstr (err, "'nope'"));
    free (err);
    err = NULL;
    config.driver = "fake";
    ah_driver_t *d = ah_driver_new (&config, &err);
    CHECK (d && streq (d->name, "fake"));
    if (!d)
        return 1;

    //  Ids that would leave the directory are refused.
    const char *bad [] = { "../etc", "", "UPPER", "a/b", ".", "0123456789abc", "../../../x", "abc123abc12/" };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        ah_sandbox_spec_t spec = { .agent_id = bad [i], .image = "img", .cpus = 1, .memory_mb = 64, .pids_limit = 10 };
        CHECK (s_fails_with (d->create (d, &spec, &err), &err, "must be 12 hexadecimal digits"));
        CHECK (s_fails_with (d->destroy (d, bad [i], &err), &err, "must be 12 hexadecimal digits"));
    }

    //  create -> start -> stop -> rebuild -> destroy, and what inspect says.
    ah_sandbox_spec_t spec = { .agent_id = "abc123abc123", .image = "debian:bookworm-slim", .cpus = 2, .memory_mb = 4096, .pids_limit = 100 };
    ah_sandbox_status_t st;
    CHECK (d->inspect (d, "abc123abc123", &st, &err) == 0 && !st.exists && !st.running);
    CHECK (d->start ? s_fails_with (d->start (d, &(ah_boot_t) { .agent_id = "abc123abc123", .token = "t", .tunnel_port = 1 }, &err), &err,
                                    "create it first") : false);
    CHECK (d->create (d, &spec, &err) == 0);
    CHECK (s_exists ("abc123abc123", "home"));
    CHECK (s_fails_with (d->create (d, &spec, &err), &err, "exists already"));
    CHECK (d->inspect (d, "abc123abc123", &st, &err) == 0 && st.exists && !st.running);
    CHECK (streq (st.detail, "created"));
    char token [AH_TOKEN_HEX];
    CHECK (ah_token_new (token) == 0);
    ah_boot_t boot = { .agent_id = "abc123abc123", .token = token, .tunnel_port = 18402 };
    CHECK (d->start (d, &boot, &err) == 0);
    CHECK (d->inspect (d, "abc123abc123", &st, &err) == 0 && st.running);
    char *boot_path = s_path ("abc123abc123", "boot.json");
    struct stat bs;
    CHECK (boot_path && stat (boot_path, &bs) == 0 && (bs.st_mode & 0777) == 0600);
    FILE *f = boot_path ? fopen (boot_path, "r") : NULL;
    char text [512] = "";
    if (f) {
        size_t n = fread (text, 1, sizeof text - 1, f);
        text [n] = 0;
        fclose (f);
    }
    CHECK (strstr (text, token) && strstr (text, "\"tunnel_url\": \"ws://127.0.0.1:18402/tunnel\""));
    free (boot_path);
    char **ids = NULL;
    CHECK (d->list (d, &ids, &err) == 0 && ids && ids [0] && streq (ids [0], "abc123abc123") && !ids [1]);
    ah_driver_free_ids (&ids);
    CHECK (ids == NULL);

    //  Injected failure, global and then per sandbox; gone when the file is.
    char *fail_root = NULL, *fail_one = s_path ("abc123abc123", "fail-stop");
    CHECK (asprintf (&fail_root, "%s/fake/fail-stop", s_dir) > 0);
    s_put (fail_root, "engine on strike\n");
    CHECK (s_fails_with (d->stop (d, "abc123abc123", &err), &err, "engine on strike"));
    unlink (fail_root);
    s_put (fail_one, "only this one");
    CHECK (s_fails_with (d->stop (d, "abc123abc123", &err), &err, "only this one"));
    unlink (fail_one);
    free (fail_root);
    free (fail_one);
    CHECK (d->stop (d, "abc123abc123", &err) == 0);
    CHECK (d->inspect (d, "abc123abc123", &st, &err) == 0 && !st.running && st.exit_code == 143);
    CHECK (d->stop (d, "abc123abc123", &err) == 0);          //  stopping a stopped one is fine

    //  Rebuild keeps the home.
    char *keep = s_path ("abc123abc123", "home/notes.txt");
    s_put (keep, "keep me");
    spec.image = "busybox:latest";
    CHECK (d->rebuild (d, &spec, &err) == 0);
    CHECK (access (keep, F_OK) == 0);
    free (keep);
    CHECK (d->inspect (d, "abc123abc123", &st, &err) == 0 && st.exists && !st.running);

    //  A second driver on the same directory sees the same sandboxes; with
    //  in-process sandboxd (waits_for_hello) a sandbox that ran in the
    //  first counts as stopped in the second.
    CHECK (d->start (d, &boot, &err) == 0);
    ah_driver_t *d2 = ah_fake_driver_new (&config, &err);
    CHECK (d2 != NULL);
    if (d2) {
        CHECK (d2->inspect (d2, "abc123abc123", &st, &err) == 0 && st.exists);
        CHECK (d->waits_for_hello ? (!st.running && st.exit_code == 143) : st.running);
        d2->destroy_driver (&d2);
        CHECK (d2 == NULL);
    }

    CHECK (d->destroy (d, "abc123abc123", &err) == 0);
    CHECK (!s_exists ("abc123abc123", NULL));
    CHECK (d->destroy (d, "abc123abc123", &err) == 0);       //  absent is success

    s_slow_stop (d);

    //  Many threads at once, each on its own sandboxes.
    pthread_t threads [8];
    worker_t workers [8];
    for (int i = 0; i < 8; i++) {
        workers [i] = (worker_t) { d, i, 0 };
        pthread_create (&threads [i], NULL, s_worker, &workers [i]);
    }
    int failures = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join (threads [i], NULL);
        failures += workers [i].failures;
    }
    CHECK (failures == 0);
    CHECK (d->list (d, &ids, &err) == 0 && ids && !ids [0]);
    ah_driver_free_ids (&ids);

    d->destroy_driver (&d);
    CHECK (d == NULL);
    nftw (s_dir, s_rm, 16, FTW_DEPTH | FTW_PHYS);
    return CHECK_DONE ();
}
