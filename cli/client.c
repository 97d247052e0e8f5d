/*  cli/client.c: the REST client of the agenthold command (libcurl). */
#include "common/str.h"
#include "cli/client.h"
#include "cli/cmd.h"
#include "config/config.h"
#include "proto/buf.h"
#include "server/serve.h"

#include <curl/curl.h>
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
        char *esc = curl_easy_escape (NULL, env_tenant, 0);
        self->tenant = esc ? strdup (esc) : NULL;
        curl_free (esc);
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

void ah_client_curl (ah_client_t *self, void *curl)
{
    if (self->ca)
        curl_easy_setopt ((CURL *) curl, CURLOPT_CAINFO, self->ca);
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

static size_t s_write (char *ptr, size_t size, size_t nmemb, void *userdata)
{
    reply_t *r = userdata;
    size_t n = size * nmemb;
    if (ah_buf_size (&r->body) + n > MAX_REPLY) {
        r->too_big = true;
        return 0;                   //  curl stops with a write error
    }
    return ah_buf_append (&r->body, ptr, n) ? 0 : n;
}

long ah_client_call (ah_client_t *self, const char *method, const char *path, json_t *body,
                     long timeout_s, json_t **reply, char **err)
{
    *reply = NULL;
    *err = NULL;
    CURL *curl = curl_easy_init ();
    if (!curl) {
        *err = strdup ("cannot start libcurl");
        return 0;
    }
    char *url = ah_client_url_for (self, path);
    char *auth = self->token ? ah_strf ("Authorization: Bearer %s", self->token) : NULL;
    char *text = body ? json_dumps (body, JSON_COMPACT) : NULL;
    struct curl_slist *headers = NULL;
    if (auth)
        headers = curl_slist_append (headers, auth);
    headers = curl_slist_append (headers, "Accept: application/json");
    if (text) {
        headers = curl_slist_append (headers, "Content-Type: application/json");
        headers = curl_slist_append (headers, "Expect:");
    }
    reply_t b = { .too_big = false };
    ah_client_curl (self, curl);
    curl_easy_setopt (curl, CURLOPT_URL, url);
    curl_easy_setopt (curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt (curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt (curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt (curl, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt (curl, CURLOPT_TIMEOUT, timeout_s > 0 ? timeout_s : 60L);
    curl_easy_setopt (curl, CURLOPT_WRITEFUNCTION, s_write);
    curl_easy_setopt (curl, CURLOPT_WRITEDATA, &b);
    if (text) {
        curl_easy_setopt (curl, CURLOPT_POSTFIELDS, text);
        curl_easy_setopt (curl, CURLOPT_POSTFIELDSIZE, (long) strlen (text));
    }
    else if (!strcmp (method, "POST")) {
        curl_easy_setopt (curl, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt (curl, CURLOPT_POSTFIELDSIZE, 0L);
    }
    long status = 0;
    CURLcode rc = curl_easy_perform (curl);
    if (rc != CURLE_OK) {
        if (b.too_big)
            *err = ah_strf ("the server's answer to %s %s is larger than %u bytes", method, path, MAX_REPLY);
        else if (rc == CURLE_OPERATION_TIMEDOUT)
            *err = ah_strf ("%s %s: no answer from %s within %ld s", method, path, self->url,
                             timeout_s > 0 ? timeout_s : 60L);
        else
            *err = ah_strf ("cannot reach the server at %s: %s (is `agenthold serve` running? "
                             "AGENTHOLD_URL says where)", self->url, curl_easy_strerror (rc));
    }
    else {
        curl_easy_getinfo (curl, CURLINFO_RESPONSE_CODE, &status);
        if (ah_buf_size (&b.body)) {
            json_error_t jerr;
            *reply = json_loadb ((const char *) ah_buf_head (&b.body), ah_buf_size (&b.body), 0, &jerr);
        }
    }
    curl_slist_free_all (headers);
    curl_easy_cleanup (curl);
    if (auth) {
        memset (auth, 0, strlen (auth));
        free (auth);
    }
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
