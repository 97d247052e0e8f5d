/*  drivers/docker.c: the Docker Engine backend (see docker.h, docs/docker.md).

    DESIGN. Called from lifecycle's and the reconciler's worker threads,
    several at once. Each call builds its own curl easy handle, so no curl
    state is shared. The shared state is small and lives in self_t behind
    one mutex: the negotiated API version and the server's own container id
    (both found lazily on first use, so the server may start before the
    engine), and the driver's SQLite connection (subnet allocations). The
    configuration is borrowed and immutable.

    Errors are sentences: "<what was being done>: <why> (Docker: <the
    engine's message>)".                                                 */
#include "common/str.h"
#include "drivers/docker.h"
#include "store/store.h"
#include "common/log.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOG_AREA            "docker"
#define MAX_BODY            (32u << 20)     //  largest answer we accept from the engine
#define CONNECT_TIMEOUT_S   3
#define CALL_TIMEOUT_S      120
#define MAX_ID              40
#define MAX_NAME            128

typedef struct {
    const ah_config_t *config;          //  borrowed, immutable
    char    *socket_path;
    char    *prefix;
    uint32_t pool_base;                 //  host order
    int      pool_bits;
    int      subnet_bits;
    uint32_t subnet_count;
    char    *sandboxd_dir;              //  bind-mounted at /opt/agenthold (NULL: volume)

    pthread_mutex_t lock;               //  guards everything below
    char    api_version [16];           //  "1.41"; "" until negotiated
    bool    server_checked;             //  server container detection done
    bool    sandboxd_deployed;          //  copied into sandboxd_volume (volume mode)
    char   *server_container;           //  full id when we run in a container, else NULL
    ah_store_t *store;
    //  The host firewall probe's thread (ah_docker_isolation_check_start),
    //  joined by destroy_driver; only the thread that started it touches these.
    pthread_t probe_thread;
    bool    probe_started;
} self_t;

//  -------------------------------------------------------------------------
//  Small helpers

static void
s_set_err (char **err, const char *fmt, ...)
{
    if (!err)
        return;
    va_list ap;
    va_start (ap, fmt);
    char *s = NULL;
    if (vasprintf (&s, fmt, ap) < 0)
        s = NULL;
    va_end (ap);
    free (*err);
    *err = s;
}

static bool
s_valid_id (const char *id)
{
    if (!id || !*id || strlen (id) > MAX_ID)
        return false;
    for (const char *p = id; *p; p++)
        if (!(islower ((unsigned char) *p) || isdigit ((unsigned char) *p) || *p == '-'))
            return false;
    return true;
}

static bool
s_valid_prefix (const char *prefix)
{
    if (!prefix || !*prefix || strlen (prefix) > 40)
        return false;
    if (!isalnum ((unsigned char) prefix [0]))
        return false;
    for (const char *p = prefix; *p; p++)
        if (!(isalnum ((unsigned char) *p) || *p == '-' || *p == '_' || *p == '.'))
            return false;
    return true;
}

static char *
s_ip_string (uint32_t host_order)
{
    struct in_addr a = { .s_addr = htonl (host_order) };
    char buf [INET_ADDRSTRLEN];
    inet_ntop (AF_INET, &a, buf, sizeof buf);
    return strdup (buf);
}

//  "10.213.0.16/28" -> base address (host order); -1 when malformed.
static int
s_parse_cidr (const char *cidr, uint32_t *base, int *bits)
{
    char addr [INET_ADDRSTRLEN + 1];
    const char *slash = cidr ? strchr (cidr, '/') : NULL;
    if (!slash || (size_t) (slash - cidr) >= sizeof addr)
        return -1;
    memcpy (addr, cidr, slash - cidr);
    addr [slash - cidr] = 0;
    struct in_addr a;
    if (inet_pton (AF_INET, addr, &a) != 1)
        return -1;
    char *end;
    long b = strtol (slash + 1, &end, 10);
    if (*end || end == slash + 1 || b < 0 || b > 32)
        return -1;
    *base = ntohl (a.s_addr);
    *bits = (int) b;
    return 0;
}

//  -------------------------------------------------------------------------
//  HTTP over the unix socket

typedef struct {
    char   *data;
    size_t  size;
    bool    too_big;
} buf_t;

static size_t
s_buf_write (char *ptr, size_t size, size_t nmemb, void *userdata)
{
    buf_t *buf = userdata;
    size_t n = size * nmemb;
    if (buf->size + n > MAX_BODY) {
        buf->too_big = true;
        return 0;                       //  aborts the transfer
    }
    char *grown = realloc (buf->data, buf->size + n + 1);
    if (!grown)
        return 0;
    buf->data = grown;
    memcpy (buf->data + buf->size, ptr, n);
    buf->size += n;
    buf->data [buf->size] = 0;
    return n;
}

typedef struct {
    const char *what;                   //  "creating container x", for messages
    const char *method;                 //  "GET", "POST", ...
    const char *body;                   //  NULL: none
    size_t      body_size;
    const char *content_type;           //  default application/json
    long        timeout_s;              //  0: CALL_TIMEOUT_S
} call_t;

typedef struct {
    char  version [16];
} ping_t;

static size_t
s_ping_header (char *ptr, size_t size, size_t nmemb, void *userdata)
{
    ping_t *ping = userdata;
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
        if (len > 0 && len < sizeof ping->version) {
            memcpy (ping->version, v, len);
            ping->version [len] = 0;
        }
    }
    return n;
}

static CURL *
s_easy (self_t *self, const char *url, long timeout_s)
{
    CURL *curl = curl_easy_init ();
    if (!curl)
        return NULL;
    curl_easy_setopt (curl, CURLOPT_UNIX_SOCKET_PATH, self->socket_path);
    curl_easy_setopt (curl, CURLOPT_URL, url);
    curl_easy_setopt (curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt (curl, CURLOPT_CONNECTTIMEOUT, (long) CONNECT_TIMEOUT_S);
    if (timeout_s > 0)
        curl_easy_setopt (curl, CURLOPT_TIMEOUT, timeout_s);
    return curl;
}

//  GET /_ping: the engine's API version. Caller holds no lock.
static int
s_ping (self_t *self, char *version, size_t size, char **err)
{
    ping_t ping = { .version = "" };
    buf_t body = { 0 };
    CURL *curl = s_easy (self, "http://docker/_ping", 10);
    if (!curl) {
        s_set_err (err, "cannot set up a request to the Docker Engine (libcurl)");
        return -1;
    }
    curl_easy_setopt (curl, CURLOPT_HEADERFUNCTION, s_ping_header);
    curl_easy_setopt (curl, CURLOPT_HEADERDATA, &ping);
    curl_easy_setopt (curl, CURLOPT_WRITEFUNCTION, s_buf_write);
    curl_easy_setopt (curl, CURLOPT_WRITEDATA, &body);
    CURLcode rc = curl_easy_perform (curl);
    long status = 0;
    curl_easy_getinfo (curl, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup (curl);
    free (body.data);
    if (rc != CURLE_OK) {
        s_set_err (err, "cannot reach the Docker Engine at %s: %s",
                   self->socket_path, curl_easy_strerror (rc));
        return -1;
    }
    if (status != 200 || !*ping.version) {
        s_set_err (err, "the Docker Engine at %s answered /_ping with HTTP %ld%s",
                   self->socket_path, status, *ping.version ? "" : " and no Api-Version header");
        return -1;
    }
    snprintf (version, size, "%s", ping.version);
    return 0;
}

static int s_detect_server_container (self_t *self, char **err);

//  Negotiates the API version once (and finds out whether we run in a
//  container). 0 / -1 with *err.
static int
s_ensure_engine (self_t *self, char **err)
{
    pthread_mutex_lock (&self->lock);
    bool known = self->api_version [0] != 0;
    bool checked = self->server_checked;
    pthread_mutex_unlock (&self->lock);
    if (!known) {
        char version [16];
        if (s_ping (self, version, sizeof version, err))
            return -1;
        pthread_mutex_lock (&self->lock);
        snprintf (self->api_version, sizeof self->api_version, "%s", version);
        pthread_mutex_unlock (&self->lock);
        ah_info (LOG_AREA, "Docker Engine at %s speaks API %s", self->socket_path, version);
    }
    if (!checked)
        return s_detect_server_container (self, err);
    return 0;
}

//  The versioned URL of path, once the engine is known. NULL with *err
//  ("<what>: <why>") when it cannot be reached. Caller frees.
static char *
s_url (self_t *self, const char *what, const char *path, char **err)
{
    char *eerr = NULL;
    if (s_ensure_engine (self, &eerr)) {
        s_set_err (err, "%s: %s", what, eerr ? eerr : "the engine is unusable");
        free (eerr);
        return NULL;
    }
    char version [16];
    pthread_mutex_lock (&self->lock);
    snprintf (version, sizeof version, "%s", self->api_version);
    pthread_mutex_unlock (&self->lock);
    char *url = ah_strf ("http://docker/v%s%s", version, path);
    if (!url)
        s_set_err (err, "%s: out of memory", what);
    return url;
}

//  Turns the engine's error body into its message ("No such image: foo").
static char *
s_engine_message (const buf_t *body)
{
    if (!body->data || !body->size)
        return strdup ("no message");
    json_t *j = json_loadb (body->data, body->size, 0, NULL);
    const char *msg = j ? json_string_value (json_object_get (j, "message")) : NULL;
    char *out;
    if (msg)
        out = strdup (msg);
    else {
        //  Not JSON: the first line of the text, capped.
        size_t n = strcspn (body->data, "\r\n");
        if (n > 300)
            n = 300;
        out = strndup (body->data, n);
    }
    json_decref (j);
    return out;
}

//  One call. Returns the HTTP status, or -1 with *err when the engine
//  could not be reached. *answer (if wanted) gets the parsed JSON body or
//  NULL; *message (if wanted) the engine's error message on status >= 400.
static long
s_call (self_t *self, const call_t *call, const char *path, json_t **answer,
        char **message, char **err)
{
    if (answer)
        *answer = NULL;
    if (message)
        *message = NULL;
    char *url = s_url (self, call->what, path, err);
    if (!url)
        return -1;
    buf_t body = { 0 };
    CURL *curl = s_easy (self, url, call->timeout_s ? call->timeout_s : CALL_TIMEOUT_S);
    if (!curl) {
        free (url);
        s_set_err (err, "%s: cannot set up the request (out of memory?)", call->what);
        return -1;
    }
    struct curl_slist *headers = NULL;
    headers = curl_slist_append (headers, "Expect:");
    if (call->body) {
        char ct [80];
        snprintf (ct, sizeof ct, "Content-Type: %s",
                  call->content_type ? call->content_type : "application/json");
        headers = curl_slist_append (headers, ct);
    }
    curl_easy_setopt (curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt (curl, CURLOPT_CUSTOMREQUEST, call->method);
    if (call->body || strcmp (call->method, "POST") == 0 || strcmp (call->method, "PUT") == 0) {
        curl_easy_setopt (curl, CURLOPT_POSTFIELDS, call->body ? call->body : "");
        curl_easy_setopt (curl, CURLOPT_POSTFIELDSIZE_LARGE,
                          (curl_off_t) (call->body ? call->body_size : 0));
    }
    curl_easy_setopt (curl, CURLOPT_WRITEFUNCTION, s_buf_write);
    curl_easy_setopt (curl, CURLOPT_WRITEDATA, &body);

    CURLcode rc = curl_easy_perform (curl);
    long status = 0;
    curl_easy_getinfo (curl, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all (headers);
    curl_easy_cleanup (curl);
    free (url);

    if (rc != CURLE_OK) {
        if (body.too_big)
            s_set_err (err, "%s: the Docker Engine's answer is larger than %u bytes",
                       call->what, MAX_BODY);
        else
        if (rc == CURLE_OPERATION_TIMEDOUT)
            s_set_err (err, "%s: the Docker Engine at %s did not answer within %ld s",
                       call->what, self->socket_path,
                       call->timeout_s ? call->timeout_s : (long) CALL_TIMEOUT_S);
        else
        if (rc == CURLE_COULDNT_CONNECT)
            s_set_err (err, "%s: cannot reach the Docker Engine at %s: %s",
                       call->what, self->socket_path, curl_easy_strerror (rc));
        else
            s_set_err (err, "%s: the connection to the Docker Engine at %s failed: %s",
                       call->what, self->socket_path, curl_easy_strerror (rc));
        free (body.data);
        //  The engine may come back as another version: negotiate again.
        pthread_mutex_lock (&self->lock);
        self->api_version [0] = 0;
        pthread_mutex_unlock (&self->lock);
        return -1;
    }
    if (status >= 400) {
        if (message)
            *message = s_engine_message (&body);
    }
    else
    if (answer && body.size) {
        json_error_t jerr;
        *answer = json_loadb (body.data, body.size, 0, &jerr);
        if (!*answer) {
            s_set_err (err, "%s: the Docker Engine's answer is not JSON (%s)", call->what, jerr.text);
            free (body.data);
            return -1;
        }
    }
    free (body.data);
    return status;
}

//  The usual sentence for an unexpected status.
static void
s_status_err (char **err, const char *what, long status, const char *message)
{
    s_set_err (err, "%s: the Docker Engine refused (HTTP %ld) (Docker: %s)",
               what, status, message ? message : "no message");
}

//  A call without an answer body: OK when the status is ok1 or ok2, or
//  404 when absent_ok (removing what is gone already). 404 otherwise says
//  the object does not exist. 0 / -1 with *err.
typedef struct {
    const char *method;
    long        ok1, ok2;
    bool        absent_ok;
    long        timeout_s;
} simple_t;

static int
s_simple (self_t *self, const simple_t *how, const char *what, const char *path, char **err)
{
    call_t call = { .what = what, .method = how->method, .timeout_s = how->timeout_s };
    char *msg = NULL;
    long st = s_call (self, &call, path, NULL, &msg, err);
    int rc = -1;
    if (st == how->ok1 || st == how->ok2 || (st == 404 && how->absent_ok))
        rc = 0;
    else
    if (st == 404)
        s_set_err (err, "%s: it does not exist (Docker: %s)", what, msg ? msg : "");
    else
    if (st > 0)
        s_status_err (err, what, st, msg);
    free (msg);
    return rc;
}

//  URL-encodes a JSON filter for ?filters=.
static char *
s_filters (const char *prefix, bool events)
{
    json_t *labels = json_pack ("[s s+]", "agenthold.managed=true", "agenthold.prefix=", prefix);
    json_t *f = json_pack ("{s:o}", "label", labels);
    if (events) {
        json_object_set_new (f, "type", json_pack ("[s]", "container"));
        json_object_set_new (f, "event", json_pack ("[s s s s]", "start", "stop", "die", "destroy"));
    }
    char *text = json_dumps (f, JSON_COMPACT);
    json_decref (f);
    char *esc = text ? curl_easy_escape (NULL, text, 0) : NULL;
    free (text);
    char *out = esc ? strdup (esc) : NULL;
    curl_free (esc);
    return out;
}

//  -------------------------------------------------------------------------
//  Running in a container: find our own id

char *
ah_docker_container_id_from_mountinfo (const char *path)
{
    FILE *f = fopen (path, "r");
    if (!f)
        return NULL;
    char line [4096];
    char *found = NULL;
    while (!found && fgets (line, sizeof line, f)) {
        //  Fields: id parent major:minor root mountpoint ...
        char root [2048], mount [1024];
        if (sscanf (line, "%*s %*s %*s %2047s %1023s", root, mount) != 2)
            continue;
        if (strcmp (mount, "/etc/hostname") != 0)
            continue;
        const char *p = strstr (root, "containers/");
        if (!p)
            continue;
        p += strlen ("containers/");
        size_t n = 0;
        while (isxdigit ((unsigned char) p [n]))
            n++;
        if (n == 64 && p [n] == '/')
            found = strndup (p, 64);
    }
    fclose (f);
    return found;
}

static int
s_detect_server_container (self_t *self, char **err)
{
    const char *configured = self->config->server_container;
    char *candidate = configured && *configured
                    ? strdup (configured) : ah_docker_container_id_from_mountinfo ("/proc/self/mountinfo");
    char *full_id = NULL;
    if (candidate) {
        char *esc = curl_easy_escape (NULL, candidate, 0);
        char *path = ah_strf ("/containers/%s/json", esc ? esc : "");
        curl_free (esc);
        json_t *j = NULL;
        char *msg = NULL, *cerr = NULL;
        call_t call = { .what = "finding the server's own container", .method = "GET" };
        //  s_call would recurse into s_ensure_engine: mark checked first.
        pthread_mutex_lock (&self->lock);
        self->server_checked = true;
        pthread_mutex_unlock (&self->lock);
        long st = path ? s_call (self, &call, path, &j, &msg, &cerr) : -1;
        free (path);
        if (st == 200 && json_string_value (json_object_get (j, "Id")))
            full_id = strdup (json_string_value (json_object_get (j, "Id")));
        else
        if (configured && *configured) {
            //  A configured container that does not exist is a configuration error.
            if (st == -1)
                s_set_err (err, "%s", cerr);
            else
                s_set_err (err, "sandbox.docker.server_container '%s' is not a container of "
                           "this Docker Engine (Docker: %s)", configured, msg ? msg : "no message");
            pthread_mutex_lock (&self->lock);
            self->server_checked = false;
            pthread_mutex_unlock (&self->lock);
            json_decref (j);
            free (msg);
            free (cerr);
            free (candidate);
            return -1;
        }
        else
            ah_warn (LOG_AREA, "this process looks like container %.12s but the engine does not "
                     "know it; running as on the host", candidate);
        json_decref (j);
        free (msg);
        free (cerr);
        free (candidate);
    }
    pthread_mutex_lock (&self->lock);
    self->server_checked = true;
    free (self->server_container);
    self->server_container = full_id;
    pthread_mutex_unlock (&self->lock);
    if (full_id)
        ah_info (LOG_AREA, "the server runs in container %.12s: it joins every agent network at .2",
                 full_id);
    return 0;
}

//  Caller frees; NULL when on the host.
static char *
s_server_container (self_t *self)
{
    pthread_mutex_lock (&self->lock);
    char *id = self->server_container ? strdup (self->server_container) : NULL;
    pthread_mutex_unlock (&self->lock);
    return id;
}

//  -------------------------------------------------------------------------
//  Subnets (the networks table)

//  The subnet already recorded for agent_id, or a new one, not one of
//  skip[]. Returns the subnet's base (host order) or 0 with *err.
static uint32_t
s_subnet_for (self_t *self, const char *agent_id, const uint32_t *skip, size_t nskip, char **err)
{
    uint32_t result = 0;
    pthread_mutex_lock (&self->lock);
    ah_store_t *store = self->store;
    if (ah_store_begin (store)) {
        s_set_err (err, "allocating a subnet for agent %s: cannot begin a transaction on the database",
                   agent_id);
        goto out;
    }
    sqlite3_stmt *st = ah_store_prepare (store, "SELECT subnet FROM networks WHERE agent_id = :agent_id");
    if (st && ah_store_bind_text (st, ":agent_id", agent_id) == 0
    &&  ah_store_step (store, st) == SQLITE_ROW) {
        uint32_t base; int bits;
        const char *subnet = (const char *) sqlite3_column_text (st, 0);
        bool skipped = false;
        if (subnet && s_parse_cidr (subnet, &base, &bits) == 0) {
            for (size_t i = 0; i < nskip; i++)
                if (skip [i] == base)
                    skipped = true;
            if (!skipped) {
                result = base;
                sqlite3_reset (st);
                ah_store_commit (store);
                goto out;
            }
        }
        sqlite3_reset (st);
        //  Unusable (malformed, or it clashes with the engine): replace it.
        sqlite3_stmt *del = ah_store_prepare (store, "DELETE FROM networks WHERE agent_id = :agent_id");
        if (!del || ah_store_bind_text (del, ":agent_id", agent_id) || ah_store_step (store, del) != SQLITE_DONE) {
            ah_store_rollback (store);
            s_set_err (err, "allocating a subnet for agent %s: cannot update the networks table", agent_id);
            goto out;
        }
    }
    else
    if (st)
        sqlite3_reset (st);

    //  Taken subnets, as a bitmap over the pool.
    uint8_t *taken = calloc ((self->subnet_count + 7) / 8, 1);
    if (!taken) {
        ah_store_rollback (store);
        s_set_err (err, "allocating a subnet for agent %s: out of memory", agent_id);
        goto out;
    }
    sqlite3_stmt *all = ah_store_prepare (store, "SELECT subnet FROM networks");
    uint32_t size = 1u << (32 - self->subnet_bits);
    while (all && ah_store_step (store, all) == SQLITE_ROW) {
        uint32_t base; int bits;
        const char *subnet = (const char *) sqlite3_column_text (all, 0);
        if (subnet && s_parse_cidr (subnet, &base, &bits) == 0
        &&  base >= self->pool_base && (base - self->pool_base) / size < self->subnet_count) {
            uint32_t i = (base - self->pool_base) / size;
            taken [i / 8] |= 1u << (i % 8);
        }
    }
    if (all)
        sqlite3_reset (all);
    for (size_t k = 0; k < nskip; k++)
        if (skip [k] >= self->pool_base && (skip [k] - self->pool_base) / size < self->subnet_count) {
            uint32_t i = (skip [k] - self->pool_base) / size;
            taken [i / 8] |= 1u << (i % 8);
        }
    uint32_t pick = UINT32_MAX;
    for (uint32_t i = 0; i < self->subnet_count; i++)
        if (!(taken [i / 8] & (1u << (i % 8)))) {
            pick = i;
            break;
        }
    free (taken);
    if (pick == UINT32_MAX) {
        ah_store_rollback (store);
        s_set_err (err, "allocating a subnet for agent %s: all %u /%d subnets of %s are in use "
                   "(raise sandbox.docker.network_pool or subnet_bits)", agent_id,
                   self->subnet_count, self->subnet_bits, self->config->network_pool);
        goto out;
    }
    uint32_t base = self->pool_base + pick * size;
    char *ip = s_ip_string (base);
    char *cidr = ip ? ah_strf ("%s/%d", ip, self->subnet_bits) : NULL;
    free (ip);
    sqlite3_stmt *ins = ah_store_prepare (store,
        "INSERT INTO networks (agent_id, subnet) VALUES (:agent_id, :subnet)");
    if (!cidr || !ins || ah_store_bind_text (ins, ":agent_id", agent_id)
    ||  ah_store_bind_text (ins, ":subnet", cidr) || ah_store_step (store, ins) != SQLITE_DONE
    ||  ah_store_commit (store)) {
        ah_store_rollback (store);
        s_set_err (err, "allocating a subnet for agent %s: cannot record it in the networks table",
                   agent_id);
        free (cidr);
        goto out;
    }
    free (cidr);
    result = base;
out:
    pthread_mutex_unlock (&self->lock);
    return result;
}

//  The recorded subnet, 0 if none.
static uint32_t
s_subnet_lookup (self_t *self, const char *agent_id)
{
    uint32_t result = 0;
    pthread_mutex_lock (&self->lock);
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "SELECT subnet FROM networks WHERE agent_id = :agent_id");
    if (st && ah_store_bind_text (st, ":agent_id", agent_id) == 0
    &&  ah_store_step (self->store, st) == SQLITE_ROW) {
        uint32_t base; int bits;
        const char *subnet = (const char *) sqlite3_column_text (st, 0);
        if (subnet && s_parse_cidr (subnet, &base, &bits) == 0)
            result = base;
    }
    if (st)
        sqlite3_reset (st);
    pthread_mutex_unlock (&self->lock);
    return result;
}

static int
s_subnet_free (self_t *self, const char *agent_id, char **err)
{
    int rc = 0;
    pthread_mutex_lock (&self->lock);
    sqlite3_stmt *st = ah_store_prepare (self->store, "DELETE FROM networks WHERE agent_id = :agent_id");
    if (!st || ah_store_bind_text (st, ":agent_id", agent_id)
    ||  ah_store_step (self->store, st) != SQLITE_DONE) {
        s_set_err (err, "freeing the subnet of agent %s: cannot update the networks table", agent_id);
        rc = -1;
    }
    pthread_mutex_unlock (&self->lock);
    return rc;
}

//  -------------------------------------------------------------------------
//  Names

static void
s_names (self_t *self, const char *agent_id, char *container, char *volume, char *network)
{
    snprintf (container, MAX_NAME, "%s-%s", self->prefix, agent_id);
    snprintf (volume, MAX_NAME, "%s-home-%s", self->prefix, agent_id);
    snprintf (network, MAX_NAME, "%s-net-%s", self->prefix, agent_id);
}

static json_t *
s_labels (self_t *self, const char *agent_id)
{
    return json_pack ("{s:s s:s s:s}", "agenthold.managed", "true",
                      "agenthold.agent", agent_id, "agenthold.prefix", self->prefix);
}

//  -------------------------------------------------------------------------
//  Network

//  Creates (or finds) the agent's network on subnet base. Returns 0, 1 when
//  the engine says the subnet overlaps another network (pick another), or
//  -1 with *err.
static int
s_network_create (self_t *self, const char *agent_id, uint32_t base, char **err)
{
    char container [MAX_NAME], volume [MAX_NAME], network [MAX_NAME];
    s_names (self, agent_id, container, volume, network);
    char *what = ah_strf ("creating network %s", network);
    char *ip = s_ip_string (base);
    char *gw = s_ip_string (base + 1);
    char *subnet = ah_strf ("%s/%d", ip, self->subnet_bits);
    json_t *req = json_pack ("{s:s s:s s:b s:b s:b s:{s:s s:[{s:s s:s}]} s:o}",
        "Name", network, "Driver", "bridge", "Internal", 1, "CheckDuplicate", 1,
        "Attachable", 0,
        "IPAM", "Driver", "default", "Config", "Subnet", subnet, "Gateway", gw,
        "Labels", s_labels (self, agent_id));
    char *body = json_dumps (req, JSON_COMPACT);
    json_decref (req);
    call_t call = { .what = what, .method = "POST", .body = body, .body_size = body ? strlen (body) : 0 };
    char *msg = NULL;
    int rc = -1;
    long st = s_call (self, &call, "/networks/create", NULL, &msg, err);
    if (st == 201 || st == 200)
        rc = 0;
    else
    if (st == 409) {
        //  It exists already (a retried create or rebuild): fine if it is ours
        //  on the same subnet.
        char *path = ah_strf ("/networks/%s", network);
        json_t *j = NULL;
        call_t get = { .what = what, .method = "GET" };
        char *m2 = NULL;
        long st2 = s_call (self, &get, path, &j, &m2, err);
        free (path);
        const char *have = NULL;
        json_t *cfg = json_array_get (json_object_get (json_object_get (j, "IPAM"), "Config"), 0);
        have = json_string_value (json_object_get (cfg, "Subnet"));
        if (st2 == 200 && have && strcmp (have, subnet) == 0)
            rc = 0;
        else
        if (st2 == 200)
            s_set_err (err, "%s: a network of that name exists on subnet %s, not %s; destroy the "
                       "sandbox to clean it up", what, have ? have : "(none)", subnet);
        else
        if (st2 > 0)
            s_status_err (err, what, st2, m2);
        json_decref (j);
        free (m2);
    }
    else
    if (st > 0 && msg && (strstr (msg, "overlaps") || strstr (msg, "overlap"))) {
        ah_warn (LOG_AREA, "%s: subnet %s overlaps a network not ours (Docker: %s); trying another",
                 what, subnet, msg);
        rc = 1;
    }
    else
    if (st > 0)
        s_status_err (err, what, st, msg);
    free (msg);
    free (body);
    free (subnet);
    free (gw);
    free (ip);
    free (what);
    return rc;
}

//  Connects the server's own container to the network at .2.
static int
s_network_join_server (self_t *self, const char *agent_id, uint32_t base, char **err)
{
    char *server = s_server_container (self);
    if (!server)
        return 0;
    char container [MAX_NAME], volume [MAX_NAME], network [MAX_NAME];
    s_names (self, agent_id, container, volume, network);
    char *what = ah_strf ("connecting the server's container to network %s", network);
    char *addr = s_ip_string (base + 2);
    json_t *req = json_pack ("{s:s s:{s:{s:s}}}", "Container", server,
                             "EndpointConfig", "IPAMConfig", "IPv4Address", addr);
    char *body = json_dumps (req, JSON_COMPACT);
    json_decref (req);
    char *path = ah_strf ("/networks/%s/connect", network);
    call_t call = { .what = what, .method = "POST", .body = body, .body_size = strlen (body) };
    char *msg = NULL;
    long st = s_call (self, &call, path, NULL, &msg, err);
    int rc = 0;
    //  403 "already exists in network" is what a repeated connect answers.
    if (st == 200 || (st == 403 && msg && strstr (msg, "already exists")))
        rc = 0;
    else {
        if (st > 0)
            s_status_err (err, what, st, msg);
        rc = -1;
    }
    free (msg);
    free (path);
    free (body);
    free (addr);
    free (what);
    free (server);
    return rc;
}

static int
s_network_remove (self_t *self, const char *agent_id, char **err)
{
    char container [MAX_NAME], volume [MAX_NAME], network [MAX_NAME];
    s_names (self, agent_id, container, volume, network);
    char *what = ah_strf ("removing network %s", network);
    char *server = s_server_container (self);
    if (server) {
        json_t *req = json_pack ("{s:s s:b}", "Container", server, "Force", 1);
        char *body = json_dumps (req, JSON_COMPACT);
        json_decref (req);
        char *path = ah_strf ("/networks/%s/disconnect", network);
        call_t call = { .what = what, .method = "POST", .body = body, .body_size = strlen (body) };
        char *msg = NULL;
        s_call (self, &call, path, NULL, &msg, NULL);   //  not connected / absent: fine
        free (msg);
        free (path);
        free (body);
        free (server);
    }
    char *path = ah_strf ("/networks/%s", network);
    simple_t how = { .method = "DELETE", .ok1 = 204, .ok2 = 200, .absent_ok = true };
    int rc = s_simple (self, &how, what, path, err);
    free (path);
    free (what);
    return rc;
}

//  The agent's network, on a subnet that works, joined by the server when
//  it runs in a container. Returns the subnet base, 0 with *err.
static uint32_t
s_network_ensure (self_t *self, const char *agent_id, char **err)
{
    uint32_t skip [8];
    size_t nskip = 0;
    while (true) {
        uint32_t base = s_subnet_for (self, agent_id, skip, nskip, err);
        if (!base)
            return 0;
        int rc = s_network_create (self, agent_id, base, err);
        if (rc == 0) {
            if (s_network_join_server (self, agent_id, base, err))
                return 0;
            return base;
        }
        if (rc < 0)
            return 0;
        if (nskip == sizeof skip / sizeof skip [0]) {
            s_set_err (err, "creating the network of agent %s: %zu subnets in a row overlap networks "
                       "the engine already has; choose another sandbox.docker.network_pool",
                       agent_id, nskip + 1);
            s_subnet_free (self, agent_id, NULL);
            return 0;
        }
        skip [nskip++] = base;
    }
}

//  -------------------------------------------------------------------------
//  Container

static int
s_container_remove (self_t *self, const char *agent_id, char **err)
{
    char container [MAX_NAME], volume [MAX_NAME], network [MAX_NAME];
    s_names (self, agent_id, container, volume, network);
    char *what = ah_strf ("removing container %s", container);
    char *path = ah_strf ("/containers/%s?force=true&v=false", container);
    //  409 "removal already in progress": someone else is removing it.
    simple_t how = { .method = "DELETE", .ok1 = 204, .ok2 = 409, .absent_ok = true, .timeout_s = 60 };
    int rc = s_simple (self, &how, what, path, err);
    free (path);
    free (what);
    return rc;
}

//  sandboxd at /opt/agenthold, read-only: a bind of its directory (server
//  on the host) or sandbox.docker.sandboxd_volume.
static json_t *
s_sandboxd_mount (self_t *self)
{
    if (self->sandboxd_dir)
        return json_pack ("{s:s s:s s:s s:b}",
            "Type", "bind", "Source", self->sandboxd_dir, "Target", "/opt/agenthold", "ReadOnly", 1);
    return json_pack ("{s:s s:s s:s s:b s:{s:b}}",
        "Type", "volume", "Source", self->config->sandboxd_volume, "Target", "/opt/agenthold",
        "ReadOnly", 1, "VolumeOptions", "NoCopy", 1);
}

static int
s_container_create (self_t *self, const ah_sandbox_spec_t *spec, uint32_t base, char **err)
{
    const ah_config_t *c = self->config;
    char container [MAX_NAME], volume [MAX_NAME], network [MAX_NAME];
    s_names (self, spec->agent_id, container, volume, network);
    const char *image = spec->image && *spec->image ? spec->image : c->default_image;
    if (!image || !*image) {
        s_set_err (err, "creating container %s: no image given and no sandbox.default_image", container);
        return -1;
    }
    double cpus = spec->cpus > 0 ? spec->cpus : c->default_cpus;
    if (c->max_cpus > 0 && cpus > c->max_cpus)
        cpus = c->max_cpus;
    int64_t memory_mb = spec->memory_mb > 0 ? spec->memory_mb : c->default_memory_mb;
    if (c->max_memory_mb > 0 && memory_mb > c->max_memory_mb)
        memory_mb = c->max_memory_mb;
    int64_t pids = spec->pids_limit > 0 ? spec->pids_limit : c->pids_limit;

    json_t *mounts = json_array ();
    json_array_append_new (mounts, json_pack ("{s:s s:s s:s s:{s:o}}",
        "Type", "volume", "Source", volume, "Target", "/home/agent",
        "VolumeOptions", "Labels", s_labels (self, spec->agent_id)));
    json_array_append_new (mounts, s_sandboxd_mount (self));

    json_t *host = json_pack ("{s:b s:I s:I s:I s:o s:s s:{s:s}}",
        "Init", 1,
        "NanoCpus", (json_int_t) (cpus * 1e9),
        "Memory", (json_int_t) memory_mb * 1024 * 1024,
        "PidsLimit", (json_int_t) pids,
        "Mounts", mounts,
        "NetworkMode", network,
        "RestartPolicy", "Name", "no");
    if (c->runtime && *c->runtime)
        json_object_set_new (host, "Runtime", json_string (c->runtime));

    char *addr = s_ip_string (base + (1u << (32 - self->subnet_bits)) / 2);
    json_t *req = json_pack ("{s:s s:s s:[s] s:s s:o s:o s:{s:{s:{s:{s:s}}}}}",
        "Image", image,
        "Hostname", spec->agent_id,
        "Entrypoint", "/opt/agenthold/sandboxd",
        //  sandboxd starts as root (it reads the root-only boot.json and
        //  drops to the agent account for what it runs), whatever USER
        //  the image names.
        "User", "0:0",
        "Labels", s_labels (self, spec->agent_id),
        "HostConfig", host,
        "NetworkingConfig", "EndpointsConfig", network, "IPAMConfig", "IPv4Address", addr);
    json_object_set_new (req, "Cmd", json_array ());
    char *body = json_dumps (req, JSON_COMPACT);
    json_decref (req);
    free (addr);

    char *what = ah_strf ("creating container %s", container);
    char *path = ah_strf ("/containers/create?name=%s", container);
    call_t call = { .what = what, .method = "POST", .body = body, .body_size = body ? strlen (body) : 0 };
    int rc = -1;
    for (int attempt = 0; attempt < 2; attempt++) {
        char *msg = NULL;
        long st = s_call (self, &call, path, NULL, &msg, err);
        if (st == 201 || st == 200)
            rc = 0;
        else
        if (st == 404)
            s_set_err (err, "%s: image '%s' not found (Docker: %s)", what, image, msg ? msg : "");
        else
        if (st == 409 && attempt == 0) {
            //  A container of that name survives from an interrupted
            //  create or rebuild: the spec wins, the home is in the volume.
            ah_info (LOG_AREA, "%s: one exists already; replacing it", what);
            free (msg);
            if (s_container_remove (self, spec->agent_id, err))
                break;
            continue;
        }
        else
        if (st == 400 && msg && strstr (msg, "runtime"))
            s_set_err (err, "%s: the engine has no OCI runtime '%s' (sandbox.docker.runtime) (Docker: %s)",
                       what, c->runtime ? c->runtime : "", msg);
        else
        if (st > 0)
            s_status_err (err, what, st, msg);
        free (msg);
        break;
    }
    free (path);
    free (what);
    free (body);
    return rc;
}

//  -------------------------------------------------------------------------
//  boot.json as a tar archive

static void
s_tar_header (uint8_t *h, const char *name, char type, unsigned mode, size_t size)
{
    memset (h, 0, 512);
    snprintf ((char *) h, 100, "%s", name);
    snprintf ((char *) h + 100, 8, "%07o", mode);
    snprintf ((char *) h + 108, 8, "%07o", 0);
    snprintf ((char *) h + 116, 8, "%07o", 0);
    snprintf ((char *) h + 124, 12, "%011zo", size);
    snprintf ((char *) h + 136, 12, "%011lo", (unsigned long) time (NULL));
    h [156] = type;
    memcpy (h + 257, "ustar", 6);
    memcpy (h + 263, "00", 2);
    snprintf ((char *) h + 265, 32, "root");
    snprintf ((char *) h + 297, 32, "root");
    memset (h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h [i];
    snprintf ((char *) h + 148, 8, "%06o", sum);
    h [155] = ' ';
}

typedef struct {
    const char *name;
    char        type;                   //  '0' file, '5' directory
    unsigned    mode;
    const void *data;                   //  files
    size_t      size;
} tar_entry_t;

//  An in-memory tar of the entries (root-owned) and the end blocks.
//  Caller frees.
static uint8_t *
s_tar (const tar_entry_t *entries, size_t count, size_t *size)
{
    *size = 1024;
    for (size_t i = 0; i < count; i++)
        *size += 512 + (entries [i].size + 511) / 512 * 512;
    uint8_t *tar = calloc (1, *size);
    if (!tar)
        return NULL;
    uint8_t *p = tar;
    for (size_t i = 0; i < count; i++) {
        s_tar_header (p, entries [i].name, entries [i].type, entries [i].mode, entries [i].size);
        if (entries [i].size)
            memcpy (p + 512, entries [i].data, entries [i].size);
        p += 512 + (entries [i].size + 511) / 512 * 512;
    }
    return tar;
}

//  etc/, etc/agenthold/, etc/agenthold/boot.json (root, 0600).
static uint8_t *
s_boot_tar (const char *json, size_t *size)
{
    tar_entry_t entries [] = {
        { "etc/", '5', 0755, NULL, 0 },
        { "etc/agenthold/", '5', 0755, NULL, 0 },
        { "etc/agenthold/boot.json", '0', 0600, json, strlen (json) },
    };
    return s_tar (entries, 3, size);
}

//  -------------------------------------------------------------------------
//  sandboxd in a volume (when the server runs in a container and cannot
//  bind-mount a path of its own): once per driver, copy the server's own
//  sandboxd into sandbox.docker.sandboxd_volume through a helper container
//  that is created (mounting the volume read-write) but never started; an
//  archive PUT on a stopped container writes through its mounts. The copy
//  replaces the file (new inode), so running sandboxes keep theirs.

#define MAX_SANDBOXD    (256u << 20)

static int
s_deploy_sandboxd (self_t *self, const char *image, char **err)
{
    const ah_config_t *c = self->config;
    if (self->sandboxd_dir)
        return 0;                       //  bind mount: nothing to copy
    pthread_mutex_lock (&self->lock);
    bool done = self->sandboxd_deployed;
    pthread_mutex_unlock (&self->lock);
    if (done)
        return 0;
    char *what = ah_strf ("copying sandboxd (%s) into volume %s", c->sandboxd_path,
                            c->sandboxd_volume);
    int rc = -1;
    char *data = NULL, *body = NULL, *path = NULL, *msg = NULL;
    uint8_t *tar = NULL;
    size_t size = 0, tar_size = 0;
    FILE *f = fopen (c->sandboxd_path, "rb");
    if (!f) {
        s_set_err (err, "%s: cannot open it: %s", what, strerror (errno));
        goto out;
    }
    struct stat sb = { 0 };
    if (fstat (fileno (f), &sb) || !S_ISREG (sb.st_mode)) {
        s_set_err (err, "%s: it is not a regular file", what);
        fclose (f);
        goto out;
    }
    bool too_big = (uint64_t) sb.st_size > MAX_SANDBOXD;
    data = !too_big && sb.st_size > 0 ? malloc (sb.st_size) : NULL;
    size = data ? fread (data, 1, sb.st_size, f) : 0;
    fclose (f);
    if (!data || size != (size_t) sb.st_size) {
        s_set_err (err, "%s: %s", what, too_big ? "it is larger than 256 MiB"
                   : sb.st_size <= 0 ? "it is empty" : !data ? "out of memory" : "short read");
        goto out;
    }
    char helper [MAX_NAME];
    snprintf (helper, sizeof helper, "%s-sandboxd-copy-%08x", self->prefix, (unsigned) random ());
    json_t *req = json_pack ("{s:s s:[s] s:b s:o s:{s:[{s:s s:s s:s s:{s:o}}]}}",
        "Image", image, "Entrypoint", "/opt/agenthold/sandboxd", "NetworkDisabled", 1,
        "Labels", json_pack ("{s:s s:s}", "agenthold.managed", "true", "agenthold.prefix", self->prefix),
        "HostConfig", "Mounts", "Type", "volume", "Source", c->sandboxd_volume,
        "Target", "/opt/agenthold", "VolumeOptions", "Labels",
        json_pack ("{s:s s:s}", "agenthold.managed", "true", "agenthold.prefix", self->prefix));
    body = json_dumps (req, JSON_COMPACT);
    json_decref (req);
    path = ah_strf ("/containers/create?name=%s", helper);
    call_t create = { .what = what, .method = "POST", .body = body, .body_size = body ? strlen (body) : 0 };
    long st = s_call (self, &create, path, NULL, &msg, err);
    if (st == 404) {
        s_set_err (err, "%s: image '%s' (for the helper container) not found (Docker: %s)",
                   what, image, msg ? msg : "");
        goto out;
    }
    if (st != 201) {
        if (st > 0)
            s_status_err (err, what, st, msg);
        goto out;
    }
    tar_entry_t entry = { "sandboxd", '0', 0755, data, size };
    tar = s_tar (&entry, 1, &tar_size);
    free (path);
    path = ah_strf ("/containers/%s/archive?path=%%2Fopt%%2Fagenthold", helper);
    call_t put = { .what = what, .method = "PUT", .body = (const char *) tar, .body_size = tar_size,
                   .content_type = "application/x-tar" };
    free (msg);
    msg = NULL;
    st = tar ? s_call (self, &put, path, NULL, &msg, err) : -1;
    if (st == 200)
        rc = 0;
    else
    if (st > 0)
        s_status_err (err, what, st, msg);
    free (path);
    path = ah_strf ("/containers/%s?force=true&v=false", helper);
    simple_t how = { .method = "DELETE", .ok1 = 204, .ok2 = 200, .absent_ok = true };
    s_simple (self, &how, "removing the sandboxd copy helper", path, NULL);
    if (rc == 0) {
        pthread_mutex_lock (&self->lock);
        self->sandboxd_deployed = true;
        pthread_mutex_unlock (&self->lock);
        ah_info (LOG_AREA, "copied sandboxd (%zu bytes) into volume %s", size, c->sandboxd_volume);
    }
out:
    free (tar);
    free (msg);
    free (path);
    free (body);
    free (data);
    free (what);
    return rc;
}

//  -------------------------------------------------------------------------
//  The interface

static int
s_check_id (const char *agent_id, const char *doing, char **err)
{
    if (s_valid_id (agent_id))
        return 0;
    s_set_err (err, "%s: '%s' is not a valid agent id ([a-z0-9-], at most %d characters)",
               doing, agent_id ? agent_id : "(null)", MAX_ID);
    return -1;
}

//  create and rebuild: the network (kept across rebuilds) and a container
//  from the spec; rebuild first removes the old container, never the home.
static int
s_make (ah_driver_t *driver, const ah_sandbox_spec_t *spec, bool rebuild, char **err)
{
    self_t *self = driver->impl;
    if (!spec || s_check_id (spec->agent_id, rebuild ? "rebuilding a sandbox" : "creating a sandbox", err))
        return -1;
    if (rebuild && s_container_remove (self, spec->agent_id, err))
        return -1;
    const char *image = spec->image && *spec->image ? spec->image : self->config->default_image;
    if (image && *image && s_deploy_sandboxd (self, image, err))
        return -1;
    uint32_t base = s_network_ensure (self, spec->agent_id, err);
    if (!base)
        return -1;
    return s_container_create (self, spec, base, err);
}

static int
s_create (ah_driver_t *driver, const ah_sandbox_spec_t *spec, char **err)
{
    return s_make (driver, spec, false, err);
}

static int
s_rebuild (ah_driver_t *driver, const ah_sandbox_spec_t *spec, char **err)
{
    return s_make (driver, spec, true, err);
}

//  A server restarted with a new sandboxd must deploy it before the first
//  start too; the helper container uses the sandbox's own image.
static int
s_deploy_for_start (self_t *self, const char *container, char **err)
{
    pthread_mutex_lock (&self->lock);
    bool needed = !self->sandboxd_dir && !self->sandboxd_deployed;
    pthread_mutex_unlock (&self->lock);
    if (!needed)
        return 0;
    char *what = ah_strf ("starting container %s", container);
    char *path = ah_strf ("/containers/%s/json", container);
    call_t call = { .what = what, .method = "GET" };
    json_t *j = NULL;
    char *msg = NULL;
    long st = s_call (self, &call, path, &j, &msg, err);
    const char *image = json_string_value (json_object_get (j, "Image"));
    int rc = -1;
    if (st == 200 && image)
        rc = s_deploy_sandboxd (self, image, err);
    else
    if (st > 0)
        s_status_err (err, what, st, msg);
    json_decref (j);
    free (msg);
    free (path);
    free (what);
    return rc;
}

static int
s_start (ah_driver_t *driver, const ah_boot_t *boot, char **err)
{
    self_t *self = driver->impl;
    if (!boot || s_check_id (boot->agent_id, "starting a sandbox", err))
        return -1;
    char container [MAX_NAME], volume [MAX_NAME], network [MAX_NAME];
    s_names (self, boot->agent_id, container, volume, network);
    if (!boot->token || !*boot->token || boot->tunnel_port <= 0 || boot->tunnel_port > 65535) {
        s_set_err (err, "starting container %s: no boot token or no valid tunnel port", container);
        return -1;
    }
    uint32_t base = s_subnet_lookup (self, boot->agent_id);
    if (!base) {
        s_set_err (err, "starting container %s: no network was allocated for agent %s; "
                   "rebuild the sandbox", container, boot->agent_id);
        return -1;
    }
    char *eerr = NULL;
    if (s_ensure_engine (self, &eerr)) {
        s_set_err (err, "starting container %s: %s", container, eerr);
        free (eerr);
        return -1;
    }
    if (s_deploy_for_start (self, container, err))
        return -1;
    char *server = s_server_container (self);
    char *host = s_ip_string (base + (server ? 2 : 1));
    free (server);
    char *url = ah_strf ("ws://%s:%d/tunnel", host, boot->tunnel_port);
    free (host);
    json_t *j = json_pack ("{s:s s:s s:s}", "agent_id", boot->agent_id, "token", boot->token,
                           "tunnel_url", url);
    free (url);
    char *text = json_dumps (j, JSON_COMPACT);
    json_decref (j);
    size_t tar_size = 0;
    uint8_t *tar = text ? s_boot_tar (text, &tar_size) : NULL;
    free (text);
    if (!tar) {
        s_set_err (err, "starting container %s: out of memory composing boot.json", container);
        return -1;
    }
    char *what = ah_strf ("writing /etc/agenthold/boot.json into container %s", container);
    char *path = ah_strf ("/containers/%s/archive?path=%%2F", container);
    call_t put = { .what = what, .method = "PUT", .body = (const char *) tar, .body_size = tar_size,
                   .content_type = "application/x-tar" };
    char *msg = NULL;
    long st = s_call (self, &put, path, NULL, &msg, err);
    free (tar);
    free (path);
    int rc = -1;
    if (st == 404)
        s_set_err (err, "%s: the container does not exist (Docker: %s); rebuild the sandbox",
                   what, msg ? msg : "");
    else
    if (st > 0 && st != 200)
        s_status_err (err, what, st, msg);
    free (msg);
    msg = NULL;
    free (what);
    if (st != 200)
        return -1;

    what = ah_strf ("starting container %s", container);
    path = ah_strf ("/containers/%s/start", container);
    simple_t how = { .method = "POST", .ok1 = 204, .ok2 = 304 };
    rc = s_simple (self, &how, what, path, err);
    free (path);
    free (what);
    return rc;
}

static int
s_stop (ah_driver_t *driver, const char *agent_id, char **err)
{
    self_t *self = driver->impl;
    if (s_check_id (agent_id, "stopping a sandbox", err))
        return -1;
    char container [MAX_NAME], volume [MAX_NAME], network [MAX_NAME];
    s_names (self, agent_id, container, volume, network);
    char *what = ah_strf ("stopping container %s", container);
    char *path = ah_strf ("/containers/%s/stop?t=5", container);
    simple_t how = { .method = "POST", .ok1 = 204, .ok2 = 304, .timeout_s = 60 };
    int rc = s_simple (self, &how, what, path, err);
    free (path);
    free (what);
    return rc;
}

static int
s_destroy (ah_driver_t *driver, const char *agent_id, char **err)
{
    self_t *self = driver->impl;
    if (s_check_id (agent_id, "destroying a sandbox", err))
        return -1;
    if (s_container_remove (self, agent_id, err))
        return -1;
    if (s_network_remove (self, agent_id, err))
        return -1;
    char container [MAX_NAME], volume [MAX_NAME], network [MAX_NAME];
    s_names (self, agent_id, container, volume, network);
    char *what = ah_strf ("removing volume %s", volume);
    char *path = ah_strf ("/volumes/%s?force=true", volume);
    simple_t how = { .method = "DELETE", .ok1 = 204, .ok2 = 200, .absent_ok = true };
    int rc = s_simple (self, &how, what, path, err);
    free (path);
    free (what);
    if (rc == 0)
        rc = s_subnet_free (self, agent_id, err);
    return rc;
}

static int
s_inspect (ah_driver_t *driver, const char *agent_id, ah_sandbox_status_t *status, char **err)
{
    self_t *self = driver->impl;
    if (s_check_id (agent_id, "inspecting a sandbox", err))
        return -1;
    memset (status, 0, sizeof *status);
    status->exit_code = -1;
    char container [MAX_NAME], volume [MAX_NAME], network [MAX_NAME];
    s_names (self, agent_id, container, volume, network);
    char *what = ah_strf ("inspecting container %s", container);
    char *path = ah_strf ("/containers/%s/json", container);
    call_t call = { .what = what, .method = "GET" };
    char *msg = NULL;
    json_t *j = NULL;
    long st = s_call (self, &call, path, &j, &msg, err);
    int rc = 0;
    if (st == 404) {
        //  No container. Say whether the home survives: lifecycle repairs
        //  that with a rebuild, where nothing at all means recreate.
        free (path);
        path = ah_strf ("/volumes/%s", volume);
        call_t vol = { .what = what, .method = "GET" };
        char *m2 = NULL;
        long vst = s_call (self, &vol, path, NULL, &m2, NULL);
        snprintf (status->detail, sizeof status->detail, "%s",
                  vst == 200 ? "container missing; home volume present"
                             : "container missing; no home volume");
        free (m2);
    }
    else
    if (st == 200) {
        json_t *state = json_object_get (j, "State");
        const char *s = json_string_value (json_object_get (state, "Status"));
        status->exists = true;
        status->running = json_is_true (json_object_get (state, "Running"));
        json_t *code = json_object_get (state, "ExitCode");
        const char *started = json_string_value (json_object_get (state, "StartedAt"));
        bool ran = started && strncmp (started, "0001-", 5) != 0;
        if (!status->running && ran && json_is_integer (code))
            status->exit_code = (int) json_integer_value (code);
        if (status->running)
            snprintf (status->detail, sizeof status->detail, "running");
        else
        if (status->exit_code >= 0)
            snprintf (status->detail, sizeof status->detail, "%s (%d)", s ? s : "exited",
                      status->exit_code);
        else
            snprintf (status->detail, sizeof status->detail, "%s", s ? s : "unknown");
    }
    else {
        if (st > 0)
            s_status_err (err, what, st, msg);
        rc = -1;
    }
    json_decref (j);
    free (msg);
    free (path);
    free (what);
    return rc;
}

static void
s_add_id (char ***ids, size_t *count, size_t *cap, const char *id)
{
    if (!s_valid_id (id))
        return;
    for (size_t i = 0; i < *count; i++)
        if (strcmp ((*ids) [i], id) == 0)
            return;
    if (*count + 2 > *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        char **grown = realloc (*ids, ncap * sizeof (char *));
        if (!grown)
            return;
        *ids = grown;
        *cap = ncap;
    }
    (*ids) [(*count)++] = strdup (id);
    (*ids) [*count] = NULL;
}

static int
s_list (ah_driver_t *driver, char ***ids_p, char **err)
{
    self_t *self = driver->impl;
    *ids_p = NULL;
    char *filters = s_filters (self->prefix, false);
    if (!filters) {
        s_set_err (err, "listing sandboxes: out of memory");
        return -1;
    }
    char **ids = calloc (16, sizeof (char *));
    size_t count = 0, cap = ids ? 16 : 0;
    const char *kinds [] = { "containers", "networks", "volumes" };
    int rc = 0;
    for (int k = 0; k < 3 && rc == 0; k++) {
        char *what = ah_strf ("listing the sandboxes' %s", kinds [k]);
        char *path = ah_strf ("/%s%s?filters=%s", kinds [k], k == 0 ? "/json" : "",
                                filters);
        if (k == 0) {
            char *all = ah_strf ("%s&all=1", path);
            free (path);
            path = all;
        }
        call_t call = { .what = what, .method = "GET" };
        char *msg = NULL;
        json_t *j = NULL;
        long st = s_call (self, &call, path, &j, &msg, err);
        if (st == 200) {
            json_t *arr = k == 2 ? json_object_get (j, "Volumes") : j;
            size_t i;
            json_t *item;
            json_array_foreach (arr, i, item) {
                json_t *labels = json_object_get (item, "Labels");
                const char *id = json_string_value (json_object_get (labels, "agenthold.agent"));
                const char *prefix = json_string_value (json_object_get (labels, "agenthold.prefix"));
                if (id && prefix && strcmp (prefix, self->prefix) == 0)
                    s_add_id (&ids, &count, &cap, id);
            }
        }
        else {
            if (st > 0)
                s_status_err (err, what, st, msg);
            rc = -1;
        }
        json_decref (j);
        free (msg);
        free (path);
        free (what);
    }
    free (filters);
    if (rc) {
        ah_driver_free_ids (&ids);
        return -1;
    }
    *ids_p = ids;
    return 0;
}

//  -------------------------------------------------------------------------
//  Streams of JSON lines (events, build and pull progress): curl's write
//  callback gets arbitrary chunks, not lines. Split on newlines and carry
//  a partial line to the next chunk.

#define MAX_STREAM_LINE  (1u << 20)

typedef struct {
    char  *line;
    size_t size;
    void (*on_line) (void *arg, const char *line, size_t len);
    void  *arg;
} lines_t;

static int
s_lines_carry (lines_t *l, const char *ptr, size_t add)
{
    if (l->size + add > MAX_STREAM_LINE) {
        ah_warn (LOG_AREA, "a stream line longer than %u bytes; giving up on the stream",
                 MAX_STREAM_LINE);
        return -1;
    }
    char *grown = realloc (l->line, l->size + add + 1);
    if (!grown)
        return -1;
    l->line = grown;
    memcpy (l->line + l->size, ptr, add);
    l->size += add;
    return 0;
}

//  0, or -1 when a line is too long (the caller aborts the transfer).
static int
s_lines_feed (lines_t *l, const char *ptr, size_t n)
{
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        if (ptr [i] != '\n')
            continue;
        if (l->size) {
            if (s_lines_carry (l, ptr + start, i - start))
                return -1;
            l->on_line (l->arg, l->line, l->size);
            l->size = 0;
        }
        else
        if (i > start)
            l->on_line (l->arg, ptr + start, i - start);
        start = i + 1;
    }
    return start < n ? s_lines_carry (l, ptr + start, n - start) : 0;
}

//  -------------------------------------------------------------------------
//  Events

typedef struct {
    self_t *self;
    void (*on_change) (void *arg, const char *agent_id, const char *action);
    void *arg;
    volatile int *stop;
    lines_t lines;
    bool   connected;
    CURL  *curl;
    buf_t  error;                       //  the body of a refusal (capped)
} watch_t;

static void
s_watch_line (void *arg, const char *line, size_t len)
{
    watch_t *w = arg;
    json_t *j = json_loadb (line, len, 0, NULL);
    if (!j) {
        ah_warn (LOG_AREA, "event stream: a line that is not JSON (%zu bytes); skipped", len);
        return;
    }
    const char *action = json_string_value (json_object_get (j, "Action"));
    json_t *attrs = json_object_get (json_object_get (j, "Actor"), "Attributes");
    const char *id = json_string_value (json_object_get (attrs, "agenthold.agent"));
    const char *prefix = json_string_value (json_object_get (attrs, "agenthold.prefix"));
    if (action && id && prefix && strcmp (prefix, w->self->prefix) == 0 && s_valid_id (id)
    &&  (strcmp (action, "start") == 0 || strcmp (action, "stop") == 0
    ||   strcmp (action, "die") == 0 || strcmp (action, "destroy") == 0))
        w->on_change (w->arg, id, action);
    json_decref (j);
}

static size_t
s_watch_write (char *ptr, size_t size, size_t nmemb, void *userdata)
{
    watch_t *w = userdata;
    size_t n = size * nmemb;
    long status = 0;
    curl_easy_getinfo (w->curl, CURLINFO_RESPONSE_CODE, &status);
    if (status != 200) {
        //  A refusal: keep the start of its body for the message.
        if (w->error.size < 4096)
            s_buf_write (ptr, 1, n < 4096 - w->error.size ? n : 4096 - w->error.size, &w->error);
        return n;
    }
    if (!w->connected) {
        w->connected = true;
        w->on_change (w->arg, NULL, "connected");
    }
    return s_lines_feed (&w->lines, ptr, n) == 0 ? n : 0;
}

//  With no data the engine sends nothing: headers arrive only with the
//  first event on some versions, so "connected" is also declared here
//  once the response code is known.
static size_t
s_watch_header (char *ptr, size_t size, size_t nmemb, void *userdata)
{
    watch_t *w = userdata;
    size_t n = size * nmemb;
    if (n <= 2 && !w->connected) {      //  the blank line ending the headers
        long status = 0;
        curl_easy_getinfo (w->curl, CURLINFO_RESPONSE_CODE, &status);
        if (status == 200) {
            w->connected = true;
            w->on_change (w->arg, NULL, "connected");
        }
    }
    return n;
}

static int
s_watch_progress (void *userdata, curl_off_t dltotal, curl_off_t dlnow,
                  curl_off_t ultotal, curl_off_t ulnow)
{
    watch_t *w = userdata;
    return *w->stop ? 1 : 0;
}

static int
s_watch (ah_driver_t *driver,
         void (*on_change) (void *arg, const char *agent_id, const char *action),
         void *arg, volatile int *stop, char **err)
{
    self_t *self = driver->impl;
    char *filters = s_filters (self->prefix, true);
    char *path = filters ? ah_strf ("/events?filters=%s", filters) : NULL;
    free (filters);
    char *url = path ? s_url (self, "following the engine's events", path, err) : NULL;
    free (path);
    if (!url)
        return -1;
    watch_t w = { .self = self, .on_change = on_change, .arg = arg, .stop = stop,
                  .lines = { .on_line = s_watch_line } };
    w.lines.arg = &w;
    w.curl = url ? s_easy (self, url, 0) : NULL;
    free (url);
    if (!w.curl) {
        s_set_err (err, "following the engine's events: cannot set up the request");
        return -1;
    }
    curl_easy_setopt (w.curl, CURLOPT_WRITEFUNCTION, s_watch_write);
    curl_easy_setopt (w.curl, CURLOPT_WRITEDATA, &w);
    curl_easy_setopt (w.curl, CURLOPT_HEADERFUNCTION, s_watch_header);
    curl_easy_setopt (w.curl, CURLOPT_HEADERDATA, &w);
    curl_easy_setopt (w.curl, CURLOPT_XFERINFOFUNCTION, s_watch_progress);
    curl_easy_setopt (w.curl, CURLOPT_XFERINFODATA, &w);
    curl_easy_setopt (w.curl, CURLOPT_NOPROGRESS, 0L);
    CURLcode rc = curl_easy_perform (w.curl);
    long status = 0;
    curl_easy_getinfo (w.curl, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup (w.curl);
    free (w.lines.line);
    if (*stop) {
        free (w.error.data);
        return 0;
    }
    if (rc != CURLE_OK) {
        s_set_err (err, "following the engine's events at %s: the stream broke (%s)", self->socket_path,
                   curl_easy_strerror (rc));
        pthread_mutex_lock (&self->lock);
        self->api_version [0] = 0;
        pthread_mutex_unlock (&self->lock);
    }
    else
    if (status != 200) {
        char *msg = s_engine_message (&w.error);
        s_set_err (err, "following the engine's events: the engine refused (HTTP %ld) (Docker: %s)",
                   status, msg ? msg : "no message");
        free (msg);
    }
    else
        s_set_err (err, "following the engine's events: the engine closed the stream");
    free (w.error.data);
    return -1;
}

//  -------------------------------------------------------------------------
//  Images (the builder's optional hooks)

#define MAX_CONTEXT     (512u << 20)    //  largest build context we send
#define MAX_IMAGE_REF   255

//  Image references reach URLs: only the characters a reference may hold.
static bool
s_valid_image (const char *image)
{
    if (!image || !*image || strlen (image) > MAX_IMAGE_REF)
        return false;
    for (const char *p = image; *p; p++)
        if (!(isalnum ((unsigned char) *p) || strchr ("._-/:@", *p)))
            return false;
    return true;
}

static int
s_image_exists (ah_driver_t *driver, const char *image, bool *exists, char **err)
{
    self_t *self = driver->impl;
    *exists = false;
    if (!s_valid_image (image)) {
        s_set_err (err, "looking up image '%s': not a valid image reference", image ? image : "");
        return -1;
    }
    char *what = ah_strf ("looking up image '%s'", image);
    char *path = ah_strf ("/images/%s/json", image);
    call_t call = { .what = what, .method = "GET" };
    char *msg = NULL;
    long st = s_call (self, &call, path, NULL, &msg, err);
    int rc = 0;
    if (st == 200)
        *exists = true;
    else
    if (st != 404) {
        if (st > 0)
            s_status_err (err, what, st, msg);
        rc = -1;
    }
    free (msg);
    free (path);
    free (what);
    return rc;
}

//  The context as an in-memory tar: every regular file, directory and
//  symlink under dir (relative names), then the host files under their
//  names. Caller frees *tar.
typedef struct {
    uint8_t *data;
    size_t   size, cap;
    char    *err;
} tarbuf_t;

static int
s_tarbuf_add (tarbuf_t *t, const char *name, char type, unsigned mode, const void *data,
              size_t size, const char *link)
{
    if (strlen (name) > 99 || (link && strlen (link) > 99)) {
        t->err = ah_strf ("the name '%s' is longer than 99 characters", name);
        return -1;
    }
    size_t need = t->size + 512 + (size + 511) / 512 * 512 + 1024;
    if (need > MAX_CONTEXT) {
        t->err = ah_strf ("the build context is larger than %u MiB", MAX_CONTEXT >> 20);
        return -1;
    }
    if (need > t->cap) {
        size_t cap = t->cap ? t->cap : 1 << 20;
        while (cap < need)
            cap *= 2;
        uint8_t *grown = realloc (t->data, cap);
        if (!grown) {
            t->err = strdup ("out of memory");
            return -1;
        }
        t->data = grown;
        t->cap = cap;
    }
    uint8_t *h = t->data + t->size;
    s_tar_header (h, name, type, mode, size);
    if (link) {
        snprintf ((char *) h + 157, 100, "%s", link);
        //  The checksum covers the link name: compute it again.
        memset (h + 148, ' ', 8);
        unsigned sum = 0;
        for (int i = 0; i < 512; i++)
            sum += h [i];
        snprintf ((char *) h + 148, 8, "%06o", sum);
        h [155] = ' ';
    }
    memset (h + 512, 0, (size + 511) / 512 * 512);
    if (size)
        memcpy (h + 512, data, size);
    t->size += 512 + (size + 511) / 512 * 512;
    return 0;
}

static int
s_tarbuf_file (tarbuf_t *t, const char *name, const char *path)
{
    FILE *f = fopen (path, "rb");
    struct stat sb;
    if (!f || fstat (fileno (f), &sb) || !S_ISREG (sb.st_mode)) {
        t->err = ah_strf ("cannot read %s: %s", path, f ? "not a regular file" : strerror (errno));
        if (f)
            fclose (f);
        return -1;
    }
    if ((uint64_t) sb.st_size > MAX_CONTEXT) {
        fclose (f);
        t->err = ah_strf ("%s is larger than %u MiB", path, MAX_CONTEXT >> 20);
        return -1;
    }
    char *data = malloc (sb.st_size ? sb.st_size : 1);
    size_t got = data ? fread (data, 1, sb.st_size, f) : 0;
    fclose (f);
    int rc = -1;
    if (!data)
        t->err = strdup ("out of memory");
    else
    if (got != (size_t) sb.st_size)
        t->err = ah_strf ("cannot read %s: short read", path);
    else
        rc = s_tarbuf_add (t, name, '0', sb.st_mode & 0777, data, got, NULL);
    free (data);
    return rc;
}

static int
s_tarbuf_dir (tarbuf_t *t, const char *dir, const char *rel, int depth)
{
    if (depth > 16) {
        t->err = ah_strf ("the build context under %s is nested too deep", dir);
        return -1;
    }
    char *full = *rel ? ah_strf ("%s/%s", dir, rel) : strdup (dir);
    DIR *d = full ? opendir (full) : NULL;
    if (!d) {
        t->err = ah_strf ("cannot read the build context %s: %s", full ? full : dir, strerror (errno));
        free (full);
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir (d))) {
        if (!strcmp (e->d_name, ".") || !strcmp (e->d_name, ".."))
            continue;
        char *name = *rel ? ah_strf ("%s/%s", rel, e->d_name) : strdup (e->d_name);
        char *path = ah_strf ("%s/%s", full, e->d_name);
        struct stat sb;
        if (!name || !path || lstat (path, &sb)) {
            t->err = ah_strf ("cannot read %s: %s", path ? path : "?", strerror (errno));
            rc = -1;
        }
        else
        if (S_ISDIR (sb.st_mode)) {
            char *dname = ah_strf ("%s/", name);
            rc = s_tarbuf_add (t, dname, '5', sb.st_mode & 0777, NULL, 0, NULL);
            free (dname);
            if (rc == 0)
                rc = s_tarbuf_dir (t, dir, name, depth + 1);
        }
        else
        if (S_ISLNK (sb.st_mode)) {
            char target [PATH_MAX];
            ssize_t n = readlink (path, target, sizeof target - 1);
            if (n < 0) {
                t->err = ah_strf ("cannot read the link %s: %s", path, strerror (errno));
                rc = -1;
            }
            else {
                target [n] = 0;
                rc = s_tarbuf_add (t, name, '2', 0777, NULL, 0, target);
            }
        }
        else
        if (S_ISREG (sb.st_mode))
            rc = s_tarbuf_file (t, name, path);
        //  Sockets, fifos, devices: not build context material; skipped.
        free (name);
        free (path);
    }
    closedir (d);
    free (full);
    return rc;
}

//  Build and pull answer with a stream of JSON lines; an "error" in any
//  of them is the failure (the HTTP status is 200 by then).
typedef struct {
    lines_t lines;
    char   *error;                      //  the first error, if any
    char    last [256];                 //  the last progress line (context)
    volatile int *stop;
} progress_t;

static void
s_progress_line (void *arg, const char *line, size_t len)
{
    progress_t *p = arg;
    json_t *j = json_loadb (line, len, 0, NULL);
    if (!j)
        return;
    const char *error = json_string_value (json_object_get (j, "error"));
    if (!error)
        error = json_string_value (json_object_get (json_object_get (j, "errorDetail"), "message"));
    if (!error)                         //  a refusal before the stream: {"message": ...}
        error = json_string_value (json_object_get (j, "message"));
    if (error && !p->error)
        p->error = strdup (error);
    const char *text = json_string_value (json_object_get (j, "stream"));
    if (!text)
        text = json_string_value (json_object_get (j, "status"));
    if (text) {
        size_t n = strcspn (text, "\r\n");
        if (n) {
            snprintf (p->last, sizeof p->last, "%.*s", (int) (n < 255 ? n : 255), text);
            ah_debug (LOG_AREA, "image: %s", p->last);
        }
    }
    json_decref (j);
}

static size_t
s_progress_write (char *ptr, size_t size, size_t nmemb, void *userdata)
{
    progress_t *p = userdata;
    return s_lines_feed (&p->lines, ptr, size * nmemb) == 0 ? size * nmemb : 0;
}

static int
s_progress_stop (void *userdata, curl_off_t dltotal, curl_off_t dlnow,
                 curl_off_t ultotal, curl_off_t ulnow)
{
    progress_t *p = userdata;
    return p->stop && *p->stop ? 1 : 0;
}

//  One streaming call (POST /build or /images/create). 0 / -1 with *err.
static int
s_image_stream (self_t *self, const char *what, const char *path, const uint8_t *body,
                size_t body_size, volatile int *stop, char **err)
{
    char *url = s_url (self, what, path, err);
    if (!url)
        return -1;
    //  A build or a pull takes minutes: no overall timeout, the stop flag
    //  ends it.
    CURL *curl = s_easy (self, url, 0);
    free (url);
    if (!curl) {
        s_set_err (err, "%s: cannot set up the request", what);
        return -1;
    }
    progress_t p = { .lines = { .on_line = s_progress_line }, .stop = stop };
    p.lines.arg = &p;
    struct curl_slist *headers = curl_slist_append (NULL, "Expect:");
    headers = curl_slist_append (headers, body ? "Content-Type: application/x-tar"
                                                : "Content-Type: application/json");
    curl_easy_setopt (curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt (curl, CURLOPT_POST, 1L);
    curl_easy_setopt (curl, CURLOPT_POSTFIELDS, body ? (const char *) body : "");
    curl_easy_setopt (curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) (body ? body_size : 0));
    curl_easy_setopt (curl, CURLOPT_WRITEFUNCTION, s_progress_write);
    curl_easy_setopt (curl, CURLOPT_WRITEDATA, &p);
    curl_easy_setopt (curl, CURLOPT_XFERINFOFUNCTION, s_progress_stop);
    curl_easy_setopt (curl, CURLOPT_XFERINFODATA, &p);
    curl_easy_setopt (curl, CURLOPT_NOPROGRESS, 0L);
    CURLcode rc = curl_easy_perform (curl);
    long status = 0;
    curl_easy_getinfo (curl, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all (headers);
    curl_easy_cleanup (curl);
    int result = -1;
    if (stop && *stop)
        s_set_err (err, "%s: stopped (the server is shutting down)", what);
    else
    if (rc != CURLE_OK)
        s_set_err (err, "%s: the connection to the Docker Engine at %s failed: %s", what,
                   self->socket_path, curl_easy_strerror (rc));
    else
    if (status != 200) {
        //  Refusals come as one JSON object, which the line splitter may
        //  still hold (no newline at the end).
        if (p.lines.size)
            s_progress_line (&p, p.lines.line, p.lines.size);
        s_set_err (err, "%s: the Docker Engine refused (HTTP %ld) (Docker: %s)", what, status,
                   p.error ? p.error : p.last [0] ? p.last : "no message");
    }
    else {
        if (p.lines.size)
            s_progress_line (&p, p.lines.line, p.lines.size);
        if (p.error)
            s_set_err (err, "%s: %s", what, p.error);
        else
            result = 0;
    }
    free (p.lines.line);
    free (p.error);
    return result;
}

static int
s_image_build (ah_driver_t *driver, const ah_image_build_t *build, volatile int *stop, char **err)
{
    self_t *self = driver->impl;
    if (!build || !s_valid_image (build->image)) {
        s_set_err (err, "building image '%s': not a valid image reference",
                   build && build->image ? build->image : "");
        return -1;
    }
    char *esc = curl_easy_escape (NULL, build->image, 0);
    if (!build->context_dir) {
        //  A pull: fromImage takes "name:tag" (a missing tag means latest).
        char *what = ah_strf ("pulling image '%s'", build->image);
        char *path = ah_strf ("/images/create?fromImage=%s", esc ? esc : "");
        int rc = s_image_stream (self, what, path, NULL, 0, stop, err);
        curl_free (esc);
        free (path);
        free (what);
        return rc;
    }
    char *what = ah_strf ("building image '%s' from %s", build->image, build->context_dir);
    tarbuf_t t = { 0 };
    int rc = s_tarbuf_dir (&t, build->context_dir, "", 0);
    for (size_t i = 0; rc == 0 && i < build->n_files; i++)
        rc = s_tarbuf_file (&t, build->file_names [i], build->file_paths [i]);
    //  The end blocks: every add left room for them.
    if (rc == 0 && t.cap < t.size + 1024) {
        uint8_t *grown = realloc (t.data, t.size + 1024);
        if (grown) {
            t.data = grown;
            t.cap = t.size + 1024;
        }
        else {
            t.err = strdup ("out of memory");
            rc = -1;
        }
    }
    if (rc == 0) {
        memset (t.data + t.size, 0, 1024);
        t.size += 1024;
        char *labels = curl_easy_escape (NULL, "{\"agenthold.managed\":\"true\"}", 0);
        char *path = ah_strf ("/build?t=%s&rm=1&forcerm=1&labels=%s", esc ? esc : "",
                                labels ? labels : "");
        curl_free (labels);
        rc = s_image_stream (self, what, path, t.data, t.size, stop, err);
        free (path);
    }
    else
        s_set_err (err, "%s: %s", what, t.err ? t.err : "cannot make the build context");
    if (rc == 0)
        ah_info (LOG_AREA, "built image %s", build->image);
    curl_free (esc);
    free (t.data);
    free (t.err);
    free (what);
    return rc;
}

//  -------------------------------------------------------------------------
//  Host firewall probe (docs/docker.md, "Isolation")
//
//  A container on an internal network still reaches the host's own
//  addresses through the host's INPUT chain, which Docker leaves open; only
//  a host rule closes it, and the product does not install one (why: see
//  docs/docker.md). This probe tells the operator at start whether the rule
//  is there: a throw-away sandbox on the pool's last block runs the
//  server's sandboxd with a boot.json whose tunnel URL names the gateway
//  and a port the server just bound on all addresses, not the tunnel's. If
//  the dial arrives, host services are open to sandboxes. Its objects carry
//  only the label agenthold.probe=<prefix> (never agenthold.managed), so
//  list(), events and the reconciler do not see them; leftovers of a probe
//  cut short by a kill are removed by the next one.

#define PROBE_WAIT_MS   2500

static void
s_probe_remove_all (self_t *self)
{
    char *filter = ah_strf ("{\"label\":[\"agenthold.probe=%s\"]}", self->prefix);
    char *esc = filter ? curl_easy_escape (NULL, filter, 0) : NULL;
    free (filter);
    if (!esc)
        return;
    const char *kinds [] = { "containers", "networks" };
    for (int k = 0; k < 2; k++) {
        char *path = ah_strf (k == 0 ? "/containers/json?all=1&filters=%s" : "/networks?filters=%s", esc);
        call_t call = { .what = "listing leftovers of the firewall probe", .method = "GET" };
        json_t *j = NULL;
        char *msg = NULL, *cerr = NULL;
        long st = path ? s_call (self, &call, path, &j, &msg, &cerr) : -1;
        free (path);
        size_t i;
        json_t *o;
        if (st == 200)
            json_array_foreach (j, i, o) {
                const char *id = json_string_value (json_object_get (o, "Id"));
                if (!id)
                    continue;
                char *del = ah_strf (k == 0 ? "/%s/%s?force=true&v=true" : "/%s/%s", kinds [k], id);
                simple_t how = { .method = "DELETE", .ok1 = 204, .ok2 = 200, .absent_ok = true,
                                 .timeout_s = 60 };
                char *derr = NULL;
                if (del && s_simple (self, &how, "removing the firewall probe", del, &derr))
                    ah_warn (LOG_AREA, "%s", derr);
                free (derr);
                free (del);
            }
        json_decref (j);
        free (msg);
        free (cerr);
    }
    curl_free (esc);
}

//  A listener on all addresses, port chosen by the kernel. -1 on failure.
static int
s_probe_listen (int *port)
{
    int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_ANY) };
    socklen_t len = sizeof sa;
    if (bind (fd, (struct sockaddr *) &sa, sizeof sa) || listen (fd, 4)
    ||  getsockname (fd, (struct sockaddr *) &sa, &len)) {
        close (fd);
        return -1;
    }
    *port = ntohs (sa.sin_port);
    return fd;
}

int
ah_docker_check_isolation (ah_driver_t *driver, int tunnel_port, char **report)
{
    if (!driver || !driver->impl || !driver->name || strcmp (driver->name, "docker")) {
        s_set_err (report, "the host firewall probe needs the docker driver");
        return -1;
    }
    self_t *self = driver->impl;
    const ah_config_t *c = self->config;
    char *eerr = NULL;
    if (s_ensure_engine (self, &eerr)) {
        s_set_err (report, "cannot check the host firewall: %s", eerr);
        free (eerr);
        return -1;
    }
    char *server = s_server_container (self);
    if (server) {
        free (server);
        s_set_err (report, "cannot check the host firewall from inside a container: make sure "
                   "the host drops what %s sends to its own addresses (docs/docker.md)",
                   c->network_pool);
        return -1;
    }
    const char *image = c->default_image;
    bool exists = false;
    char *ierr = NULL;
    if (!image || s_image_exists (driver, image, &exists, &ierr) || !exists) {
        s_set_err (report, "cannot check the host firewall: sandbox.default_image '%s' is not "
                   "here to run the probe%s%s", image ? image : "", ierr ? ": " : "", ierr ? ierr : "");
        free (ierr);
        return -1;
    }
    if (!self->sandboxd_dir && s_deploy_sandboxd (self, image, &ierr)) {
        s_set_err (report, "cannot check the host firewall: %s", ierr);
        free (ierr);
        return -1;
    }
    s_probe_remove_all (self);

    //  The pool's last block: agents take blocks from the first up, so it is
    //  free unless the pool is full; the networks table says for sure.
    uint32_t size = 1u << (32 - self->subnet_bits);
    uint32_t base = self->pool_base + (self->subnet_count - 1) * size;
    char *ip = s_ip_string (base), *gw = s_ip_string (base + 1), *addr = s_ip_string (base + size / 2);
    char *subnet = ah_strf ("%s/%d", ip ? ip : "", self->subnet_bits);
    bool in_use = true;
    pthread_mutex_lock (&self->lock);
    sqlite3_stmt *q = ah_store_prepare (self->store, "SELECT 1 FROM networks WHERE subnet = :subnet");
    if (q && subnet && ah_store_bind_text (q, ":subnet", subnet) == 0) {
        int step = ah_store_step (self->store, q);
        in_use = step != SQLITE_DONE;
    }
    if (q)
        sqlite3_reset (q);
    pthread_mutex_unlock (&self->lock);

    int rc = -1, port = 0, fd = -1;
    char name [MAX_NAME], *body = NULL, *path = NULL, *msg = NULL, *cerr = NULL, *boot = NULL;
    uint8_t *tar = NULL;
    snprintf (name, sizeof name, "%s-probe-%08x", self->prefix, (unsigned) random ());
    if (in_use) {
        s_set_err (report, "cannot check the host firewall: the last subnet of %s (%s) is in use",
                   c->network_pool, subnet ? subnet : "");
        goto out;
    }
    if ((fd = s_probe_listen (&port)) < 0) {
        s_set_err (report, "cannot check the host firewall: cannot listen on a port: %s", strerror (errno));
        goto out;
    }
    if (port == tunnel_port) {
        s_set_err (report, "cannot check the host firewall: the probe got the tunnel port");
        goto out;
    }
    json_t *labels = json_pack ("{s:s}", "agenthold.probe", self->prefix);
    json_t *req = json_pack ("{s:s s:s s:b s:b s:{s:s s:[{s:s s:s}]} s:O}",
        "Name", name, "Driver", "bridge", "Internal", 1, "CheckDuplicate", 1,
        "IPAM", "Driver", "default", "Config", "Subnet", subnet, "Gateway", gw, "Labels", labels);
    body = json_dumps (req, JSON_COMPACT);
    json_decref (req);
    call_t ncall = { .what = "creating the firewall probe's network", .method = "POST", .body = body,
                     .body_size = body ? strlen (body) : 0 };
    long st = s_call (self, &ncall, "/networks/create", NULL, &msg, &cerr);
    free (body);
    body = NULL;
    if (st != 201 && st != 200) {
        s_set_err (report, "cannot check the host firewall: creating network %s on %s: %s", name,
                   subnet, st > 0 ? (msg ? msg : "refused") : cerr);
        json_decref (labels);
        goto out;
    }
    json_t *mounts = json_array ();
    json_array_append_new (mounts, s_sandboxd_mount (self));
    req = json_pack ("{s:s s:[s] s:[] s:s s:o s:{s:b s:o s:s s:I} s:{s:{s:{s:{s:s}}}}}",
        "Image", image, "Entrypoint", "/opt/agenthold/sandboxd", "Cmd", "User", "0:0",
        "Labels", labels,
        "HostConfig", "Init", 1, "Mounts", mounts, "NetworkMode", name, "Memory",
        (json_int_t) 64 << 20,
        "NetworkingConfig", "EndpointsConfig", name, "IPAMConfig", "IPv4Address", addr);
    body = json_dumps (req, JSON_COMPACT);
    json_decref (req);
    path = ah_strf ("/containers/create?name=%s", name);
    call_t ccall = { .what = "creating the firewall probe's container", .method = "POST", .body = body,
                     .body_size = body ? strlen (body) : 0 };
    free (msg);
    msg = NULL;
    st = s_call (self, &ccall, path, NULL, &msg, &cerr);
    free (path);
    path = NULL;
    if (st != 201) {
        s_set_err (report, "cannot check the host firewall: creating container %s from %s: %s", name,
                   image, st > 0 ? (msg ? msg : "refused") : cerr);
        goto out;
    }
    //  The boot file: the gateway and our probe port, a token nobody holds.
    json_t *bj = json_pack ("{s:s s:s s:s}", "agent_id", "probe", "token", "probe", "tunnel_url", "");
    char *url = ah_strf ("ws://%s:%d/tunnel", gw, port);
    json_object_set_new (bj, "tunnel_url", json_string (url ? url : ""));
    free (url);
    boot = json_dumps (bj, JSON_COMPACT);
    json_decref (bj);
    size_t tar_size = 0;
    tar = boot ? s_boot_tar (boot, &tar_size) : NULL;
    path = ah_strf ("/containers/%s/archive?path=%%2F", name);
    call_t put = { .what = "writing the firewall probe's boot.json", .method = "PUT",
                   .body = (const char *) tar, .body_size = tar_size, .content_type = "application/x-tar" };
    free (msg);
    msg = NULL;
    st = tar && path ? s_call (self, &put, path, NULL, &msg, &cerr) : -1;
    free (path);
    path = NULL;
    if (st != 200) {
        s_set_err (report, "cannot check the host firewall: writing the probe's boot.json: %s",
                   st > 0 ? (msg ? msg : "refused") : (cerr ? cerr : "out of memory"));
        goto out;
    }
    path = ah_strf ("/containers/%s/start", name);
    simple_t how = { .method = "POST", .ok1 = 204, .ok2 = 304 };
    char *serr = NULL;
    if (s_simple (self, &how, "starting the firewall probe", path, &serr)) {
        s_set_err (report, "cannot check the host firewall: %s", serr);
        free (serr);
        goto out;
    }
    free (path);
    path = NULL;
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    int ready = poll (&pfd, 1, PROBE_WAIT_MS);
    if (ready > 0) {
        s_set_err (report, "a sandbox on %s reached this host at %s:%d, a port that is not the "
                   "tunnel's: every service listening on this host's addresses is open to "
                   "sandboxes. Filter the pool on the host (docs/docker.md), e.g. `iptables -I "
                   "INPUT -s %s -j DROP` then `iptables -I INPUT -s %s -p tcp --dport %d -j ACCEPT`",
                   c->network_pool, gw, port, c->network_pool, c->network_pool, tunnel_port);
        rc = 1;
        goto out;
    }
    //  Silence only counts if the probe was alive to dial.
    path = ah_strf ("/containers/%s/json", name);
    call_t insp = { .what = "inspecting the firewall probe", .method = "GET" };
    json_t *j = NULL;
    free (msg);
    msg = NULL;
    st = s_call (self, &insp, path, &j, &msg, &cerr);
    bool running = json_is_true (json_object_get (json_object_get (j, "State"), "Running"));
    json_int_t code = json_integer_value (json_object_get (json_object_get (j, "State"), "ExitCode"));
    json_decref (j);
    if (st == 200 && running) {
        s_set_err (report, "a sandbox on %s reaches no host port but the tunnel's (a probe on "
                   "port %d went unanswered for %d ms)", c->network_pool, port, PROBE_WAIT_MS);
        rc = 0;
    }
    else
        s_set_err (report, "cannot check the host firewall: the probe sandbox stopped (exit %lld) "
                   "before it could dial", (long long) code);
out:
    if (fd >= 0)
        close (fd);
    s_probe_remove_all (self);
    free (tar);
    free (boot);
    free (path);
    free (body);
    free (msg);
    free (cerr);
    free (subnet);
    free (ip);
    free (gw);
    free (addr);
    return rc;
}

typedef struct {
    ah_driver_t *driver;
    int tunnel_port;
} probe_args_t;

static void *
s_probe_thread (void *arg)
{
    probe_args_t *a = arg;
    char *report = NULL;
    int rc = ah_docker_check_isolation (a->driver, a->tunnel_port, &report);
    if (rc == 0)
        ah_info (LOG_AREA, "host firewall: %s", report ? report : "");
    else
        ah_warn (LOG_AREA, "host firewall: %s", report ? report : "");
    free (report);
    free (a);
    return NULL;
}

int
ah_docker_isolation_check_start (ah_driver_t *driver)
{
    if (!driver || !driver->impl || !driver->name || strcmp (driver->name, "docker"))
        return -1;
    self_t *self = driver->impl;
    //  tunnel_listen is "host:port" or ":port" (validated by the config).
    const char *colon = self->config->tunnel_listen ? strrchr (self->config->tunnel_listen, ':') : NULL;
    int port = colon ? atoi (colon + 1) : 0;
    if (self->probe_started || port <= 0 || port > 65535)
        return -1;
    probe_args_t *a = calloc (1, sizeof *a);
    if (!a)
        return -1;
    *a = (probe_args_t) { .driver = driver, .tunnel_port = port };
    if (pthread_create (&self->probe_thread, NULL, s_probe_thread, a)) {
        free (a);
        return -1;
    }
    self->probe_started = true;
    return 0;
}

//  -------------------------------------------------------------------------
//  Life

static void
s_destroy_driver (ah_driver_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_driver_t *driver = *self_p;
    self_t *self = driver->impl;
    if (self) {
        if (self->probe_started)
            pthread_join (self->probe_thread, NULL);
        ah_store_close (&self->store);
        pthread_mutex_destroy (&self->lock);
        free (self->socket_path);
        free (self->prefix);
        free (self->sandboxd_dir);
        free (self->server_container);
        free (self);
    }
    free (driver);
    *self_p = NULL;
}

ah_driver_t *
ah_docker_driver_new (const ah_config_t *config, char **err)
{
    if (!config) {
        s_set_err (err, "docker driver: no configuration");
        return NULL;
    }
    if (!s_valid_prefix (config->name_prefix)) {
        s_set_err (err, "sandbox.docker.name_prefix '%s' is not usable in Docker names "
                   "(letters, digits, '-', '_', '.', at most 40, starting with a letter or digit)",
                   config->name_prefix ? config->name_prefix : "");
        return NULL;
    }
    uint32_t base;
    int bits;
    if (s_parse_cidr (config->network_pool, &base, &bits)) {
        s_set_err (err, "sandbox.docker.network_pool '%s' is not an IPv4 CIDR like 10.213.0.0/16",
                   config->network_pool ? config->network_pool : "");
        return NULL;
    }
    if (config->subnet_bits < bits || config->subnet_bits > 29 || bits < 8) {
        s_set_err (err, "sandbox.docker.subnet_bits %d does not fit network_pool %s "
                   "(needs /%d..29 and a pool of at least /8)", config->subnet_bits,
                   config->network_pool, bits);
        return NULL;
    }
    if (base & ((bits ? ~0u << (32 - bits) : 0) ^ ~0u)) {
        s_set_err (err, "sandbox.docker.network_pool '%s' has host bits set", config->network_pool);
        return NULL;
    }
    if (!config->data_dir || !*config->data_dir) {
        s_set_err (err, "docker driver: server.data_dir is not set");
        return NULL;
    }
    bool use_volume = config->sandboxd_volume && *config->sandboxd_volume;
    if (use_volume && (!config->sandboxd_path || !*config->sandboxd_path)) {
        s_set_err (err, "sandbox.sandboxd_path is not set: the server copies that file into "
                   "sandbox.docker.sandboxd_volume '%s'", config->sandboxd_volume);
        return NULL;
    }
    if (!use_volume && (!config->sandboxd_path || config->sandboxd_path [0] != '/')) {
        s_set_err (err, "sandbox.sandboxd_path '%s' must be an absolute path (it is bind-mounted "
                   "into every sandbox) unless sandbox.docker.sandboxd_volume is set",
                   config->sandboxd_path ? config->sandboxd_path : "");
        return NULL;
    }

    curl_global_init (CURL_GLOBAL_DEFAULT);
    ah_driver_t *driver = calloc (1, sizeof *driver);
    self_t *self = calloc (1, sizeof *self);
    if (!driver || !self) {
        free (driver);
        free (self);
        s_set_err (err, "docker driver: out of memory");
        return NULL;
    }
    driver->name = "docker";
    driver->waits_for_hello = true;
    driver->create = s_create;
    driver->start = s_start;
    driver->stop = s_stop;
    driver->rebuild = s_rebuild;
    driver->destroy = s_destroy;
    driver->inspect = s_inspect;
    driver->list = s_list;
    driver->watch = s_watch;
    driver->image_exists = s_image_exists;
    driver->image_build = s_image_build;
    driver->destroy_driver = s_destroy_driver;
    driver->impl = self;

    pthread_mutex_init (&self->lock, NULL);
    self->config = config;
    self->socket_path = strdup (config->docker_socket && *config->docker_socket
                                ? config->docker_socket : "/var/run/docker.sock");
    self->prefix = strdup (config->name_prefix);
    self->pool_base = base;
    self->pool_bits = bits;
    self->subnet_bits = config->subnet_bits;
    self->subnet_count = 1u << (config->subnet_bits - bits);
    if (!use_volume) {
        char *copy = strdup (config->sandboxd_path);
        self->sandboxd_dir = copy ? strdup (dirname (copy)) : NULL;
        free (copy);
    }
    char *db = ah_strf ("%s/agenthold.db", config->data_dir);
    char *serr = NULL;
    self->store = db ? ah_store_open (db, true, &serr) : NULL;
    if (!self->store) {
        s_set_err (err, "docker driver: cannot open the database %s: %s", db ? db : "",
                   serr ? serr : "out of memory");
        free (serr);
        free (db);
        s_destroy_driver (&driver);
        return NULL;
    }
    free (db);
    return driver;
}
