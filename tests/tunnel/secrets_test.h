/*  tests/tunnel/secrets_test.h: the pieces of tunnel.egress's part on
    secrets (docs/egress.md "Secrets"): HTTPS upstreams of the test's own
    on 127.0.0.1 (each a thread, its certificate from a CA the test made
    with common/egress_ca.h, one connection at a time, keep-alive), which
    write down every Authorization header they got; a TLS client that
    speaks through the proxy's CONNECT as curl would, trusting the CA it
    is given; a secret written into the database as the API writes it.
    Included once, by test_tunnel_egress.c.                               */
#ifndef AH_TEST_SECRETS_TEST_H
#define AH_TEST_SECRETS_TEST_H

#include "common/egress_ca.h"
#include "common/file.h"
#include "common/secretbox.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>

static int s_listener (int *port);     //  test_tunnel_egress.c

typedef struct {
    int fd;                         //  listening
    SSL_CTX *ctx;
    pthread_mutex_t lock;
    char seen [4096];               //  "auth=<value>;" or "auth=-;" per request, in order
    int requests;
} upstream_t;

static void s_up_note (upstream_t *u, const char *auth)
{
    pthread_mutex_lock (&u->lock);
    size_t n = strlen (u->seen);
    snprintf (u->seen + n, sizeof u->seen - n, "auth=%s;", auth ? auth : "-");
    u->requests++;
    pthread_mutex_unlock (&u->lock);
}

//  One request's head from ssl into buf (NUL-terminated): its length, 0 at the end.
static size_t s_ssl_head (SSL *ssl, char *buf, size_t size)
{
    size_t got = 0;
    while (got + 1 < size && (got < 4 || memcmp (buf + got - 4, "\r\n\r\n", 4))) {
        if (SSL_read (ssl, buf + got, 1) != 1)
            return 0;
        got++;
    }
    buf [got] = 0;
    return got;
}

//  A header's value in a head (first of name, any case), into out.
static bool s_header_of (const char *head, const char *name, char *out, size_t size)
{
    size_t n = strlen (name);
    for (const char *p = strstr (head, "\r\n"); p && p [2]; p = strstr (p + 2, "\r\n"))
        if (!strncasecmp (p + 2, name, n) && p [2 + n] == ':') {
            const char *v = p + 3 + n;
            while (*v == ' ')
                v++;
            size_t len = strcspn (v, "\r");
            snprintf (out, size, "%.*s", (int) len, v);
            return true;
        }
    return false;
}

static void *s_upstream (void *arg)
{
    upstream_t *u = (upstream_t *) arg;
    while (true) {
        int c = accept (u->fd, NULL, NULL);
        if (c < 0)
            break;
        SSL *ssl = SSL_new (u->ctx);
        SSL_set_fd (ssl, c);
        if (SSL_accept (ssl) == 1) {
            char head [8192], auth [1024], len [32];
            while (s_ssl_head (ssl, head, sizeof head)) {
                bool has = s_header_of (head, "authorization", auth, sizeof auth);
                s_up_note (u, has ? auth : NULL);
                long body = s_header_of (head, "content-length", len, sizeof len) ? atol (len) : 0;
                char skip [256];
                while (body > 0) {
                    int r = SSL_read (ssl, skip, body < (long) sizeof skip ? (int) body : (int) sizeof skip);
                    if (r <= 0)
                        break;
                    body -= r;
                }
                char path [200] = "?", answer [400];
                sscanf (head, "%*s %199s", path);
                snprintf (answer, sizeof answer, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\nok %s\n",
                          strlen (path) + 4, path);
                SSL_write (ssl, answer, (int) strlen (answer));
            }
        }
        SSL_shutdown (ssl);
        SSL_free (ssl);
        close (c);
        ERR_clear_error ();
    }
    return NULL;
}

//  An HTTPS upstream on 127.0.0.1 whose certificate ca signed (for the
//  address 127.0.0.1); *port its port.
static upstream_t *s_upstream_start (const ah_egress_ca_t *ca, int *port, pthread_t *thread)
{
    upstream_t *u = calloc (1, sizeof *u);
    pthread_mutex_init (&u->lock, NULL);
    X509 *cert = NULL;
    EVP_PKEY *key = NULL;
    const char *why = NULL;
    CHECK (ah_egress_ca_leaf (ca, "127.0.0.1", true, 3600, &cert, &key, &why) == 0);
    u->ctx = SSL_CTX_new (TLS_server_method ());
    CHECK (SSL_CTX_use_certificate (u->ctx, cert) == 1 && SSL_CTX_use_PrivateKey (u->ctx, key) == 1);
    X509_free (cert);
    EVP_PKEY_free (key);
    u->fd = s_listener (port);
    CHECK (pthread_create (thread, NULL, s_upstream, u) == 0);
    return u;
}

static void s_upstream_stop (upstream_t *u, pthread_t thread)
{
    shutdown (u->fd, SHUT_RDWR);
    close (u->fd);
    pthread_join (thread, NULL);
    SSL_CTX_free (u->ctx);
    pthread_mutex_destroy (&u->lock);
    free (u);
}

//  TLS over fd (a CONNECT through the proxy) trusting the CA in ca_file
//  alone, for the address 127.0.0.1. NULL: the handshake failed.
static SSL *s_client (int fd, const char *ca_file, SSL_CTX **ctx_p)
{
    SSL_CTX *ctx = SSL_CTX_new (TLS_client_method ());
    CHECK (SSL_CTX_load_verify_locations (ctx, ca_file, NULL) == 1);
    SSL_CTX_set_verify (ctx, SSL_VERIFY_PEER, NULL);
    SSL *ssl = SSL_new (ctx);
    X509_VERIFY_PARAM_set1_ip_asc (SSL_get0_param (ssl), "127.0.0.1");
    SSL_set_fd (ssl, fd);
    *ctx_p = ctx;
    if (SSL_connect (ssl) != 1) {
        fprintf (stderr, "client TLS failed: %s (verify %s)\n", ERR_reason_error_string (ERR_peek_last_error ()),
                 X509_verify_cert_error_string (SSL_get_verify_result (ssl)));
        ERR_clear_error ();
        SSL_free (ssl);
        return NULL;
    }
    return ssl;
}

//  The client's end: close_notify (when clean), then the socket.
static void s_client_end (SSL *ssl, SSL_CTX *ctx, int fd, bool clean)
{
    if (ssl && clean)
        SSL_shutdown (ssl);
    SSL_free (ssl);
    SSL_CTX_free (ctx);
    if (fd >= 0)
        close (fd);
}

//  One answer (head and Content-Length body) read from ssl into out.
static bool s_answer (SSL *ssl, char *out, size_t size)
{
    size_t n = s_ssl_head (ssl, out, size);
    char len [32];
    if (!n || !s_header_of (out, "content-length", len, sizeof len))
        return false;
    long body = atol (len);
    while (body > 0 && n + 1 < size) {
        int r = SSL_read (ssl, out + n, (int) (body < (long) (size - 1 - n) ? body : (long) (size - 1 - n)));
        if (r <= 0)
            return false;
        n += (size_t) r;
        body -= r;
    }
    out [n] = 0;
    return body == 0;
}

//  tenant's secret for 127.0.0.1:port, sealed as the API seals it (the
//  tunnel is not told: s_egress_changed).
static void s_secret_put (const char *tenant, int port, const char *header, const char *value)
{
    char path [400];
    snprintf (path, sizeof path, "%s/%s", s_dir, AH_SECRETBOX_FILE);
    uint8_t key [AH_SECRETBOX_KEY];
    char *why = NULL;
    CHECK (ah_keyfile_load (path, key, sizeof key, true, &why) == 0);
    free (why);
    size_t aad_n = 0, sealed_n = 0;
    uint8_t *sealed = NULL;
    char *aad = ah_secretbox_egress_aad (tenant, "127.0.0.1", port, header, &aad_n);
    CHECK (ah_secretbox_seal (key, value, strlen (value), aad, aad_n, &sealed, &sealed_n) == 0);
    char *err = NULL;
    ah_store_t *st = ah_store_open (s_db, false, &err);
    sqlite3_stmt *stmt = st ? ah_store_prepare (st, "INSERT OR REPLACE INTO egress_secrets (tenant, host, port, header,"
                                                     " value, created_at) VALUES (:t, '127.0.0.1', :p, :h, :v, 1)") : NULL;
    CHECK (stmt && !ah_store_bind_text (stmt, ":t", tenant) && !ah_store_bind_int64 (stmt, ":p", port)
           && !ah_store_bind_text (stmt, ":h", header) && !ah_store_bind_blob (stmt, ":v", sealed, sealed_n)
           && ah_store_step (st, stmt) == SQLITE_DONE);
    if (stmt)
        sqlite3_reset (stmt);
    ah_store_close (&st);
    free (err);
    free (aad);
    free (sealed);
}

#endif
