/*  tests/sandboxd/test_sandboxd_proc.c: the proc channel (docs/tunnel.md,
    "proc") and kept terminals (the pty channel with an "id") against a real sandboxd instance (in-process, raw yamux over
    socketpairs), its headers built and its replies read with the
    server's client code (proto/procchan.c): start, stdin and both
    outputs, a dropped connection and a redial, reattach by key with the
    output produced meanwhile, exit status, kill, take-over, the limits,
    and hostile arguments.                                              */
#include "tests/sandboxd/sbd_peer.h"
#include "proto/procchan.h"

#include <sys/wait.h>

//  The redial: the instance blocks reading the next socket's number.

//  Open a proc stream; its reply parsed.
static uint32_t s_open (peer_t *p, ah_msg_t *h, ah_procchan_reply_t *r)
{
    CHECK (h != NULL);
    uint32_t id = open_chan (p, &h);
    ah_msg_t *m = wait_header (p, id, 5000);
    CHECK (ah_procchan_reply (m, r) == 0);
    ah_msg_destroy (&m);
    return id;
}

static void s_send (peer_t *p, uint32_t id, uint8_t kind, const char *text)
{
    ah_buf_t b = { 0 };
    CHECK (ah_rec_append (&b, kind, text, text ? strlen (text) : 0) == 0);
    CHECK (ah_yamux_write (p->y, id, ah_buf_head (&b), ah_buf_size (&b))
           == (ssize_t) ah_buf_size (&b));
    ah_buf_free (&b);
}

//  Gather the stream's records until want shows in stdout (or EXIT when
//  want is NULL): stdout and stderr appended to out/err, the exit's
//  status and signal (else -2).
typedef struct { char out [4096], err [4096]; int status, signal; uint64_t bytes; } got_t;

//  The whole records the stream holds, taken. zeros (not NULL): stdout's
//  NUL bytes are counted there and left out of out.
static void s_take_records (tstream_t *s, got_t *g, size_t *zeros)
{
    uint8_t kind;
    const uint8_t *pl;
    uint32_t plen;
    size_t used;
    const char *err = NULL;
    while (ah_rec_decode (s->buf, s->len, &kind, &pl, &plen, &used, &err) == 1) {
        char *dst = kind == AH_REC_STDOUT ? g->out : kind == AH_REC_STDERR ? g->err : NULL;
        size_t have = dst ? strlen (dst) : 0;
        for (uint32_t i = 0; dst && i < plen; i++) {
            if (zeros && kind == AH_REC_STDOUT && pl [i] == 0)
                ++*zeros;
            else if (have < 4095) {
                dst [have++] = (char) pl [i];
                dst [have] = 0;
            }
        }
        if (kind == AH_REC_EXIT)
            CHECK (ah_procchan_exit (pl, plen, &g->status, &g->signal) == 0);
        take (s, used);
        if (dst)
            g->bytes += used;       //  output record bytes received whole: a reattach's "from"
    }
}

static bool s_collect (peer_t *p, uint32_t id, const char *want, got_t *g, int ms)
{
    tstream_t *s = find (p, id);
    int64_t until = now_ms () + ms;
    while (s && now_ms () < until && !p->failed) {
        s_take_records (s, g, NULL);
        if (want ? strstr (g->out, want) != NULL : g->status != -2)
            return true;
        if (s->closed)
            return false;
        pump (p, 50);
    }
    return false;
}

static got_t s_got (void)
{
    got_t g;
    memset (&g, 0, sizeof g);
    g.status = g.signal = -2;
    return g;
}

static void s_refused (peer_t *p, ah_msg_t *h, const char *code, const char *words)
{
    ah_procchan_reply_t r;
    s_open (p, h, &r);
    CHECK (!r.ok && strcmp (r.code, code) == 0);
    if (words && !strstr (r.error, words))
        fprintf (stderr, "refusal \"%s\" lacks \"%s\"\n", r.error, words);
    CHECK (!words || strstr (r.error, words) != NULL);
}

static const char *s_script =
    "echo started; echo to-stderr >&2; "
    "while read l; do sleep 0.3; echo \"got $l\"; done; exit 7";

//  Run, stream both ways, detach by dropping the connection, redial,
//  reattach and read what was written meanwhile, exit status.
static void test_detach (peer_t *p)
{
    const char *argv [] = { "sh", "-c", s_script };
    const char *env [] = { "GREETING=hi there" };
    ah_procchan_reply_t r;
    uint32_t id = s_open (p, ah_procchan_header ("harness", argv, 3, env, 1, -1), &r);
    CHECK (r.ok && r.pid > 0 && !r.attached && r.buffered == 0);
    pid_t pid = (pid_t) r.pid;
    got_t g = s_got ();
    CHECK (s_collect (p, id, "started\n", &g, 5000));
    s_send (p, id, AH_REC_STDIN, "one\n");
    CHECK (s_collect (p, id, "got one\n", &g, 5000));
    for (int i = 0; i < 40 && !strstr (g.err, "to-stderr\n"); i++)
        s_collect (p, id, "never said", &g, 50);
    CHECK (strstr (g.err, "to-stderr\n") != NULL);

    //  A line whose answer comes after the connection is gone.
    s_send (p, id, AH_REC_STDIN, "two\nthree\n");
    pump (p, 20);
    peer_down (p);
    usleep (1200 * 1000);
    CHECK (kill (pid, 0) == 0);                 //  still running, detached

    int fd = peer_up (p);
    CHECK (write (redial_pipe [1], &fd, sizeof fd) == (ssize_t) sizeof fd);
    hello (p);
    //  "from" beyond what it produced: refused.
    s_refused (p, ah_procchan_header ("harness", NULL, 0, NULL, 0, (int64_t) 1 << 40), "EINVAL",
               "\"from\"");
    //  Attach by key, from what came whole before the drop.
    uint64_t had = g.bytes;
    id = s_open (p, ah_procchan_header ("harness", NULL, 0, NULL, 0, (int64_t) had), &r);
    CHECK (r.ok && r.attached && r.pid == pid && !r.exited);
    CHECK (r.offset == (int64_t) had && r.lost == 0 && r.buffered > 0);
    g = s_got ();
    CHECK (s_collect (p, id, "got three\n", &g, 5000));
    CHECK (strncmp (g.out, "got two\ngot three\n", 18) == 0);
    CHECK (g.bytes == (uint64_t) r.buffered);
    //  Another stream takes it over from the start: the whole history.
    id = s_open (p, ah_procchan_header ("harness", NULL, 0, NULL, 0, 0), &r);
    CHECK (r.ok && r.attached && r.offset == 0 && r.lost == 0);
    CHECK (r.buffered == (int64_t) (had + g.bytes));
    g = s_got ();
    CHECK (s_collect (p, id, "got three\n", &g, 5000));
    CHECK (strcmp (g.out, "started\ngot one\ngot two\ngot three\n") == 0);
    //  Still both ways after the reattach.
    s_send (p, id, AH_REC_STDIN, "four\n");
    CHECK (s_collect (p, id, "got four\n", &g, 5000));
    //  End of input: the script exits 7; EXIT then FIN.
    s_send (p, id, AH_REC_EOF, NULL);
    CHECK (s_collect (p, id, NULL, &g, 5000));
    CHECK (g.status == 7 && g.signal == 0);
    tstream_t *s = find (p, id);
    CHECK (s && wait_until (p, &s->eof, 5000));
    ah_yamux_close (p->y, id);
    pump (p, 50);
    //  Its end was told: the key is free.
    uint32_t id2 = s_open (p, ah_procchan_header ("harness", NULL, 0, NULL, 0, -1), &r);
    CHECK (!r.ok && strcmp (r.code, "ENOENT") == 0);
    (void) id2;
}

//  Exit while detached: the reattach gets the output, then EXIT.
static void test_exit_detached (peer_t *p)
{
    const char *argv [] = { "sh", "-c", "read l; echo \"bye $l\"; echo \"$GREETING\"; exit 3" };
    const char *env [] = { "GREETING=hello env" };
    ah_procchan_reply_t r;
    uint32_t id = s_open (p, ah_procchan_header ("short", argv, 3, env, 1, -1), &r);
    CHECK (r.ok);
    s_send (p, id, AH_REC_STDIN, "now\n");
    ah_yamux_reset (p->y, id);                  //  RST: detach, not kill
    usleep (500 * 1000);
    for (int i = 0; i < 5; i++)
        pump (p, 20);
    id = s_open (p, ah_procchan_header ("short", argv, 3, NULL, 0, -1), &r);
    CHECK (r.ok && r.attached && r.exited);     //  argv given, but it is kept: attach
    got_t g = s_got ();
    CHECK (s_collect (p, id, NULL, &g, 5000));
    CHECK (strstr (g.out, "bye now\nhello env\n") != NULL);
    CHECK (g.status == 3);
    //  EXIT sent: the key is free at once, before the stream is closed.
    s_refused (p, ah_procchan_header ("short", NULL, 0, NULL, 0, -1), "ENOENT", "no process");
}

//  A second stream takes the process over; KILL ends it.
static void test_takeover_kill (peer_t *p)
{
    const char *argv [] = { "cat" };
    ah_procchan_reply_t r;
    uint32_t a = s_open (p, ah_procchan_header ("cat", argv, 1, NULL, 0, -1), &r);
    CHECK (r.ok && !r.attached);
    s_send (p, a, AH_REC_STDIN, "first\n");
    got_t ga = s_got ();
    CHECK (s_collect (p, a, "first\n", &ga, 5000));
    //  Without "from" a take-over replays nothing: the old stream had it.
    uint32_t b = s_open (p, ah_procchan_header ("cat", NULL, 0, NULL, 0, -1), &r);
    CHECK (r.ok && r.attached && r.buffered == 0 && r.offset == (int64_t) ga.bytes);
    tstream_t *sa = find (p, a);
    CHECK (sa && wait_until (p, &sa->closed, 5000) && sa->reset);
    s_send (p, b, AH_REC_STDIN, "echoed\n");
    got_t g = s_got ();
    CHECK (s_collect (p, b, "echoed\n", &g, 5000));
    s_send (p, b, AH_REC_KILL, NULL);
    CHECK (s_collect (p, b, NULL, &g, 5000));
    CHECK (g.status == -1 && g.signal == SIGKILL);
}

//  While detached, sandboxd holds at most 1 MiB, then stops reading: the
//  process waits, nothing is lost.
static void test_bound (peer_t *p)
{
    const char *argv [] = { "sh", "-c", "head -c 3000000 /dev/zero; echo; echo end; read x; exit 0" };
    ah_procchan_reply_t r;
    uint32_t id = s_open (p, ah_procchan_header ("flood", argv, 3, NULL, 0, -1), &r);
    CHECK (r.ok);
    ah_yamux_reset (p->y, id);
    usleep (800 * 1000);
    for (int i = 0; i < 5; i++)
        pump (p, 20);
    id = s_open (p, ah_procchan_header ("flood", NULL, 0, NULL, 0, -1), &r);
    CHECK (r.ok && r.attached && !r.exited);
    CHECK (r.buffered > 0 && r.buffered <= (int64_t) AH_PROCCHAN_BUFFER);
    //  Read everything: 3000000 zero bytes, then the end.
    tstream_t *s = find (p, id);
    size_t zeros = 0;
    got_t g = s_got ();
    int64_t until = now_ms () + 20000;
    while (s && !strstr (g.out, "end\n") && now_ms () < until) {
        s_take_records (s, &g, &zeros);
        pump (p, 50);
    }
    CHECK (strstr (g.out, "end\n") != NULL);
    CHECK (zeros == 3000000);
    //  From the start once more: only the last 1 MiB is held, the rest is
    //  counted lost.
    uint64_t total = r.offset + g.bytes;
    id = s_open (p, ah_procchan_header ("flood", NULL, 0, NULL, 0, 0), &r);
    CHECK (r.ok && r.lost > 0 && r.offset == r.lost);
    CHECK (r.buffered > 0 && r.buffered <= (int64_t) AH_PROCCHAN_BUFFER);
    CHECK ((uint64_t) (r.offset + r.buffered) == total);
    s_send (p, id, AH_REC_EOF, NULL);
    g = s_got ();
    zeros = 0;
    s = find (p, id);
    until = now_ms () + 20000;
    while (s && g.status == -2 && now_ms () < until) {
        s_take_records (s, &g, &zeros);
        pump (p, 50);
    }
    CHECK (g.status == 0 && g.bytes == (uint64_t) r.buffered);
}


static void test_hostile (peer_t *p)
{
    //  Types, through the channel's argument table.
    ah_msg_t *h = req_new ("proc");
    ah_msg_set_str (h, "key", "k");
    ah_msg_set_str (h, "argv", "sh -c true");
    s_refused (p, h, "EINVAL", "\"argv\" must be a list");
    h = req_new ("proc");
    ah_msg_set_int (h, "key", 5);
    s_refused (p, h, "EINVAL", "\"key\" must be a string");
    h = req_new ("proc");
    ah_msg_set_str (h, "key", "k");
    ah_msg_set_raw (h, "argv", "\x91\xa4true", 6);
    ah_msg_set_raw (h, "env", "\x92\x01\x02", 3);
    s_refused (p, h, "EINVAL", "\"env\" must be a map");
    //  Contents.
    h = req_new ("proc");
    ah_msg_set_str (h, "key", "k");
    ah_msg_set_raw (h, "argv", "\x90", 1);
    s_refused (p, h, "EINVAL", "argv");
    h = req_new ("proc");
    ah_msg_set_str (h, "key", "k");
    ah_msg_set_raw (h, "argv", "\x92\xa4true\x01", 7);
    s_refused (p, h, "EINVAL", "argv");
    h = req_new ("proc");
    ah_msg_set_str (h, "key", "k");
    ah_msg_set_raw (h, "argv", "\x91\xa0", 2);          //  [""]
    s_refused (p, h, "EINVAL", "argv");
    h = req_new ("proc");
    ah_msg_set_str (h, "key", "k");
    ah_msg_set_raw (h, "argv", "\x91\xa3\x61\x00\x62", 5);  //  ["a\0b"]
    s_refused (p, h, "EINVAL", NULL);
    //  Too many entries, too long an entry (built by hand: the client refuses).
    {
        msgpack_sbuffer sb;
        msgpack_sbuffer_init (&sb);
        msgpack_packer pk;
        msgpack_packer_init (&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_array (&pk, 300);
        for (int i = 0; i < 300; i++)
            msgpack_pack_str_with_body (&pk, "x", 1);
        h = req_new ("proc");
        ah_msg_set_str (h, "key", "k");
        ah_msg_set_raw (h, "argv", sb.data, sb.size);
        s_refused (p, h, "EINVAL", "argv");
        msgpack_sbuffer_clear (&sb);
        char big [5000];
        memset (big, 'a', sizeof big);
        msgpack_pack_array (&pk, 1);
        msgpack_pack_str_with_body (&pk, big, sizeof big);
        h = req_new ("proc");
        ah_msg_set_str (h, "key", "k");
        ah_msg_set_raw (h, "argv", sb.data, sb.size);
        s_refused (p, h, "EINVAL", "argv");
        msgpack_sbuffer_destroy (&sb);
    }
    const char *argv [] = { "true" };
    //  Keys: the client refuses them, sandboxd too.
    CHECK (ah_procchan_header ("../x", argv, 1, NULL, 0, -1) == NULL);
    CHECK (ah_procchan_header ("", argv, 1, NULL, 0, -1) == NULL);
    CHECK (ah_procchan_header ("k", argv, 0, NULL, 0, -1) == NULL);
    const char *bad_env [] = { "NOEQUALS" };
    CHECK (ah_procchan_header ("k", argv, 1, bad_env, 1, -1) == NULL);
    const char *keys [] = { "../x", "a b", "", "k\n",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" };
    for (size_t i = 0; i < sizeof keys / sizeof keys [0]; i++) {
        h = req_new ("proc");
        ah_msg_set_str (h, "key", keys [i]);
        ah_msg_set_raw (h, "argv", "\x91\xa4true", 6);
        s_refused (p, h, "EINVAL", "\"key\"");
    }
    h = req_new ("proc");
    ah_msg_set_raw (h, "argv", "\x91\xa4true", 6);
    s_refused (p, h, "EINVAL", "\"key\"");
    //  env: exec's rules.
    h = req_new ("proc");
    ah_msg_set_str (h, "key", "k");
    ah_msg_set_raw (h, "argv", "\x91\xa4true", 6);
    ah_msg_set_raw (h, "env", "\x81\xa3\x41\x3d\x42\xa1\x76", 7);  //  {"A=B": "v"}
    s_refused (p, h, "EINVAL", "env");
    //  No such command; no such key.
    const char *nocmd [] = { "no-such-agent-here", "--acp" };
    s_refused (p, ah_procchan_header ("k", nocmd, 2, NULL, 0, -1), "ENOENT", "not found");
    s_refused (p, ah_procchan_header ("nobody", NULL, 0, NULL, 0, -1), "ENOENT", "no process");
    //  At most 16 kept: the 17th is refused; KILL frees them.
    const char *sleeper [] = { "sleep", "60" };
    uint32_t ids [AH_PROCCHAN_KEPT_MAX];
    for (int i = 0; i < AH_PROCCHAN_KEPT_MAX; i++) {
        char key [16];
        snprintf (key, sizeof key, "s%d", i);
        ah_procchan_reply_t r;
        ids [i] = s_open (p, ah_procchan_header (key, sleeper, 2, NULL, 0, -1), &r);
        CHECK (r.ok);
    }
    s_refused (p, ah_procchan_header ("s99", sleeper, 2, NULL, 0, -1), "EAGAIN", "16");
    for (int i = 0; i < AH_PROCCHAN_KEPT_MAX; i++) {
        s_send (p, ids [i], AH_REC_KILL, NULL);
        got_t g = s_got ();
        CHECK (s_collect (p, ids [i], NULL, &g, 5000) && g.signal == SIGKILL);
        ah_yamux_close (p->y, ids [i]);
    }
    pump (p, 100);
    ah_procchan_reply_t r;
    uint32_t id = s_open (p, ah_procchan_header ("s99", sleeper, 2, NULL, 0, -1), &r);
    CHECK (r.ok);
    s_send (p, id, AH_REC_KILL, NULL);
    got_t g = s_got ();
    CHECK (s_collect (p, id, NULL, &g, 5000));
}

//  A real ACP agent (tests/acp/build-example-agent builds one; the path
//  in AH_TEST_ACP_AGENT, else this is skipped): initialize answered over
//  the proc channel, exit 0 at the end of stdin.
static void test_acp_agent (peer_t *p)
{
    const char *agent = getenv ("AH_TEST_ACP_AGENT");
    if (!agent || !*agent) {
        fprintf (stderr, "acp agent: skipped (AH_TEST_ACP_AGENT not set)\n");
        return;
    }
    const char *argv [] = { agent };
    ah_procchan_reply_t r;
    uint32_t id = s_open (p, ah_procchan_header ("acp", argv, 1, NULL, 0, -1), &r);
    CHECK (r.ok);
    s_send (p, id, AH_REC_STDIN, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
            "\"params\":{\"protocolVersion\":1,\"clientCapabilities\":{}}}\n");
    got_t g = s_got ();
    CHECK (s_collect (p, id, "\"agentCapabilities\"", &g, 10000));
    CHECK (strstr (g.out, "\"id\":1") && strstr (g.out, "\"protocolVersion\":1"));
    s_send (p, id, AH_REC_EOF, NULL);
    CHECK (s_collect (p, id, NULL, &g, 10000));
    CHECK (g.status == 0);
    fprintf (stderr, "acp agent: %.300s", g.out);
}


//  ---------------------------------------------------------------------
//  Kept terminals (docs/tunnel.md, "pty"): a pty with an id outlives
//  its stream and the connection; a ring holds what came meanwhile.

static uint32_t s_term (peer_t *p, const char *tid, bool create, int cols, int rows,
                        int64_t from, ah_procchan_reply_t *r)
{
    return s_open (p, ah_ptychan_header (tid, create, cols, rows, from), r);
}

static void test_term_kept (peer_t *p)
{
    ah_procchan_reply_t r;
    //  Attach to nothing: ENOENT; create: a shell.
    s_refused (p, ah_ptychan_header ("t1", false, 0, 0, -1), "ENOENT", "no terminal");
    uint32_t id = s_term (p, "t1", true, 80, 24, -1, &r);
    CHECK (r.ok && r.pid > 0 && !r.attached);
    pid_t pid = (pid_t) r.pid;
    s_refused (p, ah_ptychan_header ("t1", true, 80, 24, -1), "EEXIST", "already");
    got_t g = s_got ();
    s_send (p, id, AH_REC_STDIN, "echo hello-$((6*7))\n");
    CHECK (s_collect (p, id, "hello-42", &g, 5000));
    //  Output that comes after the stream went (RST: detach).
    s_send (p, id, AH_REC_STDIN, "sleep 0.5; echo later-$((2*3))\n");
    pump (p, 50);
    ah_yamux_reset (p->y, id);
    for (int i = 0; i < 20; i++)
        pump (p, 50);
    CHECK (kill (pid, 0) == 0);
    uint64_t had = g.bytes;
    id = s_term (p, "t1", false, 0, 0, (int64_t) had, &r);
    CHECK (r.ok && r.attached && r.pid == pid && r.offset == (int64_t) had && r.lost == 0);
    CHECK (r.buffered > 0);
    g = s_got ();
    CHECK (s_collect (p, id, "later-6", &g, 5000));
    had += g.bytes;
    //  The connection lost and redialled: the shell is still there.
    peer_down (p);
    usleep (300 * 1000);
    CHECK (kill (pid, 0) == 0);
    int fd = peer_up (p);
    CHECK (write (redial_pipe [1], &fd, sizeof fd) == (ssize_t) sizeof fd);
    hello (p);
    //  A reattach with a size: the pty takes it.
    id = s_term (p, "t1", false, 100, 30, -1, &r);
    CHECK (r.ok && r.attached && r.pid == pid);
    g = s_got ();
    s_send (p, id, AH_REC_STDIN, "stty size\n");
    CHECK (s_collect (p, id, "30 100", &g, 5000));
    //  The opener's FIN detaches too: FIN back, the shell runs on.
    ah_yamux_close (p->y, id);
    tstream_t *s = find (p, id);
    CHECK (s && wait_until (p, &s->eof, 5000));
    CHECK (kill (pid, 0) == 0);
    //  From 0: the whole history (under the ring's bound).
    id = s_term (p, "t1", false, 0, 0, 0, &r);
    CHECK (r.ok && r.offset == 0 && r.lost == 0);
    g = s_got ();
    CHECK (s_collect (p, id, "30 100", &g, 5000));
    CHECK (strstr (g.out, "hello-42") && strstr (g.out, "later-6"));
    //  KILL ends it: hang-up, EXIT, the id free.
    s_send (p, id, AH_REC_KILL, NULL);
    CHECK (s_collect (p, id, NULL, &g, 8000));
    CHECK (g.signal == SIGHUP || g.signal == SIGKILL || g.status >= 0);
    CHECK (kill (pid, 0) != 0 || errno == EPERM);
    s_refused (p, ah_ptychan_header ("t1", false, 0, 0, -1), "ENOENT", "no terminal");
}

//  A flood while nobody is attached: read on into the ring (the shell is
//  not blocked), the last AH_PTYCHAN_RING bytes replayed, the rest lost.
static void test_term_ring (peer_t *p)
{
    ah_procchan_reply_t r;
    uint32_t id = s_term (p, "flood", true, 80, 24, -1, &r);
    CHECK (r.ok);
    s_send (p, id, AH_REC_STDIN, "stty -echo; head -c 1000000 /dev/zero; "
            "echo; echo done-$((40+2))\n");
    pump (p, 50);
    ah_yamux_reset (p->y, id);
    for (int i = 0; i < 60; i++)
        pump (p, 50);
    id = s_term (p, "flood", false, 0, 0, 0, &r);
    CHECK (r.ok && r.attached && r.lost > 0);
    CHECK (r.buffered > 0 && r.buffered <= (int64_t) AH_PTYCHAN_RING);
    //  The NULs are counted, not kept: the end shows after them.
    got_t g = s_got ();
    size_t zeros = 0;
    tstream_t *s = find (p, id);
    int64_t until = now_ms () + 5000;
    while (s && !strstr (g.out, "done-42") && now_ms () < until) {
        s_take_records (s, &g, &zeros);
        pump (p, 50);
    }
    CHECK (strstr (g.out, "done-42") != NULL);
    CHECK (zeros > 0 && zeros < AH_PTYCHAN_RING);
    s_send (p, id, AH_REC_KILL, NULL);
    CHECK (s_collect (p, id, NULL, &g, 8000));
}

//  At most 32 kept terminals; hostile arguments.
static void test_term_hostile (peer_t *p)
{
    ah_procchan_reply_t r;
    uint32_t ids [AH_PTYCHAN_KEPT_MAX];
    for (int i = 0; i < AH_PTYCHAN_KEPT_MAX; i++) {
        char tid [16];
        snprintf (tid, sizeof tid, "c%d", i);
        ids [i] = s_term (p, tid, true, 80, 24, -1, &r);
        CHECK (r.ok);
    }
    s_refused (p, ah_ptychan_header ("c99", true, 80, 24, -1), "EAGAIN", "32 terminals");
    //  ptys lists them all (ids, pids, attached).
    {
        ah_msg_t *m = simple (p, req_new ("ptys"));
        CHECK (reply_ok (m));
        size_t size = 0;
        const void *raw = ah_msg_raw (m, "terminals", &size);
        msgpack_unpacked u;
        msgpack_unpacked_init (&u);
        CHECK (raw && msgpack_unpack_next (&u, raw, size, NULL) == MSGPACK_UNPACK_SUCCESS);
        CHECK (u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size == AH_PTYCHAN_KEPT_MAX);
        int seen = 0;
        for (uint32_t i = 0; i < u.data.via.array.size; i++) {
            msgpack_object *o = &u.data.via.array.ptr [i];
            CHECK (o->type == MSGPACK_OBJECT_MAP && o->via.map.size == 5);
            msgpack_object *id = &o->via.map.ptr [0].val;
            seen += id->type == MSGPACK_OBJECT_STR && id->via.str.size >= 2 && id->via.str.ptr [0] == 'c';
        }
        CHECK (seen == AH_PTYCHAN_KEPT_MAX);
        msgpack_unpacked_destroy (&u);
        ah_msg_destroy (&m);
    }
    //  A proc key of the same name is another table.
    s_refused (p, ah_procchan_header ("c0", NULL, 0, NULL, 0, -1), "ENOENT", "no process");
    for (int i = 0; i < AH_PTYCHAN_KEPT_MAX; i++) {
        s_send (p, ids [i], AH_REC_KILL, NULL);
        got_t g = s_got ();
        CHECK (s_collect (p, ids [i], NULL, &g, 8000));
        ah_yamux_close (p->y, ids [i]);
    }
    pump (p, 100);
    uint32_t id = s_term (p, "c99", true, 80, 24, -1, &r);
    CHECK (r.ok);
    s_refused (p, ah_ptychan_header ("c99", false, 0, 0, (int64_t) 1 << 40), "EINVAL", "\"from\"");
    //  A second stream takes it over: the first is reset.
    uint32_t id2 = s_term (p, "c99", false, 0, 0, -1, &r);
    CHECK (r.ok && r.attached);
    tstream_t *s = find (p, id);
    CHECK (s && wait_until (p, &s->closed, 5000) && s->reset);
    s_send (p, id2, AH_REC_KILL, NULL);
    got_t g = s_got ();
    CHECK (s_collect (p, id2, NULL, &g, 8000));
    CHECK (ah_ptychan_header ("../x", true, 80, 24, -1) == NULL);
    CHECK (ah_ptychan_header ("", true, 80, 24, -1) == NULL);
    const char *bad [] = { "../x", "a b", "k\n",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        ah_msg_t *h = req_new ("pty");
        ah_msg_set_str (h, "id", bad [i]);
        ah_msg_set_bool (h, "create", true);
        s_refused (p, h, "EINVAL", "\"id\"");
    }
    ah_msg_t *h = req_new ("pty");
    ah_msg_set_int (h, "id", 7);
    s_refused (p, h, "EINVAL", "\"id\" must be a string");
    h = req_new ("pty");
    ah_msg_set_str (h, "id", "z");
    ah_msg_set_int (h, "create", 1);
    s_refused (p, h, "EINVAL", "\"create\" must be a boolean");
    int64_t sizes [][2] = { { 0, 24 }, { 80, -1 }, { 100000, 24 }, { 80, 1001 } };
    for (size_t i = 0; i < 4; i++) {
        h = ah_ptychan_header ("z", true, 1, 1, -1);
        ah_msg_set_int (h, "cols", sizes [i][0]);
        ah_msg_set_int (h, "rows", sizes [i][1]);
        s_refused (p, h, "EINVAL", "cols and rows");
    }
}

int main (void)
{
    peer_t *p;
    ah_sandboxd_t *sbd = instance_start ("ah-sandboxd-proc", &p);

    test_detach (p);
    test_exit_detached (p);
    test_takeover_kill (p);
    test_bound (p);
    test_hostile (p);
    test_term_kept (p);
    test_term_ring (p);
    test_term_hostile (p);
    test_acp_agent (p);
    CHECK (!p->failed);

    //  A kept process still running when the instance stops is killed.
    const char *sleeper [] = { "sleep", "60" };
    ah_procchan_reply_t r;
    uint32_t id = s_open (p, ah_procchan_header ("last", sleeper, 2, NULL, 0, -1), &r);
    CHECK (r.ok);
    ah_yamux_reset (p->y, id);
    pump (p, 50);
    instance_end (&sbd, &p);
    CHECK (kill ((pid_t) r.pid, 0) != 0);
    return CHECK_DONE ();
}
