/*  hostd/relay.c: hostd's tunnel relay (see relay.h).                */
#include "hostd/relay.h"
#include "common/log.h"
#include "common/str.h"
#include "config/config.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define AREA            "relay"
#define MAX_CONNS       4096
#define CONNECT_MS      10000
#define BUF_SIZE        (64 * 1024)

typedef struct conn_s conn_t;

struct ah_relay_s {
    char       *path;
    char       *host;
    char       *port;
    bool        tls;
    SSL_CTX    *ctx;
    int         listen_fd;
    int         stop [2];               //  closing [1] wakes every thread
    pthread_t   acceptor;
    pthread_mutex_t lock;               //  guards conns and n_conns
    conn_t     *conns;
    size_t      n_conns;
};

struct conn_s {
    ah_relay_t *relay;
    int         in;                     //  the sandbox's side (unix)
    pthread_t   thread;
    bool        done;                   //  the thread has ended (reaped by the acceptor)
    conn_t     *next;
};

//  -------------------------------------------------------------------------
//  Targets

//  A TCP connection to host:port within CONNECT_MS, or -1 with *err.
static int
s_dial (const char *host, const char *port, char **err)
{
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;
    int g = getaddrinfo (host, port, &hints, &res);
    if (g) {
        *err = ah_strf ("cannot resolve %s: %s", host, gai_strerror (g));
        return -1;
    }
    int fd = -1, why = 0;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket (a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0)
            continue;
        if (connect (fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
            why = errno;
            close (fd);
            fd = -1;
            continue;
        }
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        int soerr = 0;
        socklen_t len = sizeof soerr;
        if (poll (&p, 1, CONNECT_MS) != 1
        ||  getsockopt (fd, SOL_SOCKET, SO_ERROR, &soerr, &len) || soerr) {
            why = soerr ? soerr : ETIMEDOUT;
            close (fd);
            fd = -1;
        }
    }
    freeaddrinfo (res);
    if (fd < 0) {
        *err = ah_strf ("cannot connect to %s port %s: %s", host, port, strerror (why ? why : EHOSTUNREACH));
        return -1;
    }
    int one = 1;
    setsockopt (fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl (fd, F_SETFL, fcntl (fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

static char *
s_ssl_error (void)
{
    unsigned long e = ERR_get_error ();
    char buf [256];
    ERR_error_string_n (e, buf, sizeof buf);
    return strdup (e ? buf : "the connection closed during the TLS handshake");
}

//  The TLS session over fd, the server's certificate checked for host.
static SSL *
s_tls (ah_relay_t *self, int fd, char **err)
{
    SSL *ssl = SSL_new (self->ctx);
    if (!ssl || !SSL_set_fd (ssl, fd)) {
        *err = strdup ("out of memory");
        SSL_free (ssl);
        return NULL;
    }
    SSL_set_tlsext_host_name (ssl, self->host);
    X509_VERIFY_PARAM *param = SSL_get0_param (ssl);
    if (!X509_VERIFY_PARAM_set1_ip_asc (param, self->host))
        X509_VERIFY_PARAM_set1_host (param, self->host, 0);
    struct timeval tv = { .tv_sec = CONNECT_MS / 1000 };
    setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ERR_clear_error ();
    if (SSL_connect (ssl) != 1) {
        long v = SSL_get_verify_result (ssl);
        char *why = v != X509_V_OK ? strdup (X509_verify_cert_error_string (v)) : s_ssl_error ();
        *err = ah_strf ("TLS with %s port %s: %s", self->host, self->port, why ? why : "?");
        free (why);
        SSL_free (ssl);
        return NULL;
    }
    tv.tv_sec = 0;
    setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return ssl;
}

//  -------------------------------------------------------------------------
//  One connection

//  Until fd is ready for events: 0, or -1 when the relay stops.
static int
s_wait (ah_relay_t *self, int fd, short events)
{
    struct pollfd p [2] = { { .fd = fd, .events = events }, { .fd = self->stop [0], .events = POLLIN } };
    if (poll (p, 2, -1) < 0 && errno != EINTR)
        return -1;
    return p [1].revents ? -1 : 0;
}

//  All of buf to fd (non-blocking: waits, watching the stop pipe too). 0 / -1.
static int
s_write_fd (ah_relay_t *self, int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write (fd, buf, len);
        if (n > 0) {
            buf += n;
            len -= (size_t) n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if ((n < 0 && errno != EAGAIN) || s_wait (self, fd, POLLOUT))
            return -1;
    }
    return 0;
}

//  All of buf through ssl (its socket non-blocking). 0 / -1.
static int
s_write_ssl (ah_relay_t *self, SSL *ssl, int fd, const char *buf, size_t len)
{
    while (len > 0) {
        int n = SSL_write (ssl, buf, (int) (len > INT32_MAX ? INT32_MAX : len));
        if (n > 0) {
            buf += n;
            len -= (size_t) n;
            continue;
        }
        int e = SSL_get_error (ssl, n);
        short ev = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
        if (!ev || s_wait (self, fd, ev))
            return -1;
    }
    return 0;
}

static void
s_carry (ah_relay_t *self, int in, int out, SSL *ssl)
{
    char *buf = malloc (BUF_SIZE);
    //  Both ends non-blocking: a write that must wait polls the stop pipe too.
    fcntl (in, F_SETFL, fcntl (in, F_GETFL) | O_NONBLOCK);
    fcntl (out, F_SETFL, fcntl (out, F_GETFL) | O_NONBLOCK);
    while (buf) {
        //  What TLS already decrypted is read before waiting again.
        bool pending = ssl && SSL_pending (ssl) > 0;
        struct pollfd p [3] = {
            { .fd = in, .events = POLLIN }, { .fd = out, .events = POLLIN },
            { .fd = self->stop [0], .events = POLLIN },
        };
        if (poll (p, 3, pending ? 0 : -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p [2].revents)
            break;
        if (p [0].revents) {
            ssize_t n = read (in, buf, BUF_SIZE);
            if (n < 0 && (errno == EINTR || errno == EAGAIN))
                ;
            else
            if (n <= 0)
                break;
            else
            if (ssl ? s_write_ssl (self, ssl, out, buf, (size_t) n)
                    : s_write_fd (self, out, buf, (size_t) n))
                break;
        }
        if (p [1].revents || pending) {
            if (ssl) {
                int n = SSL_read (ssl, buf, BUF_SIZE);
                if (n > 0) {
                    if (s_write_fd (self, in, buf, (size_t) n))
                        break;
                }
                else {
                    int e = SSL_get_error (ssl, n);
                    if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
                        break;
                }
            }
            else {
                ssize_t n = read (out, buf, BUF_SIZE);
                if (n < 0 && (errno == EINTR || errno == EAGAIN))
                    ;
                else
                if (n <= 0 || s_write_fd (self, in, buf, (size_t) n))
                    break;
            }
        }
    }
    free (buf);
}

static void *
s_conn_thread (void *arg)
{
    conn_t *c = arg;
    ah_relay_t *self = c->relay;
    char *err = NULL;
    int out = s_dial (self->host, self->port, &err);
    SSL *ssl = out >= 0 && self->tls ? s_tls (self, out, &err) : NULL;
    if (out >= 0 && (!self->tls || ssl))
        s_carry (self, c->in, out, ssl);
    else
        ah_warn (AREA, "a sandbox's tunnel connection cannot go on to the server: %s", err ? err : "?");
    free (err);
    if (ssl) {
        SSL_shutdown (ssl);
        SSL_free (ssl);
    }
    if (out >= 0)
        close (out);
    close (c->in);
    c->in = -1;
    pthread_mutex_lock (&self->lock);
    c->done = true;
    pthread_mutex_unlock (&self->lock);
    return NULL;
}

//  Joins the threads that have ended. all: every one (after stop).
static void
s_reap (ah_relay_t *self, bool all)
{
    while (true) {
        conn_t *found = NULL;
        pthread_mutex_lock (&self->lock);
        for (conn_t **pp = &self->conns; *pp; pp = &(*pp)->next)
            if (all || (*pp)->done) {
                found = *pp;
                *pp = found->next;
                self->n_conns--;
                break;
            }
        pthread_mutex_unlock (&self->lock);
        if (!found)
            return;
        pthread_join (found->thread, NULL);
        free (found);
    }
}

static void *
s_accept_thread (void *arg)
{
    ah_relay_t *self = arg;
    pthread_setname_np (pthread_self (), "ah-relay");
    while (true) {
        struct pollfd p [2] = { { .fd = self->listen_fd, .events = POLLIN },
                                { .fd = self->stop [0], .events = POLLIN } };
        if (poll (p, 2, 1000) < 0 && errno != EINTR)
            break;
        if (p [1].revents)
            break;
        s_reap (self, false);
        if (!(p [0].revents & POLLIN))
            continue;
        int fd = accept4 (self->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        pthread_mutex_lock (&self->lock);
        bool full = self->n_conns >= MAX_CONNS;
        pthread_mutex_unlock (&self->lock);
        conn_t *c = full ? NULL : calloc (1, sizeof *c);
        if (!c) {
            ah_warn (AREA, "a sandbox's tunnel connection is refused: %s",
                     full ? "too many connections" : "out of memory");
            close (fd);
            continue;
        }
        *c = (conn_t) { .relay = self, .in = fd };
        pthread_mutex_lock (&self->lock);
        if (pthread_create (&c->thread, NULL, s_conn_thread, c) != 0) {
            pthread_mutex_unlock (&self->lock);
            close (fd);
            free (c);
            continue;
        }
        c->next = self->conns;
        self->conns = c;
        self->n_conns++;
        pthread_mutex_unlock (&self->lock);
    }
    return NULL;
}

//  -------------------------------------------------------------------------
//  Start and stop

static int
s_listen_unix (const char *path, char **err)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen (path) >= sizeof sa.sun_path) {
        *err = ah_strf ("%s: longer than a unix socket path may be", path);
        return -1;
    }
    strcpy (sa.sun_path, path);
    char *dir = strdup (path);
    char *slash = dir ? strrchr (dir, '/') : NULL;
    if (slash && slash != dir) {
        *slash = 0;
        if (mkdir (dir, 0755) != 0 && errno != EEXIST) {
            *err = ah_strf ("cannot make %s: %s", dir, strerror (errno));
            free (dir);
            return -1;
        }
        chmod (dir, 0755);
    }
    free (dir);
    struct stat st;
    if (lstat (path, &st) == 0 && S_ISSOCK (st.st_mode))
        unlink (path);                  //  a previous hostd's (hostd holds its lock)
    int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind (fd, (struct sockaddr *) &sa, sizeof sa) != 0 || listen (fd, 128) != 0
    ||  chmod (path, 0666) != 0) {
        *err = ah_strf ("cannot listen on %s: %s", path, strerror (errno));
        if (fd >= 0)
            close (fd);
        return -1;
    }
    return fd;
}

//  Everything but the threads (not started, or joined).
static void
s_free (ah_relay_t *self)
{
    if (self->listen_fd >= 0) {
        close (self->listen_fd);
        unlink (self->path);
    }
    for (int i = 0; i < 2; i++)
        if (self->stop [i] >= 0)
            close (self->stop [i]);
    SSL_CTX_free (self->ctx);
    pthread_mutex_destroy (&self->lock);
    free (self->path);
    free (self->host);
    free (self->port);
    free (self);
}

ah_relay_t *
ah_relay_start (const char *socket_path, const char *target, const char *ca_file, char **err)
{
    ah_relay_t *self = calloc (1, sizeof *self);
    if (!self) {
        *err = strdup ("out of memory");
        return NULL;
    }
    self->listen_fd = self->stop [0] = self->stop [1] = -1;
    pthread_mutex_init (&self->lock, NULL);
    if (ah_config_relay_target (target, &self->tls, &self->host, &self->port)) {
        *err = ah_strf ("hostd.tunnel_relay = '%s': not tcp://HOST:PORT or tls://HOST:PORT",
                        target ? target : "");
        goto fail;
    }
    if (self->tls) {
        self->ctx = SSL_CTX_new (TLS_client_method ());
        if (!self->ctx) {
            *err = strdup ("cannot make a TLS context");
            goto fail;
        }
        SSL_CTX_set_min_proto_version (self->ctx, TLS1_2_VERSION);
        SSL_CTX_set_verify (self->ctx, SSL_VERIFY_PEER, NULL);
        SSL_CTX_clear_mode (self->ctx, SSL_MODE_AUTO_RETRY);
        if (ca_file ? SSL_CTX_load_verify_locations (self->ctx, ca_file, NULL) != 1
                    : SSL_CTX_set_default_verify_paths (self->ctx) != 1) {
            char *why = s_ssl_error ();
            *err = ah_strf ("cannot load the CA %s: %s", ca_file ? ca_file : "of the system",
                            why ? why : "?");
            free (why);
            goto fail;
        }
    }
    self->path = strdup (socket_path);
    if (!self->path || pipe2 (self->stop, O_CLOEXEC) != 0) {
        *err = strdup ("out of memory");
        goto fail;
    }
    if ((self->listen_fd = s_listen_unix (socket_path, err)) < 0)
        goto fail;
    if (pthread_create (&self->acceptor, NULL, s_accept_thread, self) != 0) {
        *err = strdup ("cannot start the relay's thread");
        goto fail;
    }
    ah_info (AREA, "sandboxes' tunnel connections on %s go on to %s", socket_path, target);
    return self;
fail:
    s_free (self);
    return NULL;
}

void
ah_relay_stop (ah_relay_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_relay_t *self = *self_p;
    close (self->stop [1]);             //  every poll on stop [0] wakes
    self->stop [1] = -1;
    pthread_join (self->acceptor, NULL);
    s_reap (self, true);
    s_free (self);
    *self_p = NULL;
}

//  -------------------------------------------------------------------------
//  The check

int
ah_relay_probe_socket (const char *socket_path, char **detail)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (!socket_path || strlen (socket_path) >= sizeof sa.sun_path) {
        *detail = strdup ("no tunnel socket");
        return -1;
    }
    strcpy (sa.sun_path, socket_path);
    int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect (fd, (struct sockaddr *) &sa, sizeof sa) != 0) {
        *detail = ah_strf ("%s: %s", socket_path, strerror (errno));
        if (fd >= 0)
            close (fd);
        return -1;
    }
    static const char req [] = "GET /tunnel HTTP/1.1\r\nHost: sandbox\r\nConnection: close\r\n\r\n";
    char buf [256] = "";
    size_t got = 0;
    int rc = -1;
    if (write (fd, req, sizeof req - 1) == (ssize_t) sizeof req - 1) {
        while (got < sizeof buf - 1 && !memchr (buf, '\n', got)) {
            struct pollfd p = { .fd = fd, .events = POLLIN };
            if (poll (&p, 1, CONNECT_MS + 2000) != 1)
                break;
            ssize_t n = read (fd, buf + got, sizeof buf - 1 - got);
            if (n <= 0)
                break;
            got += (size_t) n;
            buf [got] = 0;
        }
    }
    close (fd);
    int status = 0;
    if (sscanf (buf, "HTTP/1.%*d %d", &status) == 1 && status >= 100 && status < 600) {
        *detail = ah_strf ("%s answers (HTTP %d to a request without an upgrade)", socket_path,
                           status);
        rc = 0;
    }
    else
        *detail = ah_strf ("%s accepts a connection but nothing answers on it: the server's "
                           "tunnel is not behind it%s", socket_path,
                           got ? "" : " (the relay's log says why)");
    return rc;
}
