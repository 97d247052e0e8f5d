/*  tests/sandboxd/test_sandboxd_exec.c: sandboxd's exec, flow control,
    pty, stats and malformed-frame channels, its home reader and several
    instances in one process, driven as test_sandboxd.c drives the files
    (sbd_peer.h); main is test_sandboxd.c's.                            */
#include "tests/sandboxd/sbd_peer.h"

//  Records from stream s: appends STDOUT/STDERR payloads, returns true at EXIT.
typedef struct {
    char *out, *err;
    size_t out_len, err_len;
    bool exited;
    int64_t status, sig;
    bool timed_out;
} recs_t;

static void recs_take (tstream_t *s, recs_t *rc)
{
    while (true) {
        uint8_t kind;
        const uint8_t *pl;
        uint32_t plen;
        size_t used;
        const char *err;
        if (ah_rec_decode (s->buf, s->len, &kind, &pl, &plen, &used, &err) != 1)
            return;
        if (kind == AH_REC_STDOUT || kind == AH_REC_STDERR) {
            char **b = kind == AH_REC_STDOUT ? &rc->out : &rc->err;
            size_t *l = kind == AH_REC_STDOUT ? &rc->out_len : &rc->err_len;
            *b = realloc (*b, *l + plen + 1);
            memcpy (*b + *l, pl, plen);
            *l += plen;
            (*b) [*l] = 0;
        }
        else if (kind == AH_REC_EXIT) {
            char *e = NULL;
            ah_msg_t *m = ah_msg_decode ("", pl, plen, &e);
            rc->exited = true;
            rc->status = m ? ah_msg_int (m, "status", -99) : -99;
            rc->sig = m ? ah_msg_int (m, "signal", -99) : -99;
            rc->timed_out = m ? ah_msg_bool (m, "timed_out", false) : false;
            ah_msg_destroy (&m);
            free (e);
        }
        take (s, used);
    }
}

static void send_rec (peer_t *p, uint32_t id, uint8_t kind, const void *data, size_t size)
{
    uint8_t pre [5];
    ah_rec_prefix (kind, (uint32_t) size, pre);
    CHECK (ah_yamux_write (p->y, id, pre, 5) == 5);
    if (size)
        CHECK (ah_yamux_write (p->y, id, data, size) == (ssize_t) size);
}

static bool run_until_exit (peer_t *p, uint32_t id, recs_t *rc, int ms)
{
    tstream_t *s = find (p, id);
    int64_t until = now_ms () + ms;
    while (!rc->exited && now_ms () < until && !p->failed) {
        pump (p, 50);
        recs_take (s, rc);
    }
    return rc->exited;
}

static void recs_free (recs_t *rc)
{
    free (rc->out);
    free (rc->err);
    memset (rc, 0, sizeof *rc);
}

uint32_t exec_open (peer_t *p, const char *cmd, double timeout, ah_msg_t **reply)
{
    ah_msg_t *req = req_new ("exec");
    ah_msg_set_str (req, "cmd", cmd);
    if (timeout > 0)
        ah_msg_set_double (req, "timeout", timeout);
    uint32_t id = open_chan (p, &req);
    *reply = wait_header (p, id, 5000);
    return id;
}

void test_exec (peer_t *p)
{
    ah_msg_t *r;
    recs_t rc = { 0 };
    uint32_t id = exec_open (p, "echo out; echo err >&2; exit 3", 0, &r);
    CHECK (reply_ok (r) && ah_msg_int (r, "pid", 0) > 0);
    ah_msg_destroy (&r);
    ah_yamux_close (p->y, id);
    CHECK (run_until_exit (p, id, &rc, 10000));
    CHECK_STR (rc.out, "out\n");
    CHECK_STR (rc.err, "err\n");
    CHECK (rc.status == 3 && rc.sig == 0 && !rc.timed_out);
    tstream_t *s = find (p, id);
    CHECK (wait_until (p, &s->eof, 5000));
    recs_free (&rc);

    //  stdin records, then EOF
    id = exec_open (p, "tr a-z A-Z", 0, &r);
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);
    send_rec (p, id, AH_REC_STDIN, "hello ", 6);
    send_rec (p, id, AH_REC_STDIN, "world\n", 6);
    send_rec (p, id, AH_REC_EOF, NULL, 0);
    CHECK (run_until_exit (p, id, &rc, 10000));
    CHECK_STR (rc.out, "HELLO WORLD\n");
    CHECK (rc.status == 0);
    ah_yamux_close (p->y, id);
    recs_free (&rc);

    //  One stdin record larger than the window, to a process that reads
    //  late: sandboxd takes what the pipe takes, the rest waits unconsumed.
    id = exec_open (p, "sleep 0.3; wc -c", 0, &r);
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);
    size_t big = 600000;
    uint8_t *data = calloc (1, big + 5);
    ah_rec_prefix (AH_REC_STDIN, (uint32_t) big, data);
    size_t sent = 0;
    int64_t until = now_ms () + 10000;
    while (sent < big + 5 && now_ms () < until && !p->failed) {
        ssize_t w = ah_yamux_write (p->y, id, data + sent, big + 5 - sent);
        if (w > 0)
            sent += (size_t) w;
        pump (p, 20);
    }
    CHECK (sent == big + 5);
    free (data);
    send_rec (p, id, AH_REC_EOF, NULL, 0);
    CHECK (run_until_exit (p, id, &rc, 10000));
    CHECK (rc.out && strtol (rc.out, NULL, 10) == (long) big && rc.status == 0);
    ah_yamux_close (p->y, id);
    recs_free (&rc);

    //  The timeout kills the process group, grandchildren included.
    int64_t t0 = now_ms ();
    id = exec_open (p, "sleep 30 & sleep 30; echo never", 0.5, &r);
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);
    ah_yamux_close (p->y, id);
    CHECK (run_until_exit (p, id, &rc, 10000));
    CHECK (rc.timed_out && rc.sig == 9 && rc.status == -1);
    CHECK (rc.out == NULL);
    CHECK (now_ms () - t0 < 5000);
    recs_free (&rc);

    //  A background job holding the pipes does not hold EXIT for long.
    t0 = now_ms ();
    id = exec_open (p, "sleep 20 >/dev/null 2>&1 </dev/null & echo started", 0, &r);
    ah_msg_destroy (&r);
    ah_yamux_close (p->y, id);
    CHECK (run_until_exit (p, id, &rc, 10000));
    CHECK_STR (rc.out, "started\n");
    CHECK (rc.status == 0 && now_ms () - t0 < 5000);
    recs_free (&rc);

    //  env and cwd
    CHECK (mkdir (strcat (strcpy ((char [PATH_MAX * 2]) { 0 }, home), "/wd"), 0755) == 0);
    ah_msg_t *req = req_new ("exec");
    ah_msg_set_str (req, "cmd", "echo \"$FOO\" \"$HOME\"; pwd");
    ah_msg_set_str (req, "cwd", "wd");
    msgpack_sbuffer sb;
    msgpack_sbuffer_init (&sb);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, 1);
    msgpack_pack_str_with_body (&pk, "FOO", 3);
    msgpack_pack_str_with_body (&pk, "bar", 3);
    ah_msg_set_raw (req, "env", sb.data, sb.size);
    msgpack_sbuffer_destroy (&sb);
    id = open_chan (p, &req);
    r = wait_header (p, id, 5000);
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);
    ah_yamux_close (p->y, id);
    CHECK (run_until_exit (p, id, &rc, 10000));
    char want [PATH_MAX * 3];
    char real [PATH_MAX];
    if (!realpath (home, real))
        real [0] = 0;
    snprintf (want, sizeof want, "bar %s\n%s/wd\n", home, real);
    CHECK_STR (rc.out, want);
    recs_free (&rc);

    //  Bad arguments
    req = req_new ("exec");
    r = simple (p, req);
    CHECK_STR (reply_code (r), "EINVAL");
    ah_msg_destroy (&r);
    req = req_new ("exec");
    ah_msg_set_str (req, "cmd", "true");
    ah_msg_set_str (req, "cwd", "../");
    r = simple (p, req);
    CHECK_STR (reply_code (r), "EACCES");
    ah_msg_destroy (&r);
}

void test_flow (peer_t *p)
{
    //  20 MB of output to a consumer that stops reading: sandboxd must
    //  stay within the window (yamux would fail the session otherwise)
    //  and keep answering other channels; then it all arrives.
    size_t want = 20u * 1000u * 1000u;
    p->hold = true;
    ah_msg_t *r;
    uint32_t id = exec_open (p, "head -c 20000000 /dev/zero", 0, &r);
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);
    ah_yamux_close (p->y, id);
    int64_t until = now_ms () + 1500;
    while (now_ms () < until)
        pump (p, 50);
    tstream_t *s = find (p, id);
    CHECK (s->total <= AH_YAMUX_INITIAL_WINDOW);
    CHECK (s->total > 0);
    p->hold = false;
    ah_yamux_consumed (p->y, id, s->total);    //  what we held back
    //  Another channel answers meanwhile.
    r = simple (p, req_new ("ping"));
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);
    recs_t rc = { 0 };
    size_t got = 0;
    until = now_ms () + 30000;
    while (!rc.exited && now_ms () < until && !p->failed) {
        pump (p, 50);
        recs_take (s, &rc);
        got += rc.out_len;
        free (rc.out);
        rc.out = NULL;
        rc.out_len = 0;
    }
    CHECK (rc.exited && rc.status == 0);
    CHECK (got == want);
    recs_free (&rc);
}

void test_flow_read (peer_t *p)
{
    //  fs.read of a file bigger than the window to a consumer that stops:
    //  at most one window arrives until it consumes again.
    p->hold = true;
    ah_msg_t *req = req_new ("fs.read");
    ah_msg_set_str (req, "path", "big.bin");
    uint32_t id = open_chan (p, &req);
    ah_yamux_close (p->y, id);
    int64_t until = now_ms () + 1000;
    while (now_ms () < until)
        pump (p, 50);
    tstream_t *s = find (p, id);
    CHECK (s->total > 0 && s->total <= AH_YAMUX_INITIAL_WINDOW);
    CHECK (!s->eof);
    p->hold = false;
    ah_yamux_consumed (p->y, id, s->total);
    CHECK (wait_until (p, &s->eof, 10000));
    ah_msg_t *r = NULL;
    size_t used = 0;
    const char *err;
    CHECK (ah_chan_header_decode (s->buf, s->len, &r, &used, &err) == 1);
    CHECK (r && (size_t) ah_msg_int (r, "size", -1) == s->len - used);
    CHECK (s->len - used == 3 * 1024 * 1024 + 12345);
    ah_msg_destroy (&r);
}

void test_pty (peer_t *p)
{
    ah_msg_t *req = req_new ("pty");
    ah_msg_set_int (req, "cols", 100);
    ah_msg_set_int (req, "rows", 30);
    ah_msg_set_str (req, "term", "xterm");
    uint32_t id = open_chan (p, &req);
    ah_msg_t *r = wait_header (p, id, 5000);
    CHECK (reply_ok (r) && ah_msg_int (r, "pid", 0) > 0);
    ah_msg_destroy (&r);
    tstream_t *s = find (p, id);
    recs_t rc = { 0 };
    //  The typed line echoes as `hel''lo`; only the output says hello.
    const char *line = "echo hel''lo; stty size; echo \"T=$TERM\"\n";
    send_rec (p, id, AH_REC_STDIN, line, strlen (line));
    int64_t until = now_ms () + 10000;
    while (now_ms () < until && !(rc.out && strstr (rc.out, "T=xterm"))) {
        pump (p, 50);
        recs_take (s, &rc);
    }
    CHECK (rc.out && strstr (rc.out, "hello\r\n"));
    CHECK (rc.out && strstr (rc.out, "30 100"));
    CHECK (rc.out && strstr (rc.out, "T=xterm"));
    uint8_t rs [64];
    ah_msg_t *m = ah_msg_new ("");
    ah_msg_set_int (m, "cols", 120);
    ah_msg_set_int (m, "rows", 40);
    uint8_t *enc = NULL;
    size_t enc_len = 0;
    ah_msg_encode (m, &enc, &enc_len);
    ah_msg_destroy (&m);
    memcpy (rs, enc, enc_len);
    free (enc);
    send_rec (p, id, AH_REC_RESIZE, rs, enc_len);
    const char *line2 = "stty size; exit 7\n";
    send_rec (p, id, AH_REC_STDIN, line2, strlen (line2));
    CHECK (run_until_exit (p, id, &rc, 10000));
    CHECK (rc.out && strstr (rc.out, "40 120"));
    CHECK (rc.status == 7);
    CHECK (wait_until (p, &s->eof, 5000));
    ah_yamux_close (p->y, id);
    recs_free (&rc);

    //  The opener's FIN hangs the shell up: EXIT follows.
    req = req_new ("pty");
    id = open_chan (p, &req);
    r = wait_header (p, id, 5000);
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);
    ah_yamux_close (p->y, id);
    CHECK (run_until_exit (p, id, &rc, 10000));
    CHECK (rc.sig == 1 || rc.status >= 0);
    recs_free (&rc);
}

//  Typing before the shell is ready: the keystrokes arrive with the
//  header, before any prompt, and more of them than the pty takes at once
//  (its input queue fills while the shell starts: EAGAIN, partial writes).
//  None may be lost: sandboxd keeps what the pty did not take and writes
//  it on POLLOUT.
void test_pty_early (peer_t *p)
{
    ah_msg_t *req = req_new ("pty");
    ah_msg_set_int (req, "cols", 80);
    ah_msg_set_int (req, "rows", 24);
    uint32_t id = open_chan (p, &req);
    //  No wait for the reply: type at once. 200 lines of a no-op (about
    //  40 KiB, far more than a pty's 4 KiB queue), then lines whose
    //  output differs from their echo.
    char line [256];
    memset (line, 'x', sizeof line);
    memcpy (line, ": ", 2);
    line [199] = '\n';
    for (int i = 0; i < 200; i++)
        send_rec (p, id, AH_REC_STDIN, line, 200);
    const char *tail = "echo early$((6*7)); echo late$((6*8)); exit 3\n";
    send_rec (p, id, AH_REC_STDIN, tail, strlen (tail));
    ah_msg_t *r = wait_header (p, id, 5000);
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);
    recs_t rc = { 0 };
    CHECK (run_until_exit (p, id, &rc, 30000));
    CHECK (rc.out && strstr (rc.out, "early42"));
    CHECK (rc.out && strstr (rc.out, "late48"));
    CHECK (rc.status == 3);
    ah_yamux_close (p->y, id);
    recs_free (&rc);
}

void test_stats (peer_t *p)
{
    ah_msg_t *r = simple (p, req_new ("stats"));
    CHECK (reply_ok (r));
    int64_t cpu0 = r ? ah_msg_int (r, "cpu_ns", -1) : -1;
    int64_t at0 = r ? ah_msg_int (r, "at_ns", -1) : -1;
    CHECK (cpu0 >= 0 && at0 > 0);
    CHECK_STR (r ? ah_msg_str (r, "source") : NULL, "tree");
    ah_msg_destroy (&r);
    //  Burn about a second of CPU in a child, sample while it runs.
    uint32_t id = exec_open (p, "while :; do :; done", 1.2, &r);
    ah_msg_destroy (&r);
    ah_yamux_close (p->y, id);
    int64_t until = now_ms () + 800;
    while (now_ms () < until)
        pump (p, 50);
    r = simple (p, req_new ("stats"));
    int64_t cpu1 = r ? ah_msg_int (r, "cpu_ns", -1) : -1;
    int64_t at1 = r ? ah_msg_int (r, "at_ns", -1) : -1;
    ah_msg_destroy (&r);
    CHECK (cpu1 - cpu0 >= 100 * 1000000ll);     //  running: counted from /proc (a loaded machine gives less than 0.8 s)
    CHECK (at1 > at0);
    recs_t rc = { 0 };
    CHECK (run_until_exit (p, id, &rc, 10000));
    recs_free (&rc);
    r = simple (p, req_new ("stats"));
    int64_t cpu2 = r ? ah_msg_int (r, "cpu_ns", -1) : -1;
    ah_msg_destroy (&r);
    CHECK (cpu2 >= cpu1);                       //  reaped: still counted
    fprintf (stderr, "stats: %lld -> %lld -> %lld ns\n", (long long) cpu0, (long long) cpu1,
             (long long) cpu2);
}

void test_malformed (peer_t *p)
{
    //  A header length of zero, or bytes that are no map: EPROTO, FIN.
    uint8_t zero [4] = { 0, 0, 0, 0 };
    uint32_t id = open_raw (p, zero, 4);
    ah_msg_t *e = wait_header (p, id, 5000);
    CHECK_STR (reply_code (e), "EPROTO");
    ah_msg_destroy (&e);
    tstream_t *s = find (p, id);
    CHECK (wait_until (p, &s->eof, 5000));
    uint8_t junk [7] = { 0, 0, 0, 3, 0x93, 1, 2 };      //  an array, not a map
    id = open_raw (p, junk, 7);
    e = wait_header (p, id, 5000);
    CHECK_STR (reply_code (e), "EPROTO");
    CHECK (e && strstr (ah_msg_str (e, "error"), "malformed"));
    ah_msg_destroy (&e);
    s = find (p, id);
    CHECK (wait_until (p, &s->eof, 5000));
    //  A stream that ends before its header is complete.
    uint8_t part [5] = { 0, 0, 0, 9, 0x81 };
    id = open_raw (p, part, 5);
    ah_yamux_close (p->y, id);
    e = wait_header (p, id, 5000);
    CHECK_STR (reply_code (e), "EPROTO");
    ah_msg_destroy (&e);
    //  And the session is still fine.
    ah_msg_t *r = simple (p, req_new ("ping"));
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);
}

//  Several instances in one process, each with its own home and thread:
//  no state is shared between them.
//  A reader (read_only) on a home another instance serves: reads as the
//  sandbox does, refuses pty, exec and every write, says so in its hello.
void test_reader (void)
{
    int fds [2];
    CHECK (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    fcntl (fds [1], F_SETFL, O_NONBLOCK);
    ah_sandboxd_opts_t opts = { .agent_id = "agent-test", .home = home, .raw_transport = true,
                                .raw_fd = fds [1], .read_only = true };
    ah_sandboxd_t *sbd = ah_sandboxd_start (&opts);
    CHECK (sbd != NULL);
    peer_t p = { .fd = fds [0] };
    ah_yamux_callbacks_t cb = { .output = cb_output, .on_data = cb_data, .on_eof = cb_eof,
                                .on_closed = cb_closed };
    p.y = ah_yamux_new (true, &cb, &p);
    ah_msg_t *req = req_new ("hello");
    ah_msg_set_int (req, "version", AH_PROTOCOL_VERSION);
    ah_msg_t *r = simple (&p, req);
    CHECK (reply_ok (r));
    CHECK_STR (r ? ah_msg_str (r, "mode") : NULL, "read");
    ah_msg_destroy (&r);
    mkfile ("reader.txt", "read me\n");
    uint8_t *data = NULL;
    size_t size = 0;
    r = read_file (&p, "reader.txt", &data, &size);
    CHECK (reply_ok (r) && size == 8 && data && memcmp (data, "read me\n", 8) == 0);
    ah_msg_destroy (&r);
    free (data);
    msgpack_unpacked u;
    char code [16];
    const msgpack_object *t = tree (&p, "t", 6, 100, false, &u, code);
    CHECK_STR (tree_type (t, "t/a/b/c/deep.txt", NULL), "file");
    msgpack_unpacked_destroy (&u);
    req = req_new ("fs.list");
    ah_msg_set_str (req, "path", "t");
    r = simple (&p, req);
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);
    //  Refused, and nothing changed on disk.
    const char *refused [] = { "fs.write", "fs.mkdir", "fs.remove", "exec", "pty" };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        req = req_new (refused [i]);
        ah_msg_set_str (req, "path", "reader.txt");
        ah_msg_set_str (req, "cmd", "touch /tmp/pwned");
        uint32_t id = open_chan (&p, &req);
        ah_yamux_close (p.y, id);
        r = wait_header (&p, id, 5000);
        CHECK_STR (reply_code (r), "EACCES");
        CHECK (r && ah_msg_str (r, "error") && strstr (ah_msg_str (r, "error"), "only reads"));
        ah_msg_destroy (&r);
    }
    CHECK (file_exists (home, "reader.txt"));
    r = read_file (&p, "reader.txt", &data, &size);
    CHECK (reply_ok (r) && size == 8);
    ah_msg_destroy (&r);
    free (data);
    CHECK (!p.failed);
    ah_sandboxd_stop (&sbd);
    ah_yamux_destroy (&p.y);
    for (int i = 0; i < p.n; i++)
        free (p.s [i].buf);
    close (fds [0]);
}

void test_instances (void)
{
    enum { N = 3 };
    char homes [N][PATH_MAX + 32];
    ah_sandboxd_t *sbd [N];
    peer_t peers [N];
    int fds [N][2];
    ah_yamux_callbacks_t cb = { .output = cb_output, .on_data = cb_data, .on_eof = cb_eof,
                                .on_closed = cb_closed };
    for (int i = 0; i < N; i++) {
        snprintf (homes [i], sizeof homes [i], "%s/inst%d", root, i);
        CHECK (mkdir (homes [i], 0755) == 0);
        CHECK (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds [i]) == 0);
        fcntl (fds [i][1], F_SETFL, O_NONBLOCK);
        char id [32];
        snprintf (id, sizeof id, "agent-%d", i);
        ah_sandboxd_opts_t opts = { .agent_id = id, .home = homes [i], .raw_transport = true,
                                    .raw_fd = fds [i][1] };
        sbd [i] = ah_sandboxd_start (&opts);
        CHECK (sbd [i] != NULL);
        memset (&peers [i], 0, sizeof peers [i]);
        peers [i].fd = fds [i][0];
        peers [i].y = ah_yamux_new (true, &cb, &peers [i]);
    }
    //  Start a command on every instance before reading any answer.
    uint32_t ids [N];
    for (int i = 0; i < N; i++) {
        ah_msg_t *req = req_new ("hello");
        ah_msg_set_int (req, "version", AH_PROTOCOL_VERSION);
        ah_msg_t *r = simple (&peers [i], req);
        char want_id [32];
        snprintf (want_id, sizeof want_id, "agent-%d", i);
        CHECK_STR (r ? ah_msg_str (r, "agent_id") : NULL, want_id);
        ah_msg_destroy (&r);
        bool refused;
        char body [16];
        snprintf (body, sizeof body, "home %d\n", i);
        r = write_file (&peers [i], "who", (const uint8_t *) body, strlen (body), &refused);
        CHECK (reply_ok (r));
        ah_msg_destroy (&r);
        ids [i] = exec_open (&peers [i], "sleep 0.3; cat who", 0, &r);
        ah_msg_destroy (&r);
        ah_yamux_close (peers [i].y, ids [i]);
    }
    for (int i = 0; i < N; i++) {
        recs_t rc = { 0 };
        CHECK (run_until_exit (&peers [i], ids [i], &rc, 10000));
        char want [16];
        snprintf (want, sizeof want, "home %d\n", i);
        CHECK_STR (rc.out, want);
        recs_free (&rc);
    }
    for (int i = 0; i < N; i++) {
        ah_sandboxd_stop (&sbd [i]);
        ah_yamux_destroy (&peers [i].y);
        for (int s = 0; s < peers [i].n; s++)
            free (peers [i].s [s].buf);
        close (fds [i][0]);
    }
}

//  Stop is prompt whatever the instance is doing: backing off after a
//  refused dial, or waiting on a dial that goes nowhere.
void test_stop_while_dialling (void)
{
    //  A port nobody listens on: bind one, note it, close it.
    int s = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
    socklen_t al = sizeof a;
    bind (s, (struct sockaddr *) &a, sizeof a);
    getsockname (s, (struct sockaddr *) &a, &al);
    close (s);
    char url [64];
    snprintf (url, sizeof url, "ws://127.0.0.1:%d/tunnel", ntohs (a.sin_port));
    const char *urls [] = { url, "ws://192.0.2.1:9/tunnel" };    //  refused; TEST-NET blackhole
    for (int i = 0; i < 2; i++) {
        ah_sandboxd_opts_t opts = { .agent_id = "a", .token = "t", .tunnel_url = urls [i],
                                    .home = home, .backoff_min_ms = 50, .backoff_max_ms = 200 };
        ah_sandboxd_t *sbd = ah_sandboxd_start (&opts);
        CHECK (sbd != NULL);
        usleep (400 * 1000);
        CHECK (ah_sandboxd_connections (sbd) == 0);
        int64_t t0 = now_ms ();
        ah_sandboxd_stop (&sbd);
        CHECK (now_ms () - t0 < 1000);
    }
    //  A home that does not exist: no instance, a clear log line.
    ah_sandboxd_opts_t bad = { .agent_id = "a", .token = "t", .tunnel_url = url,
                               .home = "/nonexistent/home" };
    CHECK (ah_sandboxd_start (&bad) == NULL);
}

