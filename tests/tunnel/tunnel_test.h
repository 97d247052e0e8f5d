/*  tests/tunnel/tunnel_test.h: what the tunnel actor's tests share (one
    program each includes it once): the database file they set up and
    change behind the actor's back, and waiting for a bus message.      */
#ifndef AH_TEST_TUNNEL_TEST_H
#define AH_TEST_TUNNEL_TEST_H

#include "common/msg.h"
#include "store/store.h"
#include "../common/check.h"

#include "config/config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static char s_dir [256];            //  the test's directory
static char s_db [300];             //  the test's database file (migrated)

//  The directory (/tmp/ah-test-NAME-XXXXXX), its database and an empty
//  home in it (its path into home): 0, or -1.
static int s_setup (const char *name, char *home, size_t home_size)
{
    zsys_init ();
    zsys_handler_set (NULL);
    snprintf (s_dir, sizeof s_dir, "/tmp/ah-test-%s-XXXXXX", name);
    if (!mkdtemp (s_dir))
        return -1;
    snprintf (s_db, sizeof s_db, "%s/agenthold.db", s_dir);
    snprintf (home, home_size, "%s/home", s_dir);
    mkdir (home, 0700);
    char *err = NULL;
    ah_store_t *st = ah_store_open (s_db, true, &err);
    CHECK (st != NULL);
    free (err);
    ah_store_close (&st);
    return 0;
}

//  A configuration for the actor under test: TCP on 127.0.0.1 (the OS
//  picks the port), the test's directory, the shipped catalog and rules.
static ah_config_t *s_config (void)
{
    ah_config_t *config = ah_config_new_defaults ();
    free (config->tunnel_listen);
    config->tunnel_listen = strdup ("127.0.0.1:0");
    free (config->data_dir);
    config->data_dir = strdup (s_dir);
    free (config->catalog_path);
    config->catalog_path = strdup (AH_SOURCE_DIR "/catalog/runtimes.json");
    free (config->lua_dir);
    config->lua_dir = strdup (AH_SOURCE_DIR "/lua");
    return config;
}

//  The end: the directory removed; what main returns.
static int s_teardown (void)
{
    char rm [400];
    snprintf (rm, sizeof rm, "rm -rf '%s'", s_dir);
    if (system (rm))
        fprintf (stderr, "could not remove %s\n", s_dir);
    return CHECK_DONE ();
}

//  One SQL statement on s_db (printf-style); a failure fails the test.
static void s_sql (const char *fmt, ...)
{
    char sql [1024];
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (sql, sizeof sql, fmt, ap);
    va_end (ap);
    char *err = NULL;
    ah_store_t *st = ah_store_open (s_db, false, &err);
    if (!st || ah_store_exec (st, sql, &err)) {
        fprintf (stderr, "sql failed: %s: %s\n", sql, err ? err : "?");
        CHECK (false);
    }
    free (err);
    ah_store_close (&st);
}

//  Next message of type on sock within ms (others are printed and skipped).
static ah_msg_t *s_expect (zsock_t *sock, const char *type, int ms)
{
    int64_t end = zclock_mono () + ms;
    while (zclock_mono () < end) {
        zsock_set_rcvtimeo (sock, (int) (end - zclock_mono ()) + 1);
        ah_msg_t *m = ah_msg_recv (sock, true, NULL);
        if (!m)
            continue;
        if (streq (ah_msg_type (m), type))
            return m;
        fprintf (stderr, "(skipped %s while waiting for %s)\n", ah_msg_type (m), type);
        ah_msg_destroy (&m);
    }
    fprintf (stderr, "no %s within %d ms\n", type, ms);
    return NULL;
}

#endif
