/*  cli/audit.c: `agenthold log` and `agenthold tombstones` (see audit.h,
    docs/cli.md). The log pages with the server's keyset cursor (`next`),
    so --all reads every matching row once even while rows arrive.     */
#include "cli/http.h"
#include "cli/audit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAGE_MAX    1000

static void s_print_operations (json_t *ops)
{
    static const char *const header [] = { "ID", "AT", "AGENT", "ACTOR", "KIND", "DETAIL", "BYTES", "RUN",
                                            "OK", "ERROR" };
    static const char *const keys [] = { "id", "at", "agent_name", "actor", "kind", "detail", "bytes", "run",
                                         "ok", "error" };
    ah_cmd_print_objects (ops, header, keys, 10);
}

//  "&key=<value, percent-encoded>" appended to *query.
static void s_arg (char **query, const char *key, const char *value)
{
    if (!value)
        return;
    char *escaped = ah_hc_escape (value, false);
    char *grown = ah_cmd_strf ("%s&%s=%s", *query, key, escaped ? escaped : "");
    free (escaped);
    free (*query);
    *query = grown;
}

int ah_cli_log (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    const char *limit = "50", *operation = NULL, *run = NULL, *text = NULL, *before = NULL;
    bool failed = false, all = false;
    ah_opt_t opts [] = {
        { "--limit", &limit, NULL }, { "--operation", &operation, NULL }, { "--run", &run, NULL },
        { "--grep", &text, NULL }, { "--before", &before, NULL }, { "--failed", NULL, &failed },
        { "--all", NULL, &all }, { "--json", NULL, &co->json }, { "--config", &co->config, NULL },
        { NULL, NULL, NULL }
    };
    const char *pos [1];
    int npos, rc = ah_cmd_parse (c, argc, argv, opts, pos, 1, &npos);
    if (rc)
        return rc > 0 ? (ah_cmd_usage (c, stdout), 0) : AH_EXIT_USAGE;
    char *end = NULL;
    long n = strtol (limit, &end, 10);
    if (end == limit || *end || n < 1 || n > PAGE_MAX) {
        fprintf (stderr, "agenthold log: --limit wants a number from 1 to 1000, got '%s'\n", limit);
        return AH_EXIT_USAGE;
    }
    end = NULL;
    long long cursor = before ? strtoll (before, &end, 10) : 0;
    if (before && (end == before || *end || cursor < 1)) {
        fprintf (stderr, "agenthold log: --before wants an operation id (the ID column), got '%s'\n", before);
        return AH_EXIT_USAGE;
    }
    char *query = ah_cmd_strf ("limit=%ld", n);
    //  One agent's trail (a 404 when the caller has none of it), or all.
    char *base = npos ? ah_cmd_path ("agents", pos [0], "/operations") : strdup ("/api/v1/operations");
    s_arg (&query, "operation", operation);
    s_arg (&query, "run", run);
    s_arg (&query, "q", text);
    if (failed)
        s_arg (&query, "failed", "1");
    //  Every page (--all) or one; rows gathered, printed once.
    json_t *rows = json_array ();
    int exit_code = 0;
    bool more = false;
    do {
        char *path = cursor ? ah_cmd_strf ("%s?%s&before=%lld", base, query, cursor)
                            : ah_cmd_strf ("%s?%s", base, query);
        json_t *reply = ah_cmd_call (co, "GET", path, NULL, 0, NULL, &exit_code);
        free (path);
        if (!reply)
            break;
        json_array_extend (rows, json_object_get (reply, "operations"));
        json_t *next = json_object_get (reply, "next");
        more = json_is_integer (next);
        cursor = more ? (long long) json_integer_value (next) : 0;
        json_decref (reply);
    } while (all && more);
    free (query);
    free (base);
    if (exit_code == 0) {
        if (co->json)
            ah_cmd_print_json (rows);
        else if (json_array_size (rows) == 0)
            printf ("no operations\n");
        else
            s_print_operations (rows);
        if (more && !all && !co->json)
            fprintf (stderr, "more: agenthold log ... --before %lld (or --all)\n", cursor);
    }
    json_decref (rows);
    return exit_code;
}

static void s_print_tombstones (json_t *list)
{
    if (json_array_size (list) == 0) {
        printf ("no tombstones (every destroy was confirmed by the driver)\n");
        return;
    }
    static const char *const header [] = { "AGENT", "NAME", "TENANT", "SINCE", "ATTEMPTS", "NEXT ATTEMPT",
                                            "LAST ERROR" };
    static const char *const keys [] = { "agent_id", "name", "tenant", "since", "attempts", "next_attempt_at",
                                         "last_error" };
    ah_cmd_print_objects (list, header, keys, 7);
}

int ah_cli_tombstones (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    ah_opt_t opts [] = {
        { "--json", NULL, &co->json }, { "--config", &co->config, NULL }, { NULL, NULL, NULL }
    };
    const char *pos [2];
    int npos, rc = ah_cmd_parse (c, argc, argv, opts, pos, 2, &npos);
    if (rc)
        return rc > 0 ? (ah_cmd_usage (c, stdout), 0) : AH_EXIT_USAGE;
    if (npos == 0)
        return ah_cmd_show_list (co, "/api/v1/tombstones", "tombstones", s_print_tombstones);
    if (npos != 2 || strcmp (pos [0], "forget")) {
        fprintf (stderr, "agenthold tombstones: list them, or 'tombstones forget AGENT_ID'\n");
        return AH_EXIT_USAGE;
    }
    char *path = ah_cmd_path ("tombstones", pos [1], "");
    int exit_code;
    json_t *reply = ah_cmd_call (co, "DELETE", path, NULL, 0, NULL, &exit_code);
    free (path);
    if (reply && co->json)
        ah_cmd_print_json (reply);
    else if (reply)
        printf ("tombstone of %s forgotten (whatever the driver still holds of it stays)\n", pos [1]);
    json_decref (reply);
    return exit_code;
}
