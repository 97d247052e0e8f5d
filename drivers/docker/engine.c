/*  drivers/docker/engine.c: HTTP to the Docker Engine over its unix socket
    (libcurl), the API version, JSON answers and streams of JSON lines.

    DESIGN. Any of the driver's callers' threads calls in here; each call
    makes its own curl easy handle (CURLOPT_NOSIGNAL), so nothing of curl
    is shared. The API version is read and written under the driver's
    mutex; a transport failure forgets it, so an engine that comes back as
    another version is negotiated again.                                 */
#include "drivers/docker/docker_int.h"
#include "proto/buf.h"

#include <ctype.h>
#include <curl/curl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_BODY            (32u << 20)     //  largest answer we accept from the engine
#define MAX_REFUSAL         4096            //  what we keep of a refused stream's body
#define MAX_STREAM_LINE     (1u << 20)
#define CONNECT_TIMEOUT_S   3
#define CALL_TIMEOUT_S      120

void
ah_dk_err (char **err, const char *fmt, ...)
{
    if (!err)
        return;
    va_list ap;
    va_start (ap, fmt);
    char *s = ah_vstrf (fmt, ap);
    va_end (ap);
    free (*err);
    *err = s;
}

int
ah_dk_check_ident (ah_ident_t kind, const char *value, const char *doing, char **err)
{
    const char *why = ah_ident_check (kind, value);
    if (!why)
        return 0;
    ah_dk_err (err, "%s: %s '%.*s' %s", doing, ah_ident_what (kind), AH_IMAGE_MAX + 1,
               value ? value : "", why);
    return -1;
}

//  -------------------------------------------------------------------------
//  Requests

//  An answer body, capped at max bytes (more aborts the transfer).
typedef struct {
    ah_buf_t data;
    size_t   max;
    bool     too_big;
} body_t;

static size_t
s_body_write (char *ptr, size_t size, size_t nmemb, void *userdata)
{
    body_t *body = userdata;
    size_t n = size * nmemb;
    if (ah_buf_size (&body->data) + n > body->max) {
        body->too_big = true;
        return 0;
    }
    return ah_buf_append (&body->data, ptr, n) == 0 ? n : 0;
}

//  An easy handle on the engine's socket for url, with the method, the
//  body and *headers (the caller frees them after the transfer).
static CURL *
s_request (docker_t *self, const char *url, const dk_call_t *call, long timeout_s,
           struct curl_slist **headers)
{
    *headers = NULL;
    CURL *curl = curl_easy_init ();
    if (!curl)
        return NULL;
    curl_easy_setopt (curl, CURLOPT_UNIX_SOCKET_PATH, self->socket_path);
    curl_easy_setopt (curl, CURLOPT_URL, url);
    curl_easy_setopt (curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt (curl, CURLOPT_CONNECTTIMEOUT, (long) CONNECT_TIMEOUT_S);
    if (timeout_s > 0)
        curl_easy_setopt (curl, CURLOPT_TIMEOUT, timeout_s);
    if (!call)
        return curl;
    //  No "Expect: 100-continue" on large bodies (a build context).
    *headers = curl_slist_append (*headers, "Expect:");
    if (call->body) {
        char ct [80];
        snprintf (ct, sizeof ct, "Content-Type: %s",
                  call->content_type ? call->content_type : "application/json");
        *headers = curl_slist_append (*headers, ct);
    }
    curl_easy_setopt (curl, CURLOPT_HTTPHEADER, *headers);
    curl_easy_setopt (curl, CURLOPT_CUSTOMREQUEST, call->method);
    if (call->body || strcmp (call->method, "POST") == 0 || strcmp (call->method, "PUT") == 0) {
        curl_easy_setopt (curl, CURLOPT_POSTFIELDS, call->body ? (const char *) call->body : "");
        curl_easy_setopt (curl, CURLOPT_POSTFIELDSIZE_LARGE,
                          (curl_off_t) (call->body ? call->body_size : 0));
    }
    return curl;
}

//  Runs the transfer and frees the handle and headers. The HTTP status
//  (0 when none came) in *status.
static CURLcode
s_perform (CURL *curl, struct curl_slist *headers, long *status)
{
    CURLcode rc = curl_easy_perform (curl);
    *status = 0;
    curl_easy_getinfo (curl, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all (headers);
    curl_easy_cleanup (curl);
    return rc;
}

static void
s_forget_version (docker_t *self)
{
    pthread_mutex_lock (&self->lock);
    self->api_version [0] = 0;
    pthread_mutex_unlock (&self->lock);
}

//  -------------------------------------------------------------------------
//  The API version

static size_t
s_ping_header (char *ptr, size_t size, size_t nmemb, void *userdata)
{
    char *version = userdata;           //  16 bytes
    size_t n = size * nmemb;
    const char *key = "api-version:";
    size_t klen = strlen (key);
    if (n > klen && strncasecmp (ptr, key, klen) == 0) {
        const char *v = ptr + klen;
        const char *end = ptr + n;
        while (v < end && (*v == ' ' || *v == '\t'))
            v++;
        size_t len = 0;
        while (v + len < end && (isdigit ((unsigned char) v [len]) || v [len] == '.'))
            len++;
        if (len > 0 && len < 16) {
            memcpy (version, v, len);
            version [len] = 0;
        }
    }
    return n;
}

//  GET /_ping: the engine's API version. Caller holds no lock.
static int
s_ping (docker_t *self, char version [16], char **err)
{
    version [0] = 0;
    body_t body = { .max = MAX_BODY };
    struct curl_slist *headers;
    CURL *curl = s_request (self, "http://docker/_ping", NULL, 10, &headers);
    if (!curl) {
        ah_dk_err (err, "cannot set up a request to the Docker Engine (libcurl)");
        return -1;
    }
    curl_easy_setopt (curl, CURLOPT_HEADERFUNCTION, s_ping_header);
    curl_easy_setopt (curl, CURLOPT_HEADERDATA, version);
    curl_easy_setopt (curl, CURLOPT_WRITEFUNCTION, s_body_write);
    curl_easy_setopt (curl, CURLOPT_WRITEDATA, &body);
    long status;
    CURLcode rc = s_perform (curl, headers, &status);
    ah_buf_free (&body.data);
    if (rc != CURLE_OK) {
        ah_dk_err (err, "cannot reach the Docker Engine at %s: %s",
                   self->socket_path, curl_easy_strerror (rc));
        return -1;
    }
    if (status != 200 || !*version) {
        ah_dk_err (err, "the Docker Engine at %s answered /_ping with HTTP %ld%s",
                   self->socket_path, status, *version ? "" : " and no Api-Version header");
        return -1;
    }
    return 0;
}

int
ah_dk_ensure_engine (docker_t *self, char **err)
{
    pthread_mutex_lock (&self->lock);
    bool known = self->api_version [0] != 0;
    bool checked = self->server_checked;
    pthread_mutex_unlock (&self->lock);
    if (!known) {
        char version [16];
        if (s_ping (self, version, err))
            return -1;
        pthread_mutex_lock (&self->lock);
        snprintf (self->api_version, sizeof self->api_version, "%s", version);
        pthread_mutex_unlock (&self->lock);
        ah_info (LOG_AREA, "Docker Engine at %s speaks API %s", self->socket_path, version);
    }
    if (!checked)
        return ah_dk_detect_server_container (self, err);
    return 0;
}

//  The versioned URL of path, once the engine is known. NULL with *err
//  ("<what>: <why>") when it cannot be reached. Caller frees.
static char *
s_url (docker_t *self, const char *what, const char *path, char **err)
{
    char *eerr = NULL;
    if (ah_dk_ensure_engine (self, &eerr)) {
        ah_dk_err (err, "%s: %s", what, eerr ? eerr : "the engine is unusable");
        free (eerr);
        return NULL;
    }
    char version [16];
    pthread_mutex_lock (&self->lock);
    snprintf (version, sizeof version, "%s", self->api_version);
    pthread_mutex_unlock (&self->lock);
    char *url = ah_strf ("http://docker/v%s%s", version, path);
    if (!url)
        ah_dk_err (err, "%s: out of memory", what);
    return url;
}

//  -------------------------------------------------------------------------
//  Calls

//  The engine's error body as its message ("No such image: foo").
static char *
s_engine_message (ah_buf_t *body)
{
    const char *text = ah_buf_size (body) ? ah_buf_cstr (body) : NULL;
    if (!text)
        return strdup ("no message");
    json_t *j = json_loadb (text, ah_buf_size (body), 0, NULL);
    const char *msg = j ? json_string_value (json_object_get (j, "message")) : NULL;
    char *out;
    if (msg)
        out = strdup (msg);
    else {
        //  Not JSON: the first line of the text, capped.
        size_t n = strcspn (text, "\r\n");
        out = strndup (text, n > 300 ? 300 : n);
    }
    json_decref (j);
    return out;
}

long
ah_dk_call (docker_t *self, const dk_call_t *call, const char *path, json_t **answer,
            char **message, char **err)
{
    if (answer)
        *answer = NULL;
    if (message)
        *message = NULL;
    char *url = s_url (self, call->what, path, err);
    if (!url)
        return -1;
    long timeout_s = call->timeout_s ? call->timeout_s : CALL_TIMEOUT_S;
    body_t body = { .max = MAX_BODY };
    struct curl_slist *headers;
    CURL *curl = s_request (self, url, call, timeout_s, &headers);
    free (url);
    if (!curl) {
        ah_dk_err (err, "%s: cannot set up the request (out of memory?)", call->what);
        return -1;
    }
    curl_easy_setopt (curl, CURLOPT_WRITEFUNCTION, s_body_write);
    curl_easy_setopt (curl, CURLOPT_WRITEDATA, &body);
    long status;
    struct timespec t0, t1;
    clock_gettime (CLOCK_MONOTONIC, &t0);
    CURLcode rc = s_perform (curl, headers, &status);
    clock_gettime (CLOCK_MONOTONIC, &t1);
    //  Each call's time, for bench/docker's shares of a create or a wake.
    ah_debug (LOG_AREA, "engine %s %s: %ld in %.1f ms", call->method, path, rc == CURLE_OK ? status : -1L,
              (double) (t1.tv_sec - t0.tv_sec) * 1e3 + (double) (t1.tv_nsec - t0.tv_nsec) / 1e6);

    if (rc != CURLE_OK) {
        if (body.too_big)
            ah_dk_err (err, "%s: the Docker Engine's answer is larger than %u bytes",
                       call->what, MAX_BODY);
        else
        if (rc == CURLE_OPERATION_TIMEDOUT)
            ah_dk_err (err, "%s: the Docker Engine at %s did not answer within %ld s",
                       call->what, self->socket_path, timeout_s);
        else
        if (rc == CURLE_COULDNT_CONNECT)
            ah_dk_err (err, "%s: cannot reach the Docker Engine at %s: %s",
                       call->what, self->socket_path, curl_easy_strerror (rc));
        else
            ah_dk_err (err, "%s: the connection to the Docker Engine at %s failed: %s",
                       call->what, self->socket_path, curl_easy_strerror (rc));
        ah_buf_free (&body.data);
        s_forget_version (self);
        return -1;
    }
    if (status >= 400) {
        if (message)
            *message = s_engine_message (&body.data);
    }
    else
    if (answer && ah_buf_size (&body.data)) {
        json_error_t jerr;
        *answer = json_loadb ((const char *) ah_buf_head (&body.data), ah_buf_size (&body.data),
                              0, &jerr);
        if (!*answer) {
            ah_dk_err (err, "%s: the Docker Engine's answer is not JSON (%s)", call->what, jerr.text);
            status = -1;
        }
    }
    ah_buf_free (&body.data);
    return status;
}

long
ah_dk_get (docker_t *self, const char *what, const char *path, bool absent_ok, json_t **answer,
           char **err)
{
    dk_call_t call = { .what = what, .method = "GET" };
    char *msg = NULL;
    long st = ah_dk_call (self, &call, path, answer, &msg, err);
    if (st > 0 && st != 200 && !(st == 404 && absent_ok)) {
        ah_dk_status_err (err, what, st, msg);
        st = -1;
    }
    if (st != 200 && answer) {
        json_decref (*answer);
        *answer = NULL;
    }
    free (msg);
    return st;
}

long
ah_dk_call_json (docker_t *self, const char *what, const char *path, json_t *body,
                 char **message, char **err)
{
    char *text = body ? json_dumps (body, JSON_COMPACT) : NULL;
    json_decref (body);
    if (!text) {
        if (message)
            *message = NULL;
        ah_dk_err (err, "%s: out of memory composing the request", what);
        return -1;
    }
    dk_call_t call = { .what = what, .method = "POST", .body = text, .body_size = strlen (text) };
    long st = ah_dk_call (self, &call, path, NULL, message, err);
    free (text);
    return st;
}

void
ah_dk_status_err (char **err, const char *what, long status, const char *message)
{
    ah_dk_err (err, "%s: the Docker Engine refused (HTTP %ld) (Docker: %s)",
               what, status, message ? message : "no message");
}

int
ah_dk_simple (docker_t *self, const dk_simple_t *how, const char *doing, const char *name, char **err)
{
    char *what = ah_strf ("%s %s", doing, name);
    char *path = ah_strf (how->path_fmt, name);
    if (!what || !path) {
        ah_dk_err (err, "%s %s: out of memory", doing, name);
        free (what);
        free (path);
        return -1;
    }
    dk_call_t call = { .what = what, .method = how->method, .timeout_s = how->timeout_s };
    char *msg = NULL;
    long st = ah_dk_call (self, &call, path, NULL, &msg, err);
    int rc = -1;
    if (st == how->ok1 || st == how->ok2 || (st == 404 && how->absent_ok))
        rc = 0;
    else
    if (st == 404)
        ah_dk_err (err, "%s: it does not exist (Docker: %s)", what, msg ? msg : "");
    else
    if (st > 0)
        ah_dk_status_err (err, what, st, msg);
    free (msg);
    free (path);
    free (what);
    return rc;
}

char *
ah_dk_filters (json_t *filters)
{
    char *text = filters ? json_dumps (filters, JSON_COMPACT) : NULL;
    json_decref (filters);
    char *esc = text ? curl_easy_escape (NULL, text, 0) : NULL;
    free (text);
    char *out = esc ? strdup (esc) : NULL;
    curl_free (esc);
    return out;
}

json_t *
ah_dk_label_filter (const docker_t *self)
{
    json_t *labels = json_pack ("[s s+]", "agenthold.managed=true", "agenthold.prefix=", self->prefix);
    return json_pack ("{s:o}", "label", labels);
}

//  -------------------------------------------------------------------------
//  Streams of JSON lines: curl's write callback gets arbitrary chunks, not
//  lines. Split on newlines and carry a partial line to the next chunk.

typedef struct {
    const dk_stream_t *how;
    CURL    *curl;
    ah_buf_t partial;                   //  a line still without its newline
    ah_buf_t refusal;                   //  the start of a refusal's body
    bool     opened;
    bool     too_long;
} stream_state_t;

static void
s_stream_open (stream_state_t *s)
{
    if (s->opened)
        return;
    s->opened = true;
    if (s->how->on_open)
        s->how->on_open (s->how->arg);
}

//  0, or -1 when a line is too long or memory runs out (aborts the transfer).
static int
s_stream_carry (stream_state_t *s, const char *ptr, size_t n)
{
    if (ah_buf_size (&s->partial) + n > MAX_STREAM_LINE) {
        ah_warn (LOG_AREA, "a stream line longer than %u bytes; giving up on the stream",
                 MAX_STREAM_LINE);
        s->too_long = true;
        return -1;
    }
    return ah_buf_append (&s->partial, ptr, n);
}

static size_t
s_stream_write (char *ptr, size_t size, size_t nmemb, void *userdata)
{
    stream_state_t *s = userdata;
    size_t n = size * nmemb;
    long status = 0;
    curl_easy_getinfo (s->curl, CURLINFO_RESPONSE_CODE, &status);
    if (status != 200) {
        size_t have = ah_buf_size (&s->refusal);
        size_t room = have < MAX_REFUSAL ? MAX_REFUSAL - have : 0;
        ah_buf_append (&s->refusal, ptr, n < room ? n : room);
        return n;
    }
    s_stream_open (s);
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        if (ptr [i] != '\n')
            continue;
        if (ah_buf_size (&s->partial)) {
            if (s_stream_carry (s, ptr + start, i - start))
                return 0;
            s->how->on_line (s->how->arg, (const char *) ah_buf_head (&s->partial),
                             ah_buf_size (&s->partial));
            ah_buf_clear (&s->partial);
        }
        else
        if (i > start)
            s->how->on_line (s->how->arg, ptr + start, i - start);
        start = i + 1;
    }
    if (start < n && s_stream_carry (s, ptr + start, n - start))
        return 0;
    return n;
}

//  With no data the engine sends nothing: headers arrive only with the
//  first event on some versions, so the stream is also open once the
//  blank line ends the headers of a 200.
static size_t
s_stream_header (char *ptr, size_t size, size_t nmemb, void *userdata)
{
    stream_state_t *s = userdata;
    size_t n = size * nmemb;
    if (n <= 2 && !s->opened) {
        long status = 0;
        curl_easy_getinfo (s->curl, CURLINFO_RESPONSE_CODE, &status);
        if (status == 200)
            s_stream_open (s);
    }
    return n;
}

static int
s_stream_progress (void *userdata, curl_off_t dltotal, curl_off_t dlnow,
                   curl_off_t ultotal, curl_off_t ulnow)
{
    stream_state_t *s = userdata;
    return s->how->stop && *s->how->stop ? 1 : 0;
}

int
ah_dk_stream (docker_t *self, const dk_stream_t *how, const char *path, char **err)
{
    const char *what = how->call.what;
    char *url = s_url (self, what, path, err);
    if (!url)
        return -1;
    stream_state_t s = { .how = how };
    struct curl_slist *headers;
    s.curl = s_request (self, url, &how->call, 0, &headers);
    free (url);
    if (!s.curl) {
        ah_dk_err (err, "%s: cannot set up the request", what);
        return -1;
    }
    curl_easy_setopt (s.curl, CURLOPT_WRITEFUNCTION, s_stream_write);
    curl_easy_setopt (s.curl, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt (s.curl, CURLOPT_HEADERFUNCTION, s_stream_header);
    curl_easy_setopt (s.curl, CURLOPT_HEADERDATA, &s);
    curl_easy_setopt (s.curl, CURLOPT_XFERINFOFUNCTION, s_stream_progress);
    curl_easy_setopt (s.curl, CURLOPT_XFERINFODATA, &s);
    curl_easy_setopt (s.curl, CURLOPT_NOPROGRESS, 0L);
    long status;
    CURLcode rc = s_perform (s.curl, headers, &status);
    int result = -1;
    if (how->stop && *how->stop)
        result = 1;
    else
    if (rc != CURLE_OK) {
        ah_dk_err (err, "%s: the connection to the Docker Engine at %s broke (%s)", what,
                   self->socket_path, s.too_long ? "a line longer than 1 MiB"
                                                 : curl_easy_strerror (rc));
        s_forget_version (self);
    }
    else
    if (status != 200) {
        char *msg = s_engine_message (&s.refusal);
        ah_dk_status_err (err, what, status, msg);
        free (msg);
    }
    else {
        //  The last line may come without its newline.
        if (ah_buf_size (&s.partial))
            how->on_line (how->arg, (const char *) ah_buf_head (&s.partial),
                          ah_buf_size (&s.partial));
        result = 0;
    }
    ah_buf_free (&s.partial);
    ah_buf_free (&s.refusal);
    return result;
}
