/*  tests/fuzz/fuzz_hello.c: libFuzzer target for the tunnel's hello, on
    both sides (docs/tunnel.md "hello").

    sandboxd's side: the input's bytes (after two control bytes) are the
    payload of a new yamux stream from the server, given to a real
    sandboxd session (sandboxd/chan.c) in two pieces; the session decodes
    the channel header and answers the hello. Inputs whose header names
    another channel are not given (they would run commands or write
    files: fuzz_chanhdr covers their decoding).
    The server's side: the reply sandboxd sent, and the input's bytes
    read as a reply from a hostile sandboxd, are judged by the server's
    ah_tun_hello_verdict (actors/tunnel_conn.c).

    Checks beyond "no crash": sandboxd answers a well-formed hello of the
    right version, and only that, with ok; it answers every complete or
    malformed header, and nothing before a header is complete; its answer
    to a good hello is accepted by the server exactly when the reader
    modes agree; the server accepts a reply only with ok, the right
    version and the mode it expects, and gives a reason when it refuses.
    The session leaks nothing (ASan) and no fd (counted).             */
#include "actors/tunnel_int.h"
#include "proto/channel.h"
#include "proto/yamux.h"
#include "sandboxd/chan.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAIL(...) do { fprintf (stderr, __VA_ARGS__); fputc ('\n', stderr); abort (); } while (0)
#define AGENT "agent-fuzz"

static char s_home [64];
static int s_home_fd = -1;

typedef struct {
    uint8_t *data;
    size_t size, cap;
} out_t;

static void s_output (void *ud, const uint8_t *data, size_t size)
{
    out_t *o = ud;
    if (o->size + size > o->cap) {
        size_t cap = (o->size + size) * 2;
        uint8_t *p = realloc (o->data, cap);
        if (!p)
            FAIL ("out of memory");
        o->data = p;
        o->cap = cap;
    }
    memcpy (o->data + o->size, data, size);
    o->size += size;
}

static size_t s_backlog (void *ud)
{
    (void) ud;
    return 0;
}

static void s_rmdir (void)
{
    rmdir (s_home);
}

static void s_setup (void)
{
    snprintf (s_home, sizeof s_home, "/tmp/ah-fuzz-hello-XXXXXX");
    if (!mkdtemp (s_home))
        FAIL ("mkdtemp");
    atexit (s_rmdir);
    s_home_fd = open (s_home, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s_home_fd < 0)
        FAIL ("open home");
}

//  The payload sandboxd sent on stream 1 (data frames only), into reply.
static size_t s_stream_payload (const out_t *o, uint8_t *reply, size_t cap)
{
    size_t at = 0, n = 0;
    while (at + AH_YAMUX_HEADER_SIZE <= o->size) {
        ah_yamux_header_t h;
        if (ah_yamux_header_decode (o->data + at, &h))
            FAIL ("sandboxd sent a bad yamux header");
        at += AH_YAMUX_HEADER_SIZE;
        if (h.type == AH_YAMUX_DATA) {
            if (h.length > o->size - at)
                FAIL ("sandboxd sent a short data frame");
            if (h.stream_id == 1 && n + h.length <= cap) {
                memcpy (reply + n, o->data + at, h.length);
                n += h.length;
            }
            at += h.length;
        }
    }
    if (at != o->size)
        FAIL ("sandboxd sent a partial frame");
    return n;
}

//  The server's verdict on a reply map, checked against what it says.
static int s_verdict (const ah_msg_t *reply, bool reader)
{
    char why [600] = "";
    int rc = ah_tun_hello_verdict (reply, AGENT, reader, why, sizeof why);
    if (rc == 0) {
        const char *mode = ah_msg_str (reply, "mode");
        const char *id = ah_msg_str (reply, "agent_id");
        if (!ah_msg_bool (reply, "ok", false) || ah_msg_int (reply, "version", -1) != AH_PROTOCOL_VERSION
        ||  (reader != (mode && !strcmp (mode, "read"))) || (id && strcmp (id, AGENT)))
            FAIL ("the server accepted a hello reply it should refuse");
    }
    else if (rc != -1 || !why [0])
        FAIL ("the server refused a hello reply without a reason");
    return rc;
}

static void s_sandboxd (const uint8_t *data, size_t size, bool read_only, bool reader, size_t cut)
{
    //  What sandboxd should do with it
    ah_msg_t *req = NULL;
    size_t used = 0;
    const char *err = NULL;
    int hrc = ah_chan_header_decode (data, size, &req, &used, &err);
    const char *ch = req ? ah_msg_str (req, "ch") : NULL;
    if (hrc == 1 && ch && strcmp (ch, "hello")) {
        ah_msg_destroy (&req);
        return;
    }
    bool good = hrc == 1 && ch && ah_msg_has (req, "version")
             && ah_msg_int (req, "version", -1) == AH_PROTOCOL_VERSION;
    ah_msg_destroy (&req);

    out_t out = { 0 };
    ah_sbd_env_t env = { .home_fd = s_home_fd, .home = s_home, .agent_id = AGENT,
                         .read_only = read_only, .output = s_output, .backlog = s_backlog,
                         .ud = &out };
    ah_sbd_session_t *session = ah_sbd_session_new (&env);
    if (!session)
        FAIL ("no session");
    //  A new stream from the server (SYN), its payload in two frames
    if (cut > size)
        cut = size;
    const uint8_t *piece [2] = { data, data + cut };
    size_t plen [2] = { cut, size - cut };
    for (int i = 0; i < 2; i++) {
        uint8_t frame [AH_YAMUX_HEADER_SIZE];
        ah_yamux_header_t h = { .version = AH_YAMUX_VERSION, .type = AH_YAMUX_DATA,
                                .flags = i == 0 ? AH_YAMUX_SYN : 0, .stream_id = 1,
                                .length = (uint32_t) plen [i] };
        ah_yamux_header_encode (&h, frame);
        const char *why = NULL;
        if (ah_sbd_session_input (session, frame, sizeof frame, &why)
        ||  (plen [i] && ah_sbd_session_input (session, piece [i], plen [i], &why)))
            FAIL ("sandboxd's yamux refused a good frame: %s", why ? why : "?");
    }
    static uint8_t reply [1 << 16];
    size_t n = s_stream_payload (&out, reply, sizeof reply);
    ah_msg_t *map = NULL;
    size_t u = 0;
    int rrc = n ? ah_chan_header_decode (reply, n, &map, &u, &err) : 0;
    if (hrc == 0 && n)
        FAIL ("sandboxd answered an incomplete header");
    if (hrc != 0 && rrc != 1)
        FAIL ("sandboxd's answer to a %s header is not a header",
              hrc == 1 ? "complete" : "malformed");
    if (map) {
        bool ok = ah_msg_bool (map, "ok", false);
        if (ok != good)
            FAIL ("sandboxd answered a %s hello with ok=%d", good ? "good" : "bad", ok);
        int v = s_verdict (map, reader);
        if (good && (v == 0) != (read_only == reader))
            FAIL ("the server %s sandboxd's own hello (read_only %d, reader token %d)",
                  v == 0 ? "accepted" : "refused", read_only, reader);
        if (!good && v == 0)
            FAIL ("the server accepted a refusal");
    }
    ah_msg_destroy (&map);
    ah_sbd_session_destroy (&session);
    free (out.data);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (s_home_fd < 0)
        s_setup ();
    if (size < 2)
        return 0;
    bool read_only = data [0] & 1, reader = data [0] & 2;
    size_t cut = data [1];
    data += 2;
    size -= 2;
    s_sandboxd (data, size, read_only, reader, cut);
    //  The same bytes as a reply from a hostile sandboxd
    ah_msg_t *map = NULL;
    size_t used = 0;
    const char *err = NULL;
    if (ah_chan_header_decode (data, size, &map, &used, &err) == 1)
        s_verdict (map, reader);
    ah_msg_destroy (&map);
    return 0;
}
