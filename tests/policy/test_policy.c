/*  tests/policy/test_policy.c: the Lua policy host with real Lua and a real
    SQLite file: the shipped hooks (admit, idle, briefing), reloads, a
    broken script keeping the old one, the budget, the sandbox, the cap;
    the values PUT /api/v1/policy changes (policy/values.h).            */
#include "policy/policy.h"
#include "policy/values.h"
#include "tests/common/check.h"
#include "common/bounds.h"
#include "proto/egress.h"
#include <math.h>
#include <msgpack.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

static char s_dir [] = "/tmp/ah-test-policy-XXXXXX";

static void s_write (const char *name, const char *text)
{
    char path [256];
    snprintf (path, sizeof path, "%s/%s", s_dir, name);
    //  Write a new file and rename it over the old one, as editors do
    char temp [300];
    snprintf (temp, sizeof temp, "%s.tmp", path);
    FILE *file = fopen (temp, "w");
    if (!file)
        return;
    fputs (text, file);
    fclose (file);
    rename (temp, path);
}

static bool s_has (const char *text, const char *want)
{
    if (text && strstr (text, want))
        return true;
    fprintf (stderr, "  '%s' does not hold '%s'\n", text ? text : "(null)", want);
    return false;
}

//  admit (tenant, request, usage, limits) of lua/limits.lua. The tenant
//  "acme" with no limits of its own and empty usage unless given.
static int s_admit (ah_policy_t *policy, const ah_msg_t *tenant, const ah_msg_t *request,
                    const ah_msg_t *usage, const ah_msg_t *limits, ah_msg_t **result, char **err)
{
    ah_msg_t *t = NULL, *u = NULL;
    if (!tenant) {
        t = ah_msg_new ("TENANT");
        ah_msg_set_str (t, "name", "acme");
    }
    if (!usage) {
        u = ah_msg_new ("USAGE");
        static const char *keys [] = { "sandboxes", "running", "cpus", "memory_mb", "pool_sandboxes",
                                       "pool_running", "pool_cpus", "pool_memory_mb" };
        for (size_t i = 0; i < sizeof keys / sizeof keys [0]; i++)
            ah_msg_set_int (u, keys [i], 0);
    }
    const ah_msg_t *args [] = { tenant ? tenant : t, request, usage ? usage : u, limits };
    int rc = ah_policy_callv (policy, "admit", args, 4, result, err);
    ah_msg_destroy (&t);
    ah_msg_destroy (&u);
    return rc;
}

static ah_msg_t *s_limits (void)
{
    ah_msg_t *limits = ah_msg_new ("LIMITS");
    ah_msg_set_str (limits, "default_image", "debian:bookworm-slim");
    ah_msg_set_double (limits, "default_cpus", 2);
    ah_msg_set_int (limits, "default_memory_mb", 4096);
    ah_msg_set_double (limits, "max_cpus", 8);
    ah_msg_set_int (limits, "max_memory_mb", 16384);
    ah_msg_set_double (limits, "default_idle_minutes", 15);
    ah_msg_set_int (limits, "tenant_max_sandboxes", 200);
    ah_msg_set_int (limits, "pool_max_sandboxes", 2000);
    ah_msg_set_int (limits, "tenant_max_running", 10);
    ah_msg_set_int (limits, "pool_max_running", 20);
    return limits;
}

static void s_test_admit (ah_store_t *store)
{
    char *err = NULL;
    char lua_dir [512];
    snprintf (lua_dir, sizeof lua_dir, "%s/lua", AH_SOURCE_DIR);
    ah_policy_t *policy = ah_policy_new (lua_dir, "limits.lua", "lifecycle", store, &err);
    CHECK (policy != NULL);
    if (!policy) {
        fprintf (stderr, "  %s\n", err);
        free (err);
        return;
    }
    CHECK (ah_policy_error (policy) == NULL);
    CHECK (ah_policy_loaded_at (policy) > 0);
    ah_msg_t *limits = s_limits ();

    //  Defaults filled in
    ah_msg_t *request = ah_msg_new ("REQ");
    ah_msg_set_str (request, "op", "create");
    ah_msg_set_str (request, "name", "alpha");
    ah_msg_set_nil (request, "image");
    ah_msg_t *result = NULL;
    CHECK (s_admit (policy, NULL, request, NULL, limits, &result, &err) == 0);
    CHECK (result && ah_msg_bool (result, "allow", false));
    CHECK_STR (ah_msg_str (result, "image"), "debian:bookworm-slim");
    CHECK (result && ah_msg_double (result, "cpus", 0) == 2);
    CHECK (result && ah_msg_int (result, "memory_mb", 0) == 4096);
    CHECK (result && ah_msg_double (result, "idle_minutes", 0) == 15);
    ah_msg_destroy (&result);
    free (err);
    err = NULL;

    //  Explicit values within limits are kept
    ah_msg_set_str (request, "image", "alpine:3");
    ah_msg_set_double (request, "cpus", 0.5);
    ah_msg_set_int (request, "memory_mb", 512);
    ah_msg_set_double (request, "idle_minutes", 0.05);
    CHECK (s_admit (policy, NULL, request, NULL, limits, &result, NULL) == 0);
    CHECK (result && ah_msg_bool (result, "allow", false));
    CHECK_STR (ah_msg_str (result, "image"), "alpine:3");
    CHECK (result && ah_msg_double (result, "cpus", 0) == 0.5);
    CHECK (result && ah_msg_int (result, "memory_mb", 0) == 512);
    CHECK (result && ah_msg_double (result, "idle_minutes", 0) == 0.05);
    ah_msg_destroy (&result);

    //  Over the limits: refused with a message naming value, limit and key
    ah_msg_set_int (request, "cpus", 12);
    CHECK (s_admit (policy, NULL, request, NULL, limits, &result, NULL) == 0);
    CHECK (result && !ah_msg_bool (result, "allow", true));
    CHECK_STR (ah_msg_str (result, "message"), "cpus 12 is over the limit of 8 (sandbox.max_cpus)");
    ah_msg_destroy (&result);
    ah_msg_set_double (request, "cpus", 1);
    ah_msg_set_int (request, "memory_mb", 20000);
    CHECK (s_admit (policy, NULL, request, NULL, limits, &result, NULL) == 0);
    CHECK (result && !ah_msg_bool (result, "allow", true));
    CHECK_STR (ah_msg_str (result, "message"),
               "memory_mb 20000 is over the limit of 16384 (sandbox.max_memory_mb)");
    ah_msg_destroy (&result);
    ah_msg_set_int (request, "memory_mb", 512);
    ah_msg_set_double (request, "cpus", 0);
    CHECK (s_admit (policy, NULL, request, NULL, limits, &result, NULL) == 0);
    CHECK (result && !ah_msg_bool (result, "allow", true));
    CHECK (s_has (ah_msg_str (result, "message"), "more than 0"));
    ah_msg_destroy (&result);
    ah_msg_set_str (request, "cpus", "two");
    CHECK (s_admit (policy, NULL, request, NULL, limits, &result, NULL) == 0);
    CHECK_STR (ah_msg_str (result, "message"), "cpus must be a number");
    ah_msg_destroy (&result);
    ah_msg_destroy (&request);

    //  An update fills nothing in: absent means "keep"
    request = ah_msg_new ("REQ");
    ah_msg_set_str (request, "op", "update");
    ah_msg_set_int (request, "memory_mb", 8192);
    CHECK (s_admit (policy, NULL, request, NULL, limits, &result, NULL) == 0);
    CHECK (result && ah_msg_bool (result, "allow", false));
    CHECK (result && ah_msg_int (result, "memory_mb", 0) == 8192);
    CHECK (result && !ah_msg_has (result, "cpus"));
    CHECK (result && !ah_msg_has (result, "image"));
    ah_msg_destroy (&result);
    ah_msg_destroy (&request);

    //  Places: the seed's caps count what runs, 10 per tenant within a
    //  pool of 20; sleeping ones count only against the kept caps
    request = ah_msg_new ("REQ");
    ah_msg_set_str (request, "op", "create");
    ah_msg_t *usage = ah_msg_new ("USAGE");
    ah_msg_set_int (usage, "sandboxes", 25);
    ah_msg_set_int (usage, "running", 10);
    ah_msg_set_int (usage, "cpus", 0);
    ah_msg_set_int (usage, "memory_mb", 0);
    ah_msg_set_int (usage, "pool_sandboxes", 40);
    ah_msg_set_int (usage, "pool_running", 12);
    CHECK (s_admit (policy, NULL, request, usage, limits, &result, NULL) == 0);
    CHECK (result && !ah_msg_bool (result, "allow", true));
    CHECK_STR (ah_msg_str (result, "message"), "tenant 'acme' already holds 10 of 10 running sandboxes "
               "(limits.tenant_max_running); stop one, or let one go to sleep, first");
    ah_msg_destroy (&result);
    ah_msg_set_str (request, "op", "start");        //  a start (a wake) the same
    CHECK (s_admit (policy, NULL, request, usage, limits, &result, NULL) == 0);
    CHECK (result && s_has (ah_msg_str (result, "message"), "already holds 10 of 10 running sandboxes"));
    ah_msg_destroy (&result);
    ah_msg_set_str (request, "op", "create");
    ah_msg_set_int (usage, "running", 9);           //  15 asleep besides: room
    CHECK (s_admit (policy, NULL, request, usage, limits, &result, NULL) == 0);
    CHECK (result && ah_msg_bool (result, "allow", false));
    ah_msg_destroy (&result);
    ah_msg_set_int (usage, "pool_running", 20);
    CHECK (s_admit (policy, NULL, request, usage, limits, &result, NULL) == 0);
    CHECK (result && !ah_msg_bool (result, "allow", true));
    CHECK_STR (ah_msg_str (result, "message"), "the pool already holds 20 of 20 running sandboxes "
               "(every tenant together: limits.pool_max_running)");
    ah_msg_destroy (&result);
    ah_msg_set_int (usage, "pool_running", 12);
    ah_msg_set_int (usage, "sandboxes", 200);       //  the kept cap: sleeping ones count
    CHECK (s_admit (policy, NULL, request, usage, limits, &result, NULL) == 0);
    CHECK_STR (result ? ah_msg_str (result, "message") : NULL, "tenant 'acme' already holds 200 of 200 "
               "kept sandboxes, asleep or not (limits.tenant_max_sandboxes)");
    ah_msg_destroy (&result);
    ah_msg_set_str (request, "op", "start");        //  ... at a create only
    CHECK (s_admit (policy, NULL, request, usage, limits, &result, NULL) == 0);
    CHECK (result && ah_msg_bool (result, "allow", false));
    ah_msg_destroy (&result);
    ah_msg_set_str (request, "op", "create");
    ah_msg_set_int (usage, "sandboxes", 25);
    ah_msg_set_int (usage, "pool_sandboxes", 2000);
    CHECK (s_admit (policy, NULL, request, usage, limits, &result, NULL) == 0);
    CHECK (result && s_has (ah_msg_str (result, "message"), "the pool already holds 2000 of 2000 kept sandboxes"));
    ah_msg_destroy (&result);
    ah_msg_set_int (usage, "running", 0);
    ah_msg_set_int (usage, "pool_running", 0);
    //  A tenant's own limit wins over the server's
    ah_msg_set_int (usage, "pool_sandboxes", 5);
    ah_msg_set_int (usage, "sandboxes", 3);
    ah_msg_t *tenant = ah_msg_new ("TENANT");
    ah_msg_set_str (tenant, "name", "tiny");
    ah_msg_set_int (tenant, "max_sandboxes", 3);
    CHECK (s_admit (policy, tenant, request, usage, limits, &result, NULL) == 0);
    CHECK_STR (result ? ah_msg_str (result, "message") : NULL, "tenant 'tiny' already holds 3 of 3 kept "
               "sandboxes, asleep or not (its max_sandboxes)");
    ah_msg_destroy (&result);
    //  Running places at start, and the tenant's cpus and memory
    ah_msg_set_str (request, "op", "start");
    ah_msg_set_int (tenant, "max_running", 2);
    ah_msg_set_int (usage, "running", 2);
    CHECK (s_admit (policy, tenant, request, usage, limits, &result, NULL) == 0);
    CHECK_STR (result ? ah_msg_str (result, "message") : NULL, "tenant 'tiny' already holds 2 of 2 running "
               "sandboxes (its max_running); stop one, or let one go to sleep, first");
    ah_msg_destroy (&result);
    ah_msg_set_int (usage, "running", 1);
    CHECK (s_admit (policy, tenant, request, usage, limits, &result, NULL) == 0);
    CHECK (result && ah_msg_bool (result, "allow", false));
    ah_msg_destroy (&result);
    ah_msg_set_str (request, "op", "update");
    ah_msg_set_double (tenant, "max_cpus", 4);
    ah_msg_set_double (usage, "cpus", 3);
    ah_msg_set_double (request, "cpus", 2);
    CHECK (s_admit (policy, tenant, request, usage, limits, &result, NULL) == 0);
    CHECK_STR (result ? ah_msg_str (result, "message") : NULL, "tenant 'tiny' would hold 5 cpus, over its limit of 4");
    ah_msg_destroy (&result);
    ah_msg_destroy (&tenant);
    ah_msg_destroy (&usage);
    ah_msg_destroy (&request);
    ah_msg_destroy (&limits);

    //  Its status row says it loaded
    sqlite3_stmt *stmt = ah_store_prepare (store,
        "SELECT loaded_at, error FROM policy_status WHERE holder = 'lifecycle' AND script = 'limits.lua'");
    CHECK (ah_store_step (store, stmt) == SQLITE_ROW);
    CHECK (sqlite3_column_int64 (stmt, 0) == ah_policy_loaded_at (policy));
    CHECK (sqlite3_column_type (stmt, 1) == SQLITE_NULL);
    sqlite3_reset (stmt);
    ah_policy_destroy (&policy);
    CHECK (policy == NULL);
    ah_policy_destroy (&policy);
}

//  idle.lua's idle (sandbox, facts), both taken.
static ah_msg_t *s_call_idle (ah_policy_t *policy, ah_msg_t *sandbox, ah_msg_t *facts)
{
    ah_msg_t *result = NULL;
    char *err = NULL;
    CHECK (ah_policy_call (policy, "idle", sandbox, facts, &result, &err) == 0);
    if (err)
        fprintf (stderr, "  idle: %s\n", err);
    free (err);
    ah_msg_destroy (&sandbox);
    ah_msg_destroy (&facts);
    return result;
}

static ah_msg_t *s_idle (ah_policy_t *policy, int64_t last, int turns, int terminals, double cpu)
{
    ah_msg_t *sandbox = ah_msg_new ("SANDBOX");
    ah_msg_set_str (sandbox, "id", "aaaaaaaaaaaa");
    ah_msg_t *facts = ah_msg_new ("FACTS");
    ah_msg_set_int (facts, "now_ms", 1000000000);
    ah_msg_set_int (facts, "last_activity_ms", last);
    ah_msg_set_double (facts, "idle_minutes", 0.05);       //  3 s
    ah_msg_set_int (facts, "turns", turns);
    ah_msg_set_int (facts, "terminals", terminals);
    ah_msg_set_double (facts, "cpu_share", cpu);
    return s_call_idle (policy, sandbox, facts);
}

//  A shipped script of the source tree's lua/, without a store; NULL said.
static ah_policy_t *s_shipped (const char *script, const char *holder)
{
    char lua_dir [512];
    snprintf (lua_dir, sizeof lua_dir, "%s/lua", AH_SOURCE_DIR);
    char *err = NULL;
    ah_policy_t *policy = ah_policy_new (lua_dir, script, holder, NULL, &err);
    CHECK (policy != NULL);
    if (!policy)
        fprintf (stderr, "%s: %s\n", script, err ? err : "?");
    free (err);
    return policy;
}

//  idle.lua's ladder (issue 29): facts for a running or frozen sandbox,
//  with freeze_minutes (< 0: not said) and whether the driver can pause.
static ah_msg_t *s_ladder (ah_policy_t *policy, const char *state, int64_t last, int64_t frozen_at,
                           double freeze_minutes, bool can_freeze, const char *tenant)
{
    ah_msg_t *sandbox = ah_msg_new ("SANDBOX");
    ah_msg_set_str (sandbox, "id", "aaaaaaaaaaaa");
    ah_msg_set_str (sandbox, "tenant", tenant);
    ah_msg_t *facts = ah_msg_new ("FACTS");
    ah_msg_set_int (facts, "now_ms", 1000000000);
    ah_msg_set_int (facts, "last_activity_ms", last);
    ah_msg_set_double (facts, "idle_minutes", 0.05);       //  3 s
    ah_msg_set_str (facts, "state", state);
    ah_msg_set_int (facts, "frozen_at_ms", frozen_at);
    ah_msg_set_bool (facts, "can_freeze", can_freeze);
    if (freeze_minutes >= 0)
        ah_msg_set_double (facts, "freeze_minutes", freeze_minutes);
    return s_call_idle (policy, sandbox, facts);
}

static void s_test_ladder (const char *lua_dir)
{
    ah_policy_t *policy = ah_policy_new (lua_dir, "idle.lua", "sleeper", NULL, NULL);
    CHECK (policy != NULL);
    if (!policy)
        return;
    const int64_t now = 1000000000, minute = 60000;
    //  Idle and running: frozen first; stopped freeze_minutes after.
    ah_msg_t *r = s_ladder (policy, "running", now - 10000, 0, 2, true, "t");
    CHECK (r && ah_msg_bool (r, "idle", false));
    CHECK_STR (ah_msg_str (r, "action"), "freeze");
    CHECK (r && ah_msg_int (r, "sleeps_at_ms", 0) == now);
    CHECK (r && ah_msg_int (r, "stops_at_ms", 0) == now + 2 * minute);
    ah_msg_destroy (&r);
    //  Not idle yet: both forecasts move with the idle time.
    r = s_ladder (policy, "running", now - 1000, 0, 2, true, "t");
    CHECK (r && !ah_msg_bool (r, "idle", true));
    CHECK_STR (ah_msg_str (r, "action"), "freeze");
    CHECK (r && ah_msg_int (r, "sleeps_at_ms", 0) == now + 2000);
    CHECK (r && ah_msg_int (r, "stops_at_ms", 0) == now + 2000 + 2 * minute);
    ah_msg_destroy (&r);
    //  A driver without a pause (kubernetes) or freeze_minutes 0: stopped at once.
    r = s_ladder (policy, "running", now - 10000, 0, 2, false, "t");
    CHECK (r && ah_msg_bool (r, "idle", false));
    CHECK_STR (ah_msg_str (r, "action"), "stop");
    CHECK (r && ah_msg_int (r, "stops_at_ms", 0) == now);
    ah_msg_destroy (&r);
    r = s_ladder (policy, "running", now - 10000, 0, 0, true, "t");
    CHECK_STR (ah_msg_str (r, "action"), "stop");
    ah_msg_destroy (&r);
    //  Not said: the shipped default, 10 minutes.
    r = s_ladder (policy, "running", now - 10000, 0, -1, true, "t");
    CHECK_STR (ah_msg_str (r, "action"), "freeze");
    CHECK (r && ah_msg_int (r, "stops_at_ms", 0) == now + 10 * minute);
    ah_msg_destroy (&r);
    //  Frozen: stopped once freeze_minutes have passed since it was frozen,
    //  whatever its last use (nothing in it runs).
    r = s_ladder (policy, "frozen", now - 10000, now - minute, 2, true, "t");
    CHECK (r && !ah_msg_bool (r, "idle", true));
    CHECK_STR (ah_msg_str (r, "action"), "stop");
    CHECK_STR (ah_msg_str (r, "why"), "frozen");
    CHECK (r && ah_msg_int (r, "sleeps_at_ms", 0) == now + minute);
    CHECK (r && ah_msg_int (r, "stops_at_ms", 0) == now + minute);
    ah_msg_destroy (&r);
    r = s_ladder (policy, "frozen", now - 10000, now - 2 * minute, 2, true, "t");
    CHECK (r && ah_msg_bool (r, "idle", false));
    CHECK_STR (ah_msg_str (r, "action"), "stop");
    ah_msg_destroy (&r);
    ah_policy_destroy (&policy);
}

static void s_test_idle_and_briefing (void)
{
    char lua_dir [512];
    snprintf (lua_dir, sizeof lua_dir, "%s/lua", AH_SOURCE_DIR);
    char *err = NULL;
    ah_policy_t *policy = s_shipped ("idle.lua", "sleeper");
    if (!policy)
        return;
    const int64_t now = 1000000000;
    ah_msg_t *r = s_idle (policy, now - 10000, 0, 0, 0.01);
    CHECK (r && ah_msg_bool (r, "idle", false));
    CHECK_STR (ah_msg_str (r, "why"), "idle");
    CHECK (r && ah_msg_int (r, "sleeps_at_ms", 0) == now);
    ah_msg_destroy (&r);
    r = s_idle (policy, now - 1000, 0, 0, 0);
    CHECK (r && !ah_msg_bool (r, "idle", true));
    CHECK_STR (ah_msg_str (r, "why"), "recent use");
    CHECK (r && ah_msg_int (r, "sleeps_at_ms", 0) == now - 1000 + 3000);
    ah_msg_destroy (&r);
    r = s_idle (policy, now - 10000, 1, 0, 0);
    CHECK_STR (ah_msg_str (r, "why"), "turn");
    CHECK (r && !ah_msg_bool (r, "idle", true));
    CHECK (r && ah_msg_int (r, "sleeps_at_ms", 0) == now + 3000);
    ah_msg_destroy (&r);
    r = s_idle (policy, now - 10000, 0, 2, 0);
    CHECK_STR (ah_msg_str (r, "why"), "terminal");
    ah_msg_destroy (&r);
    r = s_idle (policy, now - 10000, 0, 0, 0.2);
    CHECK_STR (ah_msg_str (r, "why"), "cpu");
    CHECK (r && !ah_msg_bool (r, "idle", true));
    ah_msg_destroy (&r);
    ah_policy_destroy (&policy);
    s_test_ladder (lua_dir);

    policy = ah_policy_new (lua_dir, "briefing.lua", "builder", NULL, &err);
    CHECK (policy != NULL);
    if (!policy) {
        free (err);
        return;
    }
    ah_msg_t *runtime = ah_msg_new ("RUNTIME");
    ah_msg_set_str (runtime, "alias", "debian");
    ah_msg_set_str (runtime, "image", "agenthold/rt-debian:0123456789abcdef");
    ah_msg_set_str (runtime, "base_image", "debian:bookworm-slim");
    ah_msg_set_str (runtime, "description", "Debian 12, slim");
    ah_msg_set_bool (runtime, "needs_network", false);
    //  setup_commands: a msgpack list, as the builder passes it; the tools
    //  are what they install (options, shell syntax and certificates left out)
    msgpack_sbuffer buffer;
    msgpack_sbuffer_init (&buffer);
    msgpack_packer packer;
    msgpack_packer_init (&packer, &buffer, msgpack_sbuffer_write);
    msgpack_pack_array (&packer, 2);
    const char *c1 = "apt-get update && apt-get install -y --no-install-recommends git ca-certificates ripgrep";
    const char *c2 = "apk add jq; echo done | tee /x";
    msgpack_pack_str_with_body (&packer, c1, strlen (c1));
    msgpack_pack_str_with_body (&packer, c2, strlen (c2));
    CHECK (ah_msg_set_raw (runtime, "setup_commands", buffer.data, buffer.size) == 0);
    msgpack_sbuffer_clear (&buffer);
    msgpack_pack_array (&packer, 1);
    msgpack_pack_str_with_body (&packer, "Ask before you delete", 21);
    CHECK (ah_msg_set_raw (runtime, "briefing", buffer.data, buffer.size) == 0);
    msgpack_sbuffer_destroy (&buffer);
    ah_msg_t *result = NULL;
    CHECK (ah_policy_call (policy, "briefing", runtime, NULL, &result, &err) == 0);
    const char *text = result ? ah_msg_str (result, "text") : NULL;
    CHECK (s_has (text, "# Your sandbox: the debian runtime"));
    CHECK (s_has (text, "Debian 12, slim."));
    CHECK (s_has (text, "- Installed: git, ripgrep (rg), jq."));
    CHECK (s_has (text, "- Network: none beyond the agenthold server"));
    CHECK (s_has (text, "/home/agent"));
    CHECK (s_has (text, "Ask before you delete."));
    CHECK (!s_has (text, "Memory:") && !s_has (text, "Python packages"));
    //  Seed 004: the one gap, and the working instructions; nothing said
    //  of tools the runtime does not have.
    CHECK (s_has (text, "- No C compiler"));
    CHECK (s_has (text, "POSIX `/bin/sh`, each as a new process")
           && s_has (text, "variables and `cd` do not") && s_has (text, "verify the files")
           && s_has (text, "`rg -n PATTERN FILE`") && s_has (text, "`sed -n '400,460p' FILE`"));
    CHECK (!s_has (text, "soffice") && !s_has (text, "OCR"));
    ah_msg_destroy (&result);
    //  A runtime with LibreOffice, tesseract and a compiler says so.
    msgpack_sbuffer_init (&buffer);
    msgpack_pack_array (&packer, 1);
    const char *c3 = "apt-get install -y libreoffice-writer-nogui tesseract-ocr build-essential";
    msgpack_pack_str_with_body (&packer, c3, strlen (c3));
    CHECK (ah_msg_set_raw (runtime, "setup_commands", buffer.data, buffer.size) == 0);
    msgpack_sbuffer_destroy (&buffer);
    result = NULL;
    CHECK (ah_policy_call (policy, "briefing", runtime, NULL, &result, &err) == 0);
    text = result ? ah_msg_str (result, "text") : NULL;
    CHECK (s_has (text, "soffice --headless --convert-to pdf FILE") && s_has (text, "OCR a range of pages")
           && !s_has (text, "No C compiler"));
    ah_msg_destroy (&result);
    ah_msg_destroy (&runtime);
    free (err);
    ah_policy_destroy (&policy);
}

static int64_t s_status (ah_store_t *store, const char *column_sql, char **error)
{
    sqlite3_stmt *stmt = ah_store_prepare (store, column_sql);
    int64_t loaded_at = -1;
    if (error)
        *error = NULL;
    if (stmt && ah_store_step (store, stmt) == SQLITE_ROW) {
        loaded_at = sqlite3_column_type (stmt, 0) == SQLITE_NULL ? 0 : sqlite3_column_int64 (stmt, 0);
        if (error && sqlite3_column_text (stmt, 1))
            *error = strdup ((const char *) sqlite3_column_text (stmt, 1));
    }
    if (stmt)
        sqlite3_reset (stmt);
    return loaded_at;
}
#define STATUS_SQL "SELECT loaded_at, error FROM policy_status WHERE holder = 'tester' AND script = 't.lua'"

static int64_t s_call_v (ah_policy_t *policy)
{
    ah_msg_t *result = NULL;
    char *err = NULL;
    int64_t v = -1;
    if (ah_policy_call (policy, "f", NULL, NULL, &result, &err) == 0)
        v = ah_msg_int (result, "v", -1);
    else
        fprintf (stderr, "  f(): %s\n", err);
    free (err);
    ah_msg_destroy (&result);
    return v;
}

static void s_test_reload (ah_store_t *store)
{
    char *err = NULL;
    //  A missing script: no policy, and the status says why
    ah_policy_t *policy = ah_policy_new (s_dir, "t.lua", "tester", store, &err);
    CHECK (policy == NULL);
    CHECK (s_has (err, "cannot read"));
    free (err);
    char *status_error = NULL;
    CHECK (s_status (store, STATUS_SQL, &status_error) == 0);       //  never loaded
    CHECK (s_has (status_error, "cannot read"));
    free (status_error);

    s_write ("t.lua", "function f () return { v = 1 } end\n");
    policy = ah_policy_new (s_dir, "t.lua", "tester", store, &err);
    CHECK (policy != NULL);
    if (!policy) {
        free (err);
        return;
    }
    CHECK (s_call_v (policy) == 1);
    CHECK (ah_policy_reload (policy, false) == 0);                 //  unchanged
    CHECK (s_status (store, STATUS_SQL, &status_error) > 0);
    CHECK (status_error == NULL);
    free (status_error);

    //  A change is picked up by an explicit reload...
    s_write ("t.lua", "function f () return { v = 22 } end\n");
    CHECK (ah_policy_reload (policy, false) == 1);
    CHECK (s_call_v (policy) == 22);
    //  ...and by a call once the check interval has passed
    ah_policy_set_check_interval (policy, 0);
    s_write ("t.lua", "function f () return { v = 333 } end\n");
    CHECK (s_call_v (policy) == 333);
    int64_t good_loaded_at = ah_policy_loaded_at (policy);

    //  A syntax error keeps the old version and says why
    s_write ("t.lua", "function f ( return { v = 4 } end\n");
    CHECK (ah_policy_reload (policy, false) == -1);
    CHECK (s_has (ah_policy_error (policy), "policy t.lua: does not load: t.lua:1:"));
    CHECK (s_call_v (policy) == 333);
    CHECK (ah_policy_loaded_at (policy) == good_loaded_at);
    CHECK (s_status (store, STATUS_SQL, &status_error) == good_loaded_at);
    CHECK (s_has (status_error, "does not load"));
    free (status_error);
    //  Unchanged broken file: not retried
    CHECK (ah_policy_reload (policy, false) == 0);
    //  A script that fails when run keeps the old version too
    s_write ("t.lua", "function f () return { v = 5 } end\nerror ('boom at load')\n");
    CHECK (ah_policy_reload (policy, false) == -1);
    CHECK (s_has (ah_policy_error (policy), "boom at load"));
    CHECK (s_call_v (policy) == 333);
    //  A precompiled chunk is refused
    s_write ("t.lua", "\033Lua\x54\x00 garbage");
    CHECK (ah_policy_reload (policy, false) == -1);
    CHECK (s_has (ah_policy_error (policy), "binary chunk"));
    //  A loop at load time is stopped by the budget
    s_write ("t.lua", "while true do end\n");
    CHECK (ah_policy_reload (policy, false) == -1);
    CHECK (s_has (ah_policy_error (policy), "loading exceeded its budget"));
    CHECK (s_call_v (policy) == 333);
    //  Fixed: in force, and the error is cleared everywhere
    s_write ("t.lua", "function f () return { v = 6 } end\n");
    CHECK (ah_policy_reload (policy, false) == 1);
    CHECK (ah_policy_error (policy) == NULL);
    CHECK (s_call_v (policy) == 6);
    CHECK (s_status (store, STATUS_SQL, &status_error) == ah_policy_loaded_at (policy));
    CHECK (status_error == NULL);
    free (status_error);
    //  A forced reload of an unchanged file loads it again
    CHECK (ah_policy_reload (policy, true) == 1);
    ah_policy_destroy (&policy);
}

static ah_msg_t *s_call (ah_policy_t *policy, const char *function, char **err)
{
    ah_msg_t *result = NULL;
    free (*err);
    *err = NULL;
    ah_policy_call (policy, function, NULL, NULL, &result, err);
    return result;
}

static void s_test_sandbox (void)
{
    s_write ("s.lua",
        "local count = 0\n"
        "function ok () count = count + 1 return { n = count } end\n"
        "function spin () while true do end end\n"
        "function sneaky () while true do pcall (function () while true do end end) end end\n"
        "function hog () local t = {} for i = 1, 1e8 do t [i] = tostring (i) .. 'xxxxxxxxxxxxxxxx' end end\n"
        "function big () return { s = string.rep ('x', 1 << 30) } end\n"
        "function probe () return {\n"
        "  io = rawget (_G, 'io') == nil, require = rawget (_G, 'require') == nil,\n"
        "  load = rawget (_G, 'load') == nil, loadfile = rawget (_G, 'loadfile') == nil,\n"
        "  dofile = rawget (_G, 'dofile') == nil, debug = rawget (_G, 'debug') == nil,\n"
        "  package = rawget (_G, 'package') == nil, cg = rawget (_G, 'collectgarbage') == nil,\n"
        "  rawset = rawget (_G, 'rawset') == nil, execute = os.execute == nil,\n"
        "  getenv = os.getenv == nil, exit = os.exit == nil, dump = string.dump == nil,\n"
        "  time = type (os.time ()) == 'number', clock = type (os.clock ()) == 'number',\n"
        "  strmeta = getmetatable ('') == 'read-only', upper = ('x'):upper () == 'X' } end\n"
        "function use_io () return { x = io.open ('/etc/passwd') } end\n"
        "function use_execute () return { x = os.execute ('true') } end\n"
        "function use_require () return { x = require ('os') } end\n"
        "function use_load () return { x = load ('return 1') } end\n"
        "function patch () string.upper = nil return {} end\n"
        "function new_global () created = 1 return {} end\n"
        "function nested () return { t = { 1 } } end\n"
        "function not_table () return 42 end\n"
        "function number_key () return { [1] = 'a' } end\n"
        "function echo (a, b) return { s = a.s, i = a.i, d = a.d, yes = a.yes, missing = a.nothing == nil,"
        "  b = b == nil, itype = math.type (a.i), dtype = math.type (a.d) } end\n");
    char *err = NULL;
    ah_policy_t *policy = ah_policy_new (s_dir, "s.lua", "tester", NULL, &err);
    CHECK (policy != NULL);
    if (!policy) {
        fprintf (stderr, "  %s\n", err);
        free (err);
        return;
    }
    ah_policy_set_budget (policy, 200000);
    ah_msg_t *r;

    r = s_call (policy, "ok", &err);
    CHECK (r && ah_msg_int (r, "n", 0) == 1);
    ah_msg_destroy (&r);

    //  Runaway loops stop at the budget, even when they catch the error
    r = s_call (policy, "spin", &err);
    CHECK (r == NULL);
    CHECK_STR (err, "policy s.lua: spin() exceeded its budget of 200000 instructions");
    r = s_call (policy, "sneaky", &err);
    CHECK (r == NULL);
    CHECK (s_has (err, "sneaky() exceeded its budget"));
    r = s_call (policy, "ok", &err);                               //  and the next call works
    CHECK (r && ah_msg_int (r, "n", 0) == 2);
    ah_msg_destroy (&r);

    //  The allow-list
    r = s_call (policy, "probe", &err);
    CHECK (r != NULL);
    const char *probes [] = { "io", "require", "load", "loadfile", "dofile", "debug", "package",
                              "cg", "rawset", "execute", "getenv", "exit", "dump", "time",
                              "clock", "strmeta", "upper" };
    for (size_t i = 0; r && i < sizeof probes / sizeof probes [0]; i++)
        if (!ah_msg_bool (r, probes [i], false)) {
            fprintf (stderr, "  probe %s failed\n", probes [i]);
            CHECK (0);
        }
    ah_msg_destroy (&r);
    r = s_call (policy, "use_io", &err);
    CHECK (r == NULL && s_has (err, "unknown global 'io'"));
    r = s_call (policy, "use_execute", &err);
    CHECK (r == NULL && s_has (err, "execute"));
    r = s_call (policy, "use_require", &err);
    CHECK (r == NULL && s_has (err, "unknown global 'require'"));
    r = s_call (policy, "use_load", &err);
    CHECK (r == NULL && s_has (err, "unknown global 'load'"));
    r = s_call (policy, "patch", &err);
    CHECK (r == NULL && s_has (err, "read-only"));
    r = s_call (policy, "new_global", &err);
    CHECK (r == NULL && s_has (err, "attempt to create global 'created'"));
    r = s_call (policy, "no_such_function", &err);
    CHECK (r == NULL && s_has (err, "defines no function no_such_function()"));

    //  Results must be flat tables with string keys
    r = s_call (policy, "nested", &err);
    CHECK (r == NULL && s_has (err, "nested() returned a table for 't'"));
    r = s_call (policy, "not_table", &err);
    CHECK (r == NULL && s_has (err, "not_table() returned number, wanted a table"));
    r = s_call (policy, "number_key", &err);
    CHECK (r == NULL && s_has (err, "number key"));

    //  Arguments keep their types
    ah_msg_t *a = ah_msg_new ("A");
    ah_msg_set_str (a, "s", "text");
    ah_msg_set_int (a, "i", -7);
    ah_msg_set_double (a, "d", 2.5);
    ah_msg_set_bool (a, "yes", true);
    ah_msg_set_nil (a, "nothing");
    free (err);
    err = NULL;
    CHECK (ah_policy_call (policy, "echo", a, NULL, &r, &err) == 0);
    CHECK_STR (ah_msg_str (r, "s"), "text");
    CHECK (r && ah_msg_int (r, "i", 0) == -7);
    CHECK (r && ah_msg_double (r, "d", 0) == 2.5);
    CHECK (r && ah_msg_bool (r, "yes", false));
    CHECK (r && ah_msg_bool (r, "missing", false));
    CHECK (r && ah_msg_bool (r, "b", false));
    CHECK_STR (ah_msg_str (r, "itype"), "integer");
    CHECK_STR (ah_msg_str (r, "dtype"), "float");
    ah_msg_destroy (&r);
    ah_msg_destroy (&a);

    //  The memory cap holds, and the state survives it
    ah_policy_set_budget (policy, 1000000000);
    ah_policy_set_memory_limit (policy, 4u << 20);
    r = s_call (policy, "hog", &err);
    CHECK (r == NULL && s_has (err, "hog() ran out of memory (the limit is 4096 KiB)"));
    r = s_call (policy, "big", &err);
    CHECK (r == NULL && s_has (err, "big() ran out of memory"));
    r = s_call (policy, "ok", &err);
    CHECK (r && ah_msg_int (r, "n", 0) == 3);
    ah_msg_destroy (&r);
    free (err);
    ah_policy_destroy (&policy);
}

//  The values in force: the configuration's, a row's, and never a row
//  off its bound (written by hand: the API refuses such a value).
static void s_test_values (ah_store_t *store)
{
    ah_config_t *config = ah_config_new_defaults ();
    CHECK (config != NULL);
    if (!config)
        return;
    size_t n = 0;
    for (const ah_policy_value_t *p; (p = ah_policy_value_at (n)); n++) {
        CHECK (ah_policy_value_index (p->key) == (int) n);
        CHECK (ah_bound (p->key) != NULL);          //  each has a stated range
        CHECK (p->config && strchr (p->config, '.'));
    }
    CHECK (n == 8);
    CHECK (ah_policy_value_index ("uid") == -1 && ah_policy_value_index (NULL) == -1);
    CHECK (ah_policy_value (store, config, "idle_minutes") == 15);
    CHECK (ah_policy_value (store, config, "container_ttl") == 86400);
    CHECK (ah_policy_value (store, config, "workspace_ttl") == 0);
    CHECK (ah_policy_value (store, config, "max_exec_timeout") == 300);
    CHECK (ah_policy_value (store, config, "tenant_max_running") == 10);
    CHECK (isnan (ah_policy_value (store, config, "network_mode")));
    char *err = NULL;
    CHECK (ah_store_exec (store, "INSERT INTO policy_values (key, value, updated_at) VALUES"
                                 " ('idle_minutes', 0.5, 0), ('container_ttl', 0, 0),"
                                 " ('workspace_ttl', -5, 0), ('max_exec_timeout', 1e300, 0),"
                                 " ('tenant_max_running', 2.5, 0)", &err) == 0);
    free (err);
    CHECK (ah_policy_value (store, config, "idle_minutes") == 0.5);
    CHECK (ah_policy_value (store, config, "container_ttl") == 0);        //  0: never
    CHECK (ah_policy_value (store, config, "workspace_ttl") == 0);        //  -5 ignored
    CHECK (ah_policy_value (store, config, "max_exec_timeout") == 300);   //  off its bound
    CHECK (ah_policy_value (store, config, "tenant_max_running") == 10);  //  not whole
    CHECK (ah_store_exec (store, "DELETE FROM policy_values", NULL) == 0);
    CHECK (ah_policy_value (store, config, "idle_minutes") == 15);
    ah_config_destroy (&config);
}

//  lua/egress.lua on the facts the server gives it (proto/egress.c
//  matches the lists): each verdict and the rule its sentence names.
static ah_msg_t *s_egress (ah_policy_t *policy, bool needs_network, const char *host, int port)
{
    static const char *const runtime_list [] = { "deb.debian.org", "*.debian.org", "pypi.org:443" };
    static const char *const allow [] = { "*.example.org", "10.77.0.0/16" };
    static const char *const deny [] = { "evil.example.org" };
    ah_msg_t *tenant = ah_msg_new ("TENANT"), *agent = ah_msg_new ("AGENT");
    ah_msg_t *runtime = ah_msg_new ("RUNTIME"), *target = ah_msg_new ("TARGET");
    ah_msg_set_str (tenant, "name", "acme");
    ah_msg_set_str (agent, "id", "0123456789ab");
    ah_msg_set_str (agent, "name", "a1");
    ah_msg_set_str (runtime, "name", "debian");
    ah_msg_set_bool (runtime, "needs_network", needs_network);
    ah_msg_set_str (target, "host", host);
    ah_msg_set_int (target, "port", port);
    ah_msg_set_str (target, "kind", "connect");
    const char *e = ah_egress_first (runtime_list, 3, host, port);
    ah_msg_set_str (target, "runtime_entry", e ? e : "");
    e = ah_egress_first (allow, 2, host, port);
    ah_msg_set_str (target, "allow_entry", e ? e : "");
    e = ah_egress_first (deny, 1, host, port);
    ah_msg_set_str (target, "deny_entry", e ? e : "");
    const ah_msg_t *args [4] = { tenant, agent, runtime, target };
    ah_msg_t *result = NULL;
    char *err = NULL;
    CHECK (ah_policy_callv (policy, "decide", args, 4, &result, &err) == 0);
    if (err)
        fprintf (stderr, "  decide: %s\n", err);
    free (err);
    ah_msg_destroy (&tenant);
    ah_msg_destroy (&agent);
    ah_msg_destroy (&runtime);
    ah_msg_destroy (&target);
    return result;
}

static void s_expect_egress (ah_policy_t *policy, bool net, const char *host, int port, bool allow,
                             const char *rule, const char *says)
{
    ah_msg_t *r = s_egress (policy, net, host, port);
    CHECK (r && ah_msg_bool (r, "allow", !allow) == allow);
    CHECK_STR (r ? ah_msg_str (r, "rule") : NULL, rule);
    const char *why = r ? ah_msg_str (r, "why") : NULL;
    if (!why || !strstr (why, says))
        fprintf (stderr, "  %s:%d: why '%s' lacks '%s'\n", host, port, why ? why : "(none)", says);
    CHECK (why && strstr (why, says));
    ah_msg_destroy (&r);
}

static void s_test_egress (void)
{
    ah_policy_t *policy = s_shipped ("egress.lua", "tunnel");
    if (!policy)
        return;
    s_expect_egress (policy, false, "deb.debian.org", 443, false, "needs_network", "no needs_network");
    s_expect_egress (policy, true, "deb.debian.org", 443, true, "runtime egress", "entry 'deb.debian.org'");
    s_expect_egress (policy, true, "security.debian.org", 80, true, "runtime egress", "'*.debian.org'");
    s_expect_egress (policy, true, "debian.org", 443, false, "no entry", "neither runtime 'debian'");
    s_expect_egress (policy, true, "pypi.org", 443, true, "runtime egress", "'pypi.org:443'");
    s_expect_egress (policy, true, "pypi.org", 80, false, "no entry", "pypi.org:80");
    s_expect_egress (policy, true, "www.example.org", 443, true, "tenant allow", "tenant 'acme'");
    s_expect_egress (policy, true, "evil.example.org", 443, false, "tenant deny", "deny list");
    s_expect_egress (policy, true, "10.77.1.2", 8080, true, "tenant allow", "'10.77.0.0/16'");
    s_expect_egress (policy, true, "10.78.1.2", 8080, false, "no entry", "10.78.1.2:8080");
    ah_policy_destroy (&policy);
}

//  lua/ports.lua's shipped rule (issue 30): private, whatever the port,
//  saying why.
static void s_test_ports (void)
{
    ah_policy_t *policy = s_shipped ("ports.lua", "api");
    if (!policy)
        return;
    int ports [] = { 1, 80, 8000, 65535 };
    for (size_t i = 0; i < sizeof ports / sizeof ports [0]; i++) {
        ah_msg_t *mt = ah_msg_new ("TENANT"), *ma = ah_msg_new ("AGENT"), *mp = ah_msg_new ("PORT");
        ah_msg_set_str (mt, "name", "acme");
        ah_msg_set_str (ma, "id", "0123456789ab");
        ah_msg_set_str (ma, "name", "web");
        ah_msg_set_int (mp, "number", ports [i]);
        const ah_msg_t *args [3] = { mt, ma, mp };
        ah_msg_t *result = NULL;
        char *err = NULL;
        CHECK (ah_policy_callv (policy, "decide", args, 3, &result, &err) == 0);
        CHECK (result && !ah_msg_bool (result, "allow", true));
        const char *why = result ? ah_msg_str (result, "why") : NULL;
        CHECK (why && strstr (why, "shipped rule: private") && strstr (why, "agent 'web'"));
        free (err);
        ah_msg_destroy (&result);
        ah_msg_destroy (&mt);
        ah_msg_destroy (&ma);
        ah_msg_destroy (&mp);
    }
    ah_policy_destroy (&policy);
}

int main (void)
{
    if (!mkdtemp (s_dir)) {
        perror ("mkdtemp");
        return 1;
    }
    char db [256];
    snprintf (db, sizeof db, "%s/agenthold.db", s_dir);
    char *err = NULL;
    ah_store_t *store = ah_store_open (db, true, &err);
    CHECK (store != NULL);
    if (store) {
        s_test_admit (store);
        s_test_idle_and_briefing ();
        s_test_egress ();
        s_test_ports ();
        s_test_reload (store);
        s_test_sandbox ();
        s_test_values (store);
        ah_store_close (&store);
    }
    else
        fprintf (stderr, "store: %s\n", err);
    free (err);
    char command [128];
    snprintf (command, sizeof command, "rm -rf '%s'", s_dir);
    if (system (command) != 0)
        fprintf (stderr, "could not remove %s\n", s_dir);
    return CHECK_DONE ();
}
