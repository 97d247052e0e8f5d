/*  cli/sbx.c: `agenthold exec` and `agenthold fs` (see sbx.h,
    docs/cli.md). exec is one POST /api/v1/agents/NAME/exec; fs get and
    put stream (cli/http.h) straight between the local file and the API's
    /files/{path} routes, so a file never sits whole in memory here.   */
#include "cli/sbx.h"
#include "cli/client.h"
#include "cli/cmd.h"
#include "proto/buf.h"
#include "proto/channel.h"

#include "cli/http.h"
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE      2
#define MAX_ERR_BODY    65536       //  an error answer kept to print it
#define MAX_CMD         65536       //  the API's cap on cmd
#define MAX_JSON_REC    65536       //  an exit or error record at most
#define REC_ERROR       5           //  the API's record: {"error"}, the channel broke (docs/api.md)

//  --------------------------------------------------------------------
//  Small helpers

static ah_client_t *s_client (const char *cmd, const char *config)
{
    char *err = NULL;
    ah_client_t *client = ah_client_new (config, true, &err);
    if (!client) {
        fprintf (stderr, "agenthold %s: %s\n", cmd, err ? err : "cannot reach the server");
        free (err);
    }
    return client;
}

//  Appends s percent-encoded (keeping '/' when keep_slash) to buf.
static int s_encode (char *buf, size_t size, const char *s, bool keep_slash)
{
    char *e = ah_hc_escape (s, keep_slash);
    size_t n = strlen (buf);
    int rc = e && n + strlen (e) < size ? 0 : -1;
    if (!rc)
        memcpy (buf + n, e, strlen (e) + 1);
    free (e);
    return rc;
}

//  /api/v1/agents/NAME/fs/WHAT?path=PATH. The query form on purpose: the
//  URL form (files/{path}) is normalised by the server's HTTP layer before
//  routing (dot segments resolved), so a PATH with '..' would reach another
//  route there instead of sandboxd's refusal. In ?path= it arrives as it
//  is and sandboxd judges it. extra: more query ("&parents=1") or "".
static char *s_files_path (const char *name, const char *what, const char *path, const char *extra)
{
    size_t size = 64 + 3 * strlen (name) + 3 * strlen (path) + strlen (extra);
    char *p = malloc (size);
    if (!p)
        return NULL;
    snprintf (p, size, "/api/v1/agents/");
    s_encode (p, size, name, false);
    strcat (p, "/fs/");
    strcat (p, what);
    strcat (p, "?path=");
    s_encode (p, size, path, false);
    strcat (p, extra);
    return p;
}

//  A JSON call that prints the server's error; the reply or NULL.
static json_t *s_call (const char *cmd, ah_client_t *client, const char *method,
                       const char *path, json_t *body, long timeout_s)
{
    json_t *reply = NULL;
    char *err = NULL;
    long status = ah_client_call (client, method, path, body, timeout_s, &reply, &err);
    if (status == 0 || status >= 400) {
        char *why = status ? ah_client_error (reply, status) : NULL;
        fprintf (stderr, "agenthold %s: %s\n", cmd, why ? why : err ? err : "cannot reach the server");
        free (why);
        json_decref (reply);
        reply = NULL;
    }
    free (err);
    return reply;
}

//  --------------------------------------------------------------------
//  exec

static void s_exec_usage (FILE *out)
{
    fprintf (out, "usage: agenthold exec NAME [--timeout S] [--config FILE] -- CMD [ARG...]\n");
}

//  One shell word, single-quoted unless plain.
static int s_quote (char *buf, size_t size, const char *word)
{
    size_t n = strlen (buf);
    bool plain = *word != 0;
    for (const char *s = word; *s; s++)
        if (!strchr ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%", *s))
            plain = false;
    if (plain) {
        if (n + strlen (word) + 1 >= size)
            return -1;
        strcat (buf, word);
        return 0;
    }
    if (n + 3 >= size)
        return -1;
    buf [n++] = '\'';
    for (const char *s = word; *s; s++) {
        if (n + 6 >= size)
            return -1;
        if (*s == '\'') {
            memcpy (buf + n, "'\\''", 4);
            n += 4;
        }
        else
            buf [n++] = *s;
    }
    buf [n++] = '\'';
    buf [n] = 0;
    return 0;
}

//  exec ?stream=1's answer: records (proto/channel.h's framing): 1
//  stdout, 2 stderr, 4 the exit as JSON, 5 {"error"} (docs/api.md).
typedef struct {
    ah_hc_t *hc;
    ah_rec_reader_t reader;
    ah_buf_t rec;                   //  a kind 4/5 record's JSON (small)
    ah_buf_t err;                   //  an error answer's body
    int status, signal;
    bool timed_out, bad;
    char error [512];
} exec_rx_t;

static void s_exec_record_end (exec_rx_t *x, uint8_t kind)
{
    json_t *j = json_loadb ((const char *) ah_buf_head (&x->rec), ah_buf_size (&x->rec), 0, NULL);
    if (kind == AH_REC_EXIT && j) {
        x->status = (int) json_integer_value (json_object_get (j, "status"));
        x->signal = (int) json_integer_value (json_object_get (j, "signal"));
        x->timed_out = json_is_true (json_object_get (j, "timed_out"));
    }
    else if (kind == REC_ERROR)
        snprintf (x->error, sizeof x->error, "%s", j && json_is_string (json_object_get (j, "error"))
                  ? json_string_value (json_object_get (j, "error")) : "the command's channel broke");
    json_decref (j);
    ah_buf_clear (&x->rec);
}

//  An error answer (status 300 and up): its body is kept (at most
//  MAX_ERR_BODY bytes) to print, not handed on. True when it is one.
static bool s_error_answer (ah_hc_t *hc, ah_buf_t *err, const uint8_t *data, size_t len)
{
    if (ah_hc_status (hc) < 300)
        return false;
    size_t room = MAX_ERR_BODY - ah_buf_size (err);
    ah_buf_append (err, data, len < room ? len : room);
    return true;
}

//  The body of an error answer as JSON (caller decrefs), or NULL.
static json_t *s_error_json (ah_buf_t *err)
{
    return json_loadb ((const char *) ah_buf_head (err), ah_buf_size (err), 0, NULL);
}

//  A piece of a record: output goes out as it comes, the exit and the
//  error are gathered. 0 goes on; 1 stops (our output failed, or no
//  memory); 2 stops on a record that does not belong in the answer.
static int s_exec_piece (void *arg, uint8_t kind, const uint8_t *data, size_t size, bool last)
{
    exec_rx_t *x = arg;
    if (kind == AH_REC_STDOUT || kind == AH_REC_STDERR) {
        FILE *f = kind == AH_REC_STDOUT ? stdout : stderr;
        if (size && fwrite (data, 1, size, f) != size)
            return 1;
        fflush (f);
        return 0;
    }
    if ((kind != AH_REC_EXIT && kind != REC_ERROR) || ah_buf_size (&x->rec) + size > MAX_JSON_REC)
        return 2;
    if (ah_buf_append (&x->rec, data, size))
        return 1;
    if (last)
        s_exec_record_end (x, kind);
    return 0;
}

static int s_on_records (void *ud, const uint8_t *data, size_t len)
{
    exec_rx_t *x = ud;
    if (s_error_answer (x->hc, &x->err, data, len))
        return 0;
    int rc = ah_rec_read (&x->reader, (const uint8_t *) data, len, s_exec_piece, x, NULL);
    if (rc == -1 || rc == 2)
        x->bad = true;
    return rc ? 1 : 0;              //  1: the exchange stops
}

//  One streaming exchange: method on path with the token, header (a line
//  ending "\r\n", or NULL) and the body (text, or in_size bytes of in);
//  the answer's body to fn as it comes, with *hc set meanwhile. The
//  status (with *err, caller frees, when the exchange broke off after
//  it), or 0 with *err.
static long s_exchange (ah_client_t *client, const char *method, const char *path, const char *header,
                        const char *text, FILE *in, int64_t in_size,
                        ah_httpresp_body_fn *fn, void *ud, ah_hc_t **hc, char **err)
{
    *err = NULL;
    char *url = ah_client_url_for (client, path);
    char *headers = ah_client_auth (client, header);
    long status = 0;
    if (!url || !headers)
        *err = strdup ("out of memory");
    else {
        ah_hc_req_t req = { .method = method, .url = url, .ca = ah_client_ca (client),
                            .headers = headers, .body = text, .body_size = text ? strlen (text) : 0,
                            .upload = in, .upload_size = in_size, .on_body = fn, .ud = ud };
        *hc = ah_hc_start (&req, err);
        if (*hc) {
            int rc;
            while ((rc = ah_hc_pump (*hc, -1, err)) == 0)
                ;
            status = ah_hc_status (*hc);
            ah_hc_destroy (hc);
        }
    }
    ah_client_auth_free (headers);
    free (url);
    return status;
}

//  POST body (JSON) to path; the records go to stdout/stderr as they come.
static int s_stream_call (ah_client_t *client, const char *path, const char *body, exec_rx_t *x)
{
    char *err = NULL;
    long code = s_exchange (client, "POST", path, "Content-Type: application/json\r\n", body, NULL, 0,
                            s_on_records, x, &x->hc, &err);
    int status = 0;
    if (code >= 300) {
        json_t *j = s_error_json (&x->err);
        char *why = ah_client_error (j, code);
        fprintf (stderr, "agenthold exec: %s\n", why ? why : "the server refused the command");
        free (why);
        json_decref (j);
        status = 1;
    }
    else if (x->bad) {
        fprintf (stderr, "agenthold exec: the server's answer is not a record stream\n");
        status = 1;
    }
    else if (err) {
        fprintf (stderr, "agenthold exec: %s: %s\n", ah_client_url (client), err);
        status = 1;
    }
    free (err);
    ah_buf_free (&x->err);
    return status;
}

int ah_cli_exec (int argc, char **argv, const char *config)
{
    const char *name = NULL, *timeout = NULL;
    int i = 0;
    for (; i < argc; i++) {
        const char *a = argv [i];
        if (!strcmp (a, "--help") || !strcmp (a, "-h")) {
            s_exec_usage (stdout);
            printf ("\nRun CMD under /bin/sh in NAME's sandbox (which must be running), print its\n"
                    "stdout and stderr to ours and exit with its status (128+N when signal N\n"
                    "ended it, 124 when it timed out). --timeout S: kill it after S seconds\n"
                    "(default 300). The words of CMD are quoted for the shell; a single word\n"
                    "is passed as it is (`agenthold exec a1 -- 'ls | wc -l'`).\n");
            return 0;
        }
        if (!strcmp (a, "--"))
            break;
        if (!strcmp (a, "--timeout") && i + 1 < argc)
            timeout = argv [++i];
        else if (!strncmp (a, "--timeout=", 10))
            timeout = a + 10;
        else if (!strcmp (a, "--config") && i + 1 < argc)
            config = argv [++i];
        else if (a [0] == '-') {
            fprintf (stderr, "agenthold exec: unknown option '%s'\n", a);
            s_exec_usage (stderr);
            return EXIT_USAGE;
        }
        else if (!name)
            name = a;
        else
            break;              //  the command starts without --
    }
    if (i < argc && !strcmp (argv [i], "--"))
        i++;
    if (!name || i >= argc) {
        fprintf (stderr, "agenthold exec: %s\n", !name ? "no agent named" : "no command after --");
        s_exec_usage (stderr);
        return EXIT_USAGE;
    }
    double t = 300;
    if (timeout) {
        char *end = NULL;
        t = strtod (timeout, &end);
        if (end == timeout || *end || !(t > 0) || t > 7 * 86400) {
            fprintf (stderr, "agenthold exec: --timeout wants seconds greater than 0, got '%s'\n", timeout);
            return EXIT_USAGE;
        }
    }
    char *cmd = calloc (1, MAX_CMD + 1);
    if (!cmd)
        return 1;
    if (argc - i == 1)
        snprintf (cmd, MAX_CMD + 1, "%s", argv [i]);
    else
        for (int k = i; k < argc; k++) {
            size_t n = strlen (cmd);
            if (k > i && n + 1 < MAX_CMD)
                cmd [n] = ' ', cmd [n + 1] = 0;
            if (s_quote (cmd, MAX_CMD, argv [k])) {
                fprintf (stderr, "agenthold exec: the command is longer than %d bytes\n", MAX_CMD);
                free (cmd);
                return EXIT_USAGE;
            }
        }
    ah_client_t *client = s_client ("exec", config);
    if (!client) {
        free (cmd);
        return 1;
    }
    char path [512] = "/api/v1/agents/";
    s_encode (path, sizeof path - 16, name, false);
    strcat (path, "/exec?stream=1");
    //  Without --timeout the server's ceiling applies (sandbox.max_exec_timeout)
    json_t *body = json_pack ("{s:s}", "cmd", cmd);
    if (timeout)
        json_object_set_new (body, "timeout", json_real (t));
    char *text = json_dumps (body, JSON_COMPACT);
    json_decref (body);
    free (cmd);
    exec_rx_t rx = { .status = -1 };
    int rc = s_stream_call (client, path, text, &rx);
    free (text);
    ah_buf_free (&rx.rec);
    ah_client_destroy (&client);
    fflush (stdout);
    if (rc)
        return 1;
    if (rx.error [0]) {
        char *why = ah_cmd_clean (strdup (rx.error));
        fprintf (stderr, "agenthold exec: %s\n", why ? why : "");
        free (why);
        return 1;
    }
    if (rx.status < 0 && !rx.signal) {
        fprintf (stderr, "agenthold exec: the answer ended without the command's exit status\n");
        return 1;
    }
    if (rx.timed_out) {
        fprintf (stderr, "agenthold exec: timed out after %g s\n", t);
        return 124;
    }
    if (rx.signal > 0)
        return 128 + rx.signal;
    return rx.status >= 0 && rx.status < 256 ? rx.status : 1;
}

//  --------------------------------------------------------------------
//  fs

static void s_fs_usage (FILE *out)
{
    fprintf (out,
        "usage: agenthold fs ls NAME [PATH] [--all] [--json]\n"
        "       agenthold fs get NAME PATH [LOCAL]     (LOCAL '-' is stdout)\n"
        "       agenthold fs put NAME PATH [LOCAL]     (LOCAL '-' is stdin)\n"
        "       agenthold fs tree NAME [PATH] [--all] [--json]\n"
        "       agenthold fs mkdir NAME PATH [-p]\n"
        "       agenthold fs rm NAME PATH [-r]\n");
}

typedef struct {
    ah_hc_t *hc;
    FILE *out;                      //  the local file (get)
    ah_buf_t err;                   //  an error answer's body (capped)
    bool failed_write;
} xfer_t;

static int s_on_body (void *ud, const uint8_t *data, size_t len)
{
    xfer_t *x = ud;
    if (s_error_answer (x->hc, &x->err, data, len))
        return 0;                   //  kept to print, not in the file
    if (x->out && fwrite (data, 1, len, x->out) != len) {
        x->failed_write = true;
        return 1;
    }
    return 0;
}

//  One streaming transfer; 0 ok, else prints why and returns 1.
static int s_transfer (ah_client_t *client, const char *method, const char *path,
                       FILE *in, int64_t in_size, FILE *out, const char *what)
{
    xfer_t x = { .out = out };
    char *err = NULL;
    long code = s_exchange (client, method, path, NULL, NULL, in, in_size, s_on_body, &x, &x.hc, &err);
    int status = 0;
    if (x.failed_write) {
        fprintf (stderr, "agenthold fs %s: cannot write the local file: %s\n", what, strerror (errno));
        status = 1;
    }
    else if (code >= 300) {
        json_t *j = s_error_json (&x.err);
        char *why = ah_client_error (j, code);
        fprintf (stderr, "agenthold fs %s: %s\n", what, why ? why : "the server refused the request");
        free (why);
        json_decref (j);
        status = 1;
    }
    else if (err) {
        fprintf (stderr, "agenthold fs %s: %s: %s\n", what, ah_client_url (client), err);
        status = 1;
    }
    free (err);
    ah_buf_free (&x.err);
    return status;
}

static const char *s_base (const char *path)
{
    const char *slash = strrchr (path, '/');
    return slash && slash [1] ? slash + 1 : path;
}

static int s_fs_get (ah_client_t *client, const char *name, const char *path, const char *local)
{
    if (!local)
        local = s_base (path);
    char *url = s_files_path (name, "file", path, "");
    if (!url)
        return 1;
    int status;
    if (!strcmp (local, "-"))
        status = s_transfer (client, "GET", url, NULL, -1, stdout, "get");
    else {
        //  Into LOCAL.part, renamed once whole: a failed download leaves
        //  no truncated LOCAL behind.
        size_t tlen = strlen (local) + 8;
        char *tmp = malloc (tlen);
        snprintf (tmp, tlen, "%s.part", local);
        FILE *f = fopen (tmp, "wb");
        if (!f) {
            fprintf (stderr, "agenthold fs get: cannot create %s: %s\n", tmp, strerror (errno));
            free (tmp);
            free (url);
            return 1;
        }
        status = s_transfer (client, "GET", url, NULL, -1, f, "get");
        if (fclose (f) && !status) {
            fprintf (stderr, "agenthold fs get: cannot write %s: %s\n", tmp, strerror (errno));
            status = 1;
        }
        if (!status && rename (tmp, local)) {
            fprintf (stderr, "agenthold fs get: cannot rename %s to %s: %s\n", tmp, local, strerror (errno));
            status = 1;
        }
        if (status)
            unlink (tmp);
        free (tmp);
    }
    free (url);
    return status;
}

static int s_fs_put (ah_client_t *client, const char *name, const char *path, const char *local)
{
    if (!local)
        local = s_base (path);
    FILE *f = strcmp (local, "-") ? fopen (local, "rb") : stdin;
    if (!f) {
        fprintf (stderr, "agenthold fs put: cannot open %s: %s\n", local, strerror (errno));
        return 1;
    }
    struct stat st;
    if (fstat (fileno (f), &st) || !S_ISREG (st.st_mode)) {
        fprintf (stderr, "agenthold fs put: %s is not a regular file (the API needs the size up front)\n", local);
        if (f != stdin)
            fclose (f);
        return 1;
    }
    char *url = s_files_path (name, "file", path, "");
    int status = url ? s_transfer (client, "PUT", url, f, (int64_t) st.st_size, NULL, "put") : 1;
    free (url);
    if (f != stdin)
        fclose (f);
    return status;
}

static int s_fs_ls (ah_client_t *client, const char *name, const char *path, bool all, bool as_json)
{
    char *url = s_files_path (name, "list", path, all ? "&all=true" : "");
    json_t *reply = url ? s_call ("fs ls", client, "GET", url, NULL, 0) : NULL;
    free (url);
    if (!reply)
        return 1;
    if (as_json)
        ah_cmd_print_json (reply);
    else {
        ah_cmd_clean_json (reply);
        size_t i;
        json_t *e;
        json_array_foreach (json_object_get (reply, "entries"), i, e) {
            const char *type = json_string_value (json_object_get (e, "type"));
            time_t mtime = (time_t) json_integer_value (json_object_get (e, "mtime"));
            struct tm tm;
            char when [32] = "-";
            if (gmtime_r (&mtime, &tm))
                strftime (when, sizeof when, "%Y-%m-%d %H:%M", &tm);
            printf ("%-7s %04o %12lld  %s  %s%s\n", type ? type : "?",
                    (unsigned) json_integer_value (json_object_get (e, "mode")) & 07777,
                    (long long) json_integer_value (json_object_get (e, "size")), when,
                    json_string_value (json_object_get (e, "name")),
                    type && !strcmp (type, "dir") ? "/" : "");
        }
        if (json_is_true (json_object_get (reply, "truncated")))
            fprintf (stderr, "agenthold fs ls: the listing was cut short\n");
    }
    json_decref (reply);
    return 0;
}

//  GET /api/v1/agents/NAME/tree?path=PATH[&all=true]: one path a line
//  (directories end in '/'), what cut it short on stderr.
static int s_fs_tree (ah_client_t *client, const char *name, const char *path, bool all, bool as_json)
{
    size_t size = 64 + 3 * strlen (name) + 3 * strlen (path);
    char *url = malloc (size);
    if (!url)
        return 1;
    snprintf (url, size, "/api/v1/agents/");
    s_encode (url, size, name, false);
    strcat (url, "/tree?path=");
    s_encode (url, size, path, false);
    if (all)
        strcat (url, "&all=true");
    json_t *reply = s_call ("fs tree", client, "GET", url, NULL, 0);
    free (url);
    if (!reply)
        return 1;
    if (as_json)
        ah_cmd_print_json (reply);
    else {
        size_t i;
        json_t *e;
        json_array_foreach (json_object_get (reply, "entries"), i, e) {
            const char *type = ah_cmd_jstr (e, "type", "?");
            char *shown = ah_cmd_clean (ah_cmd_strf ("%s", ah_cmd_jstr (e, "path", "?")));
            printf ("%s%s%s\n", shown ? shown : "?", !strcmp (type, "dir") ? "/" : "",
                    json_is_true (json_object_get (e, "uploaded")) ? "  (uploaded)" : "");
            free (shown);
        }
        json_array_foreach (json_object_get (reply, "skipped"), i, e) {
            char *shown = ah_cmd_clean (ah_cmd_strf ("%s: %s", ah_cmd_jstr (e, "path", "?"),
                                                     ah_cmd_jstr (e, "error", "?")));
            fprintf (stderr, "agenthold fs tree: skipped %s\n", shown ? shown : "?");
            free (shown);
        }
        if (json_is_true (json_object_get (reply, "depth_limit_reached")))
            fprintf (stderr, "agenthold fs tree: deeper than %lld levels: not shown\n",
                     (long long) json_integer_value (json_object_get (reply, "max_depth")));
        if (json_is_true (json_object_get (reply, "entries_limit_reached")))
            fprintf (stderr, "agenthold fs tree: more than %lld entries: the rest not shown\n",
                     (long long) json_integer_value (json_object_get (reply, "max_entries")));
    }
    json_decref (reply);
    return 0;
}

//  One fs operation: its options and positionals (NAME, PATH, LOCAL).
typedef struct {
    const char *name, *path, *local;
    bool all, as_json, parents, recursive;
} fs_args_t;

static int s_op_ls (ah_client_t *c, const fs_args_t *a)   { return s_fs_ls (c, a->name, a->path, a->all, a->as_json); }
static int s_op_tree (ah_client_t *c, const fs_args_t *a) { return s_fs_tree (c, a->name, a->path, a->all, a->as_json); }
static int s_op_get (ah_client_t *c, const fs_args_t *a)  { return s_fs_get (c, a->name, a->path, a->local); }
static int s_op_put (ah_client_t *c, const fs_args_t *a)  { return s_fs_put (c, a->name, a->path, a->local); }

//  mkdir and rm: one call each, nothing printed but a failure.
static int s_op_change (ah_client_t *c, const fs_args_t *a, bool mk)
{
    char *url = s_files_path (a->name, mk ? "mkdir" : "file", a->path,
                              mk ? (a->parents ? "&parents=1" : "") : (a->recursive ? "&recursive=1" : ""));
    json_t *reply = url ? s_call (mk ? "fs mkdir" : "fs rm", c, mk ? "POST" : "DELETE", url, NULL, 0) : NULL;
    int status = reply ? 0 : 1;
    json_decref (reply);
    free (url);
    return status;
}
static int s_op_mkdir (ah_client_t *c, const fs_args_t *a) { return s_op_change (c, a, true); }
static int s_op_rm (ah_client_t *c, const fs_args_t *a)    { return s_op_change (c, a, false); }

//  The operations, dispatched from here alone: how many positionals
//  each takes (the operation's name included).
static const struct {
    const char *op;
    int need, most;
    int (*run) (ah_client_t *c, const fs_args_t *a);
} s_fs_ops [] = {
    { "ls", 2, 3, s_op_ls },
    { "tree", 2, 3, s_op_tree },
    { "get", 3, 4, s_op_get },
    { "put", 3, 4, s_op_put },
    { "mkdir", 3, 3, s_op_mkdir },
    { "rm", 3, 3, s_op_rm },
};

int ah_cli_fs (int argc, char **argv, const char *config)
{
    const char *pos [4] = { 0 };
    int npos = 0;
    bool as_json = false, parents = false, recursive = false, all = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv [i];
        if (!strcmp (a, "--help") || !strcmp (a, "-h")) {
            s_fs_usage (stdout);
            printf ("\nFiles in NAME's sandbox home. ls, get and tree read a sleeping agent's\n"
                    "home without waking it; put, mkdir and rm need it running. PATH is relative\n"
                    "to the agent's home (/home/agent); absolute paths, '..' and symlinks that\n"
                    "lead out are refused. get and put stream (the file never sits in memory);\n"
                    "get writes LOCAL.part and renames it once whole; LOCAL defaults to PATH's\n"
                    "last name. put lands whole or not at all. tree lists breadth first, a few\n"
                    "levels and entries at most (the server's files.* settings), toolchain\n"
                    "folders (node_modules, .git, .venv, ...) left out of ls and tree unless\n"
                    "--all. -p: mkdir makes missing parents; -r: rm removes a directory and\n"
                    "what is in it. Also: --config FILE.\n");
            return 0;
        }
        if (!strcmp (a, "--json"))
            as_json = true;
        else if (!strcmp (a, "-p") || !strcmp (a, "--parents"))
            parents = true;
        else if (!strcmp (a, "-r") || !strcmp (a, "--recursive"))
            recursive = true;
        else if (!strcmp (a, "--all"))
            all = true;
        else if (!strcmp (a, "--config") && i + 1 < argc)
            config = argv [++i];
        else if (a [0] == '-' && a [1]) {
            fprintf (stderr, "agenthold fs: unknown option '%s'\n", a);
            s_fs_usage (stderr);
            return EXIT_USAGE;
        }
        else if (npos < 4)
            pos [npos++] = a;
        else {
            fprintf (stderr, "agenthold fs: unexpected argument '%s'\n", a);
            s_fs_usage (stderr);
            return EXIT_USAGE;
        }
    }
    const char *op = pos [0];
    size_t k = 0, nops = sizeof s_fs_ops / sizeof s_fs_ops [0];
    while (op && k < nops && strcmp (op, s_fs_ops [k].op))
        k++;
    bool known = op && k < nops;
    if (!known || npos < s_fs_ops [k].need || npos > s_fs_ops [k].most) {
        fprintf (stderr, "agenthold fs: %s\n", !op ? "no operation (ls, get, put, tree, mkdir, rm)"
                 : !known ? "unknown operation (ls, get, put, tree, mkdir, rm)" : "wrong number of arguments");
        s_fs_usage (stderr);
        return EXIT_USAGE;
    }
    ah_client_t *client = s_client ("fs", config);
    if (!client)
        return 1;
    fs_args_t args = { .name = pos [1], .path = pos [2] ? pos [2] : ".", .local = pos [3], .all = all,
                       .as_json = as_json, .parents = parents, .recursive = recursive };
    int status = s_fs_ops [k].run (client, &args);
    ah_client_destroy (&client);
    return status;
}
