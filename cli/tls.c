/*  cli/tls.c: a TLS client session as a proto/ws transport (see tls.h). */
#include "cli/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

typedef struct {
    SSL_CTX *ctx;
    SSL *ssl;
} tls_t;

static ssize_t s_io (ah_ws_io_t *io, void *buf, size_t size, bool writing)
{
    tls_t *t = io->ctx;
    ERR_clear_error ();
    int n = writing ? SSL_write (t->ssl, buf, (int) (size > INT32_MAX ? INT32_MAX : size))
                    : SSL_read (t->ssl, buf, (int) (size > INT32_MAX ? INT32_MAX : size));
    if (n > 0)
        return n;
    int e = SSL_get_error (t->ssl, n);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        errno = EAGAIN;
        return -1;
    }
    if (e == SSL_ERROR_ZERO_RETURN)
        return 0;
    if (e == SSL_ERROR_SYSCALL && errno)
        return -1;
    errno = EPROTO;
    return writing || e != SSL_ERROR_SYSCALL ? -1 : 0;
}

static ssize_t s_read (ah_ws_io_t *io, void *buf, size_t size)
{
    return s_io (io, buf, size, false);
}

static ssize_t s_write (ah_ws_io_t *io, const void *buf, size_t size)
{
    return s_io (io, (void *) buf, size, true);
}

static void s_close (ah_ws_io_t *io)
{
    tls_t *t = io->ctx;
    if (t) {
        SSL_shutdown (t->ssl);
        SSL_free (t->ssl);
        SSL_CTX_free (t->ctx);
        free (t);
    }
    if (io->fd >= 0)
        close (io->fd);
    io->ctx = NULL;
    io->fd = -1;
}

static int s_fail (tls_t *t, int fd, char *err, size_t err_size, const char *what)
{
    unsigned long e = ERR_get_error ();
    char detail [256] = "";
    if (e)
        ERR_error_string_n (e, detail, sizeof detail);
    long verify = t && t->ssl ? SSL_get_verify_result (t->ssl) : X509_V_OK;
    snprintf (err, err_size, "TLS: %s%s%s%s%s", what, *detail ? ": " : "", detail,
              verify != X509_V_OK ? ": " : "", verify != X509_V_OK ? X509_verify_cert_error_string (verify) : "");
    if (t) {
        SSL_free (t->ssl);
        SSL_CTX_free (t->ctx);
        free (t);
    }
    close (fd);
    return -1;
}

int ah_tls_io (int fd, const char *host, const char *ca, int timeout_ms, ah_ws_io_t *io,
               char *err, size_t err_size)
{
    tls_t *t = calloc (1, sizeof *t);
    if (!t || !(t->ctx = SSL_CTX_new (TLS_client_method ())))
        return s_fail (t, fd, err, err_size, "cannot make a context");
    SSL_CTX_set_min_proto_version (t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify (t->ctx, SSL_VERIFY_PEER, NULL);
    if (ca ? SSL_CTX_load_verify_locations (t->ctx, ca, NULL) != 1
           : SSL_CTX_set_default_verify_paths (t->ctx) != 1)
        return s_fail (t, fd, err, err_size, ca ? "cannot read the CA file" : "no system CA store");
    if (!(t->ssl = SSL_new (t->ctx)))
        return s_fail (t, fd, err, err_size, "cannot make a session");
    static const unsigned char alpn [] = "\x08http/1.1";
    SSL_set_alpn_protos (t->ssl, alpn, sizeof alpn - 1);
    struct in6_addr a6;
    struct in_addr a4;
    X509_VERIFY_PARAM *param = SSL_get0_param (t->ssl);
    if (inet_pton (AF_INET, host, &a4) == 1 || inet_pton (AF_INET6, host, &a6) == 1)
        X509_VERIFY_PARAM_set1_ip_asc (param, host);
    else {
        X509_VERIFY_PARAM_set1_host (param, host, 0);
        SSL_set_tlsext_host_name (t->ssl, host);
    }
    //  The handshake on a blocking socket with a deadline, then non-blocking.
    int flags = fcntl (fd, F_GETFL);
    fcntl (fd, F_SETFL, flags & ~O_NONBLOCK);
    struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
    setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt (fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    SSL_set_fd (t->ssl, fd);
    if (SSL_connect (t->ssl) != 1)
        return s_fail (t, fd, err, err_size, "the handshake failed");
    struct timeval none = { 0, 0 };
    setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
    setsockopt (fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
    fcntl (fd, F_SETFL, flags | O_NONBLOCK);
    *io = (ah_ws_io_t) { .read = s_read, .write = s_write, .close = s_close, .fd = fd, .ctx = t };
    return 0;
}
