/*  drivers/kubernetes/api.c: HTTPS calls on the API server, one curl easy
    handle per call (any thread may call), the cluster's CA and client
    certificate handed to curl as blobs (nothing written to disk), a bearer
    token as a header. Answers are JSON; a body over 32 MiB is refused.  */
#include "drivers/kubernetes/k8s_int.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BODY_MAX    (32u << 20)
#define LINE_MAX_K8S (8u << 20)

typedef struct {
    char   *data;
    size_t  size, cap;
    bool    too_big;
} s_buf_t;

static size_t s_collect (char *ptr, size_t size, size_t nmemb, void *arg)
{
    s_buf_t *b = arg;
    size_t n = size * nmemb;
    if (b->size + n + 1 > BODY_MAX) {
        b->too_big = true;
        return 0;
    }
    if (b->size + n + 1 > b->cap) {
        size_t cap = (b->size + n + 1) * 2;
        char *grown = realloc (b->data, cap);
        if (!grown)
            return 0;
        b->data = grown;
        b->cap = cap;
    }
    memcpy (b->data + b->size, ptr, n);
    b->size += n;
    b->data [b->size] = 0;
    return n;
}

//  A handle set up for path with the credentials; headers into *hdrs.
static CURL *s_handle (k8s_t *self, const char *method, const char *path, const char *ctype,
                       struct curl_slist **hdrs)
{
    CURL *h = curl_easy_init ();
    char *url = ah_strf ("%s%s", self->creds.server, path);
    if (!h || !url) {
        if (h)
            curl_easy_cleanup (h);
        free (url);
        return NULL;
    }
    curl_easy_setopt (h, CURLOPT_URL, url);
    free (url);
    curl_easy_setopt (h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt (h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt (h, CURLOPT_PROTOCOLS_STR, "https");
    curl_easy_setopt (h, CURLOPT_CONNECTTIMEOUT, 10L);
    if (self->creds.ca) {
        struct curl_blob ca = { .data = self->creds.ca, .len = self->creds.ca_len,
                                .flags = CURL_BLOB_NOCOPY };
        curl_easy_setopt (h, CURLOPT_CAINFO_BLOB, &ca);
    }
    if (self->creds.insecure) {
        curl_easy_setopt (h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt (h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (self->creds.cert) {
        struct curl_blob cert = { .data = self->creds.cert, .len = self->creds.cert_len,
                                  .flags = CURL_BLOB_NOCOPY };
        struct curl_blob key = { .data = self->creds.key, .len = self->creds.key_len,
                                 .flags = CURL_BLOB_NOCOPY };
        curl_easy_setopt (h, CURLOPT_SSLCERTTYPE, "PEM");
        curl_easy_setopt (h, CURLOPT_SSLCERT_BLOB, &cert);
        curl_easy_setopt (h, CURLOPT_SSLKEYTYPE, "PEM");
        curl_easy_setopt (h, CURLOPT_SSLKEY_BLOB, &key);
    }
    *hdrs = curl_slist_append (NULL, "Accept: application/json");
    char *ct = ah_strf ("Content-Type: %s", ctype ? ctype : "application/json");
    if (ct)
        *hdrs = curl_slist_append (*hdrs, ct);
    free (ct);
    if (self->creds.token) {
        char *auth = ah_strf ("Authorization: Bearer %s", self->creds.token);
        if (auth)
            *hdrs = curl_slist_append (*hdrs, auth);
        if (auth)
            memset (auth, 0, strlen (auth));
        free (auth);
    }
    curl_easy_setopt (h, CURLOPT_HTTPHEADER, *hdrs);
    return h;
}

void ah_k8s_status_err (char **err, const char *what, long status, const char *message)
{
    ah_k8s_err (err, "%s: HTTP %ld from the API server%s%.400s", what, status,
                message && *message ? ": " : "", message ? message : "");
}

long ah_k8s_call (k8s_t *self, const k8s_call_t *call, const char *path, json_t *body,
                  json_t **answer, char **message, char **err)
{
    if (answer)
        *answer = NULL;
    if (message)
        *message = NULL;
    char *text = body ? json_dumps (body, JSON_COMPACT) : NULL;
    json_decref (body);
    struct curl_slist *hdrs = NULL;
    CURL *h = s_handle (self, call->method, path, call->content_type, &hdrs);
    if (!h) {
        free (text);
        curl_slist_free_all (hdrs);
        ah_k8s_err (err, "calling the API server: out of memory");
        return -1;
    }
    s_buf_t buf = { 0 };
    if (text) {
        curl_easy_setopt (h, CURLOPT_POSTFIELDS, text);
        curl_easy_setopt (h, CURLOPT_POSTFIELDSIZE, (long) strlen (text));
    }
    curl_easy_setopt (h, CURLOPT_WRITEFUNCTION, s_collect);
    curl_easy_setopt (h, CURLOPT_WRITEDATA, &buf);
    curl_easy_setopt (h, CURLOPT_TIMEOUT, call->timeout_s > 0 ? call->timeout_s : 30L);
    CURLcode cc = curl_easy_perform (h);
    long status = -1;
    if (cc != CURLE_OK)
        ah_k8s_err (err, "the API server %s cannot be reached: %s%s", self->creds.server,
                    curl_easy_strerror (cc), buf.too_big ? " (an answer over 32 MiB)" : "");
    else {
        curl_easy_getinfo (h, CURLINFO_RESPONSE_CODE, &status);
        json_t *j = buf.size ? json_loadb (buf.data, buf.size, 0, NULL) : NULL;
        if (status >= 400 && message) {
            const char *m = json_string_value (json_object_get (j, "message"));
            *message = strdup (m ? m : (buf.data && buf.size < 300 ? buf.data : ""));
        }
        if (answer && status < 400) {
            if (!j && buf.size) {
                ah_k8s_err (err, "the API server %s answered %s %s with something that is "
                            "not JSON", self->creds.server, call->method, path);
                status = -1;
            }
            *answer = j;
            j = NULL;
        }
        json_decref (j);
    }
    curl_easy_cleanup (h);
    curl_slist_free_all (hdrs);
    free (buf.data);
    free (text);
    return status;
}

//  -------------------------------------------------------------------------
//  Streams

#define STREAMS_MAX 4

typedef struct {
    s_buf_t line;
    size_t  index;
    k8s_line_fn on_line;
    void   *arg;
    bool    stopped;
    bool    too_long;
    CURL   *h;
    struct curl_slist *hdrs;
} s_stream_t;

static size_t s_stream_data (char *ptr, size_t size, size_t nmemb, void *arg)
{
    s_stream_t *s = arg;
    size_t n = size * nmemb;
    long status = 0;
    curl_easy_getinfo (s->h, CURLINFO_RESPONSE_CODE, &status);
    for (size_t i = 0; i < n; i++) {
        if (ptr [i] == '\n' && status == 200) {
            if (s->line.size && s->on_line (s->arg, s->index, s->line.data, s->line.size)) {
                s->stopped = true;
                return 0;
            }
            s->line.size = 0;
            continue;
        }
        if (s->line.size + 2 > LINE_MAX_K8S) {
            s->too_long = true;
            return 0;
        }
        if (s->line.size + 2 > s->line.cap) {
            size_t cap = s->line.cap ? s->line.cap * 2 : 4096;
            char *grown = realloc (s->line.data, cap);
            if (!grown)
                return 0;
            s->line.data = grown;
            s->line.cap = cap;
        }
        s->line.data [s->line.size++] = ptr [i];
        s->line.data [s->line.size] = 0;
    }
    return n;
}

int ah_k8s_streams (k8s_t *self, const char *const *paths, size_t n, k8s_line_fn on_line,
                    void *arg, volatile int *stop, char **err)
{
    if (n == 0 || n > STREAMS_MAX) {
        ah_k8s_err (err, "watching: %zu streams", n);
        return -1;
    }
    s_stream_t s [STREAMS_MAX];
    memset (s, 0, sizeof s);
    CURLM *multi = curl_multi_init ();
    int rc = multi ? 2 : -1;            //  2: still running
    if (!multi)
        ah_k8s_err (err, "watching: out of memory");
    for (size_t i = 0; i < n && rc == 2; i++) {
        s [i] = (s_stream_t) { .index = i, .on_line = on_line, .arg = arg };
        s [i].h = s_handle (self, "GET", paths [i], NULL, &s [i].hdrs);
        if (!s [i].h) {
            ah_k8s_err (err, "watching: out of memory");
            rc = -1;
            break;
        }
        curl_easy_setopt (s [i].h, CURLOPT_WRITEFUNCTION, s_stream_data);
        curl_easy_setopt (s [i].h, CURLOPT_WRITEDATA, &s [i]);
        //  Silence longer than this is a dead connection (each watch asks
        //  for bookmarks and ends within its timeoutSeconds).
        curl_easy_setopt (s [i].h, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt (s [i].h, CURLOPT_LOW_SPEED_TIME, 400L);
        curl_multi_add_handle (multi, s [i].h);
    }
    while (rc == 2) {
        int running = 0;
        curl_multi_perform (multi, &running);
        CURLMsg *m;
        int left;
        while (rc == 2 && (m = curl_multi_info_read (multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            s_stream_t *done = NULL;
            for (size_t i = 0; i < n; i++)
                if (s [i].h == m->easy_handle)
                    done = &s [i];
            if (!done)
                continue;
            long status = 0;
            curl_easy_getinfo (done->h, CURLINFO_RESPONSE_CODE, &status);
            if (done->stopped)
                rc = 1;
            else
            if (m->data.result != CURLE_OK) {
                ah_k8s_err (err, "watching %s: %s%s", paths [done->index],
                            curl_easy_strerror (m->data.result),
                            done->too_long ? " (an event over 8 MiB)" : "");
                rc = -1;
            }
            else
            if (status != 200) {
                json_t *j = done->line.size ? json_loadb (done->line.data, done->line.size, 0, NULL) : NULL;
                ah_k8s_status_err (err, "watching", status,
                                   json_string_value (json_object_get (j, "message")));
                json_decref (j);
                rc = -1;
            }
            else {
                if (done->line.size && on_line (arg, done->index, done->line.data, done->line.size))
                    rc = 1;
                else
                    rc = 0;
            }
        }
        if (rc != 2)
            break;
        if (stop && *stop) {
            rc = 1;
            break;
        }
        curl_multi_poll (multi, NULL, 0, 1000, NULL);
    }
    for (size_t i = 0; i < n; i++) {
        if (s [i].h) {
            curl_multi_remove_handle (multi, s [i].h);
            curl_easy_cleanup (s [i].h);
        }
        curl_slist_free_all (s [i].hdrs);
        free (s [i].line.data);
    }
    if (multi)
        curl_multi_cleanup (multi);
    return rc;
}
