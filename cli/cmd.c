/*  cli/cmd.c: what the agenthold commands share (see cmd.h).          */
#include "cli/http.h"
#include "cli/cmd.h"
#include "cli/client.h"
#include "common/ident.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ah_cmd_usage (const ah_cmd_t *c, FILE *out)
{
    fprintf (out, "usage: agenthold %s\n\n%s", c->usage, c->help);
    if (strcmp (c->name, "help") && strcmp (c->name, "serve"))
        fprintf (out, "\nAlso: --config FILE (where to find the server and its token), --help;\n"
                      "--tenant T (an admin acting within tenant T).\n");
}

int ah_cmd_parse (const ah_cmd_t *c, int argc, char **argv, const ah_opt_t *opts,
                  const char **pos, int max_pos, int *npos)
{
    *npos = 0;
    bool options = true;            //  until "--": what follows it is positional
    for (int i = 0; i < argc; i++) {
        const char *arg = argv [i];
        if (options && !strcmp (arg, "--")) {
            options = false;
            continue;
        }
        if (options && (!strcmp (arg, "--help") || !strcmp (arg, "-h")))
            return 1;
        if (options && arg [0] == '-' && arg [1]) {
            const char *eq = strchr (arg, '=');
            size_t len = eq ? (size_t) (eq - arg) : strlen (arg);
            const ah_opt_t *o = NULL;
            for (const ah_opt_t *p = opts; p && p->name; p++)
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

int ah_cmd_number (const char *cmd, const char *opt, const char *text, bool integer, json_t **out)
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

json_t *ah_cmd_call (const ah_common_t *co, const char *method, const char *path, json_t *body,
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
        char *why = ah_client_error (reply, status);
        fprintf (stderr, "agenthold: %s\n", why ? why : "the server refused the request");
        free (why);
        json_decref (reply);
        return NULL;
    }
    if (!reply) {
        fprintf (stderr, "agenthold: the server's answer (status %ld) is not JSON\n", status);
        return NULL;
    }
    *exit_code = 0;
    if (!co->json)
        ah_cmd_clean_json (reply);      //  what is printed for people from here on is safe
    return reply;
}

char *ah_cmd_path (const char *collection, const char *name, const char *suffix)
{
    char *escaped = ah_hc_escape (name, false);
    char *path = ah_cmd_strf ("/api/v1/%s/%s%s", collection, escaped ? escaped : "", suffix);
    free (escaped);
    return path;
}

const char *ah_cmd_jstr (json_t *obj, const char *key, const char *dflt)
{
    const char *s = json_string_value (json_object_get (obj, key));
    return s && *s ? s : dflt;
}

void ah_cmd_print_json (json_t *j)
{
    char *text = ah_cmd_clean_json_text (json_dumps (j, JSON_INDENT (2) | JSON_SORT_KEYS));
    if (text)
        printf ("%s\n", text);
    free (text);
}

char *ah_cmd_strf (const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    char *s = NULL;
    if (vasprintf (&s, fmt, ap) < 0)
        s = strdup ("?");
    va_end (ap);
    return s;
}

void ah_cmd_print_table (char ***rows, size_t nrows, size_t ncols)
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
                printf ("%-*s  ", (int) width [c < 16 ? c : 15], rows [r][c]);
            else
                printf ("%s", rows [r][c]);
        }
        printf ("\n");
    }
    for (size_t r = 0; r < nrows; r++) {
        for (size_t c = 0; c < ncols; c++)
            free (rows [r][c]);
        free (rows [r]);
    }
    free (rows);
}

char *ah_cmd_clean (char *s)
{
    char *out = s ? ah_text_escape (s, strlen (s), false) : NULL;
    free (s);
    return out;
}

//  A string of the tree, cleaned: a new string, or NULL when it is fine
//  (or memory ran out: then it stays, which the terminal shows as sent).
static json_t *s_clean_string (const char *s)
{
    if (!ah_text_check (s, strlen (s), false))
        return NULL;
    char *clean = ah_cmd_clean (strdup (s));
    json_t *j = clean ? json_string (clean) : NULL;
    free (clean);
    return j;
}

void ah_cmd_clean_json (json_t *j)
{
    if (json_is_array (j)) {
        size_t i;
        json_t *v;
        json_array_foreach (j, i, v) {
            json_t *clean = json_is_string (v) ? s_clean_string (json_string_value (v)) : NULL;
            if (clean)
                json_array_set_new (j, i, clean);
            else
                ah_cmd_clean_json (v);
        }
    }
    else if (json_is_object (j)) {
        const char *key;
        json_t *v;
        void *tmp;
        json_t *renamed = json_object ();
        json_object_foreach_safe (j, tmp, key, v) {
            json_t *clean = json_is_string (v) ? s_clean_string (json_string_value (v)) : NULL;
            if (clean)
                json_object_set_new (j, key, clean);
            else
                ah_cmd_clean_json (v);
            if (ah_text_check (key, strlen (key), false) && renamed) {
                char *k = ah_cmd_clean (strdup (key));
                if (k)
                    json_object_set (renamed, k, json_object_get (j, key));
                free (k);
                json_object_del (j, key);
            }
        }
        json_object_update (j, renamed);
        json_decref (renamed);
    }
}

char *ah_cmd_clean_json_text (char *text)
{
    if (!text)
        return NULL;
    //  Outside its strings JSON is ASCII, and the encoder escaped C0:
    //  what is left is DEL (7F) and C1 (C2 80..C2 9F), each made \u00XX.
    size_t n = strlen (text), k = 0;
    char *out = malloc (6 * n + 1);
    if (!out) {
        free (text);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char) text [i];
        if (c == 0x7f)
            k += (size_t) sprintf (out + k, "\\u007f");
        else if (c == 0xc2 && i + 1 < n && (unsigned char) text [i + 1] >= 0x80
             &&  (unsigned char) text [i + 1] <= 0x9f)
            k += (size_t) sprintf (out + k, "\\u%04x", (unsigned char) text [++i]);
        else
            out [k++] = (char) c;
    }
    out [k] = 0;
    free (text);
    return out;
}

//  One value for people: a string cut at 80, yes/no, a number, else "-".
static char *s_cell (json_t *v)
{
    if (json_is_string (v))
        return ah_cmd_clean (ah_cmd_strf ("%.80s", json_string_value (v)));
    if (json_is_boolean (v))
        return strdup (json_is_true (v) ? "yes" : "no");
    if (json_is_number (v))
        return ah_cmd_strf ("%g", json_number_value (v));
    if (json_is_array (v) && json_array_size (v) == 0)
        return strdup ("none");
    if (json_is_array (v)) {
        //  A list of strings (a tenant's egress lists): comma-separated.
        size_t i;
        json_t *e;
        char *out = strdup ("");
        json_array_foreach (v, i, e) {
            char *next = out ? ah_cmd_strf ("%s%s%.80s", out, i ? "," : "",
                                            json_is_string (e) ? json_string_value (e) : "?") : NULL;
            free (out);
            out = next;
            if (!out || strlen (out) > 2000)
                break;
        }
        return out ? ah_cmd_clean (out) : strdup ("-");
    }
    return strdup ("-");
}

char ***ah_cmd_table_new (const char *const *header, size_t ncols, size_t nbody)
{
    char ***rows = calloc (nbody + 1, sizeof *rows);
    for (size_t r = 0; rows && r <= nbody; r++)
        rows [r] = calloc (ncols, sizeof (char *));
    for (size_t c = 0; rows && c < ncols; c++)
        rows [0][c] = strdup (header [c]);
    return rows;
}

void ah_cmd_print_objects (json_t *list, const char *const *header, const char *const *keys, size_t ncols)
{
    size_t n = json_array_size (list);
    char ***rows = ah_cmd_table_new (header, ncols, n);
    for (size_t i = 0; i < n; i++)
        for (size_t c = 0; c < ncols; c++)
            rows [i + 1][c] = s_cell (json_object_get (json_array_get (list, i), keys [c]));
    ah_cmd_print_table (rows, n + 1, ncols);
}

void ah_cmd_print_fields (json_t *obj, const char *const *keys, size_t nkeys)
{
    size_t width = 0;
    for (size_t k = 0; k < nkeys; k++)
        if (strlen (keys [k]) > width)
            width = strlen (keys [k]);
    for (size_t k = 0; k < nkeys; k++) {
        json_t *v = json_object_get (obj, keys [k]);
        char *cell = json_is_string (v) ? ah_cmd_clean (strdup (json_string_value (v))) : s_cell (v);
        printf ("%s:%*s %s\n", keys [k], (int) (width - strlen (keys [k])), "", cell ? cell : "-");
        free (cell);
    }
}

int ah_cmd_show_list (const ah_common_t *co, const char *path, const char *key, ah_cmd_print_fn *print)
{
    int exit_code;
    json_t *reply = ah_cmd_call (co, "GET", path, NULL, 0, NULL, &exit_code);
    if (reply) {
        json_t *list = json_object_get (reply, key);
        if (co->json)
            ah_cmd_print_json (list ? list : reply);
        else
            print (list);
    }
    json_decref (reply);
    return exit_code;
}

int ah_cmd_agent_list (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co,
                       const char *suffix, const char *key, ah_cmd_print_fn *print)
{
    const char *pos [1];
    int npos = 0;
    ah_opt_t opts [] = { { "--json", NULL, &co->json }, { "--config", &co->config, NULL }, { NULL, NULL, NULL } };
    int rc = ah_cmd_parse (c, argc, argv, opts, pos, 1, &npos);
    if (rc)
        return rc > 0 ? (ah_cmd_usage (c, stdout), 0) : AH_EXIT_USAGE;
    if (npos != 1) {
        fprintf (stderr, "agenthold %s: needs NAME (agenthold help %s)\n", c->name, c->name);
        return AH_EXIT_USAGE;
    }
    char *path = ah_cmd_path ("agents", pos [0], suffix);
    rc = path ? ah_cmd_show_list (co, path, key, print) : 1;
    free (path);
    return rc;
}
