/*  tests/sandboxd/test_units.c: sandboxd's small parts on their own: the
    boot card parser, the WebSocket framing and handshake arithmetic, the
    URL parser, the path string checks, /etc/passwd lookups.           */
#include "sandboxd/boot.h"
#include "sandboxd/passwd.h"
#include "sandboxd/path.h"
#include "sandboxd/ws.h"
#include "tests/common/check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_boot (void)
{
    ah_boot_card_t c;
    char err [256];
    const char *good = " {\"agent_id\":\"ag-1\", \"token\" : \"t\\u00e9\\/x\", \"extra\": \"ignored\",\n"
                       "\"tunnel_url\":\"ws://10.0.0.2:8090/tunnel\"}\n";
    CHECK (ah_boot_parse (good, strlen (good), &c, err, sizeof err) == 0);
    CHECK_STR (c.agent_id, "ag-1");
    CHECK_STR (c.token, "t\xc3\xa9/x");
    CHECK_STR (c.tunnel_url, "ws://10.0.0.2:8090/tunnel");
    const char *emoji = "{\"agent_id\":\"\\ud83d\\ude00\",\"token\":\"t\",\"tunnel_url\":\"u\"}";
    CHECK (ah_boot_parse (emoji, strlen (emoji), &c, err, sizeof err) == 0);
    CHECK_STR (c.agent_id, "\xf0\x9f\x98\x80");

    struct { const char *text; const char *why; } bad [] = {
        { "", "not a JSON object" },
        { "[]", "not a JSON object" },
        { "{\"agent_id\":\"a\",\"token\":\"t\"}", "tunnel_url" },
        { "{\"agent_id\":\"a\",\"token\":\"t\",\"tunnel_url\":\"\"}", "tunnel_url" },
        { "{\"agent_id\":1,\"token\":\"t\",\"tunnel_url\":\"u\"}", "must be strings" },
        { "{\"agent_id\":\"a\",\"agent_id\":\"b\",\"token\":\"t\",\"tunnel_url\":\"u\"}", "duplicate" },
        { "{\"agent_id\":\"a\\u0000\",\"token\":\"t\",\"tunnel_url\":\"u\"}", "\\u0000" },
        { "{\"agent_id\":\"a\\ud800\",\"token\":\"t\",\"tunnel_url\":\"u\"}", "surrogate" },
        { "{\"agent_id\":\"a\",\"token\":\"t\",\"tunnel_url\":\"u\"} x", "trailing" },
        { "{\"agent_id\":\"a\nb\",\"token\":\"t\",\"tunnel_url\":\"u\"}", "control" },
        { "{\"agent_id\":\"a\",\"token\":\"t\",\"tunnel_url\":\"u\"", "expected" },
        { "{\"agent_id\":\"a\" \"token\":\"t\"}", "expected" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = ah_boot_parse (bad [i].text, strlen (bad [i].text), &c, err, sizeof err);
        CHECK (rc == -1);
        if (rc == -1 && !strstr (err, bad [i].why))
            fprintf (stderr, "  boot case %zu: \"%s\" lacks \"%s\"\n", i, err, bad [i].why);
        CHECK (rc == -1 && strstr (err, bad [i].why));
    }
    //  Over-long value
    char *big = malloc (3000);
    int n = snprintf (big, 3000, "{\"agent_id\":\"%02000d\",\"token\":\"t\",\"tunnel_url\":\"u\"}", 0);
    CHECK (ah_boot_parse (big, (size_t) n, &c, err, sizeof err) == -1 && strstr (err, "too long"));
    free (big);
    CHECK (ah_boot_load ("/nonexistent/boot.json", &c, err, sizeof err) == -1
           && strstr (err, "/nonexistent/boot.json"));
}

static int got_data;
static uint8_t data_buf [256];
static size_t data_len;
static int got_reply_op = -1;
static unsigned got_close;

static void on_data (void *ud, const uint8_t *d, size_t n)
{
    memcpy (data_buf + data_len, d, n);
    data_len += n;
    got_data++;
}

static void on_reply (void *ud, uint8_t op, const uint8_t *d, size_t n)
{
    got_reply_op = op;
}

static void on_close (void *ud, unsigned code)
{
    got_close = code;
}

static void test_ws (void)
{
    //  RFC 6455 section 1.3's example.
    char acc [29];
    ah_ws_accept_for ("dGhlIHNhbXBsZSBub25jZQ==", acc);
    CHECK_STR (acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");

    //  A client frame is masked and unmasks to the payload.
    uint8_t out [300];
    const char *msg = "hello yamux";
    size_t fl = ah_ws_frame (AH_WS_BIN, (const uint8_t *) msg, strlen (msg), out);
    CHECK (fl == 2 + 4 + strlen (msg));
    CHECK (out [0] == 0x82 && out [1] == (0x80 | strlen (msg)));
    char un [32] = "";
    for (size_t i = 0; i < strlen (msg); i++)
        un [i] = (char) (out [6 + i] ^ out [2 + (i & 3)]);
    CHECK_STR (un, msg);
    uint8_t big [200];
    memset (big, 7, sizeof big);
    fl = ah_ws_frame (AH_WS_BIN, big, sizeof big, out);
    CHECK (fl == 4 + 4 + sizeof big && out [1] == (0x80 | 126) && out [2] == 0 && out [3] == 200);

    //  Server frames: fragmented binary message fed a byte at a time,
    //  a ping in the middle, then close.
    ah_ws_callbacks_t cb = { on_data, on_reply, on_close };
    ah_ws_parser_t p;
    ah_ws_parser_init (&p, &cb, NULL);
    const uint8_t stream [] = {
        0x02, 3, 'a', 'b', 'c',             //  binary, not fin
        0x89, 1, 'P',                       //  ping (control between fragments)
        0x80, 2, 'd', 'e',                  //  continuation, fin
        0x88, 2, 0x03, 0xe8,                //  close 1000
    };
    const char *err = NULL;
    unsigned code = 0;
    for (size_t i = 0; i < sizeof stream; i++)
        CHECK (ah_ws_parser_feed (&p, stream + i, 1, &err, &code) == 0);
    CHECK (data_len == 5 && memcmp (data_buf, "abcde", 5) == 0);
    CHECK (got_close == 1000);
    CHECK (got_reply_op == AH_WS_CLOSE);

    struct { uint8_t bytes [12]; size_t n; unsigned code; } bad [] = {
        { { 0x81, 1, 'x' }, 3, 1003 },                          //  text
        { { 0x82, 0x81, 0, 0, 0, 0, 'x' }, 7, 1002 },           //  masked from server
        { { 0xc2, 1, 'x' }, 3, 1002 },                          //  RSV1
        { { 0x80, 1, 'x' }, 3, 1002 },                          //  continuation without start
        { { 0x09, 0 }, 2, 1002 },                               //  fragmented ping
        { { 0x82, 127, 0, 0, 0, 0, 0, 0x20, 0, 0 }, 10, 1009 }, //  2 MiB message
        { { 0x83, 0 }, 2, 1002 },                               //  reserved opcode
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ah_ws_parser_init (&p, &cb, NULL);
        code = 0;
        CHECK (ah_ws_parser_feed (&p, bad [i].bytes, bad [i].n, &err, &code) == -1);
        CHECK (code == bad [i].code);
    }

    ah_ws_url_t u;
    CHECK (ah_ws_url_parse ("ws://10.213.0.2:8090/tunnel", &u, &err) == 0);
    CHECK_STR (u.host, "10.213.0.2");
    CHECK_STR (u.port, "8090");
    CHECK_STR (u.path, "/tunnel");
    CHECK (ah_ws_url_parse ("ws://[::1]:9/t", &u, &err) == 0 && !strcmp (u.host, "::1"));
    CHECK (ah_ws_url_parse ("ws://agenthold:8090/tunnel", &u, &err) == -1 && strstr (err, "IP literal"));
    CHECK (ah_ws_url_parse ("wss://10.0.0.1/tunnel", &u, &err) == -1);
    CHECK (ah_ws_url_parse ("ws://10.0.0.1:99999/tunnel", &u, &err) == -1);
    CHECK (ah_ws_url_parse ("ws://10.0.0.1:80/a b", &u, &err) == -1);
}

static void test_paths (void)
{
    const char *err;
    CHECK (ah_path_check ("", 0, &err) == 0);
    CHECK (ah_path_check (".", 1, &err) == 0);
    CHECK (ah_path_check ("a/./b//c/", 9, &err) == 0);
    CHECK (ah_path_check ("..a/b..", 7, &err) == 0);
    CHECK (ah_path_check ("/etc", 4, &err) == -EACCES && strstr (err, "escapes"));
    CHECK (ah_path_check ("a/../b", 6, &err) == -EACCES);
    CHECK (ah_path_check ("..", 2, &err) == -EACCES);
    CHECK (ah_path_check ("a\0b", 3, &err) == -EINVAL && strstr (err, "NUL"));
    CHECK (ah_path_check (NULL, 0, &err) == -EINVAL);
    char *l = malloc (AH_PATH_MAX + 2);
    memset (l, 'a', AH_PATH_MAX + 1);
    CHECK (ah_path_check (l, AH_PATH_MAX + 1, &err) == -EINVAL && strstr (err, "too long"));
    memset (l, 'a', NAME_MAX + 1);
    CHECK (ah_path_check (l, NAME_MAX + 1, &err) == -EINVAL);
    free (l);
}

static void test_passwd (void)
{
    char path [] = "/tmp/ah-passwd-XXXXXX";
    int fd = mkstemp (path);
    const char *text = "root:x:0:0:root:/root:/bin/bash\n# comment\nbroken line\n"
                       "agent:x:1000:1001:Agent,,,:/home/agent:/bin/sh\nlong:x:99999999999:1:::\n";
    CHECK (write (fd, text, strlen (text)) == (ssize_t) strlen (text));
    close (fd);
    ah_passwd_t pw;
    CHECK (ah_passwd_find (path, "agent", 0, &pw) == 0);
    CHECK (pw.uid == 1000 && pw.gid == 1001);
    CHECK_STR (pw.dir, "/home/agent");
    CHECK_STR (pw.shell, "/bin/sh");
    CHECK (ah_passwd_find (path, NULL, 0, &pw) == 0 && !strcmp (pw.name, "root"));
    CHECK (ah_passwd_find (path, "long", 0, &pw) == -1);
    CHECK (ah_passwd_find (path, "nobody", 0, &pw) == -1);
    CHECK (ah_passwd_find ("/nonexistent", "agent", 0, &pw) == -1);
    unlink (path);
}

int main (void)
{
    test_boot ();
    test_ws ();
    test_paths ();
    test_passwd ();
    return CHECK_DONE ();
}
