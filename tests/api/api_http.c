/*  tests/api/api_http.c: the API tests' HTTP side (api_http.h).         */
#include "tests/api/api_http.h"

int t_port;
char t_token [AH_TOKEN_HEX];

size_t t_write_cb (char *ptr, size_t size, size_t nmemb, void *userdata)
{
    buf_t *b = userdata;
    size_t n = size * nmemb;
    b->data = realloc (b->data, b->size + n + 1);
    memcpy (b->data + b->size, ptr, n);
    b->size += n;
    b->data [b->size] = 0;
    return n;
}

//  Keeps the value of a Set-Cookie: agenthold_session=... header.
size_t t_header_cb (char *ptr, size_t size, size_t nmemb, void *userdata)
{
    size_t n = size * nmemb;
    const char *want = "set-cookie: agenthold_session=";
    size_t wn = strlen (want);
    if (userdata && n > wn + 64 && strncasecmp (ptr, want, wn) == 0) {
        memcpy (userdata, ptr + 12, wn - 12 + 64);
        ((char *) userdata) [wn - 12 + 64] = 0;
    }
    return n;
}

//  Returns the parsed JSON body (NULL if none or not JSON); *status set.
json_t *t_http (const char *method, const char *path, const char *body,
                       const char *token, long *status)
{
    return t_http_cookie (method, path, body, token, NULL, NULL, status);
}

json_t *t_http_cookie (const char *method, const char *path, const char *body, const char *token,
                              const char *cookie, char set_cookie [128], long *status)
{
    CURL *c = curl_easy_init ();
    char url [16384];
    snprintf (url, sizeof url, "http://127.0.0.1:%d%s", t_port, path);
    curl_easy_setopt (c, CURLOPT_URL, url);
    curl_easy_setopt (c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt (c, CURLOPT_PATH_AS_IS, 1L);           //  "./" and "../" sent as written
    curl_easy_setopt (c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt (c, CURLOPT_TIMEOUT, 20L);
    struct curl_slist *headers = NULL;
    char auth [200];
    if (token) {
        snprintf (auth, sizeof auth, "Authorization: Bearer %s", token);
        headers = curl_slist_append (headers, auth);
    }
    headers = curl_slist_append (headers, "Content-Type: application/json");
    if (body) {
        curl_easy_setopt (c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt (c, CURLOPT_POSTFIELDSIZE, (long) strlen (body));
    }
    curl_easy_setopt (c, CURLOPT_HTTPHEADER, headers);
    if (cookie)
        curl_easy_setopt (c, CURLOPT_COOKIE, cookie);
    if (set_cookie) {
        set_cookie [0] = 0;
        curl_easy_setopt (c, CURLOPT_HEADERFUNCTION, t_header_cb);
        curl_easy_setopt (c, CURLOPT_HEADERDATA, set_cookie);
    }
    buf_t b = { 0 };
    curl_easy_setopt (c, CURLOPT_WRITEFUNCTION, t_write_cb);
    curl_easy_setopt (c, CURLOPT_WRITEDATA, &b);
    *status = 0;
    CURLcode rc = curl_easy_perform (c);
    if (rc == CURLE_OK)
        curl_easy_getinfo (c, CURLINFO_RESPONSE_CODE, status);
    else
        fprintf (stderr, "curl %s %s: %s\n", method, path, curl_easy_strerror (rc));
    curl_slist_free_all (headers);
    curl_easy_cleanup (c);
    json_t *j = b.data ? json_loads (b.data, 0, NULL) : NULL;
    if (b.data && !j)
        fprintf (stderr, "%s %s: not JSON: %s\n", method, path, b.data);
    free (b.data);
    return j;
}

const char *t_str (json_t *j, const char *key)
{
    return json_string_value (json_object_get (j, key));
}

bool t_error_has (json_t *j, const char *part)
{
    const char *e = t_str (j, "error");
    if (!e || !strstr (e, part)) {
        fprintf (stderr, "error '%s' does not mention '%s'\n", e ? e : "(none)", part);
        return false;
    }
    return true;
}

//  GET raw bytes; returns the curl result, *status and the body.
CURLcode t_download (const char *path, long *status, buf_t *b)
{
    CURL *c = curl_easy_init ();
    char url [512], auth [200];
    snprintf (url, sizeof url, "http://127.0.0.1:%d%s", t_port, path);
    snprintf (auth, sizeof auth, "Authorization: Bearer %s", t_token);
    struct curl_slist *headers = curl_slist_append (NULL, auth);
    curl_easy_setopt (c, CURLOPT_URL, url);
    curl_easy_setopt (c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt (c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt (c, CURLOPT_TIMEOUT, 20L);
    curl_easy_setopt (c, CURLOPT_WRITEFUNCTION, t_write_cb);
    curl_easy_setopt (c, CURLOPT_WRITEDATA, b);
    CURLcode rc = curl_easy_perform (c);
    *status = 0;
    curl_easy_getinfo (c, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all (headers);
    curl_easy_cleanup (c);
    return rc;
}

//  One request that must fail with status and an error naming part.
void t_expect_error (int line, const char *method, const char *path, const char *body,
                            const char *token, long want, const char *part)
{
    long status;
    json_t *j = t_http (method, path, body, token, &status);
    check_total++;
    if (status != want || (part && !t_error_has (j, part))) {
        check_failures++;
        fprintf (stderr, "%s:%d: %s %s: got %ld, want %ld naming '%s'\n", __FILE__, line,
                 method, path, status, want, part ? part : "");
    }
    json_decref (j);
}

//  Raw bytes to the server; returns what came back (caller frees).
char *t_raw (const char *bytes, size_t n, bool half_close)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons (t_port) };
    inet_pton (AF_INET, "127.0.0.1", &sa.sin_addr);
    if (connect (fd, (struct sockaddr *) &sa, sizeof sa)) {
        close (fd);
        return strdup ("");
    }
    struct timeval tv = { .tv_sec = 3 };
    setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (write (fd, bytes, n) < 0) {
        close (fd);
        return strdup ("");
    }
    if (half_close)
        shutdown (fd, SHUT_WR);
    char *out = calloc (1, 65536);
    size_t got = 0;
    ssize_t r;
    while (got < 65535 && (r = read (fd, out + got, 65535 - got)) > 0)
        got += (size_t) r;
    close (fd);
    return out;
}

//  Every field a client names something with and the server shows back,
//  holding each control character (C0 but NUL, which JSON refuses, DEL,
//  each C1) as a JSON escape: 400 naming the field (common/ident.h, the
//  free-text rule). alice exists; nothing here is made.