/*  cli/client.c: the REST client of the agenthold command (cli/http.h). */
#include "common/str.h"
#include "cli/client.h"
#include "cli/cmd.h"
#include "cli/http.h"
#include "config/config.h"
#include "proto/buf.h"
#include "server/serve.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REPLY   (16u << 20)     //  a response larger than this is refused

struct ah_client_t {
    char *url;                      //  "http://127.0.0.1:8080", no trailing slash
    char *token;                    //  NULL when not needed
    char *ca;                       //  certificates to trust for https (NULL: the system's)
    char *tenant;                   //  percent-encoded AGENTHOLD_TENANT, or NULL
};

//  The token file: one line, surrounding whitespace ignored.
static char *s_read_token (const char *path, char **err)
{
    FILE *f = fopen (path, "r");
    if (!f) {
        *err = ah_strf ("no API token: cannot read %s (%s); set AGENTHOLD_TOKEN, or run as "
                         "the user that runs `agenthold serve`", path, strerror (errno));
        return NULL;
    }
    char buf [256];
    size_t n = fread (buf, 1, sizeof buf - 1, f);
    fclose (f);
    buf [n] = 0;
    char *start = buf;
    while (*start && isspace ((unsigned char) *start))
        start++;
    char *end = start + strlen (start);
    while (end > start && isspace ((unsigned char) end [-1]))
        *--end = 0;
    if (!*start) {
        *err = ah_strf ("no API token: %s is empty", path);
        return NULL;
    }
    return strdup (start);
}

ah_client_t *ah_client_new (const char *config_path, bool need_token, char **err)
{
    *err = NULL;
    ah_client_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    const char *env_url = getenv ("AGENTHOLD_URL");
    const char *env_token = getenv ("AGENTHOLD_TOKEN");
    const char *env_ca = getenv ("AGENTHOLD_CA");
    ah_config_t *config = NULL;
    //  The configuration is needed unless the environment says it all.
    if (!(env_url && *env_url) || (need_token && !(env_token && *env_token))) {
        char *why = NULL;
        config = ah_config_load (config_path, &why);
        if (!config) {
            *err = ah_strf ("configuration: %s", why ? why : "cannot load");
            free (why);
            goto fail;
        }
    }
    if (env_url && *env_url)
        self->url = strdup (env_url);
    else {
        char host [256];
        int port = 0;
        if (ah_config_split_listen (config->listen, host, sizeof host, &port)) {
            *err = ah_strf ("server.listen '%s' is not host:port", config->listen);
            goto fail;
        }
        if (!*host || !strcmp (host, "0.0.0.0"))
            snprintf (host, sizeof host, "127.0.0.1");
        else if (!strcmp (host, "::"))
            snprintf (host, sizeof host, "::1");
        //  The server's own certificate is the one to trust when the
        //  configuration names it (a self-signed one, typically).
        const char *scheme = config->tls_cert ? "https" : "http";
        self->url = strchr (host, ':') ? ah_strf ("%s://[%s]:%d", scheme, host, port)
                                       : ah_strf ("%s://%s:%d", scheme, host, port);
        if (config->tls_cert && !(env_ca && *env_ca))
            self->ca = strdup (config->tls_cert);
    }
    if (env_ca && *env_ca)
        self->ca = strdup (env_ca);
    const char *env_tenant = getenv ("AGENTHOLD_TENANT");
    if (env_tenant && *env_tenant) {
        self->tenant = ah_hc_escape (env_tenant, false);
    }
    size_t n = self->url ? strlen (self->url) : 0;
    while (n > 0 && self->url [n - 1] == '/')
        self->url [--n] = 0;
    if (need_token) {
        if (env_token && *env_token)
            self->token = strdup (env_token);
        else {
            char *path = ah_strf ("%s/%s", config->data_dir, AH_SERVE_TOKEN_FILE);
            self->token = path ? s_read_token (path, err) : NULL;
            free (path);
            if (!self->token)
                goto fail;
        }
        //  It goes into a header: one byte that is not visible ASCII (a
        //  CR or LF would start a header of its own) and it goes nowhere.
        const char *bad = self->token;
        while (*bad && *bad > 0x20 && *bad < 0x7f)
            bad++;
        if (*bad || bad - self->token > 1024) {
            *err = *bad ? ah_strf ("the API token (%s) holds byte 0x%02x at offset %zu: a token is visible "
                                   "ASCII only", env_token && *env_token ? "AGENTHOLD_TOKEN" : "the token file",
                                   (unsigned char) *bad, (size_t) (bad - self->token))
                        : ah_strf ("the API token is over 1024 bytes: not a token");
            goto fail;
        }
    }
    ah_config_destroy (&config);
    return self;
fail:
    ah_config_destroy (&config);
    ah_client_destroy (&self);
    if (!*err)
        *err = strdup ("out of memory");
    return NULL;
}

const char *ah_client_ca (ah_client_t *self)
{
    return self->ca;
}

void ah_client_destroy (ah_client_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_client_t *self = *self_p;
    free (self->url);
    free (self->ca);
    free (self->tenant);
    if (self->token) {
        memset (self->token, 0, strlen (self->token));
        free (self->token);
    }
    free (self);
    *self_p = NULL;
}

const char *ah_client_token (ah_client_t *self)
{
    return self->token;
}

const char *ah_client_url (ah_client_t *self)
{
    return self->url;
}

char *ah_client_url_for (ah_client_t *self, const char *path)
{
    if (!self->tenant)
        return ah_strf ("%s%s", self->url, path);
    return ah_strf ("%s%s%stenant=%s", self->url, path, strchr (path, '?') ? "&" : "?", self->tenant);
}

typedef struct {
    ah_buf_t body;
    bool too_big;
} reply_t;

static int s_gather (void *ud, const uint8_t *data, size_t size)
{
    reply_t *r = ud;
    if (ah_buf_size (&r->body) + size > MAX_REPLY) {
        r->too_big = true;
        return 1;
    }
    return ah_buf_append (&r->body, data, size) ? 1 : 0;
}

char *ah_client_auth (ah_client_t *self, const char *more)
{
    return self->token ? ah_strf ("Authorization: Bearer %s\r\n%s", self->token, more ? more : "")
                       : ah_strf ("%s", more ? more : "");
}

void ah_client_auth_free (char *headers)
{
    if (headers) {
        memset (headers, 0, strlen (headers));
        free (headers);
    }
}

long ah_client_call (ah_client_t *self, const char *method, const char *path, json_t *body,
                     long timeout_s, json_t **reply, char **err)
{
    *reply = NULL;
    *err = NULL;
    char *url = ah_client_url_for (self, path);
    char *text = body ? json_dumps (body, JSON_COMPACT) : NULL;
    char *headers = ah_client_auth (self, text ? "Accept: application/json\r\nContent-Type: application/json\r\n"
                                               : "Accept: application/json\r\n");
    long limit = timeout_s > 0 ? timeout_s : 60L;
    reply_t b = { .too_big = false };
    ah_buf_init (&b.body, 0);
    long status = 0;
    if (!url || !headers || (body && !text))
        *err = strdup ("out of memory");
    else {
        ah_hc_req_t req = { .method = method, .url = url, .ca = self->ca, .headers = headers,
                            .body = text, .body_size = text ? strlen (text) : 0,
                            .on_body = s_gather, .ud = &b, .timeout_ms = (int) limit * 1000 };
        char *why = NULL;
        bool malformed = false;
        status = ah_hc_perform (&req, &malformed, &why);
        if (status == 0 || b.too_big) {
            status = 0;
            if (b.too_big)
                *err = ah_strf ("the server's answer to %s %s is larger than %u bytes", method, path, MAX_REPLY);
            else if (why && strstr (why, "within the time allowed"))
                *err = ah_strf ("%s %s: no answer from %s within %ld s", method, path, self->url, limit);
            else if (malformed)
                *err = ah_strf ("the server at %s answered %s %s with what is not HTTP as agenthold "
                                "speaks it: %s", self->url, method, path, why ? why : "failed");
            else
                *err = ah_strf ("cannot reach the server at %s: %s (is `agenthold serve` running? "
                                 "AGENTHOLD_URL says where)", self->url, why ? why : "failed");
        }
        else if (ah_buf_size (&b.body)) {
            json_error_t jerr;
            *reply = json_loadb ((const char *) ah_buf_head (&b.body), ah_buf_size (&b.body), 0, &jerr);
        }
        free (why);
    }
    ah_client_auth_free (headers);
    free (text);
    free (url);
    ah_buf_free (&b.body);
    return status;
}

char *ah_client_error (json_t *reply, long status)
{
    const char *e = json_string_value (json_object_get (reply, "error"));
    if (e && *e)
        return ah_cmd_clean (strdup (e));
    switch (status) {
        case 401: return strdup ("unauthorized (wrong or missing API token)");
        case 404: return strdup ("not found");
        case 500: return strdup ("internal server error");
        case 503: return strdup ("service unavailable");
        case 504: return strdup ("the server timed out");
        default:  return strdup ("the server refused the request");
    }
}
