/*  cli/admin.c: tenants, tokens, sessions and policies (see admin.h,
    docs/cli.md). Each command is a subcommand word, then its options.
    The tenant acted within is the global --tenant (AGENTHOLD_TENANT),
    which is also the tenant a new token belongs to.                   */
#include "cli/admin.h"
#include "cli/http.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

//  The subcommand words of a command, for its error message.
static int s_which (const ah_cmd_t *c, int argc, char **argv, const char *const *subs)
{
    for (int i = 0; argc > 0 && subs [i]; i++)
        if (!strcmp (argv [0], subs [i]))
            return i;
    if (argc > 0 && (!strcmp (argv [0], "--help") || !strcmp (argv [0], "-h"))) {
        ah_cmd_usage (c, stdout);
        return -2;
    }
    fprintf (stderr, "agenthold %s: %s%s%s (usage: agenthold %s)\n", c->name,
             argc > 0 ? "no subcommand '" : "which subcommand?", argc > 0 ? argv [0] : "",
             argc > 0 ? "'" : "", c->usage);
    return -1;
}

//  Parses argv of a subcommand (after its word) with --json and --config
//  added to opts (at most 8). 0 go on; else the exit status to return.
static int s_parse (const ah_cmd_t *c, int argc, char **argv, const ah_opt_t *opts, ah_common_t *co,
                    const char **pos, int want_min, int want_max, int *npos)
{
    ah_opt_t all [12];
    size_t n = 0;
    for (; opts && opts [n].name && n < 8; n++)
        all [n] = opts [n];
    all [n++] = (ah_opt_t) { "--json", NULL, &co->json };
    all [n++] = (ah_opt_t) { "--config", &co->config, NULL };
    all [n] = (ah_opt_t) { NULL, NULL, NULL };
    int rc = ah_cmd_parse (c, argc, argv, all, pos, want_max, npos);
    if (rc > 0) {
        ah_cmd_usage (c, stdout);
        return -1;
    }
    if (rc < 0)
        return AH_EXIT_USAGE;
    if (*npos < want_min) {
        fprintf (stderr, "agenthold %s %s: missing argument (usage: agenthold %s)\n", c->name,
                 argv [-1], c->usage);
        return AH_EXIT_USAGE;
    }
    return 0;
}
#define S_DONE(rc) ((rc) < 0 ? 0 : (rc))

//  One call whose answer is an object: printed as JSON with --json, else
//  as the fields given. Returns the exit status.
static int s_show (ah_common_t *co, const char *method, const char *path, json_t *body, long timeout_s,
                   const char *const *fields, size_t nfields)
{
    int exit_code;
    json_t *reply = ah_cmd_call (co, method, path, body, timeout_s, NULL, &exit_code);
    if (reply && co->json)
        ah_cmd_print_json (reply);
    else if (reply)
        ah_cmd_print_fields (reply, fields, nfields);
    json_decref (reply);
    return exit_code;
}

//  --------------------------------------------------------------------
//  Tenants

static const char *const s_tenant_fields [] = {
    "name", "sandboxes", "running", "tokens", "max_sandboxes", "max_running", "max_cpus",
    "max_memory_mb", "created_at", "egress_allow", "egress_deny" };

static void s_print_tenants (json_t *list)
{
    static const char *const header [] = { "NAME", "SANDBOXES", "RUNNING", "TOKENS", "MAX SANDBOXES",
                                           "MAX RUNNING", "MAX CPUS", "MAX MEMORY MB", "CREATED" };
    if (json_array_size (list) == 0)
        printf ("no tenants (agenthold tenant create NAME makes one)\n");
    else
        ah_cmd_print_objects (list, header, s_tenant_fields, 9);
}

//  --max-* options into body: a number >= 0, or "none" (null).
static int s_limits (const char *const *values, json_t *body)
{
    static const char *const opts [] = { "--max-sandboxes", "--max-running", "--max-cpus", "--max-memory-mb" };
    static const char *const keys [] = { "max_sandboxes", "max_running", "max_cpus", "max_memory_mb" };
    for (int i = 0; i < 4; i++) {
        const char *v = values [i];
        if (!v)
            continue;
        if (!strcmp (v, "none")) {
            json_object_set_new (body, keys [i], json_null ());
            continue;
        }
        char *end = NULL;
        errno = 0;
        double d = strtod (v, &end);
        bool whole = i != 2;
        if (errno || end == v || *end || d < 0 || (whole && d != (double) (long long) d) || d > 1e12) {
            fprintf (stderr, "agenthold tenant: %s wants %s 0 or more, or 'none', got '%s'\n", opts [i],
                     whole ? "a whole number" : "a number", v);
            return -1;
        }
        json_object_set_new (body, keys [i], whole ? json_integer ((json_int_t) d) : json_real (d));
    }
    return 0;
}

//  --egress-allow / --egress-deny: comma-separated entries (docs/egress.md),
//  "none" or "" for an empty list; the server checks each entry.
static void s_egress_lists (const char *const *values, json_t *body)
{
    static const char *const keys [] = { "egress_allow", "egress_deny" };
    for (int i = 0; i < 2; i++) {
        if (!values [i])
            continue;
        json_t *list = json_array ();
        if (strcmp (values [i], "none")) {
            const char *p = values [i];
            while (*p) {
                size_t n = strcspn (p, ",");
                if (n)
                    json_array_append_new (list, json_stringn (p, n));
                p += n;
                if (*p == ',')
                    p++;
            }
        }
        json_object_set_new (body, keys [i], list);
    }
}

//  A secret's value from stdin, never from argv (argv is visible to
//  every user of the machine in /proc): all of stdin, one trailing
//  newline dropped; on a terminal, one line read without echo. NULL
//  (said why) when it is empty or too long.
#define S_SECRET_MAX 8192
static char *s_secret_read (const char *header)
{
    char *buf = calloc (1, S_SECRET_MAX + 2);
    if (!buf)
        return NULL;
    bool tty = isatty (STDIN_FILENO);
    struct termios saved, quiet;
    bool echo_off = false;
    if (tty && tcgetattr (STDIN_FILENO, &saved) == 0) {
        quiet = saved;
        quiet.c_lflag &= ~(tcflag_t) ECHO;
        echo_off = tcsetattr (STDIN_FILENO, TCSAFLUSH, &quiet) == 0;
        fprintf (stderr, "value of %s (not shown; Enter ends it): ", header);
    }
    size_t n = 0;
    while (n < S_SECRET_MAX + 1) {
        ssize_t r = read (STDIN_FILENO, buf + n, S_SECRET_MAX + 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t) r;
        if (tty && memchr (buf, '\n', n))
            break;
    }
    if (echo_off) {
        tcsetattr (STDIN_FILENO, TCSAFLUSH, &saved);
        fputc ('\n', stderr);
    }
    if (tty && memchr (buf, '\n', n))
        n = (size_t) ((char *) memchr (buf, '\n', n) - buf) + 1;
    if (n && buf [n - 1] == '\n')
        n--;
    if (n && buf [n - 1] == '\r')
        n--;
    buf [n] = 0;
    if (n == 0 || n > S_SECRET_MAX) {
        fprintf (stderr, "agenthold tenant secret set: the value comes on stdin (%s)\n",
                 n ? "at most 8192 bytes" : "it was empty");
        explicit_bzero (buf, S_SECRET_MAX + 2);
        free (buf);
        return NULL;
    }
    return buf;
}

static void s_print_secrets (json_t *list)
{
    static const char *const header [] = { "HOST", "PORT", "HEADER", "CREATED" };
    static const char *const keys [] = { "host", "port", "header", "created_at" };
    if (json_array_size (list) == 0)
        printf ("no egress secrets (agenthold tenant secret set TENANT HOST --header NAME < value)\n");
    else
        ah_cmd_print_objects (list, header, keys, 4);
}

//  tenant secret set TENANT HOST --header NAME | ls TENANT | rm TENANT HOST
static int s_tenant_secret (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    static const char *const subs [] = { "set", "ls", "rm", NULL };
    int sub = s_which (c, argc, argv, subs);
    if (sub < 0)
        return sub == -2 ? 0 : AH_EXIT_USAGE;
    const char *header = NULL;
    ah_opt_t set_opts [] = { { "--header", &header, NULL }, { NULL, NULL, NULL } };
    const char *pos [2];
    int npos;
    int want = sub == 1 ? 1 : 2;
    int rc = s_parse (c, argc - 1, argv + 1, sub == 0 ? set_opts : NULL, co, pos, want, want, &npos);
    if (rc)
        return S_DONE (rc);
    char *path = ah_cmd_path ("tenants", pos [0], "/egress/secrets");
    if (!path)
        return 1;
    if (sub == 1) {
        if (co->json) {
            json_t *reply = ah_cmd_call (co, "GET", path, NULL, 0, NULL, &rc);
            if (reply)
                ah_cmd_print_json (reply);
            json_decref (reply);
        }
        else
            rc = ah_cmd_show_list (co, path, "secrets", s_print_secrets);
        free (path);
        return rc;
    }
    char *escaped = ah_hc_escape (pos [1], false);
    char *full = escaped ? ah_cmd_strf ("%s/%s", path, escaped) : NULL;
    free (escaped);
    free (path);
    if (!full)
        return 1;
    if (sub == 2) {
        json_t *reply = ah_cmd_call (co, "DELETE", full, NULL, 0, NULL, &rc);
        if (reply && co->json)
            ah_cmd_print_json (reply);
        else if (reply)
            printf ("egress secret for %s of tenant '%s' removed\n", pos [1], pos [0]);
        json_decref (reply);
        free (full);
        return rc;
    }
    if (!header) {
        fprintf (stderr, "agenthold tenant secret set: which header? (--header NAME, e.g. --header Authorization;"
                 " the value comes on stdin)\n");
        free (full);
        return AH_EXIT_USAGE;
    }
    char *value = s_secret_read (header);
    if (!value) {
        free (full);
        return AH_EXIT_USAGE;
    }
    json_t *body = json_pack ("{s:s, s:s}", "header", header, "value", value);
    explicit_bzero (value, strlen (value));
    free (value);
    if (!body) {
        fprintf (stderr, "agenthold tenant secret set: the value is not UTF-8 text\n");
        free (full);
        return AH_EXIT_USAGE;
    }
    rc = s_show (co, "PUT", full, body, 0, (const char *const []) { "host", "port", "header", "created_at" }, 4);
    json_t *v = json_object_get (body, "value");
    if (json_string_value (v))
        explicit_bzero ((char *) json_string_value (v), json_string_length (v));
    json_decref (body);
    free (full);
    return rc;
}

int ah_cli_tenant (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    static const char *const subs [] = { "create", "ls", "show", "set", "rm", "secret", NULL };
    int sub = s_which (c, argc, argv, subs);
    if (sub < 0)
        return sub == -2 ? 0 : AH_EXIT_USAGE;
    if (sub == 5)
        return s_tenant_secret (c, argc - 1, argv + 1, co);
    const char *lim [4] = { NULL, NULL, NULL, NULL };
    const char *egress [2] = { NULL, NULL };
    bool force = false;
    ah_opt_t limit_opts [] = {
        { "--max-sandboxes", &lim [0], NULL }, { "--max-running", &lim [1], NULL },
        { "--max-cpus", &lim [2], NULL }, { "--max-memory-mb", &lim [3], NULL },
        { "--egress-allow", &egress [0], NULL }, { "--egress-deny", &egress [1], NULL }, { NULL, NULL, NULL } };
    ah_opt_t rm_opts [] = { { "--force", NULL, &force }, { NULL, NULL, NULL } };
    const ah_opt_t *opts = sub == 0 || sub == 3 ? limit_opts : sub == 4 ? rm_opts : NULL;
    const char *pos [1];
    int npos;
    int rc = s_parse (c, argc - 1, argv + 1, opts, co, pos, sub == 1 ? 0 : 1, sub == 1 ? 0 : 1, &npos);
    if (rc)
        return S_DONE (rc);
    if (sub == 1)
        return ah_cmd_show_list (co, "/api/v1/tenants", "tenants", s_print_tenants);
    char *path = ah_cmd_path ("tenants", pos [0], sub == 4 && force ? "?force=1" : "");
    json_t *body = sub == 0 || sub == 3 ? json_object () : NULL;
    if (body)
        s_egress_lists (egress, body);
    if (body && s_limits (lim, body)) {
        json_decref (body);
        free (path);
        return AH_EXIT_USAGE;
    }
    if (sub == 0)
        json_object_set_new (body, "name", json_string (pos [0]));
    if (sub == 3 && json_object_size (body) == 0) {
        fprintf (stderr, "agenthold tenant set: nothing to change (--max-sandboxes, --max-running, "
                 "--max-cpus, --max-memory-mb, --egress-allow, --egress-deny)\n");
        json_decref (body);
        free (path);
        return AH_EXIT_USAGE;
    }
    static const char *const methods [] = { "POST", "GET", "GET", "PATCH", "DELETE" };
    if (sub == 4 && !co->json && force)
        fprintf (stderr, "removing tenant '%s' and destroying its sandboxes...\n", pos [0]);
    if (sub == 4 && !co->json) {
        json_t *reply = ah_cmd_call (co, "DELETE", path, NULL, force ? 660 : 0, NULL, &rc);
        if (reply)
            printf ("tenant '%s' removed\n", pos [0]);
        json_decref (reply);
    }
    else
        rc = s_show (co, methods [sub], sub == 0 ? "/api/v1/tenants" : path, body, force ? 660 : 0,
                     s_tenant_fields, 11);
    json_decref (body);
    free (path);
    return rc;
}

//  --------------------------------------------------------------------
//  Tokens

static const char *const s_token_fields [] = {
    "name", "tenant", "admin", "user", "created_at", "last_used_at", "expires_at", "revoked_at" };

static void s_print_tokens (json_t *list)
{
    static const char *const header [] = { "NAME", "TENANT", "ADMIN", "USER", "CREATED", "LAST USED",
                                           "EXPIRES", "REVOKED" };
    ah_cmd_print_objects (list, header, s_token_fields, 8);
}

int ah_cli_token (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    static const char *const subs [] = { "create", "ls", "revoke", NULL };
    int sub = s_which (c, argc, argv, subs);
    if (sub < 0)
        return sub == -2 ? 0 : AH_EXIT_USAGE;
    const char *name = NULL, *user = NULL, *expires = NULL;
    bool admin = false, metrics = false;
    ah_opt_t create_opts [] = {
        { "--name", &name, NULL }, { "--user", &user, NULL }, { "--expires", &expires, NULL },
        { "--admin", NULL, &admin }, { "--metrics", NULL, &metrics }, { NULL, NULL, NULL } };
    const char *pos [1];
    int npos;
    int rc = s_parse (c, argc - 1, argv + 1, sub == 0 ? create_opts : NULL, co, pos,
                      sub == 2, sub == 2, &npos);
    if (rc)
        return S_DONE (rc);
    if (sub == 1)
        return ah_cmd_show_list (co, "/api/v1/tokens", "tokens", s_print_tokens);
    if (sub == 2) {
        char *path = ah_cmd_path ("tokens", pos [0], "");
        int exit_code;
        json_t *reply = ah_cmd_call (co, "DELETE", path, NULL, 0, NULL, &exit_code);
        if (reply && co->json)
            ah_cmd_print_json (reply);
        else if (reply)
            printf ("token '%s' revoked\n", pos [0]);
        json_decref (reply);
        free (path);
        return exit_code;
    }
    const char *tenant = getenv ("AGENTHOLD_TENANT");
    if (!admin && !metrics && !(tenant && *tenant)) {
        fprintf (stderr, "agenthold token create: for which tenant? (--tenant T, or --admin for an admin's token,"
                 " --metrics for one that reads /metrics only)\n");
        return AH_EXIT_USAGE;
    }
    json_t *body = json_object ();
    if (metrics)
        json_object_set_new (body, "metrics", json_true ());
    else if (admin)
        json_object_set_new (body, "admin", json_true ());
    else
        json_object_set_new (body, "tenant", json_string (tenant));
    if (name)
        json_object_set_new (body, "name", json_string (name));
    if (user)
        json_object_set_new (body, "user", json_string (user));
    if (expires)
        json_object_set_new (body, "expires", json_string (expires));
    int exit_code;
    json_t *reply = ah_cmd_call (co, "POST", "/api/v1/tokens", body, 0, NULL, &exit_code);
    json_decref (body);
    if (reply && co->json)
        ah_cmd_print_json (reply);
    else if (reply) {
        //  The token alone on stdout (for a script); the rest for people.
        printf ("%s\n", ah_cmd_jstr (reply, "token", ""));
        if (metrics)
            fprintf (stderr, "token '%s' reading /metrics only", ah_cmd_jstr (reply, "name", "?"));
        else if (admin)
            fprintf (stderr, "token '%s' for an admin", ah_cmd_jstr (reply, "name", "?"));
        else
            fprintf (stderr, "token '%s' for tenant '%s'", ah_cmd_jstr (reply, "name", "?"),
                     ah_cmd_jstr (reply, "tenant", "?"));
        if (user)
            fprintf (stderr, ", acting for '%s'", ah_cmd_jstr (reply, "user", "?"));
        if (json_is_string (json_object_get (reply, "expires_at")))
            fprintf (stderr, ", expires %s", ah_cmd_jstr (reply, "expires_at", "?"));
        fprintf (stderr, ": shown this once, only its hash is kept\n");
    }
    json_decref (reply);
    return exit_code;
}

//  --------------------------------------------------------------------
//  Sessions

static const char *const s_scopes [] = { "run", "conversation", "channel", "user", "agent", NULL };

static void s_print_sessions (json_t *list)
{
    static const char *const header [] = { "ID", "TENANT", "SCOPE", "SUBJECT", "BACKEND", "STATE", "OPENED" };
    static const char *const keys [] = { "id", "tenant", "scope", "subject", "backend", "state", "opened_at" };
    if (json_array_size (list) == 0)
        printf ("no sessions (agenthold session open SCOPE SUBJECT opens one)\n");
    else
        ah_cmd_print_objects (list, header, keys, 7);
}

static void s_print_session (json_t *s)
{
    static const char *const fields [] = { "id", "tenant", "scope", "subject", "backend", "host", "state",
                                           "lost_reason", "created_at", "opened_at" };
    ah_cmd_print_fields (s, fields, 10);
    json_t *agent = json_object_get (s, "agent");
    if (json_is_object (agent))
        printf ("agent:       %s (%s)\n", ah_cmd_jstr (agent, "name", "-"), ah_cmd_jstr (agent, "state", "-"));
}

static int s_session_reply (ah_common_t *co, const char *method, const char *path, json_t *body, long timeout_s)
{
    int exit_code;
    json_t *reply = ah_cmd_call (co, method, path, body, timeout_s, NULL, &exit_code);
    if (reply && co->json)
        ah_cmd_print_json (reply);
    else if (reply)
        s_print_session (reply);
    json_decref (reply);
    return exit_code;
}

int ah_cli_session (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    static const char *const subs [] = { "open", "ls", "show", "close", NULL };
    int sub = s_which (c, argc, argv, subs);
    if (sub < 0)
        return sub == -2 ? 0 : AH_EXIT_USAGE;
    const char *backend = NULL, *host = NULL, *runtime = NULL;
    bool no_wait = false;
    ah_opt_t open_opts [] = {
        { "--backend", &backend, NULL }, { "--host", &host, NULL }, { "--runtime", &runtime, NULL },
        { "--no-wait", NULL, &no_wait }, { NULL, NULL, NULL } };
    const char *pos [2];
    int npos;
    int rc = s_parse (c, argc - 1, argv + 1, sub == 0 ? open_opts : NULL, co, pos,
                      sub == 0 || sub >= 2, sub == 0 ? 2 : sub == 1 ? 0 : 1, &npos);
    if (rc)
        return S_DONE (rc);
    if (sub == 1)
        return ah_cmd_show_list (co, "/api/v1/sessions", "sessions", s_print_sessions);
    if (sub == 2 || sub == 3) {
        char *path = ah_cmd_path ("sessions", pos [0], "");
        if (sub == 2)
            rc = s_session_reply (co, "GET", path, NULL, 0);
        else {
            json_t *reply = ah_cmd_call (co, "DELETE", path, NULL, 0, NULL, &rc);
            if (reply && co->json)
                ah_cmd_print_json (reply);
            else if (reply)
                printf ("session '%s' closed; its sandbox is being destroyed\n", pos [0]);
            json_decref (reply);
        }
        free (path);
        return rc;
    }
    const char *wait = no_wait ? "" : "?wait=1";
    long timeout_s = no_wait ? 0 : 660;
    int scope = -1;
    for (int i = 0; s_scopes [i]; i++)
        if (!strcmp (pos [0], s_scopes [i]))
            scope = i;
    if (scope < 0) {
        //  Not a scope: a session's id, opened again by reference.
        if (npos > 1 || backend || host || runtime) {
            fprintf (stderr, "agenthold session open: '%s' is no scope (run, conversation, channel, user, "
                     "agent); a session's id takes no subject nor options\n", pos [0]);
            return AH_EXIT_USAGE;
        }
        char *suffix = ah_cmd_strf ("/open%s", wait);
        char *path = ah_cmd_path ("sessions", pos [0], suffix);
        rc = s_session_reply (co, "POST", path, NULL, timeout_s);
        free (path);
        free (suffix);
        return rc;
    }
    if (npos < 2 && scope != 3) {
        fprintf (stderr, "agenthold session open: a %s session needs its subject (usage: agenthold %s)\n",
                 pos [0], c->usage);
        return AH_EXIT_USAGE;
    }
    json_t *body = json_pack ("{s:s}", "scope", pos [0]);
    if (npos > 1)
        json_object_set_new (body, "subject", json_string (pos [1]));
    if (backend)
        json_object_set_new (body, "backend", json_string (backend));
    if (host)
        json_object_set_new (body, "host", json_string (host));
    if (runtime)
        json_object_set_new (body, "runtime", json_string (runtime));
    char *path = ah_cmd_strf ("/api/v1/sessions%s", wait);
    rc = s_session_reply (co, "POST", path, body, timeout_s);
    free (path);
    json_decref (body);
    return rc;
}

//  --------------------------------------------------------------------
//  Policies

static void s_print_policies (json_t *list)
{
    static const char *const header [] = { "HOLDER", "SCRIPT", "LOADED", "LAST ERROR", "AT" };
    static const char *const keys [] = { "holder", "script", "loaded_at", "error", "error_at" };
    if (json_array_size (list) == 0)
        printf ("no policy scripts loaded yet\n");
    else
        ah_cmd_print_objects (list, header, keys, 5);
}

//  What 0 means for a value (none: 0 is not one of its values).
static const char *s_zero (const char *key)
{
    if (strstr (key, "_max_"))
        return " (no limit)";
    if (strstr (key, "_ttl"))
        return " (never)";
    return "";
}

static void s_print_values (json_t *values)
{
    const char *key;
    json_t *v;
    json_object_foreach (values, key, v)
        printf ("  %s = %.15g%s\n", key, json_number_value (v), json_number_value (v) == 0 ? s_zero (key) : "");
}

//  KEY=N or KEY=default into body: N whole (sent as an integer) or with
//  decimals; the server checks each value against its range. -1 said why.
static int s_value (const char *arg, json_t *body)
{
    const char *eq = strchr (arg, '=');
    if (!eq || eq == arg) {
        fprintf (stderr, "agenthold policy set: '%s' is not KEY=VALUE\n", arg);
        return -1;
    }
    char key [128];
    snprintf (key, sizeof key, "%.*s", (int) (eq - arg), arg);
    if (!strcmp (eq + 1, "default")) {
        json_object_set_new (body, key, json_null ());
        return 0;
    }
    const char *text = eq + 1;
    char *end = NULL;
    errno = 0;
    long long whole = strtoll (text, &end, 10);
    if (!errno && end != text && !*end && whole >= 0) {
        json_object_set_new (body, key, json_integer (whole));
        return 0;
    }
    errno = 0;
    double v = strtod (text, &end);
    //  Decimal digits only: no "nan", "inf", hex or a sign.
    bool plain = *text && strspn (text, "0123456789.") == strlen (text);
    if (errno || end == text || *end || !plain || !isfinite (v)) {
        fprintf (stderr, "agenthold policy set: %s wants a number 0 or more (e.g. 15 or 0.5), or "
                 "'default', got '%s'\n", key, text);
        return -1;
    }
    json_object_set_new (body, key, json_real (v));
    return 0;
}

int ah_cli_policy (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    static const char *const subs [] = { "status", "reload", "set", NULL };
    int sub = s_which (c, argc, argv, subs);
    if (sub < 0)
        return sub == -2 ? 0 : AH_EXIT_USAGE;
    const char *pos [16];
    int npos;
    int rc = s_parse (c, argc - 1, argv + 1, NULL, co, pos, sub == 2, sub == 2 ? 16 : 0, &npos);
    if (rc)
        return S_DONE (rc);
    int exit_code;
    if (sub == 0) {
        json_t *reply = ah_cmd_call (co, "GET", "/api/v1/policy", NULL, 0, NULL, &exit_code);
        if (reply && co->json)
            ah_cmd_print_json (reply);
        else if (reply) {
            s_print_policies (json_object_get (reply, "policies"));
            printf ("\nvalues in force (agenthold policy set KEY=N changes one):\n");
            s_print_values (json_object_get (reply, "values"));
        }
        json_decref (reply);
        return exit_code;
    }
    json_t *body = NULL;
    if (sub == 2) {
        body = json_object ();
        for (int i = 0; i < npos; i++)
            if (s_value (pos [i], body)) {
                json_decref (body);
                return AH_EXIT_USAGE;
            }
    }
    json_t *reply = ah_cmd_call (co, sub == 1 ? "POST" : "PUT", sub == 1 ? "/api/v1/policy/reload" : "/api/v1/policy",
                                 body, 0, NULL, &exit_code);
    json_decref (body);
    if (reply && co->json)
        ah_cmd_print_json (reply);
    else if (reply && sub == 1)
        printf ("policy reload asked of lifecycle, sleeper and builder (agenthold policy status shows the outcome)\n");
    else if (reply)
        s_print_values (json_object_get (reply, "values"));
    json_decref (reply);
    return exit_code;
}
