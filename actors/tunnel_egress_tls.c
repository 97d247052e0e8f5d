/*  actors/tunnel_egress_tls.c: secrets the sandbox never sees
    (docs/egress.md "Secrets"). A CONNECT to a host and port a tenant
    attached a header to is not carried as it is: the server terminates
    the sandbox's TLS with a leaf of the installation's CA (which
    sandboxd made the sandbox trust, sandboxd/trust.h), adds the header
    to each request (proto/httpinject.h), and speaks TLS on to the real
    host, verifying its certificate and name against the system's store
    and sandbox.egress_upstream_ca_file.

    DESIGN. Three steps, on two threads.
    - ah_tun_tls_prepare (the actor's thread, when the request is
      allowed and the tenant has a secret for host:port: its row from
      the tunnel's cache, tunnel_egress.c; none: the connection is
      carried untouched, this is not called). The leaf for the host when
      self->egress_leaves holds one younger than 12 hours, and a job
      part holding copies: the sealed value, the key file's path, a
      reference on the upstream context.
    - ah_tun_tls_work (a worker, after the connect): the secrets key
      read, the value opened, the TLS handshake with the upstream made
      and verified, on memory BIOs pumped to the socket with poll (one
      deadline with the connect; the actor's stop honoured), so that a
      host whose certificate does not verify is refused before the
      sandbox's client is told it is connected (502, the sentence);
      then the host's leaf minted when none was cached (a P-256 key and
      the CA's signature; the CA is only read, common/egress_ca.h, and
      lives until the actor's destroy, after its workers are joined).
    - ah_tun_tls_take (the actor's thread, the job back): a minted leaf
      cached for the host (12 hours), and the terminated connection:
      the server side toward the sandbox (the leaf, memory BIOs), the
      client side toward the upstream (the worker's), the header
      injector. From then on the relay (tunnel_egress_relay.c) hands it
      the bytes each way and gets back the bytes for each side: nothing
      blocks, no thread but the actor's touches it.

    The value lives in the job, then in the injector; both wipe it. It is
    never logged, recorded or sent on the bus: the audit says the header's
    name and how many requests got it.                                   */
#include "actors/tunnel_int.h"
#include "common/egress_ca.h"
#include "common/file.h"
#include "common/log.h"
#include "common/secretbox.h"
#include "common/str.h"
#include "proto/egress.h"
#include "proto/httpinject.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define LEAF_VALIDITY_S     (24 * 3600)
#define LEAF_RENEW_MS       (12 * 3600 * 1000LL)    //  a cached leaf younger than this is used
#define PLAIN_CHUNK         16384

typedef struct {
    X509 *cert;
    EVP_PKEY *key;
    int64_t made_ms;
} leaf_t;

struct ah_tun_tls_job_t {
    char tenant [128];
    char host [AH_EGRESS_HOST_MAX + 1];
    int port;
    bool literal;
    char header [AH_EGRESS_SECRET_NAME_MAX + 1];
    uint8_t *sealed;
    size_t sealed_n;
    char *key_path;
    SSL_CTX *up_ctx;                //  a reference
    X509 *leaf;                     //  references (NULL: minted by the worker)
    EVP_PKEY *leaf_key;
    const ah_egress_ca_t *ca;       //  borrowed: the actor's, which outlives its workers (actor.h)
    bool minted;                    //  the worker minted leaf: kept by ah_tun_tls_take
    //  The worker's outcome
    char *value;                    //  opened (wiped when freed)
    size_t value_n;
    SSL *up;                        //  handshake done, memory BIOs
    uint64_t sent, received;        //  the handshake's bytes on the socket
};

struct ah_tun_tls_t {
    SSL *down;                      //  toward the sandbox: we are its server
    BIO *down_in, *down_out;
    SSL *up;                        //  toward the upstream: we are its client
    BIO *up_in, *up_out;
    ah_http_inject_t *inject;
    ah_buf_t plain;
    char header [AH_EGRESS_SECRET_NAME_MAX + 1];
    bool down_closed, up_closed;    //  close_notify sent
};

static void s_leaf_free (void **item)
{
    leaf_t *l = (leaf_t *) *item;
    if (l) {
        X509_free (l->cert);
        EVP_PKEY_free (l->key);
        free (l);
    }
    *item = NULL;
}

//  The reason OpenSSL's queue holds, as text (the queue emptied).
static const char *s_ssl_reason (void)
{
    unsigned long e = ERR_peek_last_error ();
    const char *r = e ? ERR_reason_error_string (e) : NULL;
    ERR_clear_error ();
    return r ? r : "no reason given";
}

void ah_tun_egress_tls_init (self_t *self, const ah_config_t *config)
{
    char *why = NULL;
    if (config && config->data_dir) {
        self->egress_ca = ah_egress_ca_load (config->data_dir, false, &why);
        self->secrets_key_path = ah_strf ("%s/%s", config->data_dir, AH_SECRETBOX_FILE);
    }
    else
        why = ah_strf ("no data directory");
    if (!self->egress_ca) {
        self->egress_ca_why = why ? why : ah_strf ("?");
        why = NULL;
        ah_warn (AREA, "egress: no egress CA (%s): hosts with a secret are refused", self->egress_ca_why);
    }
    free (why);
    SSL_CTX *up = SSL_CTX_new (TLS_client_method ());
    SSL_CTX *down = SSL_CTX_new (TLS_server_method ());
    if (up && down && SSL_CTX_set_min_proto_version (up, TLS1_2_VERSION) == 1
    &&  SSL_CTX_set_min_proto_version (down, TLS1_2_VERSION) == 1
    &&  SSL_CTX_set_default_verify_paths (up) == 1) {
        SSL_CTX_set_verify (up, SSL_VERIFY_PEER, NULL);
        const char *extra = config ? config->egress_upstream_ca_file : NULL;
        if (extra && X509_STORE_load_file (SSL_CTX_get_cert_store (up), extra) != 1)
            ah_warn (AREA, "egress: sandbox.egress_upstream_ca_file %s cannot be read (%s): only the system's "
                     "store verifies the hosts of secrets", extra, s_ssl_reason ());
        else if (extra)
            ah_info (AREA, "egress: the hosts of secrets are verified with the system's store and %s", extra);
        SSL_CTX_set_options (down, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);
        SSL_CTX_set_options (up, SSL_OP_NO_RENEGOTIATION);
        SSL_CTX_set_num_tickets (down, 0);     //  nothing resumes: a leaf may change
        self->egress_upstream_ctx = up;
        self->egress_server_ctx = down;
        up = down = NULL;
    }
    SSL_CTX_free (up);
    SSL_CTX_free (down);
    ERR_clear_error ();
    if ((self->egress_leaves = zhashx_new ()))
        zhashx_set_destructor (self->egress_leaves, s_leaf_free);
}

void ah_tun_egress_tls_destroy (self_t *self)
{
    ah_egress_ca_destroy (&self->egress_ca);
    free (self->egress_ca_why);
    self->egress_ca_why = NULL;
    free (self->secrets_key_path);
    self->secrets_key_path = NULL;
    SSL_CTX_free (self->egress_upstream_ctx);
    SSL_CTX_free (self->egress_server_ctx);
    self->egress_upstream_ctx = self->egress_server_ctx = NULL;
    zhashx_destroy (&self->egress_leaves);
}

void ah_tun_tls_job_free (ah_tun_tls_job_t **job_p)
{
    ah_tun_tls_job_t *job = job_p ? *job_p : NULL;
    if (!job)
        return;
    if (job->value)
        OPENSSL_cleanse (job->value, job->value_n);
    free (job->value);
    free (job->sealed);
    free (job->key_path);
    SSL_free (job->up);
    SSL_CTX_free (job->up_ctx);
    X509_free (job->leaf);
    EVP_PKEY_free (job->leaf_key);
    free (job);
    *job_p = NULL;
}

//  The host's leaf, when one younger than LEAF_RENEW_MS is cached.
static leaf_t *s_leaf (self_t *self, const char *host)
{
    leaf_t *l = self->egress_leaves ? (leaf_t *) zhashx_lookup (self->egress_leaves, host) : NULL;
    return l && zclock_mono () - l->made_ms < LEAF_RENEW_MS ? l : NULL;
}

//  A leaf a worker minted, cached for host (references taken).
static void s_leaf_keep (self_t *self, const char *host, X509 *cert, EVP_PKEY *key)
{
    leaf_t *l = self->egress_leaves ? calloc (1, sizeof *l) : NULL;
    if (!l)
        return;                         //  minted again next time
    X509_up_ref (cert);
    EVP_PKEY_up_ref (key);
    l->cert = cert;
    l->key = key;
    l->made_ms = zclock_mono ();
    zhashx_update (self->egress_leaves, host, l);     //  the old one (if any) freed
}

int ah_tun_tls_prepare (self_t *self, const char *tenant, const ah_tun_secret_t *secret, const char *host,
                        int port, bool literal, ah_tun_tls_job_t **job_p, char *why, size_t why_size)
{
    *job_p = NULL;
    if (!self->egress_ca || !self->egress_upstream_ctx || !self->egress_server_ctx) {
        snprintf (why, why_size, "egress failed: %s:%d has a secret of tenant '%s', but this server cannot terminate "
                  "TLS (%s)", host, port, tenant, self->egress_ca_why ? self->egress_ca_why : "no TLS context");
        return -1;
    }
    leaf_t *leaf = s_leaf (self, host);
    ah_tun_tls_job_t *job = calloc (1, sizeof *job);
    if (!job || !secret->sealed_n || !(job->sealed = malloc (secret->sealed_n))
    ||  !(job->key_path = strdup (self->secrets_key_path ? self->secrets_key_path : ""))) {
        snprintf (why, why_size, "egress failed: %s:%d: out of memory", host, port);
        ah_tun_tls_job_free (&job);
        return -1;
    }
    memcpy (job->sealed, secret->sealed, secret->sealed_n);
    job->sealed_n = secret->sealed_n;
    snprintf (job->tenant, sizeof job->tenant, "%s", tenant);
    snprintf (job->host, sizeof job->host, "%s", host);
    snprintf (job->header, sizeof job->header, "%s", secret->header);
    job->port = port;
    job->literal = literal;
    SSL_CTX_up_ref (self->egress_upstream_ctx);
    job->up_ctx = self->egress_upstream_ctx;
    if (leaf) {
        X509_up_ref (leaf->cert);
        EVP_PKEY_up_ref (leaf->key);
        job->leaf = leaf->cert;
        job->leaf_key = leaf->key;
    }
    else
        job->ca = self->egress_ca;      //  none yet (or an old one): the worker mints it
    *job_p = job;
    return 0;
}

void ah_tun_tls_job_bytes (const ah_tun_tls_job_t *job, uint64_t *sent, uint64_t *received)
{
    *sent = job ? job->sent : 0;
    *received = job ? job->received : 0;
}

//  What wbio holds, sent whole on the blocking-by-poll socket (counted
//  in *sent). 0 / -1.
static int s_flush_fd (BIO *wbio, int fd, int64_t deadline, atomic_bool *stop, uint64_t *sent)
{
    char buf [16384];
    int n;
    while ((n = BIO_read (wbio, buf, sizeof buf)) > 0) {
        for (int off = 0; off < n; ) {
            ssize_t w = send (fd, buf + off, (size_t) (n - off), MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0) {
                off += (int) w;
                *sent += (uint64_t) w;
                continue;
            }
            if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                return -1;
            int64_t left = deadline - zclock_mono ();
            if (left <= 0 || atomic_load (stop))
                return -1;
            struct pollfd p = { .fd = fd, .events = POLLOUT };
            poll (&p, 1, left > 200 ? 200 : (int) left);
        }
    }
    return 0;
}

int ah_tun_tls_work (ah_tun_tls_job_t *job, int fd, int64_t deadline, atomic_bool *stop,
                     char *error, size_t error_size)
{
    //  The value.
    uint8_t key [AH_SECRETBOX_KEY];
    char *kwhy = NULL;
    if (ah_keyfile_load (job->key_path, key, sizeof key, false, &kwhy)) {
        snprintf (error, error_size, "egress failed: the secret for %s:%d cannot be opened: %s", job->host,
                  job->port, kwhy ? kwhy : "the secrets key is not there");
        free (kwhy);
        return -1;
    }
    size_t aad_n = 0;
    char *aad = ah_secretbox_egress_aad (job->tenant, job->host, job->port, job->header, &aad_n);
    int opened = aad ? ah_secretbox_open (key, job->sealed, job->sealed_n, aad, aad_n, &job->value, &job->value_n) : -1;
    OPENSSL_cleanse (key, sizeof key);
    free (aad);
    const char *vwhy = NULL;
    if (opened || ah_egress_secret_value_check (job->value, job->value_n, &vwhy)) {
        snprintf (error, error_size, "egress failed: the secret for %s:%d does not open with this server's "
                  "secrets key (set it again)", job->host, job->port);
        return -1;
    }
    //  The upstream's TLS, verified.
    SSL *ssl = SSL_new (job->up_ctx);
    BIO *rbio = BIO_new (BIO_s_mem ()), *wbio = BIO_new (BIO_s_mem ());
    if (!ssl || !rbio || !wbio) {
        SSL_free (ssl);
        BIO_free (rbio);
        BIO_free (wbio);
        snprintf (error, error_size, "egress failed: out of memory");
        return -1;
    }
    SSL_set_bio (ssl, rbio, wbio);
    SSL_set_connect_state (ssl);
    if (!job->literal)
        SSL_set_tlsext_host_name (ssl, job->host);
    if (job->literal)
        X509_VERIFY_PARAM_set1_ip_asc (SSL_get0_param (ssl), job->host);
    else
        SSL_set1_host (ssl, job->host);
    int rc = -1;
    while (true) {
        int r = SSL_do_handshake (ssl);
        if (s_flush_fd (wbio, fd, deadline, stop, &job->sent)) {
            snprintf (error, error_size, "egress failed: %s:%d: the TLS handshake could not be sent", job->host,
                      job->port);
            break;
        }
        if (r == 1) {
            rc = 0;
            break;
        }
        int e = SSL_get_error (ssl, r);
        if (e != SSL_ERROR_WANT_READ) {
            long v = SSL_get_verify_result (ssl);
            if (v != X509_V_OK)
                snprintf (error, error_size, "egress failed: %s:%d's certificate does not verify: %s (the system's "
                          "store, and sandbox.egress_upstream_ca_file)", job->host, job->port,
                          X509_verify_cert_error_string (v));
            else
                snprintf (error, error_size, "egress failed: the TLS handshake with %s:%d failed: %s", job->host,
                          job->port, s_ssl_reason ());
            break;
        }
        int64_t left = deadline - zclock_mono ();
        if (left <= 0 || atomic_load (stop)) {
            snprintf (error, error_size, "egress failed: %s:%d did not finish its TLS handshake in time", job->host,
                      job->port);
            break;
        }
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll (&p, 1, left > 200 ? 200 : (int) left) <= 0)
            continue;
        char buf [16384];
        ssize_t n = recv (fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            snprintf (error, error_size, "egress failed: %s:%d closed the connection during the TLS handshake",
                      job->host, job->port);
            break;
        }
        if (n > 0) {
            BIO_write (rbio, buf, (int) n);
            job->received += (uint64_t) n;
        }
    }
    //  The host's leaf, when none was cached: a P-256 key and the CA's
    //  signature, here rather than on the tunnel's thread.
    const char *lwhy = NULL;
    if (!rc && !job->leaf
    &&  ah_egress_ca_leaf (job->ca, job->host, job->literal, LEAF_VALIDITY_S, &job->leaf, &job->leaf_key, &lwhy)) {
        snprintf (error, error_size, "egress failed: %s:%d: %s", job->host, job->port, lwhy ? lwhy : "no leaf");
        rc = -1;
    }
    else if (!rc && !job->leaf_key)
        rc = -1;
    else if (!rc && job->ca)
        job->minted = true;
    ERR_clear_error ();
    if (rc)
        SSL_free (ssl);
    else
        job->up = ssl;
    return rc;
}

ah_tun_tls_t *ah_tun_tls_take (self_t *self, ah_tun_tls_job_t *job, const char **why)
{
    ah_tun_tls_t *t = calloc (1, sizeof *t);
    *why = "out of memory";
    if (!t || !job->up || !self->egress_server_ctx)
        goto fail;
    t->down = SSL_new (self->egress_server_ctx);
    t->down_in = BIO_new (BIO_s_mem ());
    t->down_out = BIO_new (BIO_s_mem ());
    if (!t->down || !t->down_in || !t->down_out) {
        BIO_free (t->down_in);
        BIO_free (t->down_out);
        t->down_in = t->down_out = NULL;
        goto fail;
    }
    SSL_set_bio (t->down, t->down_in, t->down_out);
    SSL_set_accept_state (t->down);
    if (SSL_use_certificate (t->down, job->leaf) != 1 || SSL_use_PrivateKey (t->down, job->leaf_key) != 1) {
        *why = "the host's certificate cannot be used";
        goto fail;
    }
    if (job->minted)
        s_leaf_keep (self, job->host, job->leaf, job->leaf_key);
    t->up = job->up;
    job->up = NULL;
    t->up_in = SSL_get_rbio (t->up);
    t->up_out = SSL_get_wbio (t->up);
    if (!(t->inject = ah_http_inject_new (job->host, job->port, job->header, job->value)))
        goto fail;
    snprintf (t->header, sizeof t->header, "%s", job->header);
    ERR_clear_error ();
    return t;
fail:
    ERR_clear_error ();
    ah_tun_tls_free (&t);
    return NULL;
}

void ah_tun_tls_free (ah_tun_tls_t **t_p)
{
    ah_tun_tls_t *t = t_p ? *t_p : NULL;
    if (!t)
        return;
    SSL_free (t->down);
    SSL_free (t->up);
    ah_http_inject_destroy (&t->inject);
    if (ah_buf_size (&t->plain))
        OPENSSL_cleanse (ah_buf_head (&t->plain), ah_buf_size (&t->plain));
    ah_buf_free (&t->plain);
    free (t);
    *t_p = NULL;
}

//  What a memory BIO holds, appended to out. 0 / -1.
static int s_drain (BIO *bio, ah_buf_t *out)
{
    size_t n = BIO_ctrl_pending (bio);
    if (!n)
        return 0;
    uint8_t *p = ah_buf_reserve (out, n);
    if (!p)
        return -1;
    int r = BIO_read (bio, p, (int) n);
    if (r > 0)
        ah_buf_commit (out, (size_t) r);
    return 0;
}

bool ah_tun_tls_ready (const ah_tun_tls_t *t)
{
    return t && SSL_is_init_finished (t->down);
}

const char *ah_tun_tls_header (const ah_tun_tls_t *t)
{
    return t ? t->header : "";
}

uint64_t ah_tun_tls_requests (const ah_tun_tls_t *t)
{
    return t ? ah_http_inject_requests (t->inject) : 0;
}

//  Reads from one side's TLS what it decrypts, each piece handed to
//  pass. 1 when that side closed its TLS (close_notify), 0, -1 with why.
static int s_read_all (SSL *ssl, int (*pass) (ah_tun_tls_t *, const uint8_t *, size_t, const char **),
                       ah_tun_tls_t *t, const char *side, char *why, size_t why_size)
{
    uint8_t buf [PLAIN_CHUNK];
    while (true) {
        int r = SSL_read (ssl, buf, sizeof buf);
        if (r > 0) {
            const char *pwhy = NULL;
            int prc = pass (t, buf, (size_t) r, &pwhy);
            OPENSSL_cleanse (buf, (size_t) r);
            if (prc) {
                snprintf (why, why_size, "%s", pwhy ? pwhy : "refused");
                return -1;
            }
            continue;
        }
        int e = SSL_get_error (ssl, r);
        if (e == SSL_ERROR_WANT_READ)
            return 0;
        if (e == SSL_ERROR_ZERO_RETURN)
            return 1;
        snprintf (why, why_size, "TLS with the %s failed: %s", side, s_ssl_reason ());
        return -1;
    }
}

//  The sandbox's plaintext: through the injector, encrypted toward the upstream.
static int s_to_upstream (ah_tun_tls_t *t, const uint8_t *p, size_t n, const char **why)
{
    if (ah_http_inject_feed (t->inject, p, n, &t->plain, why))
        return -1;
    size_t size = ah_buf_size (&t->plain);
    int rc = size && SSL_write (t->up, ah_buf_head (&t->plain), (int) size) != (int) size ? -1 : 0;
    OPENSSL_cleanse (ah_buf_head (&t->plain), size);
    ah_buf_clear (&t->plain);
    if (rc)
        *why = "the upstream's TLS did not take a request";
    return rc;
}

//  The upstream's plaintext, encrypted toward the sandbox.
static int s_to_sandbox (ah_tun_tls_t *t, const uint8_t *p, size_t n, const char **why)
{
    if (SSL_write (t->down, p, (int) n) != (int) n) {
        *why = "the sandbox's TLS did not take an answer";
        return -1;
    }
    return 0;
}

int ah_tun_tls_from_sandbox (ah_tun_tls_t *t, const uint8_t *in, size_t n, ah_buf_t *to_sandbox,
                             ah_buf_t *to_upstream, char *why, size_t why_size)
{
    char inner [200];
    if (n && BIO_write (t->down_in, in, (int) n) != (int) n) {
        snprintf (why, why_size, "out of memory");
        return -1;
    }
    int rc = s_read_all (t->down, s_to_upstream, t, "sandbox", inner, sizeof inner);
    if (rc < 0)
        snprintf (why, why_size, strncmp (inner, "TLS", 3) ? "the sandbox's request was refused: %s" : "%s", inner);
    if (rc == 1 && !t->up_closed) {
        t->up_closed = true;            //  its close_notify, passed on
        SSL_shutdown (t->up);
    }
    if (s_drain (t->down_out, to_sandbox) || s_drain (t->up_out, to_upstream)) {
        snprintf (why, why_size, "out of memory");
        rc = -1;
    }
    ERR_clear_error ();
    return rc < 0 ? -1 : 0;
}

int ah_tun_tls_from_upstream (ah_tun_tls_t *t, const uint8_t *in, size_t n, ah_buf_t *to_sandbox,
                              ah_buf_t *to_upstream, char *why, size_t why_size)
{
    if (n && BIO_write (t->up_in, in, (int) n) != (int) n) {
        snprintf (why, why_size, "out of memory");
        return -1;
    }
    int rc = s_read_all (t->up, s_to_sandbox, t, "upstream", why, why_size);
    if (rc == 1 && !t->down_closed) {
        t->down_closed = true;
        SSL_shutdown (t->down);
    }
    if (s_drain (t->down_out, to_sandbox) || s_drain (t->up_out, to_upstream)) {
        snprintf (why, why_size, "out of memory");
        rc = -1;
    }
    ERR_clear_error ();
    return rc < 0 ? -1 : 0;
}

void ah_tun_tls_close (ah_tun_tls_t *t, bool toward_sandbox, ah_buf_t *out)
{
    bool *closed = toward_sandbox ? &t->down_closed : &t->up_closed;
    if (*closed)
        return;
    *closed = true;
    SSL_shutdown (toward_sandbox ? t->down : t->up);
    s_drain (toward_sandbox ? t->down_out : t->up_out, out);
    ERR_clear_error ();
}
