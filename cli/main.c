/*  cli/main.c: the agenthold command: `agenthold serve` runs the server
    (server/serve.h); every other command is a REST client of a running
    server (cli/client.h) or, for `tap`, a subscriber to the bus tap
    (cli/tap.h). docs/cli.md describes each command. The commands marked
    `server` in the table run in agenthold-server (cli/server_cmds.h).

    Exit status: 0 success, 1 the server refused or could not be reached
    (its message on stderr, "agenthold: ..."), 2 bad usage.             */
#include "cli/admin.h"
#include "cli/audit.h"
#include "cli/client.h"
#include "cli/conv.h"
#include "cli/follow.h"
#include "cli/sbx.h"
#include "cli/server_cmds.h"
#include "cli/term.h"
#include "cli/turn.h"
#include "config/config.h"

#include <signal.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

//  --------------------------------------------------------------------
//  Help

static ah_cmd_fn s_cmd_help, s_cmd_create, s_cmd_ls, s_cmd_show,
    s_cmd_transition, s_cmd_runtimes, s_cmd_hosts, s_cmd_pool, s_cmd_ports, s_cmd_link,
    s_cmd_links, s_cmd_unlink;

static const ah_cmd_t s_commands [] = {
    { "serve", "serve [--config FILE]",
      "Run the server in the foreground until SIGINT or SIGTERM (SIGHUP reloads the\n"
      "policies). The configuration is FILE, else $AGENTHOLD_CONFIG, else\n"
      "etc/agenthold.yaml when it exists; AGENTHOLD_* variables override every key.\n"
      "Started as root with the docker driver, the server runs as server.user\n"
      "(default agenthold) without the Docker socket, and serve starts a local\n"
      "`agenthold hostd` (root) that holds it; server.user none: one root process\n"
      "(docs/hostd.md).\n",
      ah_cli_server_cmd, NULL, true, true },
    { "hostd", "hostd [--config FILE]",
      "Run the host agent in the foreground until SIGINT or SIGTERM: the one process\n"
      "that holds the Docker socket, for servers with `sandbox.driver: remote`\n"
      "(hostd.* keys; docs/hostd.md). Same configuration sources as serve.\n",
      ah_cli_server_cmd, NULL, true, true },
    { "doctor", "doctor [--config FILE] [--json]",
      "Check the whole installation the configuration describes: the configuration,\n"
      "the database schema, the Lua scripts, the host agent (or the Docker Engine):\n"
      "reachable, same protocol, engine version, isolation, free disk, the catalog's\n"
      "images; the tunnel, TLS, the admin token file's mode, destroys waiting. Each\n"
      "problem comes with what to do. Exit status 0 only when all is well.\n",
      ah_cli_server_cmd, NULL, true, true },
    { "create", "create NAME [--runtime ALIAS | --image IMG] [--cpus N] [--memory-mb N] [--idle-minutes N] [--harness JSON] [--no-wait] [--json]",
      "Create an agent and its sandbox on a runtime of the catalog (the first one\n"
      "unless --runtime names another; `agenthold runtimes` lists them; --image runs\n"
      "an image outside the catalog) and wait until the sandbox runs, up to 10\n"
      "minutes: the first sandbox of a runtime waits while its image is built, and\n"
      "create says on stderr what the build does (\"Preparing the sandbox...\").\n"
      "Unset resources take the runtime's or the server's defaults; the server's\n"
      "limits policy may refuse them. --no-wait returns once the agent exists.\n"
      "--harness '{\"command\": [\"agent\", \"--acp\"], \"env\": {\"K\": \"v\"}}' (an admin's token):\n"
      "the agent's ACP harness instead of its runtime's (docs/conversations.md).\n",
      s_cmd_create, NULL, false, false },
    { "ls", "ls [--json]",
      "List every agent with its state, image and resources.\n",
      s_cmd_ls, NULL, false, false },
    { "show", "show NAME [--json]",
      "Show one agent (NAME or id).\n",
      s_cmd_show, NULL, false, false },
    { "start", "start NAME [--no-wait] [--timeout S] [--json]",
      "Start (wake) an agent's sandbox and wait until it runs (or fails), at most\n"
      "S seconds (default 600). --no-wait returns as soon as the server accepted.\n",
      s_cmd_transition, NULL, false, false },
    { "stop", "stop NAME [--no-wait] [--timeout S] [--json]",
      "Stop an agent's sandbox (it sleeps; its home directory stays) and wait until\n"
      "it is asleep. --no-wait returns at once.\n",
      s_cmd_transition, NULL, false, false },
    { "rebuild", "rebuild NAME [--no-wait] [--timeout S] [--json]",
      "Rebuild an agent's sandbox from its image and resources (the home directory\n"
      "stays) and wait until the rebuild ends. --no-wait returns at once.\n",
      s_cmd_transition, NULL, false, false },
    { "rm", "rm NAME [--no-wait] [--timeout S] [--json]",
      "Destroy an agent, its sandbox and its home directory, and wait until it is gone.\n",
      s_cmd_transition, NULL, false, false },
    { "log", "log [NAME] [--operation K] [--run R] [--failed] [--grep TEXT] [--limit N] [--before ID] [--all] [--json]",
      "The audit trail, newest first: who did what to NAME (an agent's name or id,\n"
      "deleted ones too; or to every agent), and each state it went through.\n"
      "--operation: one kind (exec, fs.read, state, ...); --run: what one run or\n"
      "session did (X-Agenthold-Run); --failed: failures only; --grep: a path,\n"
      "command or error containing TEXT. --limit: a page of N (default 50);\n"
      "--before ID: the page below operation ID; --all: every page.\n",
      ah_cli_log, NULL, false, false },
    { "tombstones", "tombstones [--json] | tombstones forget AGENT_ID",
      "For an admin: the destroys the driver has not confirmed yet, each with its\n"
      "attempts, next attempt and last error (they are retried, the pause doubling\n"
      "from 2 minutes to 6 hours). forget: give up on one (its rows go; whatever\n"
      "the driver still holds stays).\n",
      ah_cli_tombstones, NULL, false, false },
    { "runtimes", "runtimes [--json]",
      "The runtime catalog, the default first: each runtime's image, its state (present,\n"
      "building with what the build does, missing, error) and its last build error.\n",
      s_cmd_runtimes, NULL, false, false },
    { "routes", "routes [--json]",
      "The API's routes, from the server's own router table: method, path pattern,\n"
      "who may call it (admin, public) and whether it takes a JSON body (--json: with\n"
      "the body's fields and their types). Needs no server; for tools and tests.\n",
      ah_cli_server_cmd, NULL, false, true },
    { "ports", "ports NAME [--json]",
      "The TCP ports that listen in the agent's sandbox, on its loopback or on every\n"
      "address (what the server can reach through sandboxd), with their addresses.\n"
      "A sleeping agent is not woken: it has none.\n",
      s_cmd_ports, NULL, false, false },
    { "link", "link NAME PORT [--expires SECONDS] [--json]",
      "A link to a port of the agent's sandbox through the server (docs/ports.md):\n"
      "whoever holds it opens the agent's web server there until it expires (default\n"
      "3600 s, at most 30 days), with no token; a request on it wakes the agent.\n",
      s_cmd_link, NULL, false, false },
    { "links", "links NAME [--json]",
      "The agent's port links that still stand (not expired, not revoked): each\n"
      "one's id, port, expiry and who made it (never the link itself: it is shown\n"
      "once, by agenthold link).\n",
      s_cmd_links, NULL, false, false },
    { "unlink", "unlink NAME ID [--json]",
      "Revoke the agent's port link ID (from agenthold links): from then on it is\n"
      "refused as an invalid link (403), whoever holds it.\n",
      s_cmd_unlink, NULL, false, false },
    { "hosts", "hosts [--json]",
      "The host agents (sandbox.driver: remote), for an admin: each one's state (up,\n"
      "unreachable, refused), version and protocol, and why when it is not up.\n",
      s_cmd_hosts, NULL, false, false },
    { "pool", "pool [--json]",
      "The warm pools, for an admin (docs/lifecycle.md \"Warm pools\"): each\n"
      "runtime's size (lua/pool.lua within sandbox.warm_pool_max), its warm\n"
      "sandboxes ready and being made, how long the oldest ready one has waited,\n"
      "then the creates that took one (hits) or found none (misses) since the\n"
      "server started.\n",
      s_cmd_pool, NULL, false, false },
    { "tap", "tap [--endpoint E] [--type GLOB] [--count N]",
      "Print every message on the server's bus as one JSON line, from the tap\n"
      "(tap.endpoint in the configuration, or E). --type keeps the types matching\n"
      "GLOB (e.g. 'SANDBOX_*'); --count stops after N messages. Ctrl-C stops.\n",
      ah_cli_server_cmd, NULL, false, true },
    { "policy", "policy status [--json] | policy reload | policy set KEY=N|KEY=default...",
      "status: each policy script, when it was loaded and why its last load failed,\n"
      "and the values in force.\n"
      "reload: ask the lifecycle, sleeper and builder to reload their scripts.\n"
      "set (an admin): change values at once, kept across restarts:\n"
      "tenant_max_sandboxes, pool_max_sandboxes, tenant_max_running, pool_max_running\n"
      "(sandboxes; 0: no limit), idle_minutes (the default idle timeout, minutes),\n"
      "container_ttl, workspace_ttl (seconds; 0: never), max_exec_timeout (seconds);\n"
      "default: back to the configuration's. docs/policy.md \"Values\".\n",
      ah_cli_policy, NULL, false, false },
    { "tenant", "tenant create|ls|show|set|rm [NAME] [--max-sandboxes N] [--max-running N]\n"
      "                   [--max-cpus N] [--max-memory-mb N] [--egress-allow E,E...]\n"
      "                   [--egress-deny E,E...] [--force] [--json]\n"
      "                   | tenant secret set TENANT HOST --header NAME < VALUE\n"
      "                   | tenant secret ls TENANT | tenant secret rm TENANT HOST",
      "Tenants, for an admin. create NAME makes one (with limits of its own, else\n"
      "the pool's rules apply); ls lists them with what they hold; show NAME; set NAME\n"
      "changes its limits ('none' removes one) and replaces its egress allow and deny\n"
      "lists (comma-separated entries: name, *.name, *, an address or range, each\n"
      "with an optional :port; 'none' empties a list; docs/egress.md), applied to the\n"
      "next connection; rm NAME removes it, refused while it holds sandboxes unless\n"
      "--force, which destroys them first.\n"
      "secret set TENANT HOST --header NAME: attach a header to HOST (name, name:port,\n"
      "an address; port 443 unless named), its value read from stdin (never the command\n"
      "line); the server adds it to every request the tenant's sandboxes send there,\n"
      "terminating their TLS with the installation's CA; the sandbox never sees it.\n"
      "secret ls TENANT: the hosts and header names (never the values); secret rm\n"
      "TENANT HOST. docs/egress.md \"Secrets\".\n",
      ah_cli_tenant, NULL, false, false },
    { "token", "token create [--name N] [--user U] [--expires D] [--admin|--metrics] [--json] | token ls | token revoke NAME",
      "API tokens, for an admin. create: a token for the tenant given with --tenant\n"
      "(or an admin's with --admin, or one that reads GET /metrics only with\n"
      "--metrics), acting for person U when given (user sessions\n"
      "are U's), expiring after D (30d, 12h, 90m); the token is printed once on\n"
      "stdout and only its hash is kept. ls: every token, never the token itself.\n"
      "revoke NAME: refused from then on.\n",
      ah_cli_token, NULL, false, false },
    { "session", "session open SCOPE [SUBJECT] [--backend B] [--host H] [--runtime R] [--no-wait]\n"
      "                   | session open ID | session ls | session show ID | session close ID",
      "The sandbox of a conversation by name (docs/sessions.md). open SCOPE SUBJECT:\n"
      "SCOPE is run, conversation, channel, user (the token's person; no subject)\n"
      "or agent; the first open makes the sandbox, later ones attach to it. open ID:\n"
      "again by its reference (refused when its files are gone). close ID: end the\n"
      "session and destroy its sandbox.\n",
      ah_cli_session, NULL, false, false },
    { "turn", "turn NAME [--lease S] -- CMD...",
      "Hold a turn on NAME while CMD runs here (stdin, stdout, stderr inherited), so\n"
      "the agent does not fall asleep: wakes it first if it sleeps, renews the lease\n"
      "(default 60 s) every third of it, ends the turn when CMD exits or on\n"
      "SIGINT/SIGTERM, and exits with CMD's status.\n",
      NULL, ah_cli_turn, false, false },
    { "term", "term NAME [--attach ID | --new]",
      "A shell in NAME's sandbox on this terminal (raw mode); exits with its status.\n"
      "--attach ID: a terminal that lasts, its screen first (Ctrl-] detaches);\n"
      "--new: make one and attach.\n",
      NULL, ah_cli_term, false, false },
    { "terms", "terms NAME [--json]",
      "List NAME's terminals that last: id, state, size, clients, created, title.\n",
      ah_cli_terms, NULL, false, false },
    { "exec", "exec NAME [--timeout S] -- CMD...",
      "Run CMD in NAME's sandbox; its output to ours, exit with its status.\n",
      NULL, ah_cli_exec, false, false },
    { "fs", "fs ls|get|put|tree|mkdir|rm NAME PATH [LOCAL]",
      "Files in NAME's sandbox home; get and put stream (agenthold fs --help).\n",
      NULL, ah_cli_fs, false, false },
    { "prompt", "prompt NAME [--conversation ID] [--json] [--] TEXT...",
      "Prompt NAME's harness (docs/conversations.md): TEXT (its words joined by spaces;\n"
      "after -- a word may start with a dash) in conversation ID, or in a new one (its\n"
      "id is the first line on stderr). The reply streams to stdout as it comes; tool\n"
      "calls, permissions, notices and errors go to stderr. --json: each event of the\n"
      "turn as a JSON line on stdout. Exits 0 when the turn ends with stop reason\n"
      "end_turn, 1 (saying why) for any other stop, an error that ended the turn, a\n"
      "refusal, or a stream that broke. SIGINT (Ctrl-C), SIGTERM or SIGHUP cancel the\n"
      "turn and wait for its stop: exit 128+N; a second one leaves at once.\n",
      ah_cli_prompt, NULL, false, false },
    { "conversations", "conversations NAME [--json]",
      "List NAME's conversations: id, turn state, ACP session, created, last activity.\n",
      ah_cli_conversations, NULL, false, false },
    { "help", "help [COMMAND]",
      "Show this help, or one command's.\n",
      s_cmd_help, NULL, true, false },
};
#define COMMAND_COUNT (sizeof s_commands / sizeof s_commands [0])

static const ah_cmd_t *s_command (const char *name)
{
    for (size_t i = 0; i < COMMAND_COUNT; i++)
        if (!strcmp (s_commands [i].name, name))
            return &s_commands [i];
    return NULL;
}

static void s_usage_all (FILE *out)
{
    fprintf (out, "usage: agenthold COMMAND [OPTIONS]\n\ncommands:\n");
    for (size_t i = 0; i < COMMAND_COUNT; i++)
        fprintf (out, "  agenthold %s\n", s_commands [i].usage);
    fprintf (out,
        "\nOptions every client command takes: --config FILE (where to find the server),\n"
        "--tenant T (an admin's token acting within tenant T; AGENTHOLD_TENANT), --help.\n"
        "The server is AGENTHOLD_URL (default: http://<server.listen>), the token\n"
        "AGENTHOLD_TOKEN (default: <server.data_dir>/admin.token).\n"
        "`agenthold help COMMAND` tells more.\n");
}

//  --------------------------------------------------------------------
//  Output

static void s_print_agent (json_t *a)
{
    json_t *rebuild = json_object_get (a, "needs_rebuild");
    printf ("name:             %s\n", ah_cmd_jstr (a, "name", "-"));
    printf ("id:               %s\n", ah_cmd_jstr (a, "id", "-"));
    printf ("state:            %s\n", ah_cmd_jstr (a, "state", "-"));
    //  Running while its sandboxd redials (after a server restart).
    if (json_is_false (json_object_get (a, "connected")) && !strcmp (ah_cmd_jstr (a, "state", ""), "running"))
        printf ("connected:        no (its sandboxd is redialling the server)\n");
    if (json_is_string (json_object_get (a, "error"))) {
        char *error = ah_cmd_clean (strdup (ah_cmd_jstr (a, "error", "-")));
        printf ("error:            %s\n", error ? error : "-");
        free (error);
    }
    if (json_is_string (json_object_get (a, "no_freeze"))) {
        char *why = ah_cmd_clean (strdup (ah_cmd_jstr (a, "no_freeze", "-")));
        printf ("never frozen:     %s\n", why ? why : "-");
        free (why);
    }
    if (json_is_string (json_object_get (a, "tenant")))
        printf ("tenant:           %s\n", ah_cmd_jstr (a, "tenant", "-"));
    if (json_is_string (json_object_get (a, "home_lost")))
        printf ("home_lost:        %s\n", ah_cmd_jstr (a, "home_lost", "-"));
    if (json_is_string (json_object_get (a, "progress")))
        printf ("progress:         %s\n", ah_cmd_jstr (a, "progress", "-"));
    if (json_object_get (a, "image")) {
        printf ("runtime:          %s\n", ah_cmd_jstr (a, "runtime", "- (an image outside the catalog)"));
        printf ("image:            %s\n", ah_cmd_jstr (a, "image", "-"));
        //  An admin's override of the runtime's harness: its argv, and
        //  the names of the variables it sets (the server shows no value).
        json_t *h = json_object_get (a, "harness"), *v;
        size_t i;
        if (json_is_object (h)) {
            printf ("harness:          ");
            json_array_foreach (json_object_get (h, "command"), i, v)
                printf ("%s%s", i ? " " : "", json_string_value (v) ? json_string_value (v) : "?");
            json_array_foreach (json_object_get (h, "env"), i, v)
                printf ("%s%s", i ? ", " : " (sets ", json_string_value (v) ? json_string_value (v) : "?");
            printf ("%s\n", json_array_size (json_object_get (h, "env")) ? ")" : "");
        }
        printf ("cpus:             %g\n", json_number_value (json_object_get (a, "cpus")));
        printf ("memory_mb:        %lld\n", (long long) json_integer_value (json_object_get (a, "memory_mb")));
        printf ("idle_minutes:     %g\n", json_number_value (json_object_get (a, "idle_minutes")));
        printf ("needs_rebuild:    %s\n", json_is_true (rebuild) ? "yes" : "no");
        printf ("created_at:       %s\n", ah_cmd_jstr (a, "created_at", "-"));
        printf ("last_activity_at: %s\n", ah_cmd_jstr (a, "last_activity_at", "-"));
    }
}

//  An agent in reply: JSON or human. A waited transition that ended in
//  error fails the command with the agent's error.
static void s_print_reply (const ah_common_t *co, json_t *reply, bool waited, int *exit_code)
{
    if (!reply)
        return;
    if (co->json)
        ah_cmd_print_json (reply);
    else
        s_print_agent (reply);
    if (waited && !strcmp (ah_cmd_jstr (reply, "state", ""), "error")) {
        fprintf (stderr, "agenthold: %s: %s\n", ah_cmd_jstr (reply, "name", "?"),
                 ah_cmd_jstr (reply, "error", "the sandbox is in error"));
        *exit_code = 1;
    }
}

static void s_print_agents (json_t *agents)
{
    static const char *const header [] = { "NAME", "STATE", "IMAGE", "CPUS", "MEMORY", "IDLE", "LAST ACTIVITY",
                                           "NOTE", "SLEEPS", "TENANT" };
    //  The tenant is shown when the list holds more than one (an admin's).
    bool tenants = false;
    for (size_t i = 1; i < json_array_size (agents); i++)
        tenants = tenants || strcmp (ah_cmd_jstr (json_array_get (agents, i), "tenant", ""),
                                     ah_cmd_jstr (json_array_get (agents, 0), "tenant", ""));
    const size_t ncols = tenants ? 10 : 9;
    size_t nrows = json_array_size (agents) + 1;
    char ***rows = ah_cmd_table_new (header, ncols, nrows - 1);
    for (size_t i = 0; i + 1 < nrows; i++) {
        json_t *a = json_array_get (agents, i);
        char **row = rows [i + 1];
        row [0] = strdup (ah_cmd_jstr (a, "name", "-"));
        row [1] = strdup (ah_cmd_jstr (a, "state", "-"));
        row [2] = strdup (ah_cmd_jstr (a, "image", "-"));
        row [3] = ah_cmd_strf ("%g", json_number_value (json_object_get (a, "cpus")));
        row [4] = ah_cmd_strf ("%lldM", (long long) json_integer_value (json_object_get (a, "memory_mb")));
        row [5] = ah_cmd_strf ("%gm", json_number_value (json_object_get (a, "idle_minutes")));
        row [6] = strdup (ah_cmd_jstr (a, "last_activity_at", "-"));
        const char *error = ah_cmd_jstr (a, "error", NULL);
        if (error && !strcmp (ah_cmd_jstr (a, "state", ""), "error"))
            row [7] = ah_cmd_clean (ah_cmd_strf ("%.60s", error));
        else
            row [7] = strdup (json_is_true (json_object_get (a, "needs_rebuild")) ? "needs rebuild" : "");
        //  A frozen agent (issue 29): when it is stopped ("stops in 8m").
        const char *stops_at = ah_cmd_jstr (a, "stops_at", NULL);
        if (!ah_cmd_jstr (a, "sleeps_at", NULL) && stops_at) {
            char *in = ah_cli_sleeps_in (stops_at);
            row [8] = ah_cmd_strf ("stops %s", in);
            free (in);
        }
        else
            row [8] = ah_cli_sleeps_in (ah_cmd_jstr (a, "sleeps_at", NULL));
        if (tenants)
            row [9] = strdup (ah_cmd_jstr (a, "tenant", "-"));
    }
    ah_cmd_print_table (rows, nrows, ncols);
}

static char *s_agent_path (const char *name, const char *suffix)
{
    return ah_cmd_path ("agents", name, suffix);
}

//  --------------------------------------------------------------------
//  Commands

static int s_cmd_help (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    (void) c, (void) co;
    if (argc > 0) {
        const ah_cmd_t *about = s_command (argv [0]);
        if (!about) {
            fprintf (stderr, "agenthold: no command '%s'\n", argv [0]);
            return AH_EXIT_USAGE;
        }
        ah_cmd_usage (about, stdout);
    }
    else
        s_usage_all (stdout);
    return 0;
}


//  Commands that take only --json and --config: 0 go on, else the exit
//  status to return at once (0 after --help).
static int s_parse_simple (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co,
                           const char **pos, int max_pos, int *npos)
{
    ah_opt_t opts [] = { { "--json", NULL, &co->json }, { "--config", &co->config, NULL }, { NULL, NULL, NULL } };
    int rc = ah_cmd_parse (c, argc, argv, opts, pos, max_pos, npos);
    if (rc > 0) {
        ah_cmd_usage (c, stdout);
        return -1;
    }
    return rc < 0 ? AH_EXIT_USAGE : 0;
}

static int s_cmd_create (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    const char *image = NULL, *runtime = NULL, *cpus = NULL, *memory = NULL, *idle = NULL, *harness = NULL;
    bool no_wait = false;
    ah_opt_t opts [] = {
        { "--image", &image, NULL }, { "--runtime", &runtime, NULL }, { "--harness", &harness, NULL },
        { "--cpus", &cpus, NULL }, { "--memory-mb", &memory, NULL },
        { "--idle-minutes", &idle, NULL }, { "--no-wait", NULL, &no_wait },
        { "--json", NULL, &co->json }, { "--config", &co->config, NULL }, { NULL, NULL, NULL }
    };
    const char *pos [1];
    int npos, rc = ah_cmd_parse (c, argc, argv, opts, pos, 1, &npos);
    if (rc)
        return rc > 0 ? (ah_cmd_usage (c, stdout), 0) : AH_EXIT_USAGE;
    if (npos != 1) {
        fprintf (stderr, "agenthold create: which agent? (usage: agenthold %s)\n", c->usage);
        return AH_EXIT_USAGE;
    }
    json_t *body = json_pack ("{s:s}", "name", pos [0]);
    json_t *v;
    if (image)
        json_object_set_new (body, "image", json_string (image));
    if (runtime)
        json_object_set_new (body, "runtime", json_string (runtime));
    if (cpus) {
        if (ah_cmd_number ("create", "--cpus", cpus, false, &v))
            goto usage;
        json_object_set_new (body, "cpus", v);
    }
    if (memory) {
        if (ah_cmd_number ("create", "--memory-mb", memory, true, &v))
            goto usage;
        json_object_set_new (body, "memory_mb", v);
    }
    if (idle) {
        if (ah_cmd_number ("create", "--idle-minutes", idle, false, &v))
            goto usage;
        json_object_set_new (body, "idle_minutes", v);
    }
    if (harness) {
        //  Only its JSON is looked at here; the server holds it to the
        //  catalog's "harness" rules and says what is wrong.
        json_error_t jerr;
        json_t *h = json_loads (harness, JSON_REJECT_DUPLICATES, &jerr);
        if (!json_is_object (h)) {
            char *why = ah_cmd_clean (strdup (h ? "it is not an object" : jerr.text));
            fprintf (stderr, "agenthold create: --harness wants a JSON object {\"command\": [\"agent\", "
                     "\"--acp\"], \"env\": {...}}: %s\n", why ? why : "?");
            free (why);
            json_decref (h);
            goto usage;
        }
        json_object_set_new (body, "harness", h);
    }
    //  Waiting: follow the agent, up to 10 minutes (the first sandbox of a
    //  runtime may wait for its image to be built), saying what happens.
    //  The events are subscribed to first (every agent's: this one has no
    //  id yet), so none is missed.
    ah_follow_t *follow = no_wait ? NULL : ah_follow_new (co, NULL);
    int exit_code;
    json_t *reply = ah_cmd_call (co, "POST", "/api/v1/agents", body, 0, NULL, &exit_code);
    json_decref (body);
    if (reply && !no_wait) {
        json_t *agent = ah_follow_wait (follow, co, reply, 600, &exit_code);
        if (agent) {
            json_decref (reply);
            reply = agent;
        }
    }
    ah_follow_destroy (&follow);
    s_print_reply (co, reply, !no_wait, &exit_code);
    json_decref (reply);
    return exit_code;
usage:
    json_decref (body);
    return AH_EXIT_USAGE;
}

static void s_print_runtimes (json_t *list)
{
    static const char *const header [] = { "ALIAS", "DEFAULT", "IMAGE", "IMAGE STATE", "NETWORK", "MEMORY",
                                           "LAST ERROR" };
    char ***rows = ah_cmd_table_new (header, 7, json_array_size (list));
    for (size_t i = 0; i < json_array_size (list); i++) {
        json_t *rt = json_array_get (list, i);
        char **row = rows [i + 1];
        json_t *mem = json_object_get (rt, "mem_limit_mb");
        const char *progress = ah_cmd_jstr (rt, "progress", NULL);
        row [0] = strdup (ah_cmd_jstr (rt, "alias", "-"));
        row [1] = strdup (json_is_true (json_object_get (rt, "default")) ? "yes" : "");
        row [2] = strdup (ah_cmd_jstr (rt, "image", "-"));
        row [3] = progress ? ah_cmd_clean (ah_cmd_strf ("%s: %.60s", ah_cmd_jstr (rt, "image_state", "-"), progress))
                           : strdup (ah_cmd_jstr (rt, "image_state", "-"));
        row [4] = strdup (json_is_true (json_object_get (rt, "needs_network")) ? "yes" : "no");
        row [5] = json_is_integer (mem) ? ah_cmd_strf ("%lldM", (long long) json_integer_value (mem))
                                        : strdup ("default");
        row [6] = ah_cmd_clean (ah_cmd_strf ("%.100s", ah_cmd_jstr (rt, "image_error", "")));
    }
    ah_cmd_print_table (rows, json_array_size (list) + 1, 7);
}

//  Each host agent, then why for those that are not up.
static void s_print_hosts (json_t *list)
{
    if (json_array_size (list) == 0) {
        printf ("no host agent recorded: with sandbox.driver remote, one is recorded once the server's event "
                "stream to it connects (hostd up, its Docker Engine answering); with another driver the "
                "server runs its sandboxes itself\n");
        return;
    }
    static const char *const header [] = { "NAME", "STATE", "VERSION", "PROTOCOL", "ENDPOINT",
                                           "UNREACHABLE SANDBOXES" };
    static const char *const keys [] = { "name", "state", "version", "protocol", "endpoint",
                                         "unreachable_sandboxes" };
    ah_cmd_print_objects (list, header, keys, 6);
    for (size_t i = 0; i < json_array_size (list); i++) {
        json_t *h = json_array_get (list, i);
        const char *error = ah_cmd_jstr (h, "error", NULL);
        if (!error)
            continue;
        char *line = ah_cmd_clean (ah_cmd_strf ("%s: %s", ah_cmd_jstr (h, "name", "?"), error));
        printf ("%s\n", line ? line : "");
        free (line);
    }
}

static int s_cmd_pool (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    const char *pos [1];
    int npos, rc = s_parse_simple (c, argc, argv, co, pos, 0, &npos);
    if (rc)
        return rc < 0 ? 0 : rc;
    int exit_code;
    json_t *reply = ah_cmd_call (co, "GET", "/api/v1/pool", NULL, 0, NULL, &exit_code);
    if (reply && co->json)
        ah_cmd_print_json (reply);
    else
    if (reply) {
        json_t *pools = json_object_get (reply, "pools");
        long long now = (long long) time (NULL) * 1000;
        for (size_t i = 0; i < json_array_size (pools); i++) {
            json_t *p = json_array_get (pools, i);
            json_t *oldest = json_object_get (p, "oldest_ready_at");
            char age [32] = "-";
            if (json_is_integer (oldest))
                snprintf (age, sizeof age, "%llds", (now - (long long) json_integer_value (oldest)) / 1000);
            json_object_set_new (p, "age", json_string (age));
        }
        static const char *const header [] = { "RUNTIME", "SIZE", "READY", "MAKING", "FROZEN", "OLDEST READY" };
        static const char *const keys [] = { "runtime", "size", "ready", "making", "frozen", "age" };
        ah_cmd_print_objects (pools, header, keys, 6);
        printf ("hits %lld, misses %lld, drained %lld (sandbox.warm_pool_max %lld)\n",
                (long long) json_integer_value (json_object_get (reply, "hits")),
                (long long) json_integer_value (json_object_get (reply, "misses")),
                (long long) json_integer_value (json_object_get (reply, "drained")),
                (long long) json_integer_value (json_object_get (reply, "max")));
    }
    json_decref (reply);
    return exit_code;
}

static int s_cmd_hosts (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    const char *pos [1];
    int npos, rc = s_parse_simple (c, argc, argv, co, pos, 0, &npos);
    if (rc)
        return rc < 0 ? 0 : rc;
    return ah_cmd_show_list (co, "/api/v1/hosts", "hosts", s_print_hosts);
}

static void s_print_ports (json_t *list)
{
    if (json_array_size (list) == 0) {
        printf ("no port listens in the sandbox\n");
        return;
    }
    static const char *const header [] = { "PORT", "ADDRESS" };
    static const char *const keys [] = { "port", "address" };
    ah_cmd_print_objects (list, header, keys, 2);
}

static int s_cmd_ports (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    const char *pos [1];
    int npos, rc = s_parse_simple (c, argc, argv, co, pos, 1, &npos);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (npos != 1) {
        fprintf (stderr, "agenthold ports: which agent? (usage: agenthold %s)\n", c->usage);
        return AH_EXIT_USAGE;
    }
    char *path = s_agent_path (pos [0], "/ports");
    rc = ah_cmd_show_list (co, path, "ports", s_print_ports);
    free (path);
    return rc;
}

static int s_cmd_link (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    const char *expires = NULL;
    ah_opt_t opts [] = { { "--expires", &expires, NULL }, { "--json", NULL, &co->json },
                         { "--config", &co->config, NULL }, { NULL, NULL, NULL } };
    const char *pos [2];
    int npos, rc = ah_cmd_parse (c, argc, argv, opts, pos, 2, &npos);
    if (rc)
        return rc > 0 ? (ah_cmd_usage (c, stdout), 0) : AH_EXIT_USAGE;
    if (npos != 2) {
        fprintf (stderr, "agenthold link: which agent and which port? (usage: agenthold %s)\n", c->usage);
        return AH_EXIT_USAGE;
    }
    json_t *body = json_object (), *v;
    if (expires) {
        if (ah_cmd_number ("link", "--expires", expires, true, &v)) {
            json_decref (body);
            return AH_EXIT_USAGE;
        }
        json_object_set_new (body, "expires", v);
    }
    //  The port goes into the path as a number or not at all.
    char *end = NULL;
    long port = strtol (pos [1], &end, 10);
    if (!*pos [1] || *end || port < 1 || port > 65535) {
        fprintf (stderr, "agenthold link: port '%s' must be a number from 1 to 65535\n", pos [1]);
        json_decref (body);
        return AH_EXIT_USAGE;
    }
    char suffix [48];
    snprintf (suffix, sizeof suffix, "/ports/%ld/link", port);
    char *path = s_agent_path (pos [0], suffix);
    int exit_code;
    json_t *reply = ah_cmd_call (co, "POST", path, body, 0, NULL, &exit_code);
    free (path);
    json_decref (body);
    if (reply) {
        char *err = NULL;
        ah_client_t *client = ah_client_new (co->config, false, &err);
        char *url = client ? ah_client_url_for (client, ah_cmd_jstr (reply, "path", "")) : NULL;
        if (url)
            json_object_set_new (reply, "url", json_string (url));
        if (co->json)
            ah_cmd_print_json (reply);
        else
            printf ("%s\n(until %s)\n", url ? url : ah_cmd_jstr (reply, "path", "?"),
                    ah_cmd_jstr (reply, "expires_at", "?"));
        free (url);
        free (err);
        ah_client_destroy (&client);
        json_decref (reply);
    }
    return exit_code;
}

static void s_print_links (json_t *list)
{
    if (json_array_size (list) == 0) {
        printf ("no port link stands (agenthold link NAME PORT makes one)\n");
        return;
    }
    static const char *const header [] = { "ID", "PORT", "EXPIRES", "MADE BY" };
    static const char *const keys [] = { "id", "port", "expires_at", "made_by" };
    ah_cmd_print_objects (list, header, keys, 4);
}

static int s_cmd_links (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    const char *pos [1];
    int npos, rc = s_parse_simple (c, argc, argv, co, pos, 1, &npos);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (npos != 1) {
        fprintf (stderr, "agenthold links: which agent? (usage: agenthold %s)\n", c->usage);
        return AH_EXIT_USAGE;
    }
    char *path = s_agent_path (pos [0], "/ports/links");
    rc = ah_cmd_show_list (co, path, "links", s_print_links);
    free (path);
    return rc;
}

static int s_cmd_unlink (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    const char *pos [2];
    int npos, rc = s_parse_simple (c, argc, argv, co, pos, 2, &npos);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (npos != 2) {
        fprintf (stderr, "agenthold unlink: which agent and which link? (usage: agenthold %s)\n", c->usage);
        return AH_EXIT_USAGE;
    }
    //  The id goes into the path as 12 lowercase hex characters or not at all.
    bool ok = strlen (pos [1]) == 12;
    for (const char *p = pos [1]; ok && *p; p++)
        ok = (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f');
    if (!ok) {
        fprintf (stderr, "agenthold unlink: no port link '%.40s': an id is 12 lowercase hex characters "
                 "(agenthold links %s shows them)\n", pos [1], pos [0]);
        return AH_EXIT_USAGE;
    }
    char suffix [40];
    snprintf (suffix, sizeof suffix, "/ports/links/%s", pos [1]);
    char *path = s_agent_path (pos [0], suffix);
    int exit_code;
    json_t *reply = ah_cmd_call (co, "DELETE", path, NULL, 0, NULL, &exit_code);
    free (path);
    if (reply) {
        if (co->json)
            ah_cmd_print_json (reply);
        else
            printf ("link %s revoked\n", pos [1]);
        json_decref (reply);
    }
    return exit_code;
}

static void s_print_agent_list (json_t *agents)
{
    if (json_array_size (agents) == 0)
        printf ("no agents (agenthold create NAME makes one)\n");
    else
        s_print_agents (agents);
}

static int s_cmd_ls (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    const char *pos [1];
    int npos, rc = s_parse_simple (c, argc, argv, co, pos, 0, &npos);
    if (rc)
        return rc < 0 ? 0 : rc;
    return ah_cmd_show_list (co, "/api/v1/agents", "agents", s_print_agent_list);
}

static int s_cmd_show (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    const char *pos [1];
    int npos, rc = s_parse_simple (c, argc, argv, co, pos, 1, &npos);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (npos != 1) {
        fprintf (stderr, "agenthold show: which agent? (usage: agenthold %s)\n", c->usage);
        return AH_EXIT_USAGE;
    }
    char *path = s_agent_path (pos [0], "");
    int exit_code;
    json_t *reply = ah_cmd_call (co, "GET", path, NULL, 0, NULL, &exit_code);
    free (path);
    //  The briefing of its runtime, as the sandbox has it.
    json_t *briefing = NULL;
    if (reply && json_is_string (json_object_get (reply, "runtime"))) {
        int ignored;
        //  As sent (json: not cleaned), so its lines are split before
        //  each is cleaned below.
        ah_common_t raw = *co;
        raw.json = true;
        path = s_agent_path (ah_cmd_jstr (reply, "id", pos [0]), "/briefing");
        briefing = ah_cmd_call (&raw, "GET", path, NULL, 0, NULL, &ignored);
        free (path);
    }
    if (co->json && reply && briefing)
        json_object_set (reply, "briefing", json_object_get (briefing, "text"));
    s_print_reply (co, reply, false, &exit_code);
    if (!co->json && briefing && json_is_string (json_object_get (briefing, "text"))) {
        //  Line by line, each with its control characters escaped.
        char *text = strdup (ah_cmd_jstr (briefing, "text", ""));
        printf ("briefing:\n");
        for (char *line = text, *next; line && *line; line = next) {
            next = strchr (line, '\n');
            if (next)
                *next++ = 0;
            char *clean = ah_cmd_clean (strdup (line));
            printf ("  %s\n", clean ? clean : "");
            free (clean);
        }
        free (text);
    }
    json_decref (briefing);
    json_decref (reply);
    return exit_code;
}

//  start, stop, rebuild, rm: one request, waiting by default.
static int s_cmd_transition (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    bool no_wait = false;
    const char *timeout = NULL;
    ah_opt_t opts [] = {
        { "--no-wait", NULL, &no_wait }, { "--timeout", &timeout, NULL },
        { "--json", NULL, &co->json }, { "--config", &co->config, NULL }, { NULL, NULL, NULL }
    };
    const char *pos [1];
    int npos, rc = ah_cmd_parse (c, argc, argv, opts, pos, 1, &npos);
    if (rc)
        return rc > 0 ? (ah_cmd_usage (c, stdout), 0) : AH_EXIT_USAGE;
    if (npos != 1) {
        fprintf (stderr, "agenthold %s: which agent? (usage: agenthold %s)\n", c->name, c->usage);
        return AH_EXIT_USAGE;
    }
    long wait_s = 600;
    if (timeout) {
        char *end = NULL;
        errno = 0;
        wait_s = strtol (timeout, &end, 10);
        if (errno || end == timeout || *end || wait_s < 1 || wait_s > 3600) {
            fprintf (stderr, "agenthold %s: --timeout wants seconds from 1 to 3600, got '%s'\n",
                     c->name, timeout);
            return AH_EXIT_USAGE;
        }
    }
    //  Followed on the agent's events, subscribed to before the request,
    //  so that what preparing the sandbox does is said as it happens and
    //  the command ends the moment the agent settles (cli/follow.h).
    bool rm = !strcmp (c->name, "rm");
    char *suffix = ah_cmd_strf ("%s%s", rm ? "" : "/", rm ? "" : c->name);
    char *path = s_agent_path (pos [0], suffix);
    free (suffix);
    ah_follow_t *follow = no_wait ? NULL : ah_follow_new (co, pos [0]);
    int exit_code;
    json_t *reply = ah_cmd_call (co, rm ? "DELETE" : "POST", path, NULL, 0, NULL, &exit_code);
    free (path);
    if (reply && !no_wait) {
        json_t *agent = ah_follow_wait (follow, co, reply, wait_s, &exit_code);
        if (agent) {
            json_decref (reply);
            reply = agent;
        }
    }
    ah_follow_destroy (&follow);
    if (reply) {
        const char *state = ah_cmd_jstr (reply, "state", "?");
        if (co->json)
            ah_cmd_print_json (reply);
        else
            printf ("%s: %s\n", ah_cmd_jstr (reply, "name", pos [0]), state);
        //  The transition ended, badly: say why, fail.
        if (!no_wait && !strcmp (state, "error")) {
            fprintf (stderr, "agenthold: %s: %s\n", ah_cmd_jstr (reply, "name", pos [0]),
                     ah_cmd_jstr (reply, "error", "the sandbox is in error"));
            exit_code = 1;
        }
    }
    json_decref (reply);
    return exit_code;
}


static int s_cmd_runtimes (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    const char *pos [1];
    int npos, rc = s_parse_simple (c, argc, argv, co, pos, 0, &npos);
    if (rc)
        return rc < 0 ? 0 : rc;
    return ah_cmd_show_list (co, "/api/v1/runtimes", "runtimes", s_print_runtimes);
}


//  --tenant T (or --tenant=T) anywhere before a "--": taken out of argv
//  into AGENTHOLD_TENANT, which every request carries (cli/client.h).
//  -1 when it has no value (said why).
static int s_take_tenant (int *argc, char **argv)
{
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv [i];
        if (!strcmp (a, "--"))
            while (i < *argc)
                argv [out++] = argv [i++];
        else if (!strcmp (a, "--tenant") || !strncmp (a, "--tenant=", 9)) {
            const char *v = a [8] == '=' ? a + 9 : i + 1 < *argc ? argv [++i] : NULL;
            if (!v || !*v) {
                fprintf (stderr, "agenthold: --tenant needs a tenant name\n");
                return -1;
            }
            setenv ("AGENTHOLD_TENANT", v, 1);
        }
        else
            argv [out++] = argv [i];
    }
    *argc = out;
    argv [out] = NULL;
    return 0;
}

int main (int argc, char **argv)
{
    if (s_take_tenant (&argc, argv))
        return AH_EXIT_USAGE;
    if (argc < 2) {
        s_usage_all (stderr);
        return AH_EXIT_USAGE;
    }
    const char *name = argv [1];
    if (!strcmp (name, "--help") || !strcmp (name, "-h")) {
        s_usage_all (stdout);
        return 0;
    }
    const ah_cmd_t *c = s_command (name);
    if (!c) {
        fprintf (stderr, "agenthold: no command '%s' (agenthold --help lists them)\n", name);
        return AH_EXIT_USAGE;
    }
    ah_common_t co = { .config = getenv ("AGENTHOLD_CONFIG") };
    if (co.config && !*co.config)
        co.config = NULL;
    //  serve first: it must start before any thread.
    if (c->early || c->server)
        return c->run (c, argc - 2, argv + 2, &co);
    //  A server that closed the connection is an error to report, not a
    //  signal to die of (a TLS write can raise it).
    signal (SIGPIPE, SIG_IGN);
    return c->run ? c->run (c, argc - 2, argv + 2, &co) : c->raw (argc - 2, argv + 2, co.config);
}
