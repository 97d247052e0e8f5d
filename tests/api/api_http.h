/*  tests/api/api_http.h: the API tests' HTTP side (api_http.c): libcurl
    requests with the admin token (t_token) to the API on t_port, their
    JSON answers, expected refusals, raw bytes on a socket. Shared by
    test_api.c (routes, auth, caps, ?wait, malformed requests) and
    test_api_input.c (text fields, bodies from the route table, hostile
    home paths).                                                       */
#ifndef AH_TEST_API_HTTP_H
#define AH_TEST_API_HTTP_H
#include "actors/api.h"
#include "tests/api/fake_actors.h"
#include "common/bounds.h"
#include "common/bus.h"
#include "common/msg.h"
#include "common/token.h"
#include "store/store.h"
#include "tests/common/check.h"

#include <ctype.h>
#include <curl/curl.h>
#include <msgpack.h>
#include <stdarg.h>
#include <strings.h>
#include <jansson.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

extern int t_port;
extern char t_token [AH_TOKEN_HEX];

typedef struct {
    char *data;
    size_t size;
} buf_t;

size_t t_write_cb (char *ptr, size_t size, size_t nmemb, void *userdata);
size_t t_header_cb (char *ptr, size_t size, size_t nmemb, void *userdata);
//  The parsed JSON body (NULL if none or not JSON); *status set.
json_t *t_http (const char *method, const char *path, const char *body, const char *token, long *status);
//  t_http with a Cookie header (cookie "name=value", NULL none), keeping
//  the session cookie an answer sets into set_cookie (NULL: not kept).
json_t *t_http_cookie (const char *method, const char *path, const char *body, const char *token, const char *cookie, char set_cookie [128], long *status);
const char *t_str (json_t *j, const char *key);
bool t_error_has (json_t *j, const char *part);
CURLcode t_download (const char *path, long *status, buf_t *b);
void t_expect_error (int line, const char *method, const char *path, const char *body, const char *token, long want, const char *part);
char *t_raw (const char *bytes, size_t n, bool half_close);
//  One request that must fail with status and an error naming part.
#define EXPECT(...) t_expect_error (__LINE__, __VA_ARGS__)

//  test_api_input.c
void test_text_fields (void);
void test_bodies (zactor_t *lifecycle, ah_store_t *store);
void test_home_paths (zactor_t *lifecycle);

#endif
