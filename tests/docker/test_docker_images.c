/*  tests/docker/test_docker_images.c: the Docker driver's image hooks for
    the builder: image_exists, image_build from a context plus host files
    (the catalog's busybox runtime), a failing build and a failing pull
    with the engine's reason, the stop flag, and bad references.      */
#include "drivers/docker.h"
#include "common/ident.h"
#include "../common/check.h"
#include "engine.h"

int
main (void)
{
    if (!eng_available ())
        return eng_skip ("docker.images");
    eng_fixture_t fx;
    ah_driver_t *d = NULL;
    char *err = NULL;
    char built [160], ctx [192], cmd [512];
    if (eng_fixture_init (&fx, "ahimg", "10.213.80.0/20")) {
        CHECK (0);
        goto cleanup;
    }
    snprintf (built, sizeof built, "agenthold-test:%s-busybox", fx.prefix);
    d = ah_docker_driver_new (&fx.config, &err);
    CHECK (d && d->image_exists && d->image_build);
    if (!d)
        goto cleanup;

    bool exists = false;
    CHECK (d->image_exists (d, fx.tag, &exists, &err) == 0 && exists);
    CHECK (d->image_exists (d, "agenthold-no-such-image:nope", &exists, &err) == 0 && !exists);
    CHECK (d->image_exists (d, "bad image!", &exists, &err) == -1
           && strstr (err, ah_ident_check (AH_IDENT_IMAGE, "bad image!")));

    //  The catalog's busybox runtime: context dir + /bin/busybox as a host file.
    const char *names [] = { "busybox" };
    const char *paths [] = { "/bin/busybox" };
    char context [256];
    snprintf (context, sizeof context, "%s/catalog/images/busybox", AH_SOURCE_DIR);
    ah_image_build_t b = { .image = built, .context_dir = context,
                           .file_names = names, .file_paths = paths, .n_files = 1 };
    double t0 = eng_now ();
    int rc = d->image_build (d, &b, NULL, &err);
    CHECK (rc == 0);
    if (rc)
        fprintf (stderr, "build: %s\n", err);
    fprintf (stderr, "busybox runtime image built in %.2f s\n", eng_now () - t0);
    CHECK (d->image_exists (d, built, &exists, &err) == 0 && exists);
    //  It is a working sandbox image: the driver runs a sandbox from it.
    ah_sandbox_spec_t spec = { .agent_id = "0000000000d1", .image = built };
    CHECK (d->create (d, &spec, &err) == 0);
    ah_boot_t boot = { .agent_id = "0000000000d1", .token = "t", .tunnel_port = 18311 };
    CHECK (d->start (d, &boot, &err) == 0);
    char cname [160];
    snprintf (cname, sizeof cname, "%s-0000000000d1", fx.prefix);
    int code;
    char *out = eng_exec (cname, "[\"grep\",\"^agent:\",\"/etc/passwd\"]", &code);
    CHECK (code == 0 && out && strstr (out, "agent:x:1000"));
    free (out);
    CHECK (d->destroy (d, "0000000000d1", &err) == 0);

    //  A build that fails says why, in the engine's words.
    snprintf (ctx, sizeof ctx, "%s/badctx", fx.dir);
    mkdir (ctx, 0755);
    snprintf (cmd, sizeof cmd, "printf 'FROM scratch\\nCOPY missing-file /x\\n' > %s/Dockerfile", ctx);
    CHECK (system (cmd) == 0);
    ah_image_build_t bad = { .image = "agenthold-test:never", .context_dir = ctx };
    free (err);
    err = NULL;
    CHECK (d->image_build (d, &bad, NULL, &err) == -1);
    CHECK (err && strstr (err, "building image 'agenthold-test:never'") && strstr (err, "missing-file"));
    fprintf (stderr, "failed build says: %s\n", err ? err : "");
    //  A missing host file is named.
    const char *gone [] = { "/nonexistent/busybox" };
    b.file_paths = gone;
    free (err);
    err = NULL;
    CHECK (d->image_build (d, &b, NULL, &err) == -1 && err && strstr (err, "/nonexistent/busybox"));
    //  A pull with no registry reachable fails with the engine's reason.
    ah_image_build_t pull = { .image = "agenthold-no-such.invalid/nothing:1" };
    free (err);
    err = NULL;
    t0 = eng_now ();
    CHECK (d->image_build (d, &pull, NULL, &err) == -1);
    CHECK (err && strstr (err, "pulling image 'agenthold-no-such.invalid/nothing:1'") && !strstr (err, "no message"));
    fprintf (stderr, "failed pull says (%.1f s): %s\n", eng_now () - t0, err ? err : "");
    //  Told to stop: gives up at once.
    volatile int stop = 1;
    free (err);
    err = NULL;
    b.file_paths = paths;
    CHECK (d->image_build (d, &b, &stop, &err) == -1 && err && strstr (err, "stopped"));

cleanup:
    if (d)
        d->destroy_driver (&d);
    free (err);
    eng_remove_image (built);
    CHECK (eng_fixture_cleanup (&fx) == 0);
    return CHECK_DONE ();
}
