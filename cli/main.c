/*  cli/main.c: the agenthold command: `agenthold serve` runs the server
    (server/serve.h); every other command is a REST client of a running
    server (cli/client.h) or, for `tap`, a subscriber to the bus tap
    (cli/tap.h). docs/cli.md describes each command.

    Exit status: 0 success, 1 the server refused or could not be reached
    (its message on stderr, "agenthold: ..."), 2 bad usage.             */
#include "cli/client.h"
#include "cli/sbx.h"
#include "cli/term.h"
#include "cli/tap.h"
#include "cli/turn.h"
#include "config/config.h"
#include "server/serve.h"

#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_USAGE  2

//  --------------------------------------------------------------------
//  Help

typedef struct {
    const char *name;
    const char *usage;
    const char *help;
} command_t;

static const command_t s_commands [] = {
    { "serve", "serve [--config FILE]",
      "Run the server in the foreground until SIGINT or SIGTERM (SIGHUP reloads the\n"
      "policies). The configuration is FILE, else $AGENTHOLD_CONFIG, else\n"
      "etc/agenthold.yaml when it exists; AGENTHOLD_* variables override every key.\n" },
    { "create", "create NAME [--image IMG] [--cpus N] [--memory-mb N] [--idle-minutes N] [--no-wait] [--json]",
      "Create an agent and its sandbox (asleep until started) and wait until the\n"
      "sandbox is made. Unset resources take the server's defaults; the server's\n"
      "limits policy may refuse them. --no-wait returns once the agent exists.\n" },
    { "ls", "ls [--json]",
      "List every agent with its state, image and resources.\n" },
    { "show", "show NAME [--json]",
      "Show one agent (NAME or id).\n" },
    { "start", "start NAME [--no-wait] [--timeout S] [--json]",
      "Start (wake) an agent's sandbox and wait until it runs (or fails), at most\n"
      "S seconds (default 600). --no-wait returns as soon as the server accepted.\n" },
    { "stop", "stop NAME [--no-wait] [--timeout S] [--json]",
      "Stop an agent's sandbox (it sleeps; its home directory stays) and wait until\n"
      "it is asleep. --no-wait returns at once.\n" },
    { "rebuild", "rebuild NAME [--no-wait] [--timeout S] [--json]",
      "Rebuild an agent's sandbox from its image and resources (the home directory\n"
      "stays) and wait until the rebuild ends. --no-wait returns at once.\n" },
    { "rm", "rm NAME [--no-wait] [--timeout S] [--json]",
      "Destroy an agent, its sandbox and its home directory, and wait until it is gone.\n" },
    { "log", "log [NAME] [--limit N] [--json]",
      "The audit trail, newest first: who did what to NAME (or to every agent),\n"
      "and each state it went through. --limit: at most N entries (default 50).\n" },
    { "runtimes", "runtimes [--json]",
      "The runtime catalog: each runtime's image and whether the image is there.\n" },
    { "tap", "tap [--endpoint E] [--type GLOB] [--count N]",
      "Print every message on the server's bus as one JSON line, from the tap\n"
      "(tap.endpoint in the configuration, or E). --type keeps the types matching\n"
      "GLOB (e.g. 'SANDBOX_*'); --count stops after N messages. Ctrl-C stops.\n" },
    { "policy", "policy status [--json] | policy reload",
      "status: each policy script, when it was loaded and why its last load failed.\n"
      "reload: ask the lifecycle, sleeper and builder to reload their scripts.\n" },
    { "turn", "turn NAME [--lease S] -- CMD...",
      "Hold a turn on NAME while CMD runs here (stdin, stdout, stderr inherited), so\n"
      "the agent does not fall asleep: wakes it first if it sleeps, renews the lease\n"
      "(default 60 s) every third of it, ends the turn when CMD exits or on\n"
      "SIGINT/SIGTERM, and exits with CMD's status.\n" },
    { "term", "term NAME",
      "A shell in NAME's sandbox on this terminal (raw mode); exits with its status.\n" },
    { "exec", "exec NAME [--timeout S] -- CMD...",
      "Run CMD in NAME's sandbox; its output to ours, exit with its status.\n" },
    { "fs", "fs ls|get|put|mkdir|rm NAME PATH [LOCAL]",
      "Files in NAME's sandbox home; get and put stream (agenthold fs --help).\n" },
    { "help", "help [COMMAND]",
      "Show this help, or one command's.\n" },
};
#define COMMAND_COUNT (sizeof s_commands / sizeof s_commands [0])

static const command_t *s_command (const char *name)
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
        "--help. The server is AGENTHOLD_URL (default: http://<server.listen>), the token\n"
        "AGENTHOLD_TOKEN (default: <server.data_dir>/admin.token).\n"
        "`agenthold help COMMAND` tells more.\n");
}

static void s_usage_one (const command_t *c, FILE *out)
{
    fprintf (out, "usage: agenthold %s\n\n%s", c->usage, c->help);
    if (strcmp (c->name, "help") && strcmp (c->name, "serve"))
        fprintf (out, "\nAlso: --config FILE (where to find the server and its token), --help.\n");
}

//  --------------------------------------------------------------------
//  Options

typedef struct {
    const char *name;               //  "--cpus"
    const char **value;             //  for options with an argument
    bool *flag;                     //  for switches
} opt_t;

//  Parse argv (after the command name) into opts and positionals.
//  0 ok, 1 --help was asked, -1 bad usage (said why).
static int s_parse (const command_t *c, int argc, char **argv, const opt_t *opts,
                    const char **pos, int max_pos, int *npos)
{
    *npos = 0;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv [i];
        if (!strcmp (arg, "--help") || !strcmp (arg, "-h"))
            return 1;
        if (arg [0] == '-' && arg [1]) {
            const char *eq = strchr (arg, '=');
            size_t len = eq ? (size_t) (eq - arg) : strlen (arg);
            const opt_t *o = NULL;
            for (const opt_t *p = opts; p && p->name; p++)
                if (strlen (p->name) == len && !strncmp (p->name, arg, len))
                    o = p;
            if (!o) {
                fprintf (stderr, "agenthold %s: unknown option '%.*s' (agenthold %s --help)\n",
                         c->name, (int) len, arg, c->name);
                return -1;
            }
            if (o->flag) {
                if (eq) {
                    fprintf (stderr, "agenthold %s: %s takes no value\n", c->name, o->name);
                    return -1;
                }
                *o->flag = true;
            }
            else if (eq)
                *o->value = eq + 1;
            else if (i + 1 < argc)
                *o->value = argv [++i];
            else {
                fprintf (stderr, "agenthold %s: %s needs a value\n", c->name, o->name);
                return -1;
            }
            continue;
        }
        if (*npos >= max_pos) {
            fprintf (stderr, "agenthold %s: unexpected argument '%s' (usage: agenthold %s)\n",
                     c->name, arg, c->usage);
            return -1;
        }
        pos [(*npos)++] = arg;
    }
    return 0;
}

static int s_number (const char *cmd, const char *opt, const char *text, bool integer, json_t **out)
{
    char *end = NULL;
    errno = 0;
    if (integer) {
        long long v = strtoll (text, &end, 10);
        if (!errno && end != text && !*end && v > 0) {
            *out = json_integer (v);
            return 0;
        }
        fprintf (stderr, "agenthold %s: %s wants a whole number greater than 0, got '%s'\n", cmd, opt, text);
    }
    else {
        double v = strtod (text, &end);
        if (!errno && end != text && !*end && isfinite (v) && v > 0) {
            *out = json_real (v);
            return 0;
        }
        fprintf (stderr, "agenthold %s: %s wants a number greater than 0, got '%s'\n", cmd, opt, text);
    }
    return -1;
}

//  --------------------------------------------------------------------
//  Output

typedef struct {
    const char *config;             //  --config
    bool json;                      //  --json
} common_t;

static const char *s_jstr (json_t *obj, const char *key, const char *dflt)
{
    const char *s = json_string_value (json_object_get (obj, key));
    return s && *s ? s : dflt;
}

static void s_print_json (json_t *j)
{
    char *text = json_dumps (j, JSON_INDENT (2) | JSON_SORT_KEYS);
    if (text)
        printf ("%s\n", text);
    free (text);
}

static void s_print_agent (json_t *a)
{
    json_t *rebuild = json_object_get (a, "needs_rebuild");
    printf ("name:             %s\n", s_jstr (a, "name", "-"));
    printf ("id:               %s\n", s_jstr (a, "id", "-"));
    printf ("state:            %s\n", s_jstr (a, "state", "-"));
    if (json_is_string (json_object_get (a, "error")))
        printf ("error:            %s\n", s_jstr (a, "error", "-"));
    if (json_object_get (a, "image")) {
        printf ("image:            %s\n", s_jstr (a, "image", "-"));
        printf ("cpus:             %g\n", json_number_value (json_object_get (a, "cpus")));
        printf ("memory_mb:        %lld\n", (long long) json_integer_value (json_object_get (a, "memory_mb")));
        printf ("idle_minutes:     %g\n", json_number_value (json_object_get (a, "idle_minutes")));
        printf ("needs_rebuild:    %s\n", json_is_true (rebuild) ? "yes" : "no");
        printf ("created_at:       %s\n", s_jstr (a, "created_at", "-"));
        printf ("last_activity_at: %s\n", s_jstr (a, "last_activity_at", "-"));
    }
}

//  An agent in reply: JSON or human. A waited transition that ended in
//  error fails the command with the agent's error.
static void s_print_reply (const common_t *co, json_t *reply, bool waited, int *exit_code)
{
    if (!reply)
        return;
    if (co->json)
        s_print_json (reply);
    else
        s_print_agent (reply);
    if (waited && !strcmp (s_jstr (reply, "state", ""), "error")) {
        fprintf (stderr, "agenthold: %s: %s\n", s_jstr (reply, "name", "?"),
                 s_jstr (reply, "error", "the sandbox is in error"));
        *exit_code = 1;
    }
}

//  An aligned table: rows of ncols strings; the header is row 0.
static void s_print_table (char ***rows, size_t nrows, size_t ncols)
{
    size_t width [16] = { 0 };
    for (size_t r = 0; r < nrows; r++)
        for (size_t c = 0; c < ncols && c < 16; c++) {
            size_t n = strlen (rows [r][c]);
            if (n > width [c])
                width [c] = n;
        }
    for (size_t r = 0; r < nrows; r++) {
        for (size_t c = 0; c < ncols; c++) {
            if (c + 1 < ncols)
                printf ("%-*s  ", (int) width [c], rows [r][c]);
            else
                printf ("%s", rows [r][c]);
        }
        printf ("\n");
    }
}

static char *s_strf (const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *s_strf (const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    char *s = NULL;
    if (vasprintf (&s, fmt, ap) < 0)
        s = strdup ("?");
    va_end (ap);
    return s;
}

static void s_print_agents (json_t *agents)
{
    static const char *header [] = { "NAME", "STATE", "IMAGE", "CPUS", "MEMORY", "IDLE", "LAST ACTIVITY", "NOTE", "SLEEPS" };
    const size_t ncols = sizeof header / sizeof header [0];
    size_t nrows = json_array_size (agents) + 1;
    char ***rows = calloc (nrows, sizeof *rows);
    rows [0] = calloc (ncols, sizeof (char *));
    for (size_t c = 0; c < ncols; c++)
        rows [0][c] = strdup (header [c]);
    for (size_t i = 0; i + 1 < nrows; i++) {
        json_t *a = json_array_get (agents, i);
        char **row = rows [i + 1] = calloc (ncols, sizeof (char *));
        row [0] = strdup (s_jstr (a, "name", "-"));
        row [1] = strdup (s_jstr (a, "state", "-"));
        row [2] = strdup (s_jstr (a, "image", "-"));
        row [3] = s_strf ("%g", json_number_value (json_object_get (a, "cpus")));
        row [4] = s_strf ("%lldM", (long long) json_integer_value (json_object_get (a, "memory_mb")));
        row [5] = s_strf ("%gm", json_number_value (json_object_get (a, "idle_minutes")));
        row [6] = strdup (s_jstr (a, "last_activity_at", "-"));
        const char *error = s_jstr (a, "error", NULL);
        if (error && !strcmp (s_jstr (a, "state", ""), "error"))
            row [7] = s_strf ("%.60s", error);
        else
            row [7] = strdup (json_is_true (json_object_get (a, "needs_rebuild")) ? "needs rebuild" : "");
        row [8] = ah_cli_sleeps_in (s_jstr (a, "sleeps_at", NULL));
    }
    s_print_table (rows, nrows, ncols);
    for (size_t r = 0; r < nrows; r++) {
        for (size_t c = 0; c < ncols; c++)
            free (rows [r][c]);
        free (rows [r]);
    }
    free (rows);
}

//  --------------------------------------------------------------------
//  Talking to the server

//  One call; prints the server's error and returns NULL on failure
//  (*exit_code set). reply owned by the caller.
static json_t *s_call (const common_t *co, const char *method, const char *path, json_t *body,
                       long timeout_s, long *status_out, int *exit_code)
{
    char *err = NULL;
    *exit_code = 1;
    ah_client_t *client = ah_client_new (co->config, true, &err);
    if (!client) {
        fprintf (stderr, "agenthold: %s\n", err ? err : "cannot reach the server");
        free (err);
        return NULL;
    }
    json_t *reply = NULL;
    long status = ah_client_call (client, method, path, body, timeout_s, &reply, &err);
    ah_client_destroy (&client);
    if (status_out)
        *status_out = status;
    if (status == 0) {
        fprintf (stderr, "agenthold: %s\n", err ? err : "request failed");
        free (err);
        return NULL;
    }
    if (status >= 400) {
        fprintf (stderr, "agenthold: %s\n", ah_client_error (reply, status));
        json_decref (reply);
        return NULL;
    }
    if (!reply) {
        fprintf (stderr, "agenthold: the server's answer (status %ld) is not JSON\n", status);
        return NULL;
    }
    *exit_code = 0;
    return reply;
}

static char *s_agent_path (const char *name, const char *suffix)
{
    char *escaped = curl_easy_escape (NULL, name, 0);
    char *path = s_strf ("/api/v1/agents/%s%s", escaped ? escaped : "", suffix);
    curl_free (escaped);
    return path;
}

//  --------------------------------------------------------------------
//  Commands

static int s_cmd_serve (const command_t *c, int argc, char **argv)
{
    const char *config_path = getenv ("AGENTHOLD_CONFIG");
    if (config_path && !*config_path)
        config_path = NULL;
    opt_t opts [] = { { "--config", &config_path, NULL }, { NULL, NULL, NULL } };
    const char *pos [1];
    int npos, rc = s_parse (c, argc, argv, opts, pos, 0, &npos);
    if (rc)
        return rc > 0 ? (s_usage_one (c, stdout), 0) : EXIT_USAGE;
    char *err = NULL;
    ah_config_t *config = ah_config_load (config_path, &err);
    if (!config) {
        fprintf (stderr, "agenthold serve: %s\n", err ? err : "cannot load the configuration");
        free (err);
        return 1;
    }
    int status = ah_server_run (config);
    ah_config_destroy (&config);
    return status;
}

//  Commands that take only --json and --config: 0 go on, else the exit
//  status to return at once (0 after --help).
static int s_parse_simple (const command_t *c, int argc, char **argv, common_t *co,
                           const char **pos, int max_pos, int *npos)
{
    opt_t opts [] = { { "--json", NULL, &co->json }, { "--config", &co->config, NULL }, { NULL, NULL, NULL } };
    int rc = s_parse (c, argc, argv, opts, pos, max_pos, npos);
    if (rc > 0) {
        s_usage_one (c, stdout);
        return -1;
    }
    return rc < 0 ? EXIT_USAGE : 0;
}

static int s_cmd_create (const command_t *c, int argc, char **argv, common_t *co)
{
    const char *image = NULL, *cpus = NULL, *memory = NULL, *idle = NULL;
    bool no_wait = false;
    opt_t opts [] = {
        { "--image", &image, NULL }, { "--cpus", &cpus, NULL }, { "--memory-mb", &memory, NULL },
        { "--idle-minutes", &idle, NULL }, { "--no-wait", NULL, &no_wait },
        { "--json", NULL, &co->json }, { "--config", &co->config, NULL }, { NULL, NULL, NULL }
    };
    const char *pos [1];
    int npos, rc = s_parse (c, argc, argv, opts, pos, 1, &npos);
    if (rc)
        return rc > 0 ? (s_usage_one (c, stdout), 0) : EXIT_USAGE;
    if (npos != 1) {
        fprintf (stderr, "agenthold create: which agent? (usage: agenthold %s)\n", c->usage);
        return EXIT_USAGE;
    }
    json_t *body = json_pack ("{s:s}", "name", pos [0]);
    json_t *v;
    if (image)
        json_object_set_new (body, "image", json_string (image));
    if (cpus) {
        if (s_number ("create", "--cpus", cpus, false, &v))
            goto usage;
        json_object_set_new (body, "cpus", v);
    }
    if (memory) {
        if (s_number ("create", "--memory-mb", memory, true, &v))
            goto usage;
        json_object_set_new (body, "memory_mb", v);
    }
    if (idle) {
        if (s_number ("create", "--idle-minutes", idle, false, &v))
            goto usage;
        json_object_set_new (body, "idle_minutes", v);
    }
    int exit_code;
    json_t *reply = s_call (co, "POST", no_wait ? "/api/v1/agents" : "/api/v1/agents?wait=1&timeout=600",
                            body, no_wait ? 0 : 630, NULL, &exit_code);
    json_decref (body);
    s_print_reply (co, reply, !no_wait, &exit_code);
    json_decref (reply);
    return exit_code;
usage:
    json_decref (body);
    return EXIT_USAGE;
}

//  Rows from JSON objects: one column per key (NULL key: the row number).
static void s_print_objects (json_t *list, const char *const *header, const char *const *keys, size_t ncols)
{
    size_t nrows = json_array_size (list) + 1;
    char ***rows = calloc (nrows, sizeof *rows);
    rows [0] = calloc (ncols, sizeof (char *));
    for (size_t c = 0; c < ncols; c++)
        rows [0][c] = strdup (header [c]);
    for (size_t i = 0; i + 1 < nrows; i++) {
        json_t *o = json_array_get (list, i);
        rows [i + 1] = calloc (ncols, sizeof (char *));
        for (size_t c = 0; c < ncols; c++) {
            json_t *v = json_object_get (o, keys [c]);
            if (json_is_string (v))
                rows [i + 1][c] = s_strf ("%.80s", json_string_value (v));
            else if (json_is_true (v) || json_is_false (v))
                rows [i + 1][c] = strdup (json_is_true (v) ? "yes" : "no");
            else if (json_is_number (v))
                rows [i + 1][c] = s_strf ("%g", json_number_value (v));
            else
                rows [i + 1][c] = strdup ("-");
        }
    }
    s_print_table (rows, nrows, ncols);
    for (size_t r = 0; r < nrows; r++) {
        for (size_t c = 0; c < ncols; c++)
            free (rows [r][c]);
        free (rows [r]);
    }
    free (rows);
}

//  GET path and print the array under key: the JSON with --json, else
//  print (list) for people. Returns the exit status.
typedef void (print_fn) (json_t *list);
static int s_show_list (const common_t *co, const char *path, const char *key, print_fn *print)
{
    int exit_code;
    json_t *reply = s_call (co, "GET", path, NULL, 0, NULL, &exit_code);
    if (reply) {
        json_t *list = json_object_get (reply, key);
        if (co->json)
            s_print_json (list ? list : reply);
        else
            print (list);
    }
    json_decref (reply);
    return exit_code;
}

static void s_print_operations (json_t *ops)
{
    static const char *const header [] = { "AT", "AGENT", "ACTOR", "KIND", "DETAIL", "OK", "ERROR" };
    static const char *const keys [] = { "at", "agent_id", "actor", "kind", "detail", "ok", "error" };
    s_print_objects (ops, header, keys, 7);
}

static void s_print_runtimes (json_t *list)
{
    static const char *const header [] = { "NAME", "IMAGE", "IMAGE STATE", "DESCRIPTION" };
    static const char *const keys [] = { "name", "image", "image_state", "description" };
    s_print_objects (list, header, keys, 4);
}

static void s_print_agent_list (json_t *agents)
{
    if (json_array_size (agents) == 0)
        printf ("no agents (agenthold create NAME makes one)\n");
    else
        s_print_agents (agents);
}

static int s_cmd_ls (const command_t *c, int argc, char **argv, common_t *co)
{
    const char *pos [1];
    int npos, rc = s_parse_simple (c, argc, argv, co, pos, 0, &npos);
    if (rc)
        return rc < 0 ? 0 : rc;
    return s_show_list (co, "/api/v1/agents", "agents", s_print_agent_list);
}

static int s_cmd_show (const command_t *c, int argc, char **argv, common_t *co)
{
    const char *pos [1];
    int npos, rc = s_parse_simple (c, argc, argv, co, pos, 1, &npos);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (npos != 1) {
        fprintf (stderr, "agenthold show: which agent? (usage: agenthold %s)\n", c->usage);
        return EXIT_USAGE;
    }
    char *path = s_agent_path (pos [0], "");
    int exit_code;
    json_t *reply = s_call (co, "GET", path, NULL, 0, NULL, &exit_code);
    free (path);
    s_print_reply (co, reply, false, &exit_code);
    json_decref (reply);
    return exit_code;
}

//  start, stop, rebuild, rm: one request, waiting by default.
static int s_cmd_transition (const command_t *c, int argc, char **argv, common_t *co)
{
    bool no_wait = false;
    const char *timeout = NULL;
    opt_t opts [] = {
        { "--no-wait", NULL, &no_wait }, { "--timeout", &timeout, NULL },
        { "--json", NULL, &co->json }, { "--config", &co->config, NULL }, { NULL, NULL, NULL }
    };
    const char *pos [1];
    int npos, rc = s_parse (c, argc, argv, opts, pos, 1, &npos);
    if (rc)
        return rc > 0 ? (s_usage_one (c, stdout), 0) : EXIT_USAGE;
    if (npos != 1) {
        fprintf (stderr, "agenthold %s: which agent? (usage: agenthold %s)\n", c->name, c->usage);
        return EXIT_USAGE;
    }
    long wait_s = 600;
    if (timeout) {
        char *end = NULL;
        errno = 0;
        wait_s = strtol (timeout, &end, 10);
        if (errno || end == timeout || *end || wait_s < 1 || wait_s > 3600) {
            fprintf (stderr, "agenthold %s: --timeout wants seconds from 1 to 3600, got '%s'\n",
                     c->name, timeout);
            return EXIT_USAGE;
        }
    }
    bool rm = !strcmp (c->name, "rm");
    char *suffix = no_wait ? s_strf ("%s%s", rm ? "" : "/", rm ? "" : c->name)
                           : s_strf ("%s%s?wait=1&timeout=%ld", rm ? "" : "/", rm ? "" : c->name, wait_s);
    char *path = s_agent_path (pos [0], suffix);
    free (suffix);
    int exit_code;
    json_t *reply = s_call (co, rm ? "DELETE" : "POST", path, NULL, no_wait ? 0 : wait_s + 30,
                            NULL, &exit_code);
    free (path);
    if (reply) {
        const char *state = s_jstr (reply, "state", "?");
        if (co->json)
            s_print_json (reply);
        else
            printf ("%s: %s\n", s_jstr (reply, "name", pos [0]), state);
        //  The transition ended, badly: say why, fail.
        if (!no_wait && !strcmp (state, "error")) {
            fprintf (stderr, "agenthold: %s: %s\n", s_jstr (reply, "name", pos [0]),
                     s_jstr (reply, "error", "the sandbox is in error"));
            exit_code = 1;
        }
    }
    json_decref (reply);
    return exit_code;
}

static int s_cmd_policy (const command_t *c, int argc, char **argv, common_t *co)
{
    const char *pos [1];
    int npos, rc = s_parse_simple (c, argc, argv, co, pos, 1, &npos);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (npos != 1 || (strcmp (pos [0], "status") && strcmp (pos [0], "reload"))) {
        fprintf (stderr, "agenthold policy: say status or reload (usage: agenthold %s)\n", c->usage);
        return EXIT_USAGE;
    }
    int exit_code;
    if (!strcmp (pos [0], "reload")) {
        json_t *reply = s_call (co, "POST", "/api/v1/policy/reload", NULL, 0, NULL, &exit_code);
        if (reply) {
            if (co->json)
                s_print_json (reply);
            else
                printf ("policy reload asked of lifecycle, sleeper and builder "
                        "(agenthold policy status shows the outcome)\n");
        }
        json_decref (reply);
        return exit_code;
    }
    json_t *reply = s_call (co, "GET", "/api/v1/policy", NULL, 0, NULL, &exit_code);
    if (!reply)
        return exit_code;
    json_t *list = json_object_get (reply, "policies");
    if (co->json)
        s_print_json (list ? list : reply);
    else if (json_array_size (list) == 0)
        printf ("no policy scripts loaded yet\n");
    else {
        static const char *const header [] = { "HOLDER", "SCRIPT", "LOADED", "LAST ERROR", "AT" };
        static const char *const keys [] = { "holder", "script", "loaded_at", "error", "error_at" };
        s_print_objects (list, header, keys, 5);
    }
    json_decref (reply);
    return 0;
}

static int s_cmd_log (const command_t *c, int argc, char **argv, common_t *co)
{
    const char *limit = "50";
    opt_t opts [] = {
        { "--limit", &limit, NULL }, { "--json", NULL, &co->json }, { "--config", &co->config, NULL },
        { NULL, NULL, NULL }
    };
    const char *pos [1];
    int npos, rc = s_parse (c, argc, argv, opts, pos, 1, &npos);
    if (rc)
        return rc > 0 ? (s_usage_one (c, stdout), 0) : EXIT_USAGE;
    char *end = NULL;
    long n = strtol (limit, &end, 10);
    if (end == limit || *end || n < 1 || n > 1000) {
        fprintf (stderr, "agenthold log: --limit wants a number from 1 to 1000, got '%s'\n", limit);
        return EXIT_USAGE;
    }
    char *suffix = s_strf ("/operations?limit=%ld", n);
    char *path = npos ? s_agent_path (pos [0], suffix) : s_strf ("/api/v1%s", suffix);
    free (suffix);
    int exit_code = s_show_list (co, path, "operations", s_print_operations);
    free (path);
    return exit_code;
}

static int s_cmd_runtimes (const command_t *c, int argc, char **argv, common_t *co)
{
    const char *pos [1];
    int npos, rc = s_parse_simple (c, argc, argv, co, pos, 0, &npos);
    if (rc)
        return rc < 0 ? 0 : rc;
    return s_show_list (co, "/api/v1/runtimes", "runtimes", s_print_runtimes);
}

static int s_cmd_tap (const command_t *c, int argc, char **argv, common_t *co)
{
    const char *endpoint = NULL, *glob = NULL, *count = NULL;
    opt_t opts [] = {
        { "--endpoint", &endpoint, NULL }, { "--type", &glob, NULL }, { "--count", &count, NULL },
        { "--json", NULL, &co->json }, { "--config", &co->config, NULL }, { NULL, NULL, NULL }
    };
    const char *pos [1];
    int npos, rc = s_parse (c, argc, argv, opts, pos, 0, &npos);
    if (rc)
        return rc > 0 ? (s_usage_one (c, stdout), 0) : EXIT_USAGE;
    long n = 0;
    if (count) {
        char *end = NULL;
        errno = 0;
        n = strtol (count, &end, 10);
        if (errno || end == count || *end || n < 1) {
            fprintf (stderr, "agenthold tap: --count wants a whole number greater than 0, got '%s'\n", count);
            return EXIT_USAGE;
        }
    }
    char *owned = NULL;
    if (!endpoint) {
        char *err = NULL;
        ah_config_t *config = ah_config_load (co->config, &err);
        if (!config) {
            fprintf (stderr, "agenthold tap: configuration: %s\n", err ? err : "cannot load");
            free (err);
            return 1;
        }
        if (config->tap_endpoint && *config->tap_endpoint)
            owned = strdup (config->tap_endpoint);
        ah_config_destroy (&config);
        if (!owned) {
            fprintf (stderr, "agenthold tap: the tap is off: set tap.endpoint in the server's "
                     "configuration (or AGENTHOLD_TAP_ENDPOINT), or give --endpoint\n");
            return 1;
        }
        endpoint = owned;
    }
    int status = ah_cli_tap (endpoint, glob, n);
    free (owned);
    return status;
}

int main (int argc, char **argv)
{
    if (argc < 2) {
        s_usage_all (stderr);
        return EXIT_USAGE;
    }
    const char *name = argv [1];
    if (!strcmp (name, "--help") || !strcmp (name, "-h")) {
        s_usage_all (stdout);
        return 0;
    }
    if (!strcmp (name, "help")) {
        if (argc > 2) {
            const command_t *c = s_command (argv [2]);
            if (!c) {
                fprintf (stderr, "agenthold: no command '%s'\n", argv [2]);
                return EXIT_USAGE;
            }
            s_usage_one (c, stdout);
        }
        else
            s_usage_all (stdout);
        return 0;
    }
    const command_t *c = s_command (name);
    if (!c) {
        fprintf (stderr, "agenthold: no command '%s' (agenthold --help lists them)\n", name);
        return EXIT_USAGE;
    }
    //  serve first: it must start before any thread (curl's included).
    if (!strcmp (name, "serve"))
        return s_cmd_serve (c, argc - 2, argv + 2);

    common_t co = { .config = getenv ("AGENTHOLD_CONFIG") };
    if (co.config && !*co.config)
        co.config = NULL;
    curl_global_init (CURL_GLOBAL_DEFAULT);
    int status;
    if (!strcmp (name, "create"))
        status = s_cmd_create (c, argc - 2, argv + 2, &co);
    else if (!strcmp (name, "ls"))
        status = s_cmd_ls (c, argc - 2, argv + 2, &co);
    else if (!strcmp (name, "show"))
        status = s_cmd_show (c, argc - 2, argv + 2, &co);
    else if (!strcmp (name, "policy"))
        status = s_cmd_policy (c, argc - 2, argv + 2, &co);
    else if (!strcmp (name, "tap"))
        status = s_cmd_tap (c, argc - 2, argv + 2, &co);
    else if (!strcmp (name, "log"))
        status = s_cmd_log (c, argc - 2, argv + 2, &co);
    else if (!strcmp (name, "runtimes"))
        status = s_cmd_runtimes (c, argc - 2, argv + 2, &co);
    else if (!strcmp (name, "exec"))
        status = ah_cli_exec (argc - 2, argv + 2, co.config);
    else if (!strcmp (name, "term"))
        status = ah_cli_term (argc - 2, argv + 2, co.config);
    else if (!strcmp (name, "fs"))
        status = ah_cli_fs (argc - 2, argv + 2, co.config);
    else if (!strcmp (name, "turn"))
        status = ah_cli_turn (argc - 2, argv + 2, co.config);
    else
        status = s_cmd_transition (c, argc - 2, argv + 2, &co);
    curl_global_cleanup ();
    return status;
}
