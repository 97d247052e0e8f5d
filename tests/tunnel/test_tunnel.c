/*  tests/tunnel/test_tunnel.c: the tunnel actor alone on a real bus with a
    real SQLite file, fake "lifecycle" and "api" DEALERs, and two kinds of
    sandboxd: tests/tunnel/client.py (auth refusals, wrong versions, a
    peer that stops answering pings) and the real sandboxd library
    in-process (fs.write / fs.read round trips, flow control by ACK,
    connection loss, reconnect, kick).                                  */
#include "common/version.h"
#include "actors/tunnel.h"
#include "common/bus.h"
#include "common/log.h"
#include "common/msg.h"
#include "common/token.h"
#include "proto/channel.h"
#include "proto/yamux.h"
#include "sandboxd/sandboxd.h"
#include "config/config.h"
#include "store/store.h"
#include "../common/check.h"
#include "tunnel_test.h"
#include "tests/common/actor_probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define AGENT "a1b2c3d4e5f6"

static char s_url [128];
static char s_token [AH_TOKEN_HEX];
static int s_req = 1;


static char *s_client_end (FILE *f);

//  Run client.py to the end; its one result line (caller frees).
static char *s_client (const char *agent, const char *token, const char *mode, const char *arg)
{
    char cmd [1024];
    snprintf (cmd, sizeof cmd, "/usr/bin/python3 %s/tests/tunnel/client.py '%s' '%s' '%s' %s %s",
              AH_SOURCE_DIR, s_url, agent, token, mode, arg ? arg : "");
    return s_client_end (popen (cmd, "r"));
}


//  Nothing at all arrives on sock within ms.
static bool s_quiet (zsock_t *sock, int ms)
{
    zsock_set_rcvtimeo (sock, ms);
    ah_msg_t *m = ah_msg_recv (sock, true, NULL);
    if (m)
        fprintf (stderr, "unexpected %s\n", ah_msg_type (m));
    bool quiet = m == NULL;
    ah_msg_destroy (&m);
    return quiet;
}

//  Start client.py in the background; read its line with s_client_end.
static FILE *s_client_start (const char *mode, const char *arg)
{
    char cmd [1024];
    snprintf (cmd, sizeof cmd, "/usr/bin/python3 %s/tests/tunnel/client.py '%s' '%s' '%s' %s %s",
              AH_SOURCE_DIR, s_url, AGENT, s_token, mode, arg ? arg : "");
    return popen (cmd, "r");
}

static char *s_client_end (FILE *f)
{
    char line [256] = "";
    if (f) {
        if (!fgets (line, sizeof line, f))
            line [0] = 0;
        pclose (f);
    }
    line [strcspn (line, "\n")] = 0;
    return strdup (line);
}

static ah_msg_t *s_open_as (zsock_t *api, ah_msg_t *header, bool reader);

//  CHAN_OPEN with a header map; returns the REPLY.
static ah_msg_t *s_open (zsock_t *api, ah_msg_t *header)
{
    return s_open_as (api, header, false);
}

//  CHAN_OPEN on the agent's reader (or its sandbox); returns the REPLY.
static ah_msg_t *s_open_as (zsock_t *api, ah_msg_t *header, bool reader)
{
    uint8_t *raw = NULL;
    size_t size = 0;
    ah_msg_encode (header, &raw, &size);
    ah_msg_t *m = ah_msg_new ("CHAN_OPEN");
    int req = s_req++;
    ah_msg_set_int (m, "req", req);
    ah_msg_set_str (m, "agent_id", AGENT);
    ah_msg_set_raw (m, "header", raw, size);
    if (reader)
        ah_msg_set_bool (m, "reader", true);
    free (raw);
    ah_msg_send (&m, api, "tunnel");
    ah_msg_t *r = s_expect (api, "REPLY", 5000);
    if (r && ah_msg_int (r, "req", 0) != req)
        CHECK (false);
    return r;
}

static ah_msg_t *s_header (const char *ch, const char *path)
{
    ah_msg_t *h = ah_msg_new ("H");
    ah_msg_set_str (h, "ch", ch);
    if (path)
        ah_msg_set_str (h, "path", path);
    return h;
}

static bool s_hello (zsock_t *lifecycle)
{
    ah_msg_t *m = s_expect (lifecycle, "SANDBOX_HELLO", 5000);
    bool ok = m && streq (ah_msg_str (m, "agent_id"), AGENT);
    ah_msg_destroy (&m);
    return ok;
}

//  TUNNEL_SESSIONS: the connections whose hello succeeded, and all of
//  them, as "sessions/connections" ("" when there is no answer).
static void s_sessions (zsock_t *api, char *out, size_t size)
{
    ah_msg_t *m = ah_msg_new ("TUNNEL_SESSIONS");
    int req = s_req++;
    ah_msg_set_int (m, "req", req);
    ah_msg_send (&m, api, "tunnel");
    ah_msg_t *r = s_expect (api, "REPLY", 5000);
    out [0] = 0;
    if (r && ah_msg_int (r, "req", 0) == req && ah_msg_bool (r, "ok", false))
        snprintf (out, size, "%lld/%lld", (long long) ah_msg_int (r, "sessions", -1),
                  (long long) ah_msg_int (r, "connections", -1));
    ah_msg_destroy (&r);
}

//  A ping channel that must open: its chan (0 if not).
static int64_t s_open_ping (zsock_t *api)
{
    ah_msg_t *h = s_header ("ping", NULL);
    ah_msg_t *r = s_open (api, h);
    ah_msg_destroy (&h);
    int64_t chan = r && ah_msg_bool (r, "ok", false) ? ah_msg_int (r, "chan", 0) : 0;
    CHECK (chan > 0);
    ah_msg_destroy (&r);
    return chan;
}

static void s_send_chan (zsock_t *api, const char *type, int64_t chan)
{
    ah_msg_t *m = ah_msg_new (type);
    ah_msg_set_int (m, "chan", chan);
    ah_msg_send (&m, api, "tunnel");
}

static void s_ack (zsock_t *api, int64_t chan, size_t bytes)
{
    ah_msg_t *m = ah_msg_new ("CHAN_ACK");
    ah_msg_set_int (m, "chan", chan);
    ah_msg_set_int (m, "bytes", (int64_t) bytes);
    ah_msg_send (&m, api, "tunnel");
}

static ah_sandboxd_t *s_sandboxd (void)
{
    char home [300];
    snprintf (home, sizeof home, "%s/home", s_dir);
    ah_sandboxd_opts_t opts = {
        .agent_id = AGENT, .token = s_token, .tunnel_url = s_url, .home = home,
        .backoff_min_ms = 100, .backoff_max_ms = 400,
    };
    return ah_sandboxd_start (&opts);
}

//  Gather a channel's CHAN_DATA into buf (ACKing each), up to its
//  CHAN_CLOSE: true if CHAN_EOF came and CHAN_CLOSE had no error.
static bool s_collect (zsock_t *api, int64_t chan, uint8_t *buf, size_t cap, size_t *got)
{
    bool eof = false, closed = false, clean = false;
    while (!closed) {
        zsock_set_rcvtimeo (api, 5000);
        ah_msg_t *m = ah_msg_recv (api, true, NULL);
        if (!m)
            break;
        const char *t = ah_msg_type (m);
        if (ah_msg_int (m, "chan", -1) != chan)
            fprintf (stderr, "(skipped %s of another channel)\n", t);
        else if (streq (t, "CHAN_DATA")) {
            size_t n = 0;
            const void *d = ah_msg_bin (m, "data", &n);
            CHECK (n <= AH_TUNNEL_DATA_MAX);
            if (d && *got + n <= cap) {
                memcpy (buf + *got, d, n);
                *got += n;
            }
            s_ack (api, chan, n);
        }
        else if (streq (t, "CHAN_EOF"))
            eof = true;
        else if (streq (t, "CHAN_CLOSE")) {
            closed = true;
            clean = !ah_msg_has (m, "error");
        }
        ah_msg_destroy (&m);
    }
    return eof && closed && clean;
}

//  An fs.write's end: EOF; the trailer comes back as data, then EOF,
//  then CLOSE without error, and says ok and size.
static void s_write_end (zsock_t *api, int64_t chan, size_t size)
{
    s_send_chan (api, "CHAN_EOF", chan);
    uint8_t trailer [256];
    size_t tlen = 0;
    CHECK (s_collect (api, chan, trailer, sizeof trailer, &tlen));
    ah_msg_t *tr = NULL;
    size_t used = 0;
    const char *err = NULL;
    CHECK (ah_chan_header_decode (trailer, tlen, &tr, &used, &err) == 1);
    CHECK (tr && ah_msg_bool (tr, "ok", false) && ah_msg_int (tr, "size", 0) == (int64_t) size);
    ah_msg_destroy (&tr);
}

//  fs.write of data, then fs.read of it back (ACKing as a slow opener).
static void s_round_trip (zsock_t *api, const uint8_t *data, size_t size)
{
    ah_msg_t *h = s_header ("fs.write", "data.bin");
    ah_msg_t *r = s_open (api, h);
    ah_msg_destroy (&h);
    CHECK (r && ah_msg_bool (r, "ok", false));
    int64_t chan = r ? ah_msg_int (r, "chan", -1) : -1;
    CHECK (chan > 0);
    ah_msg_destroy (&r);
    //  Send with a 256 KiB credit, as an opener must.
    size_t sent = 0, acked = 0;
    while (sent < size) {
        while (sent < size && sent - acked < AH_TUNNEL_CREDIT) {
            size_t n = size - sent < AH_TUNNEL_DATA_MAX ? size - sent : AH_TUNNEL_DATA_MAX;
            ah_msg_t *m = ah_msg_new ("CHAN_DATA");
            ah_msg_set_int (m, "chan", chan);
            ah_msg_set_bin (m, "data", data + sent, n);
            ah_msg_send (&m, api, "tunnel");
            sent += n;
        }
        ah_msg_t *a = s_expect (api, "CHAN_ACK", 5000);
        if (!a) {
            CHECK (false);
            return;
        }
        acked += (size_t) ah_msg_int (a, "bytes", 0);
        ah_msg_destroy (&a);
    }
    s_write_end (api, chan, size);

    //  fs.read: no ACK at first: the yamux window must stop sandboxd.
    h = s_header ("fs.read", "data.bin");
    r = s_open (api, h);
    ah_msg_destroy (&h);
    CHECK (r && ah_msg_bool (r, "ok", false));
    chan = r ? ah_msg_int (r, "chan", -1) : -1;
    size_t rsize = 0;
    const void *rep = r ? ah_msg_raw (r, "reply", &rsize) : NULL;
    ah_msg_t *reply = rep ? ah_msg_decode ("R", rep, rsize, NULL) : NULL;
    CHECK (reply && ah_msg_int (reply, "size", 0) == (int64_t) size);
    ah_msg_destroy (&reply);
    ah_msg_destroy (&r);
    s_send_chan (api, "CHAN_EOF", chan);
    uint8_t *back = (uint8_t *) malloc (size);
    size_t got = 0;
    while (true) {
        zsock_set_rcvtimeo (api, 500);
        ah_msg_t *m = ah_msg_recv (api, true, NULL);
        if (!m)
            break;
        size_t n = 0;
        const void *d = ah_msg_bin (m, "data", &n);
        if (streq (ah_msg_type (m), "CHAN_DATA") && d && got + n <= size) {
            memcpy (back + got, d, n);
            got += n;
        }
        ah_msg_destroy (&m);
    }
    fprintf (stderr, "unacknowledged, sandboxd sent %zu bytes\n", got);
    CHECK (got > 0 && got <= AH_YAMUX_INITIAL_WINDOW);
    //  Now ACK as we go: everything arrives.
    s_ack (api, chan, got);
    CHECK (s_collect (api, chan, back, size, &got));
    CHECK (got == size);
    CHECK (got == size && memcmp (back, data, size) == 0);
    free (back);
}

//  Whether fd is still the pipe whose inode was ino (the tunnel closes
//  the read end it was handed when the channel goes).
static bool s_same_pipe (int fd, ino_t ino)
{
    struct stat st;
    return fstat (fd, &st) == 0 && S_ISFIFO (st.st_mode) && st.st_ino == ino;
}

static int64_t s_open_write (zsock_t *api, const char *path)
{
    ah_msg_t *h = s_header ("fs.write", path);
    ah_msg_t *r = s_open (api, h);
    ah_msg_destroy (&h);
    int64_t chan = r && ah_msg_bool (r, "ok", false) ? ah_msg_int (r, "chan", -1) : -1;
    CHECK (chan > 0);
    ah_msg_destroy (&r);
    return chan;
}

//  An upload as the api splices it (docs/messages.md, CHAN_DATA "pipe"):
//  the first `plain` bytes as bytes, the rest through a pipe whose read
//  end goes to the tunnel with the first pipe message; EOF right after
//  the last (it waits for the pipe's bytes). The file must be whole, the
//  read end closed by the tunnel once the channel is done.
static void s_pipe_write (zsock_t *api, const uint8_t *data, size_t size, size_t plain)
{
    int64_t chan = s_open_write (api, "piped.bin");
    int fds [2];
    CHECK (pipe2 (fds, O_NONBLOCK | O_CLOEXEC) == 0);
    fcntl (fds [1], F_SETPIPE_SZ, 1 << 20);
    size_t cap = (size_t) fcntl (fds [1], F_GETPIPE_SZ);
    size_t limit = cap < AH_TUNNEL_CREDIT ? cap : AH_TUNNEL_CREDIT;
    struct stat st;
    CHECK (fstat (fds [0], &st) == 0);
    size_t sent = 0, acked = 0;
    bool handed = false;
    while (sent < size) {
        while (sent < size && sent - acked < limit) {
            size_t n = size - sent < AH_TUNNEL_DATA_MAX ? size - sent : AH_TUNNEL_DATA_MAX;
            ah_msg_t *m = ah_msg_new ("CHAN_DATA");
            ah_msg_set_int (m, "chan", chan);
            if (sent < plain) {
                n = plain - sent < n ? plain - sent : n;
                ah_msg_set_bin (m, "data", data + sent, n);
            }
            else {
                if (n > limit - (sent - acked))
                    n = limit - (sent - acked);
                ssize_t w = write (fds [1], data + sent, n);
                if (w <= 0) {
                    ah_msg_destroy (&m);
                    break;          //  full: wait for an ACK
                }
                n = (size_t) w;
                ah_msg_set_int (m, "pipe", (int64_t) n);
                if (!handed)
                    ah_msg_set_int (m, "pipe_fd", fds [0]);
                handed = true;
            }
            ah_msg_send (&m, api, "tunnel");
            sent += n;
        }
        if (sent == size)
            break;
        ah_msg_t *a = s_expect (api, "CHAN_ACK", 5000);
        if (!a) {
            CHECK (false);
            break;
        }
        acked += (size_t) ah_msg_int (a, "bytes", 0);
        ah_msg_destroy (&a);
    }
    s_write_end (api, chan, size);
    char path [400];
    snprintf (path, sizeof path, "%s/home/piped.bin", s_dir);
    FILE *f = fopen (path, "rb");
    uint8_t *back = (uint8_t *) malloc (size + 1);
    size_t got = f ? fread (back, 1, size + 1, f) : 0;
    if (f)
        fclose (f);
    CHECK (got == size && memcmp (back, data, size) == 0);
    free (back);
    s_sessions (api, (char [32]) { 0 }, 32);   //  a round trip: the channel's end was handled
    CHECK (handed == (plain < size));
    if (handed)
        CHECK (!s_same_pipe (fds [0], st.st_ino));
    else
        close (fds [0]);
    close (fds [1]);
}

//  Pipe messages the tunnel must refuse, each closing what it was handed:
//  more than one message's worth, and a pipe for a channel that is gone.
static void s_pipe_refusals (zsock_t *api)
{
    int64_t chan = s_open_write (api, "refused.bin");
    int fds [2];
    CHECK (pipe2 (fds, O_NONBLOCK | O_CLOEXEC) == 0);
    struct stat st;
    CHECK (fstat (fds [0], &st) == 0);
    ah_msg_t *m = ah_msg_new ("CHAN_DATA");
    ah_msg_set_int (m, "chan", chan);
    ah_msg_set_int (m, "pipe", (int64_t) AH_TUNNEL_DATA_MAX + 1);
    ah_msg_set_int (m, "pipe_fd", fds [0]);
    ah_msg_send (&m, api, "tunnel");
    m = s_expect (api, "CHAN_CLOSE", 5000);
    CHECK (m && ah_msg_int (m, "chan", 0) == chan && ah_msg_str (m, "error")
           && strstr (ah_msg_str (m, "error"), "beyond its credit"));
    ah_msg_destroy (&m);
    s_sessions (api, (char [32]) { 0 }, 32);
    CHECK (!s_same_pipe (fds [0], st.st_ino));
    close (fds [1]);
    //  A pipe for a channel that is gone is closed at once.
    CHECK (pipe2 (fds, O_NONBLOCK | O_CLOEXEC) == 0);
    CHECK (fstat (fds [0], &st) == 0);
    m = ah_msg_new ("CHAN_DATA");
    ah_msg_set_int (m, "chan", chan);       //  reset above: gone
    ah_msg_set_int (m, "pipe", 10);
    ah_msg_set_int (m, "pipe_fd", fds [0]);
    ah_msg_send (&m, api, "tunnel");
    m = s_expect (api, "CHAN_CLOSE", 5000);
    CHECK (m && streq (ah_msg_str (m, "error"), "no such channel"));
    ah_msg_destroy (&m);
    s_sessions (api, (char [32]) { 0 }, 32);
    CHECK (!s_same_pipe (fds [0], st.st_ino));
    close (fds [1]);
    //  The opener leaves while its pipe holds bytes the window has not
    //  taken: the read end is closed with the channel.
    chan = s_open_write (api, "left.bin");
    CHECK (pipe2 (fds, O_NONBLOCK | O_CLOEXEC) == 0);
    CHECK (fstat (fds [0], &st) == 0);
    static uint8_t zeros [64 << 10];
    CHECK (write (fds [1], zeros, sizeof zeros) == (ssize_t) sizeof zeros);
    m = ah_msg_new ("CHAN_DATA");
    ah_msg_set_int (m, "chan", chan);
    ah_msg_set_int (m, "pipe", (int64_t) sizeof zeros);
    ah_msg_set_int (m, "pipe_fd", fds [0]);
    ah_msg_send (&m, api, "tunnel");
    s_send_chan (api, "CHAN_CLOSE", chan);
    s_sessions (api, (char [32]) { 0 }, 32);   //  a round trip: both were handled
    CHECK (!s_same_pipe (fds [0], st.st_ino));
    close (fds [1]);
    //  The connection is intact: a plain write still works.
    uint8_t small [1000];
    memset (small, 'p', sizeof small);
    s_pipe_write (api, small, sizeof small, sizeof small);
}

int main (void)
{
    char home [300];
    if (s_setup ("tunnel", home, sizeof home))
        return 1;

    ah_token_new (s_token);
    char hash [AH_TOKEN_HEX];
    ah_token_hash (s_token, hash);
    s_sql ("INSERT INTO agents (id, name, image, cpus, memory_mb, idle_minutes, created_at) "
           "VALUES ('%s', 'alpha', 'img', 1, 512, 15, 1)", AGENT);
    s_sql ("INSERT INTO sandboxes (agent_id, state, image, cpus, memory_mb, boot_token_hash, updated_at) "
           "VALUES ('%s', 'starting', 'img', 1, 512, '%s', 1)", AGENT, hash);

    ah_bus_args_t bargs = { .tap_endpoint = NULL };
    zactor_t *bus = ah_actor_new (&ah_bus_actor, &bargs, NULL);
    zsock_t *lifecycle = ah_bus_connect ("lifecycle");
    zsock_t *api = ah_bus_connect ("api");
    zsock_t *sleeper = ah_bus_connect ("sleeper");
    ah_config_t *config = s_config ();
    //  The default configuration (the docker driver, tunnel_listen auto):
    //  the unix socket alone, no TCP listener (PORT says 0). Started
    //  and stopped before the test's own (it takes the bus name over).
    {
        char dir2 [300];
        snprintf (dir2, sizeof dir2, "%s/d2", s_dir);
        mkdir (dir2, 0700);
        ah_config_t *c2 = ah_config_new_defaults ();
        free (c2->data_dir);
        c2->data_dir = strdup (dir2);
        ah_tunnel_args_t t2 = { .config = c2, .db_path = s_db };
        zactor_t *second = ah_actor_new (&ah_tunnel_actor, &t2, NULL);
        CHECK (second != NULL);
        if (second) {
            zstr_send (second, "PORT");
            char *p2 = zstr_recv (second);
            CHECK (p2 && streq (p2, "0"));
            free (p2);
            char sock2 [400];
            snprintf (sock2, sizeof sock2, "%s/run/tunnel.sock", dir2);
            struct stat st2;
            CHECK (lstat (sock2, &st2) == 0 && S_ISSOCK (st2.st_mode));
            zactor_destroy (&second);
        }
        ah_config_destroy (&c2);
    }
    ah_tunnel_args_t targs = { .config = config, .db_path = s_db, .ping_interval_ms = 200,
                               .ping_timeout_ms = 2000, .open_timeout_ms = 2000,
                               .stats_interval_ms = 300, .connect_wait_ms = 2000 };
    zactor_t *tunnel = ah_actor_new (&ah_tunnel_actor, &targs, NULL);
    CHECK (tunnel != NULL);
    //  The unix socket sandboxes without a network dial: there, a socket.
    char sock [400];
    snprintf (sock, sizeof sock, "%s/run/tunnel.sock", s_dir);
    struct stat sock_st;
    CHECK (lstat (sock, &sock_st) == 0 && S_ISSOCK (sock_st.st_mode));
    zstr_send (tunnel, "PORT");
    char *port = zstr_recv (tunnel);
    CHECK (port && atoi (port) > 0);
    snprintf (s_url, sizeof s_url, "ws://127.0.0.1:%s/tunnel", port ? port : "0");
    free (port);
    //  What it cannot serve is refused at once (the lws loop serves the bus too).
    actor_probe_refusals ("tunnel");


    //  1. Refusals at the upgrade.
    char forged [AH_TOKEN_HEX];
    ah_token_new (forged);
    char *res = s_client (AGENT, forged, "auth", NULL);
    CHECK_STR (res, "STATUS 401");
    free (res);
    res = s_client (AGENT, s_token, "noagent", NULL);
    CHECK_STR (res, "STATUS 401");
    free (res);
    res = s_client (AGENT, s_token, "noauth", NULL);
    CHECK_STR (res, "STATUS 401");
    free (res);
    res = s_client ("ffffffffffff", s_token, "auth", NULL);
    CHECK_STR (res, "STATUS 401");
    free (res);
    //  Not an agent id at all (common/ident.h): refused before any lookup.
    res = s_client ("A1B2C3D4E5F6", s_token, "auth", NULL);
    CHECK_STR (res, "STATUS 401");
    free (res);
    //  A stale token: the hash was replaced by a newer boot's.
    char newer [AH_TOKEN_HEX], newer_hash [AH_TOKEN_HEX];
    ah_token_new (newer);
    ah_token_hash (newer, newer_hash);
    s_sql ("UPDATE sandboxes SET boot_token_hash = '%s' WHERE agent_id = '%s'", newer_hash, AGENT);
    res = s_client (AGENT, s_token, "auth", NULL);
    CHECK_STR (res, "STATUS 401");
    free (res);
    s_sql ("UPDATE sandboxes SET boot_token_hash = '%s' WHERE agent_id = '%s'", hash, AGENT);
    //  A sleeping sandbox: right token, wrong state.
    s_sql ("UPDATE sandboxes SET state = 'sleeping' WHERE agent_id = '%s'", AGENT);
    res = s_client (AGENT, s_token, "auth", NULL);
    CHECK_STR (res, "STATUS 403");
    free (res);
    s_sql ("UPDATE sandboxes SET state = 'starting' WHERE agent_id = '%s'", AGENT);
    //  No lifecycle traffic from refused connections.
    CHECK (s_quiet (lifecycle, 200));
    //  The right token gets in (the client leaves at once: lost, not fatal).
    res = s_client (AGENT, s_token, "auth", NULL);
    CHECK_STR (res, "OK");
    free (res);
    ah_msg_t *m = s_expect (lifecycle, "TUNNEL_LOST", 5000);
    CHECK (m && !ah_msg_bool (m, "fatal", true));
    ah_msg_destroy (&m);

    //  2. Version mismatch: both versions named, the connection closed.
    res = s_client (AGENT, s_token, "version", "2");
    CHECK (res && strstr (res, "CLOSED goaway=0"));
    free (res);
    m = s_expect (lifecycle, "TUNNEL_LOST", 5000);
    CHECK (m && ah_msg_bool (m, "fatal", false));
    const char *reason = m ? ah_msg_str (m, "reason") : NULL;
    char want [512];
    snprintf (want, sizeof want, "agent '%s' runs agenthold sandboxd 0.0.9 (tunnel protocol 2); "
              "this server speaks tunnel protocol 1: deploy the sandboxd of agenthold %s (it ships "
              "next to agenthold on the host that runs the sandbox) and restart the agent",
              AGENT, AH_VERSION);
    CHECK (reason && streq (reason, want));
    if (reason && !streq (reason, want))
        fprintf (stderr, "  reason: %s\n", reason);
    ah_msg_destroy (&m);
    res = s_client (AGENT, s_token, "eversion", NULL);
    CHECK (res && strstr (res, "CLOSED"));
    free (res);
    m = s_expect (lifecycle, "TUNNEL_LOST", 5000);
    reason = m ? ah_msg_str (m, "reason") : NULL;
    CHECK (m && ah_msg_bool (m, "fatal", false));
    CHECK (reason && strstr (reason, "99") && strstr (reason, "protocol 1") && strstr (reason, "deploy"));
    ah_msg_destroy (&m);
    CHECK (s_quiet (lifecycle, 100));           //  no SANDBOX_HELLO for either

    //  3. A peer that stops answering pings: its channel fails, lifecycle hears.
    FILE *silent = s_client_start ("silent", NULL);
    m = s_expect (lifecycle, "SANDBOX_HELLO", 5000);
    CHECK (m && streq (ah_msg_str (m, "agent_id"), AGENT));
    ah_msg_destroy (&m);
    ah_msg_t *h = s_header ("ping", NULL);
    ah_msg_t *r = s_open (api, h);
    ah_msg_destroy (&h);
    CHECK (r && ah_msg_bool (r, "ok", false) && ah_msg_int (r, "chan", 0) > 0);
    int64_t chan = r ? ah_msg_int (r, "chan", 0) : 0;
    ah_msg_destroy (&r);
    m = s_expect (api, "CHAN_CLOSE", 5000);
    CHECK (m && ah_msg_int (m, "chan", 0) == chan);
    CHECK (m && ah_msg_str (m, "error") && streq (ah_msg_str (m, "error"), "sandbox connection lost"));
    ah_msg_destroy (&m);
    m = s_expect (lifecycle, "TUNNEL_LOST", 3000);
    CHECK (m && !ah_msg_bool (m, "fatal", true));
    ah_msg_destroy (&m);
    res = s_client_end (silent);
    CHECK (res && strstr (res, "CLOSED"));
    free (res);
    //  No connection now, the sandbox starting (or running): CHAN_OPEN
    //  waits connect_wait_ms for sandboxd to (re)dial, then says why.
    h = s_header ("ping", NULL);
    int64_t opened = zclock_mono ();
    r = s_open (api, h);
    int64_t waited = zclock_mono () - opened;
    ah_msg_destroy (&h);
    CHECK (r && !ah_msg_bool (r, "ok", true) && ah_msg_int (r, "status", 0) == 409);
    CHECK (r && strstr (ah_msg_str (r, "error"), "is starting but its sandboxd is not connected")
             && strstr (ah_msg_str (r, "error"), "waited 2000 ms"));
    CHECK (waited >= 1900 && waited < 4500);
    ah_msg_destroy (&r);
    //  An open made while sandboxd is away goes to it once it says hello
    //  (a redial after a server restart), not a 409.
    s_sql ("UPDATE sandboxes SET state = 'running' WHERE agent_id = '%s'", AGENT);
    for (int i = 0; i < 3; i++) {
        h = s_header ("ping", NULL);
        uint8_t *raw = NULL;
        size_t raw_size = 0;
        ah_msg_encode (h, &raw, &raw_size);
        ah_msg_destroy (&h);
        m = ah_msg_new ("CHAN_OPEN");
        ah_msg_set_int (m, "req", 9000 + i);
        ah_msg_set_str (m, "agent_id", AGENT);
        ah_msg_set_raw (m, "header", raw, raw_size);
        free (raw);
        ah_msg_send (&m, api, "tunnel");
    }
    CHECK (s_quiet (api, 150));                 //  waiting, not refused
    FILE *late = s_client_start ("ok", NULL);
    CHECK (s_hello (lifecycle));
    for (int i = 0; i < 3; i++) {
        r = s_expect (api, "REPLY", 5000);
        CHECK (r && ah_msg_bool (r, "ok", false) && ah_msg_int (r, "chan", 0) > 0
                 && ah_msg_int (r, "req", 0) >= 9000 && ah_msg_int (r, "req", 0) < 9003);
        if (r && !ah_msg_bool (r, "ok", false))
            fprintf (stderr, "  waiting open: %s\n", ah_msg_str (r, "error"));
        if (r)
            s_send_chan (api, "CHAN_CLOSE", ah_msg_int (r, "chan", 0));
        ah_msg_destroy (&r);
    }
    s_sql ("UPDATE sandboxes SET state = 'starting' WHERE agent_id = '%s'", AGENT);

    //  3b. A newer connection replaces the older; the older's channels fail.
    FILE *first = s_client_start ("ok", NULL);
    CHECK (s_hello (lifecycle));
    res = s_client_end (late);                  //  replaced by first
    CHECK (res && strstr (res, "CLOSED"));
    free (res);
    chan = s_open_ping (api);
    FILE *second = s_client_start ("mute", NULL);
    CHECK (s_hello (lifecycle));
    m = s_expect (api, "CHAN_CLOSE", 5000);
    CHECK (m && ah_msg_int (m, "chan", 0) == chan);
    CHECK (m && ah_msg_str (m, "error") && streq (ah_msg_str (m, "error"), "tunnel reconnected"));
    ah_msg_destroy (&m);
    res = s_client_end (first);
    CHECK (res && strstr (res, "CLOSED goaway=0"));
    free (res);
    //  The tunnel counts what it holds (the row says starting, not running):
    //  one session, the replaced connection gone.
    char count [64];
    s_sessions (api, count, sizeof count);
    CHECK (streq (count, "1/1"));
    //  The newer one never answers a channel header: 504 after the timeout.
    h = s_header ("ping", NULL);
    int64_t t0 = zclock_mono ();
    r = s_open (api, h);
    ah_msg_destroy (&h);
    CHECK (r && ah_msg_int (r, "status", 0) == 504);
    CHECK (r && strstr (ah_msg_str (r, "error"), "did not answer"));
    CHECK (zclock_mono () - t0 >= 1900);
    ah_msg_destroy (&r);
    m = ah_msg_new ("TUNNEL_KICK");
    ah_msg_set_str (m, "agent_id", AGENT);
    ah_msg_send (&m, lifecycle, "tunnel");
    res = s_client_end (second);
    CHECK (res && strstr (res, "CLOSED goaway=0"));
    free (res);
    CHECK (s_quiet (lifecycle, 200));           //  replaced and kicked: no TUNNEL_LOST
    s_sessions (api, count, sizeof count);
    CHECK (streq (count, "0/0"));

    //  3b'. lifecycle says the sandbox is going to sleep: the tunnel closes.
    first = s_client_start ("ok", NULL);
    CHECK (s_hello (lifecycle));
    m = ah_msg_new ("SANDBOX_STATE");
    ah_msg_set_str (m, "agent_id", AGENT);
    ah_msg_set_str (m, "state", "running");
    ah_msg_send (&m, lifecycle, "tunnel");          //  no effect
    m = ah_msg_new ("SANDBOX_STATE");
    ah_msg_set_str (m, "agent_id", AGENT);
    ah_msg_set_str (m, "state", "stopping");
    ah_msg_send (&m, lifecycle, "tunnel");
    res = s_client_end (first);
    CHECK (res && strstr (res, "CLOSED goaway=0"));
    free (res);
    CHECK (s_quiet (lifecycle, 200));

    //  3c. Bad traffic: a text message, an oversized message, not yamux.
    const char *bad [][3] = { { "text", "code=1003", "protocol error" },
                              { "big", "code=1009", "too big" },
                              { "garbage", "CLOSED", "yamux protocol error" } };
    for (int i = 0; i < 3; i++) {
        res = s_client (AGENT, s_token, bad [i][0], NULL);
        CHECK (res && strstr (res, bad [i][1]));
        free (res);
        m = s_expect (lifecycle, "TUNNEL_LOST", 5000);
        CHECK (m && strstr (ah_msg_str (m, "reason"), bad [i][2]));
        ah_msg_destroy (&m);
    }

    //  4. The real sandboxd: round trips with flow control.
    ah_sandboxd_t *sd = s_sandboxd ();
    CHECK (sd != NULL);
    CHECK (s_hello (lifecycle));
    size_t size = 3u << 20;
    uint8_t *data = (uint8_t *) malloc (size);
    for (size_t i = 0; i < size; i++)
        data [i] = (uint8_t) (i * 2654435761u >> 13);
    s_round_trip (api, data, size);
    //  4b. Spliced uploads: bytes, then a pipe; refusals.
    size_t big = (9u << 20) + 12345;
    uint8_t *bigdata = (uint8_t *) malloc (big);
    for (size_t i = 0; i < big; i++)
        bigdata [i] = (uint8_t) (i * 2246822519u >> 11);
    s_pipe_write (api, bigdata, big, 300000);
    s_pipe_write (api, bigdata, 70000, 0);
    free (bigdata);
    s_pipe_refusals (api);
    //  CPU samples for the sleeper, from sandboxd's stats channel.
    m = s_expect (sleeper, "AGENT_STATS", 3000);
    CHECK (m && streq (ah_msg_str (m, "agent_id"), AGENT));
    CHECK (m && ah_msg_int (m, "cpu_ns", -1) >= 0 && ah_msg_int (m, "at_ns", 0) > 0);
    ah_msg_destroy (&m);
    //  A refused channel: REPLY not ok with sandboxd's code and reason.
    h = s_header ("fs.read", "missing.txt");
    r = s_open (api, h);
    ah_msg_destroy (&h);
    CHECK (r && !ah_msg_bool (r, "ok", true) && ah_msg_int (r, "status", 0) == 404);
    CHECK (r && ah_msg_str (r, "code") && streq (ah_msg_str (r, "code"), "ENOENT"));
    ah_msg_destroy (&r);

    //  5. The connection dies under an open channel; a reconnect works.
    h = s_header ("exec", NULL);
    ah_msg_set_str (h, "cmd", "sleep 30");
    r = s_open (api, h);
    ah_msg_destroy (&h);
    CHECK (r && ah_msg_bool (r, "ok", false));
    chan = r ? ah_msg_int (r, "chan", 0) : 0;
    ah_msg_destroy (&r);
    ah_sandboxd_stop (&sd);
    m = s_expect (api, "CHAN_CLOSE", 5000);
    CHECK (m && ah_msg_int (m, "chan", 0) == chan);
    CHECK (m && ah_msg_str (m, "error") && streq (ah_msg_str (m, "error"), "sandbox connection lost"));
    ah_msg_destroy (&m);
    m = s_expect (lifecycle, "TUNNEL_LOST", 5000);
    CHECK (m != NULL);
    ah_msg_destroy (&m);
    sd = s_sandboxd ();
    CHECK (s_hello (lifecycle));
    chan = s_open_ping (api);
    //  ping: both FIN after the headers; then the channel is gone, cleanly.
    s_send_chan (api, "CHAN_EOF", chan);
    m = s_expect (api, "CHAN_EOF", 5000);
    CHECK (m && ah_msg_int (m, "chan", 0) == chan);
    ah_msg_destroy (&m);
    m = s_expect (api, "CHAN_CLOSE", 5000);
    CHECK (m && ah_msg_int (m, "chan", 0) == chan && !ah_msg_has (m, "error"));
    ah_msg_destroy (&m);


    //  6. Kick: the sandbox is stopping; sandboxd's redials are refused.
    h = s_header ("exec", NULL);
    ah_msg_set_str (h, "cmd", "sleep 30");
    r = s_open (api, h);
    ah_msg_destroy (&h);
    chan = r ? ah_msg_int (r, "chan", 0) : 0;
    ah_msg_destroy (&r);
    s_sql ("UPDATE sandboxes SET state = 'stopping' WHERE agent_id = '%s'", AGENT);
    m = ah_msg_new ("TUNNEL_KICK");
    ah_msg_set_str (m, "agent_id", AGENT);
    ah_msg_send (&m, lifecycle, "tunnel");
    m = s_expect (api, "CHAN_CLOSE", 5000);
    CHECK (m && ah_msg_int (m, "chan", 0) == chan && ah_msg_str (m, "error"));
    ah_msg_destroy (&m);
    CHECK (s_quiet (lifecycle, 1000));          //  no TUNNEL_LOST, no HELLO
    h = s_header ("ping", NULL);
    r = s_open (api, h);
    ah_msg_destroy (&h);
    CHECK (r && ah_msg_int (r, "status", 0) == 409);
    CHECK (r && strstr (ah_msg_str (r, "error"), "state stopping"));
    ah_msg_destroy (&r);
    ah_sandboxd_stop (&sd);
    free (data);

    //  7. Readers of a sleeping agent's home (docs/tunnel.md, "Readers"):
    //  a reader token is good for that agent's reads alone, never as its
    //  sandbox, and lifecycle never hears of it as one.
    s_sql ("UPDATE sandboxes SET state = 'sleeping' WHERE agent_id = '%s'", AGENT);
    char rtoken [AH_TOKEN_HEX], rhash [AH_TOKEN_HEX];
    ah_token_new (rtoken);
    ah_token_hash (rtoken, rhash);
    res = s_client (AGENT, rtoken, "auth", NULL);
    CHECK_STR (res, "STATUS 401");              //  not allowed yet
    free (res);
    m = ah_msg_new ("READER_ALLOW");
    ah_msg_set_str (m, "agent_id", AGENT);
    ah_msg_set_str (m, "hash", rhash);
    ah_msg_send (&m, lifecycle, "tunnel");
    //  The reader token for another agent: refused.
    res = s_client ("ffffffffffff", rtoken, "auth", NULL);
    CHECK_STR (res, "STATUS 401");
    free (res);
    //  A sandboxd that is not a reader (its hello says mode "sandbox")
    //  with the reader token: closed, and no SANDBOX_HELLO ever.
    ah_sandboxd_opts_t ropts = {
        .agent_id = AGENT, .token = rtoken, .tunnel_url = s_url, .home = home,
        .backoff_min_ms = 100, .backoff_max_ms = 400,
    };
    sd = ah_sandboxd_start (&ropts);
    m = s_expect (lifecycle, "READER_LOST", 5000);
    CHECK (m && strstr (ah_msg_str (m, "reason"), "a reader token, but sandboxd's hello says mode 'sandbox'"));
    ah_msg_destroy (&m);
    ah_sandboxd_stop (&sd);
    //  The agent's boot token with a reader's hello (a running agent): closed too.
    s_sql ("UPDATE sandboxes SET state = 'running' WHERE agent_id = '%s'", AGENT);
    ah_sandboxd_opts_t bopts = ropts;
    bopts.token = s_token;
    bopts.read_only = true;
    sd = ah_sandboxd_start (&bopts);
    m = s_expect (lifecycle, "TUNNEL_LOST", 5000);
    CHECK (m && ah_msg_bool (m, "fatal", false)
           && strstr (ah_msg_str (m, "reason"), "came with the sandbox's boot token"));
    ah_msg_destroy (&m);
    ah_sandboxd_stop (&sd);
    s_sql ("UPDATE sandboxes SET state = 'sleeping' WHERE agent_id = '%s'", AGENT);
    while ((m = s_expect (lifecycle, "SANDBOX_HELLO", 300)))
        CHECK (false);                          //  never the sandbox's hello
    //  The reader itself: READER_HELLO, not SANDBOX_HELLO.
    ropts.read_only = true;
    sd = ah_sandboxd_start (&ropts);
    m = s_expect (lifecycle, "READER_HELLO", 5000);
    CHECK (m && streq (ah_msg_str (m, "agent_id"), AGENT));
    ah_msg_destroy (&m);
    //  The agent's own channels never reach its reader.
    h = s_header ("ping", NULL);
    r = s_open (api, h);
    ah_msg_destroy (&h);
    CHECK (r && ah_msg_int (r, "status", 0) == 409);
    ah_msg_destroy (&r);
    //  On the reader: reads only, refused by the tunnel itself (whatever
    //  runs at the other end).
    const char *refused [] = { "pty", "exec", "fs.write", "fs.mkdir", "fs.remove", "stats", "hello" };
    for (size_t i = 0; i < sizeof refused / sizeof refused [0]; i++) {
        h = s_header (refused [i], "x");
        r = s_open_as (api, h, true);
        ah_msg_destroy (&h);
        CHECK (r && ah_msg_int (r, "status", 0) == 403 && !ah_msg_bool (r, "ok", true));
        CHECK (r && strstr (ah_msg_str (r, "error"), "a reader carries reads only"));
        ah_msg_destroy (&r);
    }
    h = s_header ("fs.list", ".");
    r = s_open_as (api, h, true);
    ah_msg_destroy (&h);
    CHECK (r && ah_msg_bool (r, "ok", false));
    chan = r ? ah_msg_int (r, "chan", 0) : 0;
    ah_msg_destroy (&r);
    s_send_chan (api, "CHAN_CLOSE", chan);
    //  Revoked: the connection goes (no READER_LOST: lifecycle asked),
    //  the redial is refused, and nothing opens on a reader any more.
    m = ah_msg_new ("READER_REVOKE");
    ah_msg_set_str (m, "agent_id", AGENT);
    ah_msg_send (&m, lifecycle, "tunnel");
    CHECK (s_quiet (lifecycle, 1000));
    h = s_header ("fs.list", ".");
    r = s_open_as (api, h, true);
    ah_msg_destroy (&h);
    CHECK (r && ah_msg_int (r, "status", 0) == 409);
    ah_msg_destroy (&r);
    res = s_client (AGENT, rtoken, "auth", NULL);
    CHECK_STR (res, "STATUS 401");
    free (res);
    ah_sandboxd_stop (&sd);

    zactor_destroy (&tunnel);
    zsock_destroy (&api);
    zsock_destroy (&sleeper);
    zsock_destroy (&lifecycle);
    zactor_destroy (&bus);
    ah_config_destroy (&config);
    return s_teardown ();
}
