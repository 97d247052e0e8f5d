/*  sandboxd/port.c: the port and ports channels (docs/tunnel.md): a TCP
    connection to a port of the sandbox's own loopback, carried as the
    stream's plain bytes both ways, and the list of the ports that
    listen there (issue 30: a sandbox's web servers reached through the
    server).

    port: {"ch": "port", "port": 1..65535}. sandboxd connects to
    127.0.0.1:PORT (then [::1]:PORT when nothing listens on the first),
    without blocking: the reply {"ok": true, "address"} comes once the
    connection is made, or the refusal (ECONNREFUSED, ETIMEDOUT, ...)
    when it cannot be. Then the stream's bytes go to the socket and the
    socket's to the stream, each as its reader takes them: the opener's
    bytes stay in the yamux window until the socket takes them, and the
    socket is read only while the window to the opener has room, so
    neither side buffers more than a window. The opener's FIN shuts the
    socket's writing side; the socket's end FINs the stream; a socket
    error resets it.

    ports: {"ch": "ports"} → {"ok": true, "ports": [{"port", "address"}]}:
    the TCP sockets in LISTEN in this network namespace (/proc/net/tcp
    and tcp6) bound to the loopback or to every address, the ones the
    port channel reaches; at most PORTS_MAX, by port.                  */
#include "sandboxd/chan_int.h"
#include "common/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <msgpack.h>
#include <poll.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PORTS_MAX       1024
#define CONNECT_MS      10000       //  a connect that has not finished by then fails

//  A non-blocking connect to the loopback of one family: the socket
//  (connected or in progress), or -errno.
static int s_connect (int family, int port)
{
    int fd = socket (family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_storage sa = { 0 };
    socklen_t len;
    if (family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *) &sa;
        in->sin_family = AF_INET;
        in->sin_port = htons ((uint16_t) port);
        in->sin_addr.s_addr = htonl (INADDR_LOOPBACK);
        len = sizeof *in;
    }
    else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *) &sa;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons ((uint16_t) port);
        in6->sin6_addr = in6addr_loopback;
        len = sizeof *in6;
    }
    if (connect (fd, (struct sockaddr *) &sa, len) == 0 || errno == EINPROGRESS)
        return fd;
    int e = errno;
    close (fd);
    return -e;
}

static void s_connected (ah_sbd_session_t *self, chan_t *ch)
{
    ch->port_connecting = false;
    ch->deadline = 0;
    int one = 1;
    setsockopt (ch->file, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ah_msg_t *reply = ah_msg_new ("reply");
    ah_msg_set_bool (reply, "ok", true);
    ah_msg_set_str (reply, "address", ch->port_family == AF_INET ? "127.0.0.1" : "::1");
    ah_sbd_send_header (self, ch, reply);
    ah_msg_destroy (&reply);
}

void ah_sbd_port (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req)
{
    int64_t port = ah_msg_int (req, "port", 0);
    if (port < 1 || port > 65535) {
        ah_sbd_refuse (self, ch, "EINVAL", "port: \"port\" must be a whole number from 1 to 65535");
        return;
    }
    ch->port = (int) port;
    ch->port_family = AF_INET;
    int fd = s_connect (AF_INET, ch->port);
    if (fd == -ECONNREFUSED) {
        ch->port_family = AF_INET6;
        fd = s_connect (AF_INET6, ch->port);
    }
    if (fd < 0) {
        ah_sbd_refuse (self, ch, ah_sbd_code (-fd), "nothing answers on port %d of the sandbox's "
                       "loopback: %s", ch->port, strerror (-fd));
        return;
    }
    ch->kind = K_PORT;
    ch->file = fd;
    ch->port_connecting = true;
    ch->deadline = ah_sbd_now () + CONNECT_MS;
}

//  The connect finished (the socket was writable): made, or refused.
static void s_connect_done (ah_sbd_session_t *self, chan_t *ch)
{
    int e = 0;
    socklen_t len = sizeof e;
    if (getsockopt (ch->file, SOL_SOCKET, SO_ERROR, &e, &len) < 0)
        e = errno;
    if (e == ECONNREFUSED && ch->port_family == AF_INET) {
        //  Nothing on 127.0.0.1: perhaps on ::1 alone.
        close (ch->file);
        ch->file = -1;
        ch->port_family = AF_INET6;
        int fd = s_connect (AF_INET6, ch->port);
        if (fd >= 0) {
            ch->file = fd;
            return;
        }
        e = -fd;
    }
    if (e) {
        close (ch->file);
        ch->file = -1;
        ah_sbd_refuse (self, ch, ah_sbd_code (e), "nothing answers on port %d of the sandbox's "
                       "loopback: %s", ch->port, strerror (e));
        return;
    }
    s_connected (self, ch);
}

size_t ah_sbd_port_in (ah_sbd_session_t *self, chan_t *ch)
{
    (void) self;
    if (ch->file < 0 || ch->port_connecting)
        return 0;
    size_t used = 0, have = ah_buf_size (&ch->in);
    const uint8_t *in = ah_buf_head (&ch->in);
    while (used < have) {
        ssize_t w = send (ch->file, in + used, have - used, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            break;
        if (w <= 0) {
            ah_sbd_reset (self, ch, "the port's connection failed while being written");
            return used;
        }
        used += (size_t) w;
    }
    return used;
}

void ah_sbd_port_eof_check (chan_t *ch, size_t left)
{
    if (ch->kind == K_PORT && ch->peer_eof && !left && !ch->port_shut && ch->file >= 0
    &&  !ch->port_connecting) {
        shutdown (ch->file, SHUT_WR);
        ch->port_shut = true;
    }
}

//  The socket's bytes onto the stream while the window allows.
static void s_pump (ah_sbd_session_t *self, chan_t *ch)
{
    int rounds = 16;
    while (!ch->gone && !ch->port_eof && ch->file >= 0 && ah_sbd_out_idle (ch) && rounds-- > 0
           && self->env.backlog (self->env.ud) < AH_SBD_BACKLOG_MAX) {
        uint32_t win = ah_yamux_send_window (self->yamux, ch->id);
        if (win == 0)
            return;
        size_t want = win < S_CHUNK ? win : S_CHUNK;
        uint8_t *p = ah_buf_reserve (&ch->out, want);
        if (!p) {
            ah_sbd_reset (self, ch, "out of memory");
            return;
        }
        ssize_t r = recv (ch->file, p, want, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EAGAIN)
            return;
        if (r < 0) {
            ah_sbd_reset (self, ch, "the port's connection failed while being read");
            return;
        }
        if (r == 0) {
            ch->port_eof = true;
            ch->want_fin = true;
            ah_sbd_flush (self, ch);
            return;
        }
        ah_buf_commit (&ch->out, (size_t) r);
        ah_sbd_flush (self, ch);
    }
}

void ah_sbd_port_poll (ah_sbd_session_t *self, chan_t *ch, bool can_send, int *timeout_ms,
                       void (*add) (ah_sbd_session_t *, int, short, chan_t *, kept_t *, role_t))
{
    if (ch->file < 0)
        return;
    if (ch->port_connecting) {
        add (self, ch->file, POLLOUT, ch, NULL, R_SOCK);
        int64_t d = ch->deadline - ah_sbd_now ();
        if (d < 0)
            d = 0;
        if (*timeout_ms < 0 || d < *timeout_ms)
            *timeout_ms = (int) d;
        return;
    }
    short events = 0;
    if (can_send && !ch->port_eof)
        events |= POLLIN;
    if (ah_buf_size (&ch->in) > 0)
        events |= POLLOUT;
    if (events)
        add (self, ch->file, events, ch, NULL, R_SOCK);
}

bool ah_sbd_port_event (ah_sbd_session_t *self, chan_t *ch, short revents)
{
    if (ch->file < 0)
        return false;
    if (ch->port_connecting) {
        s_connect_done (self, ch);
        return false;
    }
    if (revents & (POLLIN | POLLHUP | POLLERR))
        s_pump (self, ch);
    return !ch->gone && ch->file >= 0 && (revents & (POLLOUT | POLLERR));
}

void ah_sbd_port_timers (ah_sbd_session_t *self, chan_t *ch, int64_t now)
{
    if (ch->kind == K_PORT && ch->port_connecting && ch->deadline && now >= ch->deadline) {
        close (ch->file);
        ch->file = -1;
        ch->port_connecting = false;
        ah_sbd_refuse (self, ch, "ETIMEDOUT", "port %d of the sandbox's loopback did not accept "
                       "within %d ms", ch->port, CONNECT_MS);
    }
}

//  ---------------------------------------------------------------------
//  ports

typedef struct {
    int port;
    char address [INET6_ADDRSTRLEN];
} listen_t;

static int s_by_port (const void *a, const void *b)
{
    const listen_t *x = a, *y = b;
    if (x->port != y->port)
        return x->port - y->port;
    return strcmp (x->address, y->address);
}

//  The LISTEN sockets of one /proc/net file reachable on the loopback.
static void s_read_table (const char *path, bool v6, listen_t *out, size_t *n)
{
    FILE *f = fopen (path, "re");
    if (!f)
        return;
    char line [512];
    if (!fgets (line, sizeof line, f)) {        //  the heading
        fclose (f);
        return;
    }
    while (*n < PORTS_MAX && fgets (line, sizeof line, f)) {
        char local [64], state [8];
        unsigned port;
        if (sscanf (line, " %*s %63[0-9A-Fa-f]:%x %*s %7s", local, &port, state) != 3
        ||  strcmp (state, "0A") != 0 || port == 0 || port > 65535)
            continue;
        //  The address as the kernel prints it: 32-bit words in host order.
        uint8_t addr [16] = { 0 };
        size_t words = v6 ? 4 : 1;
        if (strlen (local) != words * 8)
            continue;
        for (size_t w = 0; w < words; w++) {
            char hex [9];
            memcpy (hex, local + w * 8, 8);
            hex [8] = 0;
            uint32_t word = (uint32_t) strtoul (hex, NULL, 16);
            memcpy (addr + w * 4, &word, 4);
        }
        bool reach;
        char text [INET6_ADDRSTRLEN] = "";
        if (!v6) {
            reach = addr [0] == 127 || !memcmp (addr, "\0\0\0\0", 4);
            inet_ntop (AF_INET, addr, text, sizeof text);
        }
        else {
            static const uint8_t any [16] = { 0 };
            static const uint8_t lo [16] = { [15] = 1 };
            static const uint8_t mapped_lo [16] = { [10] = 0xff, [11] = 0xff, [12] = 127 };
            reach = !memcmp (addr, any, 16) || !memcmp (addr, lo, 16) || !memcmp (addr, mapped_lo, 13);
            inet_ntop (AF_INET6, addr, text, sizeof text);
        }
        if (!reach)
            continue;
        out [*n].port = (int) port;
        snprintf (out [*n].address, sizeof out [*n].address, "%s", text);
        (*n)++;
    }
    fclose (f);
}

void ah_sbd_ports (ah_sbd_session_t *self, chan_t *ch)
{
    listen_t *found = calloc (PORTS_MAX, sizeof *found);
    if (!found) {
        ah_sbd_refuse (self, ch, "ENOMEM", "ports: out of memory");
        return;
    }
    size_t n = 0;
    s_read_table ("/proc/net/tcp", false, found, &n);
    s_read_table ("/proc/net/tcp6", true, found, &n);
    qsort (found, n, sizeof *found, s_by_port);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init (&sb);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array (&pk, n);
    for (size_t i = 0; i < n; i++) {
        msgpack_pack_map (&pk, 2);
        msgpack_pack_str_with_body (&pk, "port", 4);
        msgpack_pack_int (&pk, found [i].port);
        msgpack_pack_str_with_body (&pk, "address", 7);
        msgpack_pack_str_with_body (&pk, found [i].address, strlen (found [i].address));
    }
    ah_msg_t *reply = ah_msg_new ("reply");
    ah_msg_set_bool (reply, "ok", true);
    if (ah_msg_set_raw (reply, "ports", (const uint8_t *) sb.data, sb.size))
        ah_msg_set_nil (reply, "ports");
    msgpack_sbuffer_destroy (&sb);
    free (found);
    ah_sbd_finish (self, ch, &reply);
}
