/*  cli/turn.c: `agenthold turn NAME [--lease S] -- CMD...` (see turn.h,
    docs/cli.md). Starts a turn (POST /api/v1/agents/NAME/turns: it also
    wakes a sleeping agent and waits until it runs), runs CMD here with
    our stdin, stdout and stderr, renews the lease every lease/3 while CMD
    runs, and ends the turn when CMD exits or when we are told to stop
    (SIGINT, SIGTERM, SIGHUP: passed on to CMD first unless the terminal
    sent it to CMD as well). A turn whose holder
    dies without ending it expires with its lease, so nothing here must
    survive us.

    One thread. The signal handler only records the signal (the one
    piece of process-wide state, as signals are); the loop below acts on
    it.                                                                */
#include "cli/http.h"
#include "cli/turn.h"
#include "cli/client.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE  2
#define POLL_MS     100
#define GRACE_MS    10000           //  after passing a signal on, before SIGKILL
#define START_TIMEOUT_S 180         //  a wake may take the server's 120 s

static volatile sig_atomic_t s_signal, s_pass_on;

//  A signal from the terminal (Ctrl-C) reaches CMD by itself, as CMD is
//  in our process group: only one sent to us alone (kill) is passed on,
//  so CMD never sees the same Ctrl-C twice.
static void s_on_signal (int sig, siginfo_t *info, void *context)
{
    (void) context;
    s_signal = sig;
    if (!info || info->si_code == SI_USER || info->si_code == SI_QUEUE)
        s_pass_on = 1;
}

static int64_t s_now_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void s_usage (FILE *out)
{
    fprintf (out, "usage: agenthold turn NAME [--lease S] [--config FILE] -- CMD [ARG...]\n");
}

//  POST/DELETE on a turn; 0 ok. *turn_id (caller frees) from a start.
static int s_turn_call (ah_client_t *client, const char *method, const char *path,
                        long lease_ms, char **turn_id, bool quiet)
{
    json_t *body = lease_ms > 0 ? json_pack ("{s:I}", "lease_ms", (json_int_t) lease_ms) : NULL;
    json_t *reply = NULL;
    char *err = NULL;
    long status = ah_client_call (client, method, path, body, START_TIMEOUT_S, &reply, &err);
    json_decref (body);
    int rc = 0;
    if (status == 0 || status >= 400) {
        char *why = status && !quiet ? ah_client_error (reply, status) : NULL;
        if (!quiet)
            fprintf (stderr, "agenthold turn: %s %s: %s\n", method, path,
                     why ? why : err ? err : "cannot reach the server");
        free (why);
        rc = -1;
    }
    else if (turn_id) {
        const char *id = json_string_value (json_object_get (reply, "turn_id"));
        *turn_id = id ? strdup (id) : NULL;
        if (!*turn_id) {
            fprintf (stderr, "agenthold turn: the server's answer has no turn_id\n");
            rc = -1;
        }
    }
    free (err);
    json_decref (reply);
    return rc;
}

int ah_cli_turn (int argc, char **argv, const char *config)
{
    const char *name = NULL;
    long lease_s = 60;
    int i = 0;
    for (; i < argc; i++) {
        if (!strcmp (argv [i], "--")) {
            i++;
            break;
        }
        if (!strcmp (argv [i], "--help") || !strcmp (argv [i], "-h")) {
            s_usage (stdout);
            return 0;
        }
        if ((!strcmp (argv [i], "--lease") || !strcmp (argv [i], "--config")) && i + 1 < argc) {
            const char *value = argv [++i];
            if (!strcmp (argv [i - 1], "--config"))
                config = value;
            else {
                char *end = NULL;
                errno = 0;
                lease_s = strtol (value, &end, 10);
                if (errno || end == value || *end || lease_s < 3 || lease_s > 3600) {
                    fprintf (stderr, "agenthold turn: --lease wants whole seconds from 3 to 3600, got '%s'\n", value);
                    return EXIT_USAGE;
                }
            }
        }
        else if (argv [i][0] == '-') {
            fprintf (stderr, "agenthold turn: unknown option '%s'\n", argv [i]);
            s_usage (stderr);
            return EXIT_USAGE;
        }
        else if (!name)
            name = argv [i];
        else {
            fprintf (stderr, "agenthold turn: put the command after '--' (got '%s')\n", argv [i]);
            return EXIT_USAGE;
        }
    }
    if (!name || i >= argc) {
        fprintf (stderr, "agenthold turn: %s\n", !name ? "which agent?" : "no command after '--'");
        s_usage (stderr);
        return EXIT_USAGE;
    }
    char **cmd = argv + i;

    char *err = NULL;
    ah_client_t *client = ah_client_new (config, true, &err);
    if (!client) {
        fprintf (stderr, "agenthold turn: %s\n", err ? err : "cannot reach the server");
        free (err);
        return 1;
    }
    //  Signals from here on end the turn; before the turn exists they
    //  would only kill us, which is fine.
    struct sigaction sa;
    memset (&sa, 0, sizeof sa);
    sa.sa_sigaction = s_on_signal;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset (&sa.sa_mask);
    sigaction (SIGINT, &sa, NULL);
    sigaction (SIGTERM, &sa, NULL);
    sigaction (SIGHUP, &sa, NULL);

    char *escaped = ah_hc_escape (name, false);
    char path [600];
    snprintf (path, sizeof path, "/api/v1/agents/%s/turns", escaped ? escaped : "");
    free (escaped);
    char *turn = NULL;
    long lease_ms = lease_s * 1000;
    if (s_turn_call (client, "POST", path, lease_ms, &turn, false)) {
        ah_client_destroy (&client);
        return 1;
    }
    char renew [200], end [200];
    snprintf (renew, sizeof renew, "/api/v1/turns/%s/renew", turn);
    snprintf (end, sizeof end, "/api/v1/turns/%s", turn);

    int status = 1;
    fflush (NULL);
    pid_t pid = s_signal ? -1 : fork ();
    if (pid == 0) {
        //  The child: default signal dispositions, then CMD.
        signal (SIGINT, SIG_DFL);
        signal (SIGTERM, SIG_DFL);
        signal (SIGHUP, SIG_DFL);
        execvp (cmd [0], cmd);
        fprintf (stderr, "agenthold turn: cannot run '%s': %s\n", cmd [0], strerror (errno));
        _exit (errno == ENOENT ? 127 : 126);
    }
    if (pid < 0 && !s_signal)
        fprintf (stderr, "agenthold turn: cannot fork: %s\n", strerror (errno));
    int64_t next_renew = s_now_ms () + lease_ms / 3, killed_at = 0;
    int passed = 0;
    while (pid > 0) {
        int wstatus;
        pid_t got = waitpid (pid, &wstatus, WNOHANG);
        if (got == pid) {
            status = WIFEXITED (wstatus) ? WEXITSTATUS (wstatus)
                   : WIFSIGNALED (wstatus) ? 128 + WTERMSIG (wstatus) : 1;
            break;
        }
        if (got < 0 && errno != EINTR) {
            fprintf (stderr, "agenthold turn: waitpid: %s\n", strerror (errno));
            break;
        }
        int sig = s_signal;
        if (sig && sig != passed) {
            passed = sig;
            if (s_pass_on)
                kill (pid, sig);
            s_pass_on = 0;
            killed_at = s_now_ms ();
        }
        if (killed_at && s_now_ms () - killed_at > GRACE_MS) {
            kill (pid, SIGKILL);
            killed_at = 0;
        }
        if (s_now_ms () >= next_renew) {
            //  A lost renewal (the server away for a while) is retried at
            //  the next third; the lease covers two misses.
            if (s_turn_call (client, "POST", renew, lease_ms, NULL, false) == 0)
                next_renew = s_now_ms () + lease_ms / 3;
            else
                next_renew = s_now_ms () + lease_ms / 6;
        }
        struct timespec ts = { 0, POLL_MS * 1000000L };
        nanosleep (&ts, NULL);
    }
    //  An expired lease is already over: no message for that.
    s_turn_call (client, "DELETE", end, 0, NULL, true);
    free (turn);
    ah_client_destroy (&client);
    if (pid <= 0 && s_signal)
        status = 128 + s_signal;
    return status;
}

char *ah_cli_sleeps_in (const char *sleeps_at)
{
    struct tm tm;
    memset (&tm, 0, sizeof tm);
    const char *rest = sleeps_at ? strptime (sleeps_at, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
    if (!rest)
        return strdup ("-");
    time_t at = timegm (&tm);
    long left = (long) difftime (at, time (NULL));
    char text [32];
    if (left <= 0)
        snprintf (text, sizeof text, "now");
    else if (left < 60)
        snprintf (text, sizeof text, "in %lds", left);
    else if (left < 3600)
        snprintf (text, sizeof text, "in %ldm", (left + 30) / 60);
    else
        snprintf (text, sizeof text, "in %ldh%ldm", left / 3600, (left % 3600) / 60);
    return strdup (text);
}
