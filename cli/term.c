/*  cli/term.c: `agenthold term NAME` (see term.h, docs/cli.md): our own
    terminal in raw mode on the API's terminal WebSocket
    (/api/v1/agents/NAME/terminal, docs/api.md). Keystrokes go as binary
    messages, the window size as a text message {"cols","rows"} at start
    and on SIGWINCH; output comes as binary messages; the server closes
    with "the shell exited with status N" and we exit with N.

    The WebSocket is proto/ws.c over one TCP connection, through TLS
    (cli/tls.c) when the server is https. One thread, one poll loop over the socket, our input and a
    self-pipe: signal handlers only write the signal's number to it, the
    loop acts on it. Our input is read only while less than OUT_MAX waits
    for the server. The terminal's settings are restored on every way
    out: the shell's exit, an error, SIGINT/SIGTERM/SIGHUP/SIGQUIT, and
    atexit.

    A terminal that lasts (issue 29, docs/api.md "Terminals"): --attach
    ID attaches to one (?terminal=ID), --new makes one first (POST
    .../terminals, its id said on stderr). Leaving it does not end it:
    Ctrl-] detaches, and so does the end of our input (after
    DETACH_LINGER_MS more of its output). `agenthold terms NAME` lists
    an agent's terminals.                                               */
#include "cli/http.h"
#include "cli/term.h"
#include "cli/client.h"
#include "cli/cmd.h"
#include "proto/ws.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE  2
#define IN_CHUNK    4096
#define OUT_MAX     (1u << 20)      //  bytes queued for the server before we stop reading input
#define READ_MAX    (1u << 20)      //  bytes read from the server per loop turn
#define CONNECT_MS  10000
#define DETACH_KEY  0x1d            //  Ctrl-]: leave a lasting terminal running
#define DETACH_LINGER_MS 1500       //  output still shown after our input ended (lasting terminal)

//  The saved terminal: process-wide like the terminal itself; touched by
//  the one thread (and atexit on that thread).
static struct termios s_saved;
static bool s_raw;
static int s_sigpipe [2] = { -1, -1 };

static void s_restore (void)
{
    if (s_raw) {
        tcsetattr (STDIN_FILENO, TCSAFLUSH, &s_saved);
        s_raw = false;
    }
}

static void s_on_signal (int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char) sig;
    if (write (s_sigpipe [1], &b, 1) < 0) {
        //  The pipe is full: a signal of that kind is already waiting.
    }
    errno = saved;
}

static void s_usage (FILE *out)
{
    fprintf (out, "usage: agenthold term NAME [--attach ID | --new] [--config FILE]\n");
}

static int s_write_all (int fd, const void *data, size_t size)
{
    const uint8_t *p = data;
    while (size > 0) {
        ssize_t w = write (fd, p, size);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            struct pollfd pf = { fd, POLLOUT, 0 };
            poll (&pf, 1, 1000);
            continue;
        }
        if (w <= 0)
            return -1;
        p += w;
        size -= (size_t) w;
    }
    return 0;
}

typedef struct {
    int  exit_status;               //  -1 until the close says
    bool closed;                    //  the server closed the terminal
    bool failed;                    //  our output could not be written
    const char *id;                 //  a terminal that lasts, else NULL
} term_t;

//  The terminal's output: binary messages, in pieces as they come.
static void s_on_message (void *ud, int opcode, const uint8_t *data, size_t size, bool last)
{
    term_t *t = ud;
    if (opcode == AH_WS_BIN && size && !t->failed && s_write_all (STDOUT_FILENO, data, size))
        t->failed = true;
}

//  The server's close: the shell's status in the reason, or why not.
static void s_on_close (void *ud, unsigned code, const char *reason)
{
    term_t *t = ud;
    long v;
    const char *s;
    if (code == 1000 && (s = strstr (reason, "exited with status ")) && sscanf (s + 19, "%ld", &v) == 1)
        t->exit_status = (int) (v & 0xFF);
    else if (code == 1000 && (s = strstr (reason, "by signal ")) && sscanf (s + 10, "%ld", &v) == 1)
        t->exit_status = 128 + (int) v;
    else {
        s_restore ();
        char *why = ah_cmd_clean (strdup (*reason ? reason : "no reason given"));
        fprintf (stderr, "\nagenthold term: the terminal closed (%u): %s\n", code, why ? why : "");
        free (why);
        t->exit_status = 1;
    }
    t->closed = true;
}

static void s_send_size (ah_ws_t *ws)
{
    struct winsize wsz;
    if (ioctl (STDIN_FILENO, TIOCGWINSZ, &wsz) || wsz.ws_col == 0 || wsz.ws_row == 0)
        return;
    char msg [64];
    int n = snprintf (msg, sizeof msg, "{\"cols\":%u,\"rows\":%u}", wsz.ws_col, wsz.ws_row);
    ah_ws_send (ws, AH_WS_TEXT, msg, (size_t) n);
}

//  Percent-encodes s into buf (for the agent's name in the path);
//  empty when it does not fit.
static void s_encode (char *buf, size_t size, const char *s)
{
    char *e = ah_hc_escape (s, false);
    snprintf (buf, size, "%s", e && strlen (e) < size ? e : "");
    free (e);
}

//  The terminal's WebSocket, upgraded; NULL when it could not open
//  (said why: the server's own words when it refused).
static ah_ws_t *s_open (ah_client_t *client, const char *name, term_t *t)
{
    const char *base = ah_client_url (client);
    char ename [512], eid [200] = "", path [800];
    s_encode (ename, sizeof ename, name);
    if (t->id)
        s_encode (eid, sizeof eid, t->id);
    struct winsize wsz = { .ws_col = 80, .ws_row = 24 };
    if (ioctl (STDIN_FILENO, TIOCGWINSZ, &wsz) || !wsz.ws_col || !wsz.ws_row)
        wsz.ws_col = 80, wsz.ws_row = 24;
    snprintf (path, sizeof path, "/api/v1/agents/%s/terminal?cols=%u&rows=%u%s%s", ename, wsz.ws_col,
              wsz.ws_row, t->id ? "&terminal=" : "", eid);
    char *full = ah_client_url_for (client, path);
    ah_ws_url_t url;
    const char *uerr = "out of memory";
    int bad = full ? ah_ws_url_parse (full, &url, &uerr) : -1;
    free (full);
    if (bad) {
        fprintf (stderr, "agenthold term: bad server URL %s: %s\n", base, uerr);
        return NULL;
    }
    char err [512] = "";
    ah_ws_io_t io;
    if (ah_hc_connect (&url, ah_client_ca (client), CONNECT_MS, &io, err, sizeof err)) {
        fprintf (stderr, "agenthold term: cannot connect to %s: %s\n", base, err);
        return NULL;
    }
    ah_ws_opts_t opts = { .on_message = s_on_message, .on_close = s_on_close, .ud = t };
    ah_ws_t *ws = ah_ws_new (&io, &opts);
    if (!ws)
        return NULL;
    char *auth = malloc (strlen (ah_client_token (client)) + 32);
    if (auth)
        sprintf (auth, "Authorization: Bearer %s\r\n", ah_client_token (client));
    else
        snprintf (err, sizeof err, "out of memory");
    //  Opening a terminal may wake the agent first: no time limit here.
    int rc = auth ? ah_ws_handshake (ws, &url, auth, -1, -1, err, sizeof err) : -1;
    if (auth)
        memset (auth, 0, strlen (auth));
    free (auth);
    if (rc == 0)
        return ws;
    int status = ah_ws_status (ws);
    //  The refusal's body says why ({"error": ...}).
    json_t *body = json_loads (ah_ws_body (ws), 0, NULL);
    char *msg = json_is_string (json_object_get (body, "error")) ? ah_client_error (body, status) : NULL;
    json_decref (body);
    if (status == 0 && strstr (err, "closed the connection"))
        fprintf (stderr, "agenthold term: the server refused the terminal (it closed the "
                 "connection; its log says why)\n");
    else if (status != 101 && msg)
        fprintf (stderr, "agenthold term: %s\n", msg);
    else if (status != 101 && status != 0)
        fprintf (stderr, "agenthold term: the server refused the terminal (HTTP %d)\n", status);
    else
        fprintf (stderr, "agenthold term: %s\n", err);
    free (msg);
    ah_ws_destroy (&ws);
    return NULL;
}

//  ah_ws_read said the connection is over: the shell's status when the
//  server closed the terminal, else 1 (said why).
static int s_ended (ah_ws_t *ws, term_t *t)
{
    ah_ws_flush (ws);               //  our answer to the close, best effort
    if (t->closed)
        return t->exit_status;
    s_restore ();
    fprintf (stderr, "\nagenthold term: %s\n", ah_ws_error (ws));
    return 1;
}

//  The loop: input to the server, output to ours, signals. Returns the
//  exit status.
//  Leave a lasting terminal running: close our side, say how to return.
static int s_detach (ah_ws_t *ws, term_t *t)
{
    ah_ws_close (ws, 1000, "detached");
    ah_ws_flush (ws);
    s_restore ();
    fprintf (stderr, "\nagenthold term: detached; terminal %s runs on (--attach %s)\n", t->id, t->id);
    return 0;
}

static int s_run (ah_ws_t *ws, term_t *t)
{
    bool in_open = true;
    int64_t linger_until = 0;       //  a lasting terminal whose input ended: detach then
    uint8_t in [IN_CHUNK];
    if (ah_ws_read (ws, READ_MAX))  //  what came with the upgrade
        return s_ended (ws, t);
    while (!t->failed) {
        int wait = -1;
        if (linger_until) {
            struct timespec ts;
            clock_gettime (CLOCK_MONOTONIC, &ts);
            int64_t now = (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
            if (now >= linger_until)
                return s_detach (ws, t);
            wait = (int) (linger_until - now);
        }
        bool room = ah_ws_pending (ws) < OUT_MAX;
        struct pollfd pf [3] = {
            { ah_ws_fd (ws), POLLIN | (ah_ws_pending (ws) ? POLLOUT : 0), 0 },
            { s_sigpipe [0], POLLIN, 0 },
            { in_open && room ? STDIN_FILENO : -1, POLLIN, 0 },
        };
        if (poll (pf, 3, wait) < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        unsigned char sig;
        while (pf [1].revents && read (s_sigpipe [0], &sig, 1) == 1) {
            if (sig == SIGWINCH) {
                s_send_size (ws);
                continue;
            }
            //  Told to stop: say goodbye (the server hangs the shell up).
            ah_ws_close (ws, 1000, NULL);
            ah_ws_flush (ws);
            s_restore ();
            fprintf (stderr, "\nagenthold term: stopped by signal %d\n", sig);
            return 128 + sig;
        }
        if (pf [2].revents) {
            ssize_t r = read (STDIN_FILENO, in, sizeof in);
            if (r > 0 && t->id && s_raw && memchr (in, DETACH_KEY, (size_t) r))
                return s_detach (ws, t);
            if (r > 0)
                ah_ws_send (ws, AH_WS_BIN, in, (size_t) r);
            else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
                in_open = false;    //  our input ended: the shell goes on until it exits
                if (t->id) {        //  ... and a lasting terminal is left to it
                    struct timespec ts;
                    clock_gettime (CLOCK_MONOTONIC, &ts);
                    linger_until = (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + DETACH_LINGER_MS;
                }
            }
        }
        if (ah_ws_flush (ws)) {
            s_restore ();
            fprintf (stderr, "\nagenthold term: lost the connection to the server\n");
            return 1;
        }
        if ((pf [0].revents & (POLLIN | POLLHUP | POLLERR)) && ah_ws_read (ws, READ_MAX))
            return s_ended (ws, t);
    }
    return 1;                       //  our own output failed
}

//  One call (POST with an empty object); the reply when it answered
//  want, else NULL having said why (the server's own words).
static json_t *s_call (ah_client_t *client, const char *method, const char *path, long want)
{
    json_t *reply = NULL, *body = strcmp (method, "POST") == 0 ? json_object () : NULL;
    char *err = NULL;
    long code = ah_client_call (client, method, path, body, 0, &reply, &err);
    json_decref (body);
    if (code == want)
        return reply;
    char *why = code ? ah_client_error (reply, code) : NULL;
    fprintf (stderr, "agenthold term: %s\n", why ? why : err ? err : "cannot reach the server");
    free (why);
    free (err);
    json_decref (reply);
    return NULL;
}

int ah_cli_term (int argc, char **argv, const char *config)
{
    const char *name = NULL, *attach = NULL;
    bool make = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp (argv [i], "--help") || !strcmp (argv [i], "-h")) {
            s_usage (stdout);
            printf ("\nA shell in NAME's sandbox on this terminal (raw mode), as the agent's\n"
                    "user. Opening it wakes a sleeping agent and waits until it runs. The\n"
                    "window size follows ours (SIGWINCH). Exits with the shell's status; the\n"
                    "terminal's settings are restored on every way out. Input that is not a\n"
                    "terminal is passed as it is (`echo 'ls; exit' | agenthold term a1`).\n"
                    "\n"
                    "--attach ID: a terminal that lasts (agenthold terms NAME lists them): its\n"
                    "screen first, then live output; the shell outlives us. --new: make one\n"
                    "and attach (its id on stderr). Ctrl-] detaches, as does the end of our\n"
                    "input; exits 0 then.\n");
            return 0;
        }
        if (!strcmp (argv [i], "--config") && i + 1 < argc)
            config = argv [++i];
        else if (!strcmp (argv [i], "--attach") && i + 1 < argc)
            attach = argv [++i];
        else if (!strcmp (argv [i], "--new"))
            make = true;
        else if (argv [i][0] == '-') {
            fprintf (stderr, "agenthold term: unknown option '%s'\n", argv [i]);
            s_usage (stderr);
            return EXIT_USAGE;
        }
        else if (!name)
            name = argv [i];
        else {
            fprintf (stderr, "agenthold term: unexpected argument '%s'\n", argv [i]);
            s_usage (stderr);
            return EXIT_USAGE;
        }
    }
    if (!name) {
        fprintf (stderr, "agenthold term: no agent named\n");
        s_usage (stderr);
        return EXIT_USAGE;
    }
    char *err = NULL;
    ah_client_t *client = ah_client_new (config, true, &err);
    if (!client) {
        fprintf (stderr, "agenthold term: %s\n", err ? err : "cannot reach the server");
        free (err);
        return 1;
    }
    //  A refused upgrade is a dropped connection (browsers could not read
    //  an HTTP answer anyway): ask first, so that a wrong name or token
    //  gets the server's own words.
    char path [600] = "/api/v1/agents/";
    s_encode (path + strlen (path), sizeof path - strlen (path), name);
    json_t *reply = s_call (client, "GET", path, 200);
    if (!reply) {
        ah_client_destroy (&client);
        return 1;
    }
    json_decref (reply);
    char made [64] = "";
    if (make && !attach) {
        char tpath [700];
        snprintf (tpath, sizeof tpath, "%s/terminals", path);
        reply = s_call (client, "POST", tpath, 201);
        const char *id = json_string_value (json_object_get (reply, "id"));
        if (!id) {
            json_decref (reply);
            ah_client_destroy (&client);
            return 1;
        }
        snprintf (made, sizeof made, "%s", id);
        json_decref (reply);
        fprintf (stderr, "agenthold term: terminal %s\n", made);
        attach = made;
    }
    term_t t = { .exit_status = -1, .id = attach };
    ah_ws_t *ws = s_open (client, name, &t);
    ah_client_destroy (&client);
    if (!ws)
        return 1;
    if (pipe2 (s_sigpipe, O_CLOEXEC | O_NONBLOCK)) {
        fprintf (stderr, "agenthold term: pipe: %s\n", strerror (errno));
        ah_ws_destroy (&ws);
        return 1;
    }
    struct sigaction sa = { .sa_handler = s_on_signal };
    sigemptyset (&sa.sa_mask);
    int sigs [] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH };
    for (size_t i = 0; i < sizeof sigs / sizeof sigs [0]; i++)
        sigaction (sigs [i], &sa, NULL);
    signal (SIGPIPE, SIG_IGN);
    bool tty = isatty (STDIN_FILENO);
    if (tty && tcgetattr (STDIN_FILENO, &s_saved) == 0) {
        struct termios raw = s_saved;
        cfmakeraw (&raw);
        atexit (s_restore);
        if (tcsetattr (STDIN_FILENO, TCSAFLUSH, &raw) == 0)
            s_raw = true;
    }
    int status = s_run (ws, &t);
    s_restore ();
    if (status < 0)
        status = t.exit_status >= 0 ? t.exit_status : 1;
    ah_ws_destroy (&ws);
    return status;
}

//  ---------------------------------------------------------------------
//  agenthold terms NAME: the agent's terminals

static void s_print_terms (json_t *list)
{
    static const char *const header [] = { "ID", "STATE", "COLS", "ROWS", "CLIENTS", "CREATED", "TITLE" };
    static const char *const keys [] = { "id", "state", "cols", "rows", "clients", "created_at", "title" };
    ah_cmd_print_objects (list, header, keys, 7);
}

int ah_cli_terms (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    return ah_cmd_agent_list (c, argc, argv, co, "/terminals", "terminals", s_print_terms);
}
