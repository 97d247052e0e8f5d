/*  tests/tunnel/test_tunnel_egress.c: the server carrying egress
    connections out (docs/egress.md), end to end in one process: the
    tunnel actor on a real bus and SQLite file with the shipped catalog
    and lua/egress.lua, the real sandboxd library with its proxy on
    127.0.0.1, a client speaking to that proxy as curl would, and an
    upstream of the test's own on 127.0.0.1 (an echo server). Loopback
    is refused by design, so the upstream is reached only once the
    tenant's allow list names its address: both are shown. Nothing here
    reaches any address but 127.0.0.1 (names are `localhost`, resolved
    from /etc/hosts).                                                  */
#include "actors/tunnel.h"
#include "common/bus.h"
#include "common/msg.h"
#include "common/token.h"
#include "sandboxd/sandboxd.h"
#include "config/config.h"
#include "store/store.h"
#include "../common/check.h"
#include "tunnel_test.h"
#include "secrets_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define AGENT "e9e8e7e6e5e4"



static zsock_t *s_api;              //  the test's "api" on the bus

//  The tunnel's fills of a tenant's lists (ah_tunnel_args_t's hook, in
//  its worker): counted, and held there while s_fill_hold is set.
static pthread_mutex_t s_fill_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t s_fill_cond = PTHREAD_COND_INITIALIZER;
static int s_fills;
static bool s_fill_hold;

static void s_fill_hook (const char *tenant, void *arg)
{
    pthread_mutex_lock (&s_fill_lock);
    s_fills++;
    pthread_cond_broadcast (&s_fill_cond);
    while (s_fill_hold)
        pthread_cond_wait (&s_fill_cond, &s_fill_lock);
    pthread_mutex_unlock (&s_fill_lock);
}

//  How many fills have read so far (waiting up to ms for at least n).
static int s_fills_seen (int n, int ms)
{
    struct timespec until;
    clock_gettime (CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long) (ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock (&s_fill_lock);
    while (s_fills < n && pthread_cond_timedwait (&s_fill_cond, &s_fill_lock, &until) == 0)
        ;
    int seen = s_fills;
    pthread_mutex_unlock (&s_fill_lock);
    return seen;
}

static void s_fills_hold (bool hold)
{
    pthread_mutex_lock (&s_fill_lock);
    s_fill_hold = hold;
    pthread_cond_broadcast (&s_fill_cond);
    pthread_mutex_unlock (&s_fill_lock);
}

//  A request sent to the proxy, its answer not read yet: the socket.
static int s_send_req (int eport, const char *request)
{
    int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) eport),
                              .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
    struct timeval tv = { .tv_sec = 10 };
    if (fd < 0 || connect (fd, (struct sockaddr *) &sa, sizeof sa)
    ||  write (fd, request, strlen (request)) != (ssize_t) strlen (request)) {
        CHECK (false);
        if (fd >= 0)
            close (fd);
        return -1;
    }
    setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

//  Nothing to read on fd yet (no answer).
static bool s_unanswered (int fd)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    return fd >= 0 && poll (&p, 1, 0) == 0;
}

//  The answer's head on fd (read one byte at a time, to its blank line).
static void s_head (int fd, char *head, size_t size)
{
    size_t got = 0;
    while (fd >= 0 && got + 1 < size && (got < 4 || memcmp (head + got - 4, "\r\n\r\n", 4))
       &&  read (fd, head + got, 1) == 1)
        got++;
    head [got] = 0;
}

//  What the API does once its writer changed a tenant's egress lists or
//  secrets, or removed the tenant: EGRESS_CHANGED to the tunnel. Then a
//  TUNNEL_SESSIONS round trip on the same path, so that the tunnel has
//  handled it before the test's next connection.
static void s_egress_changed (const char *tenant)
{
    ah_msg_t *m = ah_msg_new ("EGRESS_CHANGED");
    ah_msg_set_str (m, "tenant", tenant);
    ah_msg_send (&m, s_api, "tunnel");
    m = ah_msg_new ("TUNNEL_SESSIONS");
    ah_msg_set_int (m, "req", 99999);
    ah_msg_send (&m, s_api, "tunnel");
    m = s_expect (s_api, "REPLY", 5000);
    CHECK (m && ah_msg_int (m, "req", 0) == 99999);
    ah_msg_destroy (&m);
}

//  The tenant's lists, replaced in the database only (the tunnel is not
//  told): entries separated by spaces.
static void s_lists_quiet (const char *allow, const char *deny)
{
    s_sql ("DELETE FROM tenant_egress");
    const char *lists [2] = { allow, deny };
    for (int l = 0; l < 2; l++) {
        char copy [512];
        snprintf (copy, sizeof copy, "%s", lists [l] ? lists [l] : "");
        int pos = 0;
        for (char *save = NULL, *e = strtok_r (copy, " ", &save); e; e = strtok_r (NULL, " ", &save))
            s_sql ("INSERT INTO tenant_egress (tenant, list, pos, entry) SELECT tenant, '%s', %d, '%s' "
                   "FROM agents WHERE id = '%s'", l ? "deny" : "allow", pos++, e, AGENT);
    }
}

//  The tenant's lists, replaced as the API replaces them (the tunnel told).
static void s_lists (const char *allow, const char *deny)
{
    s_lists_quiet (allow, deny);
    s_egress_changed ("default");
    s_egress_changed ("acme");
}


//  The next audit row of kind: its detail, error, ok and bytes.
typedef struct {
    char detail [600], error [900];
    bool ok;
    int64_t bytes;
} row_t;

static bool s_row (zsock_t *recorder, const char *kind, row_t *row)
{
    memset (row, 0, sizeof *row);
    row->bytes = -1;
    int64_t end = zclock_mono () + 5000;
    while (zclock_mono () < end) {
        ah_msg_t *m = s_expect (recorder, "OP_RECORD", (int) (end - zclock_mono ()) + 1);
        if (!m)
            break;
        bool mine = streq (ah_msg_str (m, "kind"), kind) && streq (ah_msg_str (m, "agent_id"), AGENT)
                 && streq (ah_msg_str (m, "actor"), "sandbox");
        fprintf (stderr, "(record %s ok=%d detail '%s' error '%s')\n", ah_msg_str (m, "kind"),
                 ah_msg_bool (m, "ok", false), ah_msg_str (m, "detail"), ah_msg_str (m, "error") ? ah_msg_str (m, "error") : "");
        if (mine) {
            const char *d = ah_msg_str (m, "detail"), *e = ah_msg_str (m, "error");
            snprintf (row->detail, sizeof row->detail, "%s", d ? d : "");
            snprintf (row->error, sizeof row->error, "%s", e ? e : "");
            row->ok = ah_msg_bool (m, "ok", false);
            row->bytes = ah_msg_has (m, "bytes") ? ah_msg_int (m, "bytes", -1) : -1;
        }
        ah_msg_destroy (&m);
        if (mine)
            return true;
    }
    fprintf (stderr, "no %s record\n", kind);
    return false;
}

//  The tunnel's egress counts of tenant (TUNNEL_SESSIONS' "egress",
//  what GET /metrics shows); tenants: how many it counts.
typedef struct {
    int64_t allowed, denied, failed, out, in;
    size_t tenants;
} counts_t;

static counts_t s_counts (zsock_t *api, const char *tenant)
{
    static int req = 1;
    counts_t c = { -1, -1, -1, -1, -1, 0 };
    ah_msg_t *m = ah_msg_new ("TUNNEL_SESSIONS");
    ah_msg_set_int (m, "req", ++req);
    ah_msg_send (&m, api, "tunnel");
    ah_msg_t *r = s_expect (api, "REPLY", 5000);
    char *line = r && ah_msg_int (r, "req", 0) == req ? ah_msg_to_json (r, NULL) : NULL;
    json_t *root = line ? json_loads (line, 0, NULL) : NULL;
    json_t *egress = json_object_get (json_object_get (root, "fields"), "egress");
    c.tenants = json_array_size (egress);
    size_t i;
    json_t *t;
    json_array_foreach (egress, i, t)
        if (json_string_value (json_object_get (t, "tenant"))
        &&  streq (json_string_value (json_object_get (t, "tenant")), tenant)) {
            c.allowed = json_integer_value (json_object_get (t, "allowed"));
            c.denied = json_integer_value (json_object_get (t, "denied"));
            c.failed = json_integer_value (json_object_get (t, "failed"));
            c.out = json_integer_value (json_object_get (t, "bytes_out"));
            c.in = json_integer_value (json_object_get (t, "bytes_in"));
        }
    fprintf (stderr, "(egress counts: %zu tenants; %s: allowed %lld denied %lld failed %lld out %lld in %lld)\n",
             c.tenants, tenant, (long long) c.allowed, (long long) c.denied, (long long) c.failed, (long long) c.out,
             (long long) c.in);
    json_decref (root);
    free (line);
    ah_msg_destroy (&r);
    return c;
}

//  Tenant 'default''s counts are what was expected, exactly.
static bool s_counts_are (zsock_t *api, int64_t allowed, int64_t denied, int64_t failed, int64_t out, int64_t in)
{
    counts_t c = s_counts (api, "default");
    bool ok = c.tenants == 1 && c.allowed == allowed && c.denied == denied && c.failed == failed
           && c.out == out && c.in == in;
    if (!ok)
        fprintf (stderr, "expected: allowed %lld denied %lld failed %lld out %lld in %lld\n", (long long) allowed,
                 (long long) denied, (long long) failed, (long long) out, (long long) in);
    return ok;
}

//  ---------------------------------------------------------------------
//  The upstream: an echo server on 127.0.0.1. Each connection gets back
//  what it sends, as it sends it; after the client's FIN it sends
//  "EOF-SEEN n\n" (n: the bytes it had) and closes, so the client sees
//  that its FIN arrived and that bytes still flow the other way.

static int s_listener (int *port)
{
    int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
    socklen_t len = sizeof sa;
    if (fd < 0 || bind (fd, (struct sockaddr *) &sa, sizeof sa) || listen (fd, 64)
    ||  getsockname (fd, (struct sockaddr *) &sa, &len)) {
        CHECK (false);
        return -1;
    }
    *port = ntohs (sa.sin_port);
    return fd;
}

static void *s_echo_conn (void *arg)
{
    int fd = (int) (intptr_t) arg;
    char buf [65536];
    size_t total = 0;
    ssize_t r;
    while ((r = read (fd, buf, sizeof buf)) > 0) {
        total += (size_t) r;
        for (ssize_t off = 0; off < r; ) {
            ssize_t w = write (fd, buf + off, (size_t) (r - off));
            if (w <= 0)
                goto out;
            off += w;
        }
    }
    int n = snprintf (buf, sizeof buf, "EOF-SEEN %zu\n", total);
    if (write (fd, buf, (size_t) n) != n)
        fprintf (stderr, "echo: the last write failed\n");
out:
    close (fd);
    return NULL;
}

static void *s_echo (void *arg)
{
    int lfd = (int) (intptr_t) arg;
    while (true) {
        int fd = accept4 (lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            return NULL;
        pthread_t t;
        if (pthread_create (&t, NULL, s_echo_conn, (void *) (intptr_t) fd) == 0)
            pthread_detach (t);
        else
            close (fd);
    }
}

//  A second upstream: it shuts its writing side at once, then reads to
//  the end, slowly (a pause first, then 32 KiB every 2 ms: it is the
//  bottleneck, so what the sandbox sends piles up on the way); the
//  count it read, for the test.
static atomic_size_t s_sunk = SIZE_MAX;

static void *s_sink (void *arg)
{
    int lfd = (int) (intptr_t) arg;
    int fd = accept4 (lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return NULL;
    shutdown (fd, SHUT_WR);
    usleep (300 * 1000);
    char buf [32768];
    size_t total = 0;
    ssize_t r;
    while ((r = read (fd, buf, sizeof buf)) > 0) {
        total += (size_t) r;
        usleep (2000);
    }
    atomic_store (&s_sunk, total);
    close (fd);
    return NULL;
}

//  ---------------------------------------------------------------------
//  The proxy's client

//  Connect to the proxy and send request; the answer's head (status
//  line and headers) into head; the socket, its body unread (-1 if the
//  connection failed).
static int s_proxy (int eport, const char *request, char *head, size_t size)
{
    int fd = s_send_req (eport, request);
    s_head (fd, head, size);
    return fd;
}

//  Read fd to its end (10 s at most) into out (NUL-terminated).
static size_t s_read_all (int fd, char *out, size_t size)
{
    size_t got = 0;
    ssize_t r;
    while (got + 1 < size && (r = read (fd, out + got, size - 1 - got)) > 0)
        got += (size_t) r;
    out [got] = 0;
    return got;
}

//  A request answered by the proxy itself: its whole answer.
static void s_ask (int eport, const char *request, char *out, size_t size)
{
    char head [1024];
    int fd = s_proxy (eport, request, head, sizeof head);
    size_t n = snprintf (out, size, "%s", head);
    if (fd >= 0) {
        if (n < size)
            s_read_all (fd, out + n, size - n);
        close (fd);
    }
}

//  CONNECT 127.0.0.1:port through the proxy: the socket once it said 200.
static int s_tunnel_to (int eport, const char *target)
{
    char req [300], head [1024];
    snprintf (req, sizeof req, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target);
    int fd = s_proxy (eport, req, head, sizeof head);
    if (strncmp (head, "HTTP/1.1 200 ", 13)) {
        fprintf (stderr, "CONNECT %s: %s\n", target, head);
        CHECK (false);
        if (fd >= 0)
            close (fd);
        return -1;
    }
    return fd;
}

//  Send size bytes and read them echoed, both at once (poll), then FIN
//  and read to the end: true when every byte came back in order and the
//  upstream reported our FIN with the count.
static bool s_echo_through (int fd, size_t size)
{
    uint8_t *out = malloc (size), *in = malloc (size + 64);
    for (size_t i = 0; i < size; i++)
        out [i] = (uint8_t) (i * 7 + 3);
    size_t sent = 0, got = 0;
    bool shut = false, ok = out && in;
    int64_t end = zclock_mono () + 20000;
    while (ok && zclock_mono () < end) {
        struct pollfd p = { .fd = fd, .events = POLLIN | (sent < size ? POLLOUT : 0) };
        if (poll (&p, 1, 1000) < 0)
            break;
        if ((p.revents & POLLOUT) && sent < size) {
            ssize_t w = send (fd, out + sent, size - sent > 65536 ? 65536 : size - sent, MSG_DONTWAIT);
            if (w > 0)
                sent += (size_t) w;
        }
        if (sent == size && !shut) {
            shutdown (fd, SHUT_WR);         //  half-close: the echo still comes back
            shut = true;
        }
        if (p.revents & (POLLIN | POLLHUP)) {
            ssize_t r = recv (fd, in + got, size + 63 - got, MSG_DONTWAIT);
            if (r == 0)
                break;
            if (r > 0)
                got += (size_t) r;
        }
    }
    char tail [64];
    snprintf (tail, sizeof tail, "EOF-SEEN %zu\n", size);
    ok = ok && got == size + strlen (tail) && !memcmp (in, out, size) && !memcmp (in + size, tail, strlen (tail));
    if (!ok)
        fprintf (stderr, "echo of %zu bytes: sent %zu, got %zu\n", size, sent, got);
    free (out);
    free (in);
    return ok;
}

//  Six CONNECTs of req through the proxy at once, to an upstream that
//  never accepts: when each was answered (ms after asking) into
//  answered; how many were the connect timeout's 504.
static int s_stuck (int eport, const char *req, int64_t answered [6])
{
    int slow [6];
    char answer [4096];
    int64_t asked = zclock_mono ();
    for (int i = 0; i < 6; i++) {
        answered [i] = 0;
        slow [i] = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) eport),
                                  .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
        CHECK (connect (slow [i], (struct sockaddr *) &sa, sizeof sa) == 0);
        CHECK (write (slow [i], req, strlen (req)) == (ssize_t) strlen (req));
    }
    int timeouts = 0;
    for (int left = 6; left > 0 && zclock_mono () - asked < 15000; ) {
        struct pollfd p [6];
        for (int i = 0; i < 6; i++)
            p [i] = (struct pollfd) { .fd = answered [i] ? -1 : slow [i], .events = POLLIN };
        if (poll (p, 6, 500) <= 0)
            continue;
        for (int i = 0; i < 6; i++)
            if (p [i].revents) {
                answered [i] = zclock_mono () - asked;
                s_read_all (slow [i], answer, sizeof answer);
                if (!strncmp (answer, "HTTP/1.1 504 ", 13)
                &&  strstr (answer, "did not accept the connection within 2000 ms (sandbox.egress_connect_timeout)"))
                    timeouts++;
                else
                    fprintf (stderr, "stuck upstream: %s\n", answer);
                left--;
            }
    }
    for (int i = 0; i < 6; i++)
        close (slow [i]);
    return timeouts;
}

//  answered, sorted into order (and printed).
static void s_sorted (const int64_t answered [6], int64_t order [6])
{
    memcpy (order, answered, 6 * sizeof *order);
    for (int i = 0; i < 6; i++)             //  by insertion
        for (int j = i; j > 0 && order [j] < order [j - 1]; j--) {
            int64_t t = order [j];
            order [j] = order [j - 1];
            order [j - 1] = t;
        }
    fprintf (stderr, "answered after %lld %lld %lld %lld | %lld %lld ms\n", (long long) order [0],
             (long long) order [1], (long long) order [2], (long long) order [3], (long long) order [4],
             (long long) order [5]);
}

//  One GET of path through the proxy to 127.0.0.1:port over TLS, the
//  client trusting ca_file, with the sandbox's own Authorization: true
//  when it was answered "ok <path>" and both rows say the connection's
//  TLS was the server's (terminated) or the sandbox's own, as expected.
static bool s_tls_get (int eport, zsock_t *recorder, int port, const char *ca_file, const char *path,
                       bool terminated)
{
    char t [64], req [300], got [2048];
    row_t row;
    snprintf (t, sizeof t, "127.0.0.1:%d", port);
    int fd = s_tunnel_to (eport, t);
    bool ok = s_row (recorder, "egress", &row) && row.ok && !strstr (row.detail, "TLS terminated") == !terminated;
    SSL_CTX *cctx = NULL;
    SSL *ssl = fd >= 0 ? s_client (fd, ca_file, &cctx) : NULL;
    snprintf (req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer sandbox-own\r\n\r\n", path, t);
    snprintf (t, sizeof t, "ok %s", path);
    ok = ok && ssl && SSL_write (ssl, req, (int) strlen (req)) == (int) strlen (req)
       && s_answer (ssl, got, sizeof got) && strstr (got, t);
    s_client_end (ssl, cctx, fd, true);
    ok = ok && s_row (recorder, "egress.end", &row) && !strstr (row.detail, "TLS terminated") == !terminated;
    if (!ok)
        fprintf (stderr, "TLS GET %s through port %d: not as expected\n", path, port);
    return ok;
}

int main (void)
{
    //  A network namespace of the test's own (as root), before any
    //  thread: lo up, and a public address on it, 11.22.33.44, that is
    //  "this server's own" (nothing leaves the namespace: it has no
    //  other interface).
    bool own_ns = unshare (CLONE_NEWNET) == 0;
    if (own_ns)
        CHECK (system ("ip link set lo up && ip addr add 11.22.33.44/32 dev lo") == 0);
    else
        fprintf (stderr, "no network namespace of its own (%s): the server's own public address "
                 "is not shown\n", strerror (errno));
    char home [300];
    if (s_setup ("egress", home, sizeof home))
        return 1;
    char token [AH_TOKEN_HEX], hash [AH_TOKEN_HEX];
    ah_token_new (token);
    ah_token_hash (token, hash);
    //  The shipped debian runtime: needs_network, its own list (which
    //  names no address: it opens nothing the address check refuses).
    s_sql ("INSERT INTO agents (id, name, image, cpus, memory_mb, idle_minutes, created_at, runtime) "
           "VALUES ('%s', 'eve', 'img', 1, 512, 15, 1, 'debian')", AGENT);
    s_sql ("INSERT INTO sandboxes (agent_id, state, image, cpus, memory_mb, boot_token_hash, updated_at) "
           "VALUES ('%s', 'running', 'img', 1, 512, '%s', 1)", AGENT, hash);

    //  The upstream, and a port where nothing listens.
    int up_port = 0, closed_port = 0;
    int lfd = s_listener (&up_port);
    int cfd = s_listener (&closed_port);
    close (cfd);
    pthread_t echo;
    CHECK (pthread_create (&echo, NULL, s_echo, (void *) (intptr_t) lfd) == 0);

    ah_bus_args_t bargs = { .tap_endpoint = NULL };
    zactor_t *bus = ah_actor_new (&ah_bus_actor, &bargs, NULL);
    zsock_t *lifecycle = ah_bus_connect ("lifecycle");
    zsock_t *recorder = ah_bus_connect ("recorder");
    zsock_t *api = ah_bus_connect ("api");
    s_api = api;
    ah_config_t *config = s_config ();
    //  Secrets: the installation's CA (as the server makes it at its
    //  start), the CA of the test's HTTPS upstreams (the server trusts it
    //  through sandbox.egress_upstream_ca_file), and a CA nobody trusts.
    char ca_dir [2][400], ca_file [500], trust_dir [400];
    snprintf (ca_dir [0], sizeof ca_dir [0], "%s/upstream-ca", s_dir);
    snprintf (ca_dir [1], sizeof ca_dir [1], "%s/untrusted-ca", s_dir);
    snprintf (ca_file, sizeof ca_file, "%s/%s", ca_dir [0], AH_EGRESS_CA_CERT_FILE);
    snprintf (trust_dir, sizeof trust_dir, "%s/trust", s_dir);
    char *ca_why = NULL;
    ah_egress_ca_t *egress_ca = ah_egress_ca_load (s_dir, true, &ca_why);
    mkdir (ca_dir [0], 0700);
    mkdir (ca_dir [1], 0700);
    ah_egress_ca_t *up_ca = ah_egress_ca_load (ca_dir [0], true, &ca_why);
    ah_egress_ca_t *bad_ca = ah_egress_ca_load (ca_dir [1], true, &ca_why);
    CHECK (egress_ca && up_ca && bad_ca);
    free (ca_why);
    config->egress_upstream_ca_file = strdup (ca_file);
    config->egress_max_connections = 6;         //  the cap, small enough to reach
    config->egress_connect_timeout_s = 2;
    ah_tunnel_args_t targs = { .config = config, .db_path = s_db, .ping_interval_ms = 500,
                               .ping_timeout_ms = 5000, .open_timeout_ms = 2000,
                               .stats_interval_ms = -1, .connect_wait_ms = 2000,
                               .egress_fill_hook = s_fill_hook };
    zactor_t *tunnel = ah_actor_new (&ah_tunnel_actor, &targs, NULL);
    CHECK (tunnel != NULL);
    zstr_send (tunnel, "PORT");
    char *port = zstr_recv (tunnel);
    char url [128];
    snprintf (url, sizeof url, "ws://127.0.0.1:%s/tunnel", port ? port : "0");
    free (port);
    //  A free port for the proxy.
    int eport = 0;
    int pfd = s_listener (&eport);
    close (pfd);
    ah_sandboxd_opts_t opts = {
        .agent_id = AGENT, .token = token, .tunnel_url = url, .home = home,
        .backoff_min_ms = 100, .backoff_max_ms = 400, .egress_port = eport, .trust_dir = trust_dir,
    };
    ah_sandboxd_t *sd = ah_sandboxd_start (&opts);
    ah_msg_t *m = s_expect (lifecycle, "SANDBOX_HELLO", 5000);
    CHECK (m != NULL);
    ah_msg_destroy (&m);

    char answer [4096], target [64], want [300];
    row_t row;
    snprintf (target, sizeof target, "127.0.0.1:%d", up_port);
    //  Nothing counted yet: no tenant in the counts.
    CHECK (s_counts (api, "default").tenants == 0);

    //  0. The rule's own refusals, each read by the proxy's client as 403
    //  with its sentence and recorded: an agent of no catalog runtime
    //  (the rule's first line); the debian runtime's list, which names no
    //  such host (nothing may leave the machine here, so no allowed name
    //  is asked); the tenant's lists, changed while the sandbox runs,
    //  apply to the next connection: a deny beats the runtime's list.
    s_sql ("UPDATE agents SET runtime = NULL WHERE id = '%s'", AGENT);
    s_ask (eport, "CONNECT deb.debian.org:443 HTTP/1.1\r\nHost: deb.debian.org:443\r\n\r\n", answer, sizeof answer);
    CHECK (!strncmp (answer, "HTTP/1.1 403 ", 13) && strstr (answer, "has no needs_network"));
    CHECK (s_row (recorder, "egress", &row) && streq (row.detail, "deb.debian.org:443 (connect)") && !row.ok
           && strstr (row.error, "has no needs_network"));
    s_sql ("UPDATE agents SET runtime = 'debian' WHERE id = '%s'", AGENT);
    s_ask (eport, "GET http://Example.ORG/x HTTP/1.1\r\nHost: example.org\r\n\r\n", answer, sizeof answer);
    CHECK (!strncmp (answer, "HTTP/1.1 403 ", 13)
           && strstr (answer, "example.org:80 is on neither runtime 'debian''s egress list nor tenant"));
    CHECK (s_row (recorder, "egress", &row) && streq (row.detail, "example.org:80 (http)"));
    s_lists (NULL, "deb.debian.org");
    s_ask (eport, "CONNECT deb.debian.org:443 HTTP/1.1\r\n\r\n", answer, sizeof answer);
    CHECK (strstr (answer, "deny list (entry 'deb.debian.org')") != NULL);
    CHECK (s_row (recorder, "egress", &row) && !row.ok);
    //  The tunnel holds the tenant's lists (read once, not per
    //  connection): a change behind the API's back is not seen...
    s_lists_quiet (NULL, "*.debian.org");
    s_ask (eport, "CONNECT deb.debian.org:443 HTTP/1.1\r\n\r\n", answer, sizeof answer);
    CHECK (strstr (answer, "deny list (entry 'deb.debian.org')") != NULL);
    CHECK (s_row (recorder, "egress", &row) && !row.ok);
    //  ... and one the API made (EGRESS_CHANGED) applies to the very next connection.
    s_egress_changed ("default");
    s_ask (eport, "CONNECT deb.debian.org:443 HTTP/1.1\r\n\r\n", answer, sizeof answer);
    CHECK (strstr (answer, "deny list (entry '*.debian.org')") != NULL);
    CHECK (s_row (recorder, "egress", &row) && !row.ok);

    //  1. The rule allows anything ('*'), but no entry names an address:
    //  the address check refuses loopback, private, link-local and the
    //  metadata address, raw or behind a name, before any connect.
    s_lists ("*", NULL);
    snprintf (want, sizeof want, "CONNECT %s HTTP/1.1\r\n\r\n", target);
    s_ask (eport, want, answer, sizeof answer);
    CHECK (!strncmp (answer, "HTTP/1.1 403 ", 13));
    snprintf (want, sizeof want, "egress refused: %s: loopback, refused whatever the rule says", target);
    CHECK (strstr (answer, want) && strstr (answer, "only an admin's entry naming that address"));
    CHECK (s_row (recorder, "egress", &row) && !row.ok && strstr (row.error, ": loopback, refused"));
    snprintf (want, sizeof want, "%s (connect) to %s", target, target);
    CHECK_STR (row.detail, want);
    //  A name that resolves to 127.0.0.1.
    snprintf (want, sizeof want, "CONNECT localhost:%d HTTP/1.1\r\n\r\n", up_port);
    s_ask (eport, want, answer, sizeof answer);
    CHECK (!strncmp (answer, "HTTP/1.1 403 ", 13));
    CHECK (strstr (answer, "egress refused: localhost resolves to ") && strstr (answer, ": loopback, refused"));
    CHECK (s_row (recorder, "egress", &row) && !row.ok && strstr (row.detail, "localhost:"));
    //  An IPv4-mapped IPv6 form of it.
    snprintf (want, sizeof want, "CONNECT [::ffff:127.0.0.1]:%d HTTP/1.1\r\n\r\n", up_port);
    s_ask (eport, want, answer, sizeof answer);
    CHECK (!strncmp (answer, "HTTP/1.1 403 ", 13) && strstr (answer, ": loopback, refused"));
    CHECK (s_row (recorder, "egress", &row) && !row.ok);
    struct { const char *target, *why; } refused [] = {
        { "169.254.169.254:80", "metadata address" },
        { "10.1.2.3:22", "private range" },
        { "192.168.1.1:443", "private range" },
        { "100.64.0.1:443", "carrier-grade NAT" },
        { "169.254.1.1:80", "link-local" },
        { "0.0.0.0:80", "unspecified" },
        { "224.0.0.1:80", "multicast" },
        { "255.255.255.255:80", "broadcast" },
        { "[fd00::1]:443", "private range" },
        { "[::1]:443", "loopback" },
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused [0]; i++) {
        snprintf (want, sizeof want, "CONNECT %s HTTP/1.1\r\n\r\n", refused [i].target);
        s_ask (eport, want, answer, sizeof answer);
        if (strncmp (answer, "HTTP/1.1 403 ", 13) || !strstr (answer, refused [i].why))
            fprintf (stderr, "%s: %s\n", refused [i].target, answer);
        CHECK (!strncmp (answer, "HTTP/1.1 403 ", 13) && strstr (answer, refused [i].why));
        CHECK (s_row (recorder, "egress", &row) && !row.ok && strstr (row.error, refused [i].why));
    }
    //  The server's own addresses, public ones too (its API, its tunnel
    //  and whatever else the host serves are out of reach).
    if (own_ns) {
        s_ask (eport, "CONNECT 11.22.33.44:443 HTTP/1.1\r\n\r\n", answer, sizeof answer);
        CHECK (!strncmp (answer, "HTTP/1.1 403 ", 13) && strstr (answer, "one of this server's own addresses"));
        CHECK (s_row (recorder, "egress", &row) && !row.ok && strstr (row.error, "own addresses"));
    }
    //  The plain-HTTP form is checked the same way.
    s_ask (eport, "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: x\r\n\r\n", answer,
           sizeof answer);
    CHECK (!strncmp (answer, "HTTP/1.1 403 ", 13) && strstr (answer, "metadata address"));
    CHECK (s_row (recorder, "egress", &row) && strstr (row.detail, "169.254.169.254:80 (http) to "));
    //  The metrics: every one of them denied on the tenant, nothing else.
    //  (and the rule's own three refusals of step 0, and the cache's two).
    int64_t denied = 3 + 2 + 3 + 10 + (own_ns ? 1 : 0) + 1;
    CHECK (s_counts_are (api, 0, denied, 0, 0, 0));

    //  2. The admin's explicit entry names the upstream's address and
    //  port: carried, bytes both ways, each side's half-close reaching
    //  the other, and on the record (the verdict, then bytes and time).
    snprintf (want, sizeof want, "* %s", target);
    s_lists (want, NULL);
    int fd = s_tunnel_to (eport, target);
    CHECK (fd >= 0 && s_echo_through (fd, 5));
    if (fd >= 0)
        close (fd);
    CHECK (s_row (recorder, "egress", &row) && row.ok);
    snprintf (want, sizeof want, "%s (connect) to %s: allowed by tenant 'default''s allow list (entry '*')",
              target, target);
    CHECK_STR (row.detail, want);
    CHECK (s_row (recorder, "egress.end", &row) && row.ok && !row.error [0]);
    //  5 bytes out, the 5 echoed and "EOF-SEEN 5\n" in.
    snprintf (want, sizeof want, "%s (connect) to %s: 5 bytes out, 16 bytes in, ", target, target);
    CHECK (!strncmp (row.detail, want, strlen (want)) && strstr (row.detail, " ms"));
    CHECK (row.bytes == 21);
    CHECK (s_counts_are (api, 1, denied, 0, 5, 16));
    //  Larger than every window on the way (yamux's 256 KiB, growing):
    //  flow control both ways, nothing lost or reordered.
    fd = s_tunnel_to (eport, target);
    CHECK (fd >= 0 && s_echo_through (fd, 3u << 20));
    if (fd >= 0)
        close (fd);
    CHECK (s_row (recorder, "egress", &row) && row.ok);
    CHECK (s_row (recorder, "egress.end", &row) && row.ok && row.bytes == (int64_t) (6u << 20) + 17);
    int64_t out = 5 + (3 << 20), in = 16 + (3 << 20) + (int64_t) strlen ("EOF-SEEN 3145728\n");
    CHECK (s_counts_are (api, 2, denied, 0, out, in));
    //  A plain request: its head is the first bytes upstream (the echo
    //  sends it back as the "answer").
    snprintf (want, sizeof want, "GET http://%s/x HTTP/1.1\r\nHost: %s\r\n\r\n", target, target);
    fd = s_proxy (eport, want, answer, sizeof answer);
    CHECK (fd >= 0 && !strcmp (answer, want));      //  the echoed head
    if (fd >= 0) {
        shutdown (fd, SHUT_WR);
        s_read_all (fd, answer, sizeof answer);
        CHECK (!strncmp (answer, "EOF-SEEN ", 9));
        close (fd);
    }
    CHECK (s_row (recorder, "egress", &row) && row.ok && strstr (row.detail, "(http) to 127.0.0.1:"));
    CHECK (s_row (recorder, "egress.end", &row) && row.ok);
    {
        //  The head out, the head and "EOF-SEEN <its size>" in.
        size_t head = strlen (want);
        char tail [64];
        snprintf (tail, sizeof tail, "EOF-SEEN %zu\n", head);
        out += (int64_t) head;
        in += (int64_t) (head + strlen (tail));
        CHECK (s_counts_are (api, 3, denied, 0, out, in));
    }
    //  The entry names that port only: another port of the address stays refused.
    snprintf (want, sizeof want, "CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n", closed_port);
    s_ask (eport, want, answer, sizeof answer);
    CHECK (!strncmp (answer, "HTTP/1.1 403 ", 13) && strstr (answer, ": loopback, refused"));
    CHECK (s_row (recorder, "egress", &row) && !row.ok);
    //  A name is checked by what it resolves to: a deny entry naming the
    //  range refuses localhost, though the rule let the name through.
    snprintf (want, sizeof want, "* %s", target);
    s_lists (want, "127.0.0.0/8");
    snprintf (want, sizeof want, "CONNECT localhost:%d HTTP/1.1\r\n\r\n", up_port);
    s_ask (eport, want, answer, sizeof answer);
    CHECK (!strncmp (answer, "HTTP/1.1 403 ", 13) && strstr (answer, "deny list (entry '127.0.0.0/8')"));
    CHECK (s_row (recorder, "egress", &row) && !row.ok);
    denied += 2;                    //  the other port, the deny entry
    CHECK (s_counts_are (api, 3, denied, 0, out, in));

    //  The other half-close first: the upstream shuts its side at once
    //  and reads on; the client reads the end, then sends 8 MiB and its
    //  own FIN. The stream ends (both FINs) while the upstream, which
    //  reads slowly, has not taken everything: the rest still reaches it.
    int sink_port = 0;
    int kfd = s_listener (&sink_port);
    pthread_t sink;
    CHECK (pthread_create (&sink, NULL, s_sink, (void *) (intptr_t) kfd) == 0);
    char sink_target [64];
    snprintf (sink_target, sizeof sink_target, "127.0.0.1:%d", sink_port);
    snprintf (want, sizeof want, "* %s %s", target, sink_target);
    s_lists (want, NULL);
    fd = s_tunnel_to (eport, sink_target);
    CHECK (fd >= 0 && s_read_all (fd, answer, sizeof answer) == 0);    //  its FIN, at once
    size_t big = 8u << 20, sent = 0;
    char *chunk = calloc (1, 65536);
    while (fd >= 0 && chunk && sent < big) {
        ssize_t w = write (fd, chunk, 65536);
        if (w <= 0)
            break;
        sent += (size_t) w;
    }
    CHECK (sent == big);
    free (chunk);
    if (fd >= 0)
        close (fd);
    pthread_join (sink, NULL);
    close (kfd);
    CHECK (atomic_load (&s_sunk) == big);
    CHECK (s_row (recorder, "egress", &row) && row.ok);
    CHECK (s_row (recorder, "egress.end", &row) && row.ok && row.bytes == (int64_t) big);
    snprintf (want, sizeof want, "%s: %zu bytes out, 0 bytes in, ", sink_target, big);
    CHECK (strstr (row.detail, want) != NULL);

    //  3. An upstream that refuses the connection: a clear error (502).
    snprintf (want, sizeof want, "* %s 127.0.0.1:%d", target, closed_port);
    s_lists (want, NULL);
    snprintf (want, sizeof want, "CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n", closed_port);
    s_ask (eport, want, answer, sizeof answer);
    CHECK (!strncmp (answer, "HTTP/1.1 502 ", 13) && strstr (answer, "refused the connection"));
    CHECK (s_row (recorder, "egress", &row) && !row.ok && strstr (row.error, "refused the connection"));
    //  The sink's 8 MiB out; the refused connect failed, not denied.
    out += (int64_t) big;
    CHECK (s_counts_are (api, 4, denied, 1, out, in));

    //  4. The cap (sandbox.egress_max_connections, 6 here): the seventh
    //  connection at once is refused (503, saying why), the next one after
    //  one closed is carried.
    int held [6];
    for (int i = 0; i < 6; i++)
        CHECK ((held [i] = s_tunnel_to (eport, target)) >= 0);
    snprintf (want, sizeof want, "CONNECT %s HTTP/1.1\r\n\r\n", target);
    s_ask (eport, want, answer, sizeof answer);
    CHECK (!strncmp (answer, "HTTP/1.1 503 ", 13)
           && strstr (answer, "this sandbox has 6 connections out already")
           && strstr (answer, "sandbox.egress_max_connections"));
    CHECK (held [0] >= 0 && s_echo_through (held [0], 100));
    if (held [0] >= 0)
        close (held [0]);
    usleep (300 * 1000);            //  the end reaches the server
    int c = s_tunnel_to (eport, target);
    CHECK (c >= 0 && s_echo_through (c, 10));
    if (c >= 0)
        close (c);
    //  Seven carried, the seventh at once refused; 100 and 10 bytes
    //  echoed, each with its "EOF-SEEN n".
    out += 100 + 10;
    in += 100 + 13 + 10 + 12;
    denied++;
    CHECK (s_counts_are (api, 11, denied, 1, out, in));
    for (int i = 1; i < 6; i++)
        if (held [i] >= 0)
            close (held [i]);       //  closed with no FIN exchange: the server still ends them
    usleep (300 * 1000);

    //  4b. An upstream that never accepts (a listener whose backlog is
    //  full drops the SYNs): each connect fails at the timeout (504),
    //  and one sandbox has at most AH_TUN_EGRESS_CONNECTING (4) connects
    //  in the workers at once: of six asked together for a name (its
    //  lookup, then its connect, are a worker's), two wait their turn and
    //  are answered a timeout later than the first four.
    int stuck_port = 0;
    int sfd = s_listener (&stuck_port);
    CHECK (sfd >= 0 && listen (sfd, 0) == 0);
    int fill [2];
    for (int i = 0; i < 2; i++) {
        fill [i] = socket (AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) stuck_port),
                                  .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
        if (connect (fill [i], (struct sockaddr *) &sa, sizeof sa))
            CHECK (errno == EINPROGRESS);
    }
    usleep (100 * 1000);
    snprintf (want, sizeof want, "* 127.0.0.1:%d ::1", stuck_port);
    s_lists (want, NULL);
    int64_t answered [6], order [6];
    char slow_req [100];
    snprintf (slow_req, sizeof slow_req, "CONNECT localhost:%d HTTP/1.1\r\n\r\n", stuck_port);
    int timeouts = s_stuck (eport, slow_req, answered);
    CHECK (timeouts == 6);
    {
        //  Six failed at the timeout. The five closed above may each have
        //  read the echo's "EOF-SEEN 0" (11 bytes) before their end, or
        //  not, as the close and the upstream's answer race.
        counts_t k = s_counts (api, "default");
        CHECK (k.allowed == 11 && k.denied == denied && k.failed == 7 && k.out == out);
        CHECK (k.in >= in && k.in <= in + 5 * 11 && (k.in - in) % 11 == 0);
    }
    s_sorted (answered, order);
    CHECK (order [0] >= 1800 && order [3] < order [4] && order [4] - order [3] >= 1500);
    //  An address literal takes the same way (its own-address check and
    //  its connect are a worker's, nothing of it on the tunnel's
    //  thread): of six asked together, two wait their turn too.
    snprintf (slow_req, sizeof slow_req, "CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n", stuck_port);
    CHECK (s_stuck (eport, slow_req, answered) == 6);
    s_sorted (answered, order);
    CHECK (order [0] >= 1800 && order [3] < order [4] && order [4] - order [3] >= 1500);
    {
        counts_t k = s_counts (api, "default");
        CHECK (k.allowed == 11 && k.denied == denied && k.failed == 13);
    }
    for (int i = 0; i < 2; i++)
        close (fill [i]);
    close (sfd);

    //  4c. Counted on the agent's tenant: moved to 'acme', its
    //  connections are acme's, and default's counts stay as they were.
    counts_t before = s_counts (api, "default");
    s_sql ("INSERT INTO tenants (name) VALUES ('acme')");
    s_sql ("UPDATE agents SET tenant = 'acme' WHERE id = '%s'", AGENT);
    snprintf (want, sizeof want, "* %s", target);
    s_lists (want, NULL);
    fd = s_tunnel_to (eport, target);
    CHECK (fd >= 0 && s_echo_through (fd, 7));
    if (fd >= 0)
        close (fd);
    usleep (300 * 1000);            //  the end reaches the server
    s_ask (eport, "CONNECT 10.1.2.3:22 HTTP/1.1\r\n\r\n", answer, sizeof answer);
    CHECK (!strncmp (answer, "HTTP/1.1 403 ", 13));
    counts_t acme = s_counts (api, "acme"), after = s_counts (api, "default");
    CHECK (acme.tenants == 2 && acme.allowed == 1 && acme.denied == 1 && acme.failed == 0
           && acme.out == 7 && acme.in == 7 + (int64_t) strlen ("EOF-SEEN 7\n"));
    CHECK (after.allowed == before.allowed && after.denied == before.denied && after.failed == before.failed
           && after.out == before.out && after.in == before.in);

    //  4d. Secrets (docs/egress.md "Secrets"). sandboxd wrote the CA hello
    //  carried, alone and after the system's bundle.
    {
        char path [500], text [300000];
        snprintf (path, sizeof path, "%s/egress-ca.pem", trust_dir);
        FILE *f = fopen (path, "r");
        size_t n = f ? fread (text, 1, sizeof text - 1, f) : 0;
        text [n] = 0;
        if (f)
            fclose (f);
        CHECK (egress_ca && streq (text, ah_egress_ca_pem (egress_ca)));
        snprintf (path, sizeof path, "%s/ca-bundle.pem", trust_dir);
        f = fopen (path, "r");
        n = f ? fread (text, 1, sizeof text - 1, f) : 0;
        text [n] = 0;
        if (f)
            fclose (f);
        size_t pn = egress_ca ? strlen (ah_egress_ca_pem (egress_ca)) : 0;
        CHECK (n > pn && egress_ca && streq (text + n - pn, ah_egress_ca_pem (egress_ca)));
    }
    {
        const char *secret = "Bearer sk-TUNNEL-SECRET-9f8e7d";
        char egress_ca_file [400], up_entries [200], got [2048], t [64];
        snprintf (egress_ca_file, sizeof egress_ca_file, "%s/%s", s_dir, AH_EGRESS_CA_CERT_FILE);
        int pa = 0, pb = 0, pc = 0;
        pthread_t ta, tb, tc;
        upstream_t *ua = s_upstream_start (up_ca, &pa, &ta);        //  a secret
        upstream_t *ub = s_upstream_start (bad_ca, &pb, &tb);       //  a secret, a certificate nobody trusts
        upstream_t *uc = s_upstream_start (up_ca, &pc, &tc);        //  no secret
        snprintf (up_entries, sizeof up_entries, "127.0.0.1:%d 127.0.0.1:%d 127.0.0.1:%d", pa, pb, pc);
        s_lists (up_entries, NULL);
        //  The rows of the steps before, read and set aside.
        for (ah_msg_t *m; (m = s_expect (recorder, "OP_RECORD", 500)); )
            ah_msg_destroy (&m);
        s_secret_put ("acme", pa, "Authorization", secret);
        s_secret_put ("acme", pb, "Authorization", secret);
        s_egress_changed ("acme");      //  as the API's PUT does: applied to the next connection
        //  Two requests on one connection, pipelined, each with the
        //  sandbox's own Authorization: the upstream gets the secret,
        //  never the sandbox's; the client verified the server's leaf
        //  with the installation's CA alone.
        snprintf (t, sizeof t, "127.0.0.1:%d", pa);
        fd = s_tunnel_to (eport, t);
        CHECK (s_row (recorder, "egress", &row) && row.ok && strstr (row.detail, "TLS terminated")
               && strstr (row.detail, "'Authorization'") && !strstr (row.detail, secret));
        SSL_CTX *cctx = NULL;
        SSL *ssl = fd >= 0 ? s_client (fd, egress_ca_file, &cctx) : NULL;
        CHECK (ssl != NULL);
        //  The host's leaf, minted in the worker for this first connection.
        X509 *leaf = ssl ? SSL_get1_peer_certificate (ssl) : NULL;
        CHECK (leaf != NULL);
        char reqs [600];
        snprintf (reqs, sizeof reqs, "GET /one HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthorization: Bearer sandbox-own\r\n\r\n"
                  "POST /two HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nauthorization: x\r\nContent-Length: 5\r\n\r\nhello",
                  pa, pa);
        CHECK (ssl && SSL_write (ssl, reqs, (int) strlen (reqs)) == (int) strlen (reqs));
        CHECK (ssl && s_answer (ssl, got, sizeof got) && strstr (got, "ok /one"));
        CHECK (ssl && s_answer (ssl, got, sizeof got) && strstr (got, "ok /two"));
        char want_seen [300];
        snprintf (want_seen, sizeof want_seen, "auth=%s;auth=%s;", secret, secret);
        CHECK (streq (ua->seen, want_seen) && ua->requests == 2);
        s_client_end (ssl, cctx, fd, true);
        CHECK (s_row (recorder, "egress.end", &row) && strstr (row.detail, "header 'Authorization' added to 2 requests")
               && !strstr (row.detail, secret) && !strstr (row.error, secret));
        //  A request naming another host in the tunnel: the connection
        //  ends, the upstream gets nothing, the record says why.
        fd = s_tunnel_to (eport, t);
        CHECK (s_row (recorder, "egress", &row) && row.ok);
        ssl = fd >= 0 ? s_client (fd, egress_ca_file, &cctx) : NULL;
        {
            //  The next connection gets the same leaf: kept by the tunnel.
            X509 *again = ssl ? SSL_get1_peer_certificate (ssl) : NULL;
            CHECK (leaf && again && X509_cmp (leaf, again) == 0);
            X509_free (again);
            X509_free (leaf);
        }
        const char *evil = "GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n";
        CHECK (ssl && SSL_write (ssl, evil, (int) strlen (evil)) == (int) strlen (evil));
        CHECK (!ssl || !s_answer (ssl, got, sizeof got));
        CHECK (s_row (recorder, "egress.end", &row) && !row.ok
               && strstr (row.error, "the sandbox's request was refused: a Host header naming another host"));
        CHECK (ua->requests == 2);
        s_client_end (ssl, cctx, fd, false);
        //  A client that does not trust the installation's CA: its
        //  handshake fails, the record says so, the upstream gets nothing.
        fd = s_tunnel_to (eport, t);
        CHECK (s_row (recorder, "egress", &row) && row.ok);
        ssl = fd >= 0 ? s_client (fd, ca_file, &cctx) : NULL;
        CHECK (ssl == NULL);
        s_client_end (ssl, cctx, fd, false);
        CHECK (s_row (recorder, "egress.end", &row) && !row.ok && strstr (row.error, "TLS with the sandbox failed"));
        CHECK (ua->requests == 2);
        //  An upstream whose certificate does not verify: refused before
        //  the sandbox's client is told it is connected (502, the sentence).
        snprintf (t, sizeof t, "CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n", pb);
        s_ask (eport, t, answer, sizeof answer);
        CHECK (!strncmp (answer, "HTTP/1.1 502 ", 13) && strstr (answer, "certificate does not verify"));
        CHECK (s_row (recorder, "egress", &row) && !row.ok && strstr (row.error, "does not verify"));
        CHECK (ub->requests == 0);
        //  No secret: carried untouched; the client verifies the upstream's
        //  own certificate (its CA, not the installation's), and the
        //  upstream gets the sandbox's own header.
        CHECK (s_tls_get (eport, recorder, pc, ca_file, "/plain", false));
        CHECK (streq (uc->seen, "auth=Bearer sandbox-own;"));
        //  The secret removed (as the API's DELETE does): the very next
        //  connection to its host is carried untouched...
        s_sql ("DELETE FROM egress_secrets WHERE tenant = 'acme' AND port = %d", pa);
        s_egress_changed ("acme");
        CHECK (s_tls_get (eport, recorder, pa, ca_file, "/gone", false));
        snprintf (want_seen, sizeof want_seen, "auth=%s;auth=%s;auth=Bearer sandbox-own;", secret, secret);
        CHECK (streq (ua->seen, want_seen) && ua->requests == 3);
        //  ... and set again, the next one gets it.
        s_secret_put ("acme", pa, "Authorization", secret);
        s_egress_changed ("acme");
        CHECK (s_tls_get (eport, recorder, pa, egress_ca_file, "/back", true));
        snprintf (want_seen, sizeof want_seen, "auth=%s;auth=%s;auth=Bearer sandbox-own;auth=%s;", secret, secret,
                  secret);
        CHECK (streq (ua->seen, want_seen) && ua->requests == 4);
        //  The tenant removed (its rows, as the API's DELETE removes them):
        //  what the tunnel held of it goes; the next connection finds no
        //  list and no secret.
        s_sql ("DELETE FROM tenant_egress WHERE tenant = 'acme'");
        s_sql ("DELETE FROM egress_secrets WHERE tenant = 'acme'");
        s_egress_changed ("acme");
        snprintf (want, sizeof want, "CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n", pa);
        s_ask (eport, want, answer, sizeof answer);
        CHECK (!strncmp (answer, "HTTP/1.1 403 ", 13) && strstr (answer, "is on neither runtime"));
        CHECK (s_row (recorder, "egress", &row) && !row.ok);
        snprintf (want, sizeof want, "* %s", target);
        s_upstream_stop (ua, ta);
        s_upstream_stop (ub, tb);
        s_upstream_stop (uc, tc);
        s_lists (want, NULL);
    }
    ah_egress_ca_destroy (&egress_ca);
    ah_egress_ca_destroy (&up_ca);
    ah_egress_ca_destroy (&bad_ca);

    //  4e. A tenant's lists not held (its first request, the first after
    //  EGRESS_CHANGED) are read in a worker, never on the tunnel's thread:
    //  the requests wait for that read, parked, and go on once it is back.
    //  Held there (the test's hook), the read shows what may come meanwhile.
    //  Two first requests of the tenant at once: one read, both carried;
    //  the second a plain request, whose head, kept while it waited, is
    //  the first thing upstream (the echo sends it back).
    {
        int fills = s_fills_seen (0, 0);
        s_fills_hold (true);
        s_egress_changed ("acme");
        snprintf (want, sizeof want, "CONNECT %s HTTP/1.1\r\n\r\n", target);
        int a = s_send_req (eport, want);
        CHECK (s_fills_seen (fills + 1, 5000) == fills + 1);    //  read, held before it is handed back
        char plain [300];
        snprintf (plain, sizeof plain, "GET http://%s/parked HTTP/1.1\r\nHost: %s\r\n\r\n", target, target);
        int b = s_send_req (eport, plain);
        usleep (300 * 1000);                //  b reaches the tunnel, which waits for the same read
        CHECK (s_unanswered (a) && s_unanswered (b));
        CHECK (s_fills_seen (0, 0) == fills + 1);
        s_fills_hold (false);
        char head [1024];
        s_head (a, head, sizeof head);
        CHECK (!strncmp (head, "HTTP/1.1 200 ", 13));
        s_head (b, head, sizeof head);
        CHECK (streq (head, plain));
        CHECK (a >= 0 && s_echo_through (a, 1000));
        if (b >= 0) {
            char rest [64];
            shutdown (b, SHUT_WR);
            s_read_all (b, rest, sizeof rest);
            CHECK (!strncmp (rest, "EOF-SEEN ", 9));
        }
        CHECK (s_fills_seen (0, 0) == fills + 1);               //  one read for both
        if (a >= 0)
            close (a);
        if (b >= 0)
            close (b);
        //  The lists changed (EGRESS_CHANGED) while a read was in flight:
        //  what it read may be the rows before the change, so they are
        //  read again, and the request is decided on the new ones.
        fills = s_fills_seen (0, 0);
        s_fills_hold (true);
        s_egress_changed ("acme");
        a = s_send_req (eport, want);
        CHECK (s_fills_seen (fills + 1, 5000) == fills + 1);    //  it read '* <target>'
        s_lists_quiet (NULL, NULL);
        s_egress_changed ("acme");          //  handled by the tunnel while the read is held
        CHECK (s_unanswered (a));
        s_fills_hold (false);
        char rest [2048];
        s_head (a, head, sizeof head);
        size_t n = a >= 0 ? s_read_all (a, rest, sizeof rest) : 0;
        CHECK (n > 0 && !strncmp (head, "HTTP/1.1 403 ", 13) && strstr (rest, "is on neither runtime"));
        CHECK (s_fills_seen (fills + 2, 5000) == fills + 2);    //  read again, once
        if (a >= 0)
            close (a);
        snprintf (want, sizeof want, "* %s", target);
        s_lists (want, NULL);
        //  Drained: the rows of this part.
        for (ah_msg_t *m; (m = s_expect (recorder, "OP_RECORD", 300)); )
            ah_msg_destroy (&m);
    }

    //  5. A connection open while the sandbox goes: ended, on the record;
    //  and a request still parked (its tenant's read held) freed, on the
    //  record too.
    fd = s_tunnel_to (eport, target);
    CHECK (fd >= 0 && s_row (recorder, "egress", &row) && row.ok);
    int fills = s_fills_seen (0, 0);
    s_fills_hold (true);
    s_egress_changed ("acme");
    snprintf (want, sizeof want, "CONNECT %s HTTP/1.1\r\n\r\n", target);
    int parked = s_send_req (eport, want);
    CHECK (s_fills_seen (fills + 1, 5000) == fills + 1);
    usleep (100 * 1000);
    ah_sandboxd_stop (&sd);
    bool ended = false, unparked = false;
    for (int i = 0; i < 20 && !(ended && unparked); i++) {
        ah_msg_t *r = s_expect (recorder, "OP_RECORD", 5000);
        if (!r)
            break;
        const char *kind = ah_msg_str (r, "kind"), *error = ah_msg_str (r, "error");
        fprintf (stderr, "(record %s error '%s')\n", kind, error ? error : "");
        bool lost = !ah_msg_bool (r, "ok", true) && error && strstr (error, "sandbox connection lost");
        if (lost && streq (kind, "egress.end"))
            ended = true;
        if (lost && streq (kind, "egress") && strstr (error, "ended before it was decided"))
            unparked = true;
        ah_msg_destroy (&r);
    }
    s_fills_hold (false);
    CHECK (ended && unparked);
    if (parked >= 0)
        close (parked);
    if (fd >= 0)
        close (fd);

    zactor_destroy (&tunnel);
    zsock_destroy (&api);
    zsock_destroy (&recorder);
    zsock_destroy (&lifecycle);
    zactor_destroy (&bus);
    ah_config_destroy (&config);
    shutdown (lfd, SHUT_RDWR);
    close (lfd);
    pthread_join (echo, NULL);
    return s_teardown ();
}
