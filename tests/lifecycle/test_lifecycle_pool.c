/*  tests/lifecycle/test_lifecycle_pool.c: warm pools (issue 31) on the
    lifecycle actor alone, with the harness of test_lifecycle.c (the fake
    driver counted, the bus, a real SQLite file) and a Lua directory of
    its own whose pool.lua the test rewrites: the pool fills; a create of
    the pool's shape takes a warm sandbox (running at once, no driver call,
    its own home and boot token, a tenant's from then on) and the pool
    refills; another shape is a cold create; warm sandboxes count against
    no tenant's limits; a smaller size drains; the actor stopped with a
    pool half made and started again leaves every sandbox the driver holds
    accounted for by a row, and the pool full again; a catalog changed
    across a restart drains the old shape and refills in the new; a warm
    sandbox that fails is drained and pauses the making of new ones; a
    runtime's image made again (RUNTIME_IMAGE, another image id) drains
    the warm sandboxes of the old one and not a taken agent; a frozen
    pool freezes its warm sandboxes and a take thaws one.              */
#include "tests/lifecycle/lc_harness.h"

#include <dirent.h>
#include <fcntl.h>

static char s_lua [128];

static void s_pool_lua (int size, bool frozen)
{
    char *path = zsys_sprintf ("%s/pool.lua", s_lua);
    char *text = zsys_sprintf ("-- test pool.lua\nfunction size(runtime, clock)\n"
                               "  if runtime.default then return { size = %d, frozen = %s } end\n"
                               "  return { size = 0 }\nend\n", size, frozen ? "true" : "false");
    lc_write (path, text);
    //  The policy host sees a change by the file's mtime and size: each
    //  version gets an mtime of its own, even within one second.
    static time_t s_version;
    if (!s_version)
        s_version = time (NULL);
    s_version += 10;
    struct timespec times [2] = { { 0, UTIME_NOW }, { s_version, 0 } };
    utimensat (AT_FDCWD, path, times, 0);
    zstr_free (&path);
    zstr_free (&text);
}

static void s_pool_size (int size)
{
    s_pool_lua (size, false);
}

static int64_t s_warm (const char *state)
{
    char sql [256];
    snprintf (sql, sizeof sql, "SELECT count(*) FROM agents a JOIN sandboxes s ON s.agent_id = a.id"
              " WHERE a.pool = 'debian' AND a.tenant = '' AND s.state %s AND :id IS NULL", state);
    return lc_count (sql, NULL);
}

static bool s_wait_warm (const char *state, int64_t n, int ms)
{
    int64_t until = zclock_mono () + ms;
    while (zclock_mono () < until) {
        if (s_warm (state) == n)
            return true;
        zclock_sleep (20);
    }
    fprintf (stderr, "  warm rows %s: %lld, want %lld\n", state, (long long) s_warm (state), (long long) n);
    return false;
}

//  Every sandbox the fake driver holds (a directory under fake/) has its
//  row: nothing orphaned.
static bool s_all_accounted (void)
{
    char *dir = zsys_sprintf ("%s/fake", lc_dir);
    DIR *d = opendir (dir);
    zstr_free (&dir);
    bool ok = d != NULL;
    for (struct dirent *e = d ? readdir (d) : NULL; e; e = readdir (d)) {
        if (strlen (e->d_name) != 12 || strspn (e->d_name, "0123456789abcdef") != 12)
            continue;                       //  ".", "..", the driver's own files
        char *state = lc_col (e->d_name, "state");
        if (!state) {
            fprintf (stderr, "  the driver holds %s, which no row knows\n", e->d_name);
            ok = false;
        }
        free (state);
    }
    if (d)
        closedir (d);
    return ok;
}

static char *s_create (const char *name, const char *tenant, int64_t memory_mb, ah_msg_t **reply_p)
{
    ah_msg_t *m = ah_msg_new ("AGENT_CREATE");
    ah_msg_set_str (m, "name", name);
    ah_msg_set_str (m, "tenant", tenant);
    if (memory_mb > 0)
        ah_msg_set_int (m, "memory_mb", memory_mb);
    ah_msg_t *reply = lc_call (m);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 201);
    char *id = reply && ah_msg_str (reply, "agent_id") ? strdup (ah_msg_str (reply, "agent_id")) : NULL;
    *reply_p = reply;
    return id;
}

static void s_test_fill_and_take (void)
{
    //  The pool fills: two warm sandboxes of the default runtime, made and
    //  started by the actor, no tenant's.
    CHECK (s_wait_warm ("= 'running'", 2, 5000));
    CHECK (atomic_load (&lc_drv.creates) == 2 && atomic_load (&lc_drv.starts) == 2);
    CHECK (lc_count ("SELECT count(*) FROM agents WHERE pool IS NOT NULL AND (tenant <> '' OR name NOT LIKE"
                     " 'warm-%') AND :id IS NULL", NULL) == 0);
    char warm_hash [2][AH_TOKEN_HEX + 1] = { "", "" };
    sqlite3_stmt *st = ah_store_prepare (lc_store, "SELECT s.boot_token_hash FROM agents a JOIN sandboxes s"
                                         " ON s.agent_id = a.id WHERE a.pool IS NOT NULL ORDER BY a.id");
    for (int i = 0; i < 2 && ah_store_step (lc_store, st) == SQLITE_ROW; i++)
        snprintf (warm_hash [i], sizeof warm_hash [i], "%s", (const char *) sqlite3_column_text (st, 0));
    sqlite3_reset (st);
    CHECK (strlen (warm_hash [0]) == 64 && strlen (warm_hash [1]) == 64 && !streq (warm_hash [0], warm_hash [1]));

    //  A create of the default shape takes one: running at once, no
    //  driver call of its own, the tenant's from now on.
    int creates = atomic_load (&lc_drv.creates), starts = atomic_load (&lc_drv.starts);
    ah_msg_t *reply = NULL;
    char *id = s_create ("taker", "acme", 0, &reply);
    CHECK (reply && streq (ah_msg_str (reply, "state"), "running") && ah_msg_bool (reply, "warm", false));
    ah_msg_destroy (&reply);
    CHECK (id != NULL);
    if (!id)
        return;
    CHECK (lc_saw_event (id, "running", NULL, 0));
    CHECK (lc_col_is (id, "state", "running"));
    CHECK (lc_count ("SELECT count(*) FROM agents WHERE id = :id AND tenant = 'acme' AND name = 'taker'"
                     " AND pool IS NULL AND runtime = 'debian'", id) == 1);
    CHECK (atomic_load (&lc_drv.starts) == starts);
    //  Its boot token is the one made for it alone; its home is empty.
    char *hash = lc_col (id, "boot_token_hash");
    CHECK (hash && (streq (hash, warm_hash [0]) || streq (hash, warm_hash [1])));
    char *home = lc_fake_path (id, "home");
    zdir_t *d = zdir_new (home, NULL);
    CHECK (d && zdir_count (d) == 0);
    zdir_destroy (&d);
    free (home);
    //  Its idle clock started.
    CHECK (lc_count ("SELECT count(*) FROM sandboxes WHERE agent_id = :id AND last_activity_at IS NOT NULL", id) == 1);

    //  The pool refills in the background; the new one's token is its own.
    CHECK (s_wait_warm ("= 'running'", 2, 5000));
    CHECK (atomic_load (&lc_drv.creates) == creates + 1);
    CHECK (lc_count ("SELECT count(*) FROM sandboxes WHERE boot_token_hash = (SELECT boot_token_hash"
                     " FROM sandboxes WHERE agent_id = :id)", id) == 1);
    free (hash);

    //  The same name in the same tenant is still refused (409), warm pool or not.
    ah_msg_t *m = ah_msg_new ("AGENT_CREATE");
    ah_msg_set_str (m, "name", "taker");
    ah_msg_set_str (m, "tenant", "acme");
    reply = lc_call (m);
    CHECK (lc_status (&reply) == 409);

    //  Another shape is a cold create, as before.
    char *cold = s_create ("cold", "acme", 512, &reply);
    CHECK (reply && streq (ah_msg_str (reply, "state"), "creating") && !ah_msg_bool (reply, "warm", false));
    ah_msg_destroy (&reply);
    CHECK (cold && lc_wait_state (cold, "running", 5000));
    CHECK (s_warm ("= 'running'") == 2);

    //  Warm sandboxes count against no tenant: a tenant allowed one
    //  running sandbox takes one warm sandbox, and is refused a second.
    CHECK (lc_sql ("INSERT OR REPLACE INTO tenants (name, max_running) SELECT 'solo', 1 WHERE :id IS NULL",
                   NULL) == 0);
    char *one = s_create ("one", "solo", 0, &reply);
    CHECK (reply && ah_msg_bool (reply, "warm", false));
    ah_msg_destroy (&reply);
    m = ah_msg_new ("AGENT_CREATE");
    ah_msg_set_str (m, "name", "two");
    ah_msg_set_str (m, "tenant", "solo");
    reply = lc_call (m);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 422
           && strstr (ah_msg_str (reply, "error"), "already holds 1 of 1 running"));
    ah_msg_destroy (&reply);
    free (one);
    free (cold);
    free (id);

    //  POOL_LIST: the pool's size; two takes (taker, one) and one create
    //  that found none (cold: another shape; two was refused by
    //  limits.lua before the pool was looked at).
    m = ah_msg_new ("POOL_LIST");
    reply = lc_call (m);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 200);
    CHECK (reply && ah_msg_int (reply, "hits", -1) == 2 && ah_msg_int (reply, "misses", -1) == 1
           && ah_msg_int (reply, "max", -1) == 3);
    size_t raw_size = 0;
    const char *raw = reply ? ah_msg_raw (reply, "pools", &raw_size) : NULL;
    CHECK (raw && raw_size > 0);
    //  [{"runtime": "debian", "size": 2, ...}, ...] as msgpack: the first
    //  runtime's name and a size of 2 are in it.
    CHECK (raw && memmem (raw, raw_size, "debian", 6) && memmem (raw, raw_size, "\xa4size\x02", 6));
    ah_msg_destroy (&reply);
}

static void s_test_drain (void)
{
    CHECK (s_wait_warm ("= 'running'", 2, 5000));
    int destroys = atomic_load (&lc_drv.destroys);
    s_pool_size (0);
    CHECK (s_wait_warm ("IS NOT NULL", 0, 5000));
    CHECK (atomic_load (&lc_drv.destroys) == destroys + 2);
    //  The agents taken are not the pool's: they stay.
    CHECK (lc_count ("SELECT count(*) FROM agents WHERE name IN ('taker','cold','one') AND :id IS NULL", NULL) == 3);
    //  A create now is cold.
    ah_msg_t *reply = NULL;
    char *id = s_create ("late", "acme", 0, &reply);
    CHECK (reply && streq (ah_msg_str (reply, "state"), "creating"));
    ah_msg_destroy (&reply);
    CHECK (id && lc_wait_state (id, "running", 5000));
    free (id);
}

//  The actor stops with a pool half made (one warm sandbox started, one
//  still in the driver's create), and starts again: the rows say what
//  was under way, every sandbox of the driver has its row, and the pool
//  is full again.
static void s_test_restart (void)
{
    atomic_store (&lc_drv.start_delay_ms, 400);
    s_pool_size (2);
    int64_t until = zclock_mono () + 5000;
    while (zclock_mono () < until && s_warm ("IN ('creating','starting')") == 0)
        zclock_sleep (5);
    CHECK (s_warm ("IN ('creating','starting')") > 0);
    zactor_destroy (&lc_lifecycle);
    atomic_store (&lc_drv.start_delay_ms, 0);
    CHECK (s_warm ("= 'running'") < 2);
    CHECK (s_all_accounted ());
    lc_start_lifecycle (1000);
    CHECK (s_wait_warm ("= 'running'", 2, 8000));
    CHECK (s_wait_warm ("IS NOT NULL", 2, 3000));
    CHECK (s_all_accounted ());
}

//  A catalog changed across a restart (the default runtime's memory): the
//  warm sandboxes of the old shape are drained and the pool refilled in
//  the new one.
static void s_test_catalog_change (void)
{
    zactor_destroy (&lc_lifecycle);
    int destroys = atomic_load (&lc_drv.destroys);
    zfile_t *src = zfile_new (NULL, AH_SOURCE_DIR "/catalog/runtimes.json");
    CHECK (src && zfile_input (src) == 0);
    zchunk_t *chunk = src ? zfile_read (src, 1 << 20, 0) : NULL;
    zfile_destroy (&src);
    char *text = chunk ? strndup ((const char *) zchunk_data (chunk), zchunk_size (chunk)) : NULL;
    zchunk_destroy (&chunk);
    //  debian's 2g becomes 1g; busybox's build context (relative to the
    //  catalog's directory) is the source's, through a link.
    char *mem = text ? strstr (text, "\"mem_limit\": \"2g\"") : NULL;
    CHECK (mem != NULL);
    if (!mem) {
        free (text);
        return;
    }
    mem [14] = '1';
    char *images = zsys_sprintf ("%s/images", lc_dir);
    CHECK (symlink (AH_SOURCE_DIR "/catalog/images", images) == 0);
    zstr_free (&images);
    char *changed = text;
    char *path = zsys_sprintf ("%s/runtimes.json", lc_dir);
    lc_write (path, changed);
    free (lc_config->catalog_path);
    lc_config->catalog_path = path;
    free (changed);
    lc_start_lifecycle (1000);
    CHECK (s_wait_warm ("= 'running'", 2, 8000));
    int64_t until = zclock_mono () + 5000;
    while (zclock_mono () < until && lc_count ("SELECT count(*) FROM agents WHERE pool IS NOT NULL"
                                               " AND memory_mb <> 1024 AND :id IS NULL", NULL) > 0)
        zclock_sleep (20);
    CHECK (lc_count ("SELECT count(*) FROM agents WHERE pool IS NOT NULL AND memory_mb = 1024"
                     " AND :id IS NULL", NULL) == 2);
    CHECK (lc_count ("SELECT count(*) FROM agents WHERE pool IS NOT NULL AND :id IS NULL", NULL) == 2);
    CHECK (atomic_load (&lc_drv.destroys) == destroys + 2);
    CHECK (s_all_accounted ());
}

//  A warm sandbox that fails (the driver's create refused) is drained, and
//  the pool is not made again at once: no create every second.
static void s_test_failure_pauses (void)
{
    CHECK (s_wait_warm ("= 'running'", 2, 5000));
    char *fail = zsys_sprintf ("%s/fake/fail-create", lc_dir);
    lc_write (fail, "the engine is away (test)\n");
    int creates = atomic_load (&lc_drv.creates);
    s_pool_size (3);
    int64_t until = zclock_mono () + 5000;
    while (zclock_mono () < until && atomic_load (&lc_drv.creates) == creates)
        zclock_sleep (20);
    CHECK (atomic_load (&lc_drv.creates) == creates + 1);
    zclock_sleep (3500);            //  three fill passes (1 s) go by
    CHECK (atomic_load (&lc_drv.creates) == creates + 1);
    CHECK (s_warm ("= 'error'") == 0 && s_warm ("= 'running'") == 2);
    unlink (fail);
    zstr_free (&fail);
}

//  RUNTIME_IMAGE, as the builder sends it.
static void s_runtime_image (const char *image_id)
{
    ah_msg_t *m = ah_msg_new ("RUNTIME_IMAGE");
    ah_msg_set_str (m, "runtime", "debian");
    ah_msg_set_str (m, "image", "agenthold/rt-debian:x");
    ah_msg_set_str (m, "image_id", image_id);
    ah_msg_send (&m, lc_client, "lifecycle");
}

static int64_t s_made_from (const char *image_id)
{
    char sql [200];
    snprintf (sql, sizeof sql, "SELECT count(*) FROM agents a JOIN sandboxes s ON s.agent_id = a.id"
              " WHERE a.pool IS NOT NULL AND s.state = 'running' AND a.image_id = '%s' AND :id IS NULL",
              image_id);
    return lc_count (sql, NULL);
}

//  The runtime's image made again: the warm sandboxes made from the old
//  image go (drains counted, audited), new ones come from the new one; an
//  agent taken from the old pool is not touched; hostile RUNTIME_IMAGEs
//  change nothing.
static void s_test_image_rebuilt (void)
{
    //  What the pool holds was made before the harness named image ids
    //  (none known: such rows are kept); drained, then made again.
    s_pool_size (0);
    CHECK (s_wait_warm ("IS NOT NULL", 0, 5000));
    atomic_store (&lc_drv.image_gen, 1);
    s_runtime_image ("sha256:gen1");
    s_pool_size (2);
    CHECK (s_wait_warm ("= 'running'", 2, 8000));
    CHECK (s_made_from ("sha256:gen1") == 2);
    //  The same id again, and hostile ones: nothing goes.
    int destroys = atomic_load (&lc_drv.destroys);
    s_runtime_image ("sha256:gen1");
    ah_msg_t *m = ah_msg_new ("RUNTIME_IMAGE");
    ah_msg_set_str (m, "runtime", "no-such-runtime");
    ah_msg_set_str (m, "image_id", "sha256:other");
    ah_msg_send (&m, lc_client, "lifecycle");
    m = ah_msg_new ("RUNTIME_IMAGE");
    ah_msg_set_str (m, "runtime", "debian");
    ah_msg_set_int (m, "image_id", 7);
    ah_msg_send (&m, lc_client, "lifecycle");
    m = ah_msg_new ("RUNTIME_IMAGE");
    ah_msg_set_str (m, "runtime", "debian");
    char big [200];
    memset (big, 'a', sizeof big - 1);
    big [sizeof big - 1] = 0;
    ah_msg_set_str (m, "image_id", big);
    ah_msg_send (&m, lc_client, "lifecycle");
    zclock_sleep (2500);
    CHECK (atomic_load (&lc_drv.destroys) == destroys);
    CHECK (s_made_from ("sha256:gen1") == 2);

    //  One is taken: the tenant's from now on.
    ah_msg_t *reply = NULL;
    char *taken = s_create ("kept", "acme", 0, &reply);
    CHECK (reply && ah_msg_bool (reply, "warm", false));
    ah_msg_destroy (&reply);
    CHECK (s_wait_warm ("= 'running'", 2, 8000));
    m = ah_msg_new ("POOL_LIST");
    reply = lc_call (m);
    int64_t before = reply ? ah_msg_int (reply, "drained", -1) : -1;
    ah_msg_destroy (&reply);

    //  Made again: gen2. The two warm of gen1 go, two of gen2 come.
    destroys = atomic_load (&lc_drv.destroys);
    atomic_store (&lc_drv.image_gen, 2);
    s_runtime_image ("sha256:gen2");
    int64_t until = zclock_mono () + 10000;
    while (zclock_mono () < until && s_made_from ("sha256:gen2") != 2)
        zclock_sleep (20);
    CHECK (s_made_from ("sha256:gen2") == 2);
    CHECK (lc_count ("SELECT count(*) FROM agents WHERE pool IS NOT NULL AND image_id <> 'sha256:gen2'"
                     " AND :id IS NULL", NULL) == 0);
    CHECK (atomic_load (&lc_drv.destroys) == destroys + 2);
    m = ah_msg_new ("POOL_LIST");
    reply = lc_call (m);
    CHECK (reply && ah_msg_int (reply, "drained", -1) == before + 2);
    ah_msg_destroy (&reply);
    //  The taken agent: untouched, still running, still its old image's.
    CHECK (taken && lc_col_is (taken, "state", "running"));
    CHECK (lc_count ("SELECT count(*) FROM agents WHERE id = :id AND name = 'kept' AND pool IS NULL"
                     " AND image_id = 'sha256:gen1'", taken) == 1);
    CHECK (s_all_accounted ());
    atomic_store (&lc_drv.image_gen, 0);
    free (taken);
}

//  A frozen pool: each warm sandbox, once ready (sandboxd said hello; the
//  fake driver has none: running), is frozen; a take thaws it (answered
//  once the thaw is done: running) and the pool refills frozen; a pool no
//  longer frozen has its warm sandboxes thawed.
static void s_test_frozen (void)
{
    s_pool_lua (2, true);
    CHECK (s_wait_warm ("= 'frozen'", 2, 10000));
    CHECK (s_wait_warm ("IS NOT NULL", 2, 3000));
    CHECK (lc_count ("SELECT count(*) FROM agents a JOIN sandboxes s ON s.agent_id = a.id WHERE a.pool IS NOT NULL"
                     " AND s.state = 'frozen' AND s.boot_token_hash IS NOT NULL"
                     " AND :id IS NULL", NULL) == 2);
    ah_msg_t *m = ah_msg_new ("POOL_LIST");
    ah_msg_t *reply = lc_call (m);
    size_t raw_size = 0;
    const char *raw = reply ? ah_msg_raw (reply, "pools", &raw_size) : NULL;
    CHECK (raw && memmem (raw, raw_size, "\xa6" "frozen\x02", 8)
           && memmem (raw, raw_size, "\xac" "keeps_frozen\xc3", 14));
    ah_msg_destroy (&reply);

    int thaws = atomic_load (&lc_drv.thaws), starts = atomic_load (&lc_drv.starts);
    lc_drain_events ();
    char *id = s_create ("cold-warm", "acme", 0, &reply);
    CHECK (reply && streq (ah_msg_str (reply, "state"), "running") && ah_msg_bool (reply, "warm", false));
    ah_msg_destroy (&reply);
    //  Answered once the thaw is done: running when the caller reads it.
    CHECK (id && lc_col_is (id, "state", "running"));
    CHECK (id && lc_saw_event (id, "thawing", NULL, 0));
    CHECK (id && lc_saw_event (id, "running", NULL, 0));
    CHECK (atomic_load (&lc_drv.thaws) == thaws + 1 && atomic_load (&lc_drv.starts) == starts);
    CHECK (lc_count ("SELECT count(*) FROM agents a JOIN sandboxes s ON s.agent_id = a.id WHERE a.id = :id"
                     " AND a.pool IS NULL AND a.tenant = 'acme' AND s.frozen_at IS NULL"
                     " AND s.boot_token_hash IS NOT NULL", id) == 1);
    //  The pool refills, frozen.
    CHECK (s_wait_warm ("= 'frozen'", 2, 10000));
    //  Not frozen any more: thawed, running.
    thaws = atomic_load (&lc_drv.thaws);
    s_pool_lua (2, false);
    CHECK (s_wait_warm ("= 'running'", 2, 8000));
    CHECK (atomic_load (&lc_drv.thaws) == thaws + 2);
    CHECK (id && lc_col_is (id, "state", "running"));
    free (id);
}

int main (void)
{
    zsys_init ();
    zsys_handler_set (NULL);
    if (lc_setup ("ah-lcpool", 18402))
        return 1;
    //  A Lua directory of the test's own: the shipped limits.lua, and a
    //  pool.lua the test rewrites.
    snprintf (s_lua, sizeof s_lua, "%s/lua", lc_dir);
    mkdir (s_lua, 0700);
    char *limits = zsys_sprintf ("%s/limits.lua", s_lua);
    zfile_t *src = zfile_new (NULL, AH_SOURCE_DIR "/lua/limits.lua");
    CHECK (src && zfile_input (src) == 0);
    zchunk_t *chunk = src ? zfile_read (src, 1 << 20, 0) : NULL;
    zfile_destroy (&src);
    FILE *f = fopen (limits, "w");
    if (f && chunk)
        fwrite (zchunk_data (chunk), 1, zchunk_size (chunk), f);
    if (f)
        fclose (f);
    zchunk_destroy (&chunk);
    zstr_free (&limits);
    s_pool_size (2);
    free (lc_config->lua_dir);
    lc_config->lua_dir = strdup (s_lua);
    free (lc_config->catalog_path);
    lc_config->catalog_path = strdup (AH_SOURCE_DIR "/catalog/runtimes.json");
    lc_config->warm_pool_max = 3;
    lc_start_lifecycle (1000);

    s_test_fill_and_take ();
    s_test_drain ();
    s_test_restart ();
    s_test_catalog_change ();
    s_test_image_rebuilt ();
    s_test_frozen ();
    s_test_failure_pauses ();

    lc_teardown ();
    return CHECK_DONE ();
}
