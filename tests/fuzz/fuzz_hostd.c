/*  tests/fuzz/fuzz_hostd.c: libFuzzer target for hostd's wire messages:
    what a message from the ZeroMQ wire goes through on hostd's ROUTER
    (common/msg.c ah_msg_recv_fault: frame count, the route and type
    frames, the msgpack map, the "req" of a refused message) and then the
    wire's own decoders (drivers/remote/wire.c: a sandbox spec and the
    engine facts).

    The input is cut into frames, each a 2-byte big-endian length then
    its bytes (a short last frame takes what is left), and sent over a
    real inproc pair; the receiving end reads it as hostd's ROUTER does.

    Checks beyond "no crash": a message or a fault with a reason, never
    both or neither; a message re-encoded decodes to the same encoding
    (stable round trip) and its type and route are the frames sent; the
    spec's env array holds exactly n_env entries, none empty or holding a
    newline; the facts' strings are NUL-terminated and the firewall state
    is one hostd can send.                                             */
#include "common/msg.h"
#include "drivers/remote/wire.h"

#include <czmq.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) do { fprintf (stderr, __VA_ARGS__); fputc ('\n', stderr); abort (); } while (0)

static zsock_t *s_tx, *s_rx;

static void s_setup (void)
{
    zsys_init ();
    zsys_set_linger (0);
    s_rx = zsock_new_pair ("@inproc://fuzz-hostd");
    s_tx = zsock_new_pair (">inproc://fuzz-hostd");
    if (!s_rx || !s_tx)
        FAIL ("cannot make the inproc pair");
}

static void s_check_msg (ah_msg_t *m)
{
    ah_sandbox_spec_t spec;
    char **env = ah_hostd_get_spec (m, &spec);
    if (env) {
        size_t n = 0;
        for (char **e = env; *e; e++, n++)
            if (!**e || strchr (*e, '\n'))
                FAIL ("env entry empty or holding a newline");
        if (n != spec.n_env || (const char *const *) env != spec.env)
            FAIL ("env array of %zu entries, spec says %zu", n, spec.n_env);
        for (char **e = env; *e; e++)
            free (*e);
        free (env);
    }
    ah_engine_facts_t f;
    ah_hostd_get_facts (m, &f);
    if (!memchr (f.api_version, 0, sizeof f.api_version) || !memchr (f.version, 0, sizeof f.version)
    ||  !memchr (f.root_dir, 0, sizeof f.root_dir) || !memchr (f.runtime, 0, sizeof f.runtime)
    ||  !memchr (f.firewall_report, 0, sizeof f.firewall_report))
        FAIL ("facts string not NUL-terminated");
    if (f.firewall < AH_FIREWALL_PENDING || f.firewall > 1)
        FAIL ("firewall state %d", f.firewall);
    //  Round trip: encode, decode, encode: the same bytes
    uint8_t *e1 = NULL, *e2 = NULL;
    size_t s1 = 0, s2 = 0;
    if (ah_msg_encode (m, &e1, &s1) == 0) {
        char *err = NULL;
        ah_msg_t *again = ah_msg_decode (ah_msg_type (m), e1, s1, &err);
        if (!again)
            FAIL ("re-encoded message does not decode: %s", err ? err : "?");
        if (ah_msg_encode (again, &e2, &s2) != 0 || s2 != s1 || memcmp (e1, e2, s1))
            FAIL ("message encoding is not stable");
        if (ah_msg_count (again) != ah_msg_count (m))
            FAIL ("field count changed in the round trip");
        ah_msg_destroy (&again);
    }
    free (e1);
    free (e2);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (!s_tx)
        s_setup ();
    zmsg_t *z = zmsg_new ();
    size_t at = 0, frames = 0;
    const uint8_t *first [2] = { NULL, NULL };
    size_t first_len [2] = { 0, 0 };
    while (at < size && frames < 8) {
        size_t len = size - at;
        if (len >= 2) {
            size_t want = (size_t) data [at] << 8 | data [at + 1];
            at += 2;
            len = size - at < want ? size - at : want;
        }
        else
            at += len, len = 0;
        if (frames < 2) {
            first [frames] = data + at;
            first_len [frames] = len;
        }
        zmsg_addmem (z, data + at, len);
        at += len;
        frames++;
    }
    if (!frames) {
        zmsg_addmem (z, "", 0);     //  zmsg_send sends nothing of no frames
        frames = 1;
    }
    //  libFuzzer's timers signal the process: a send or a receive they
    //  interrupt (EINTR) is made again, not taken for the input's fault.
    size_t nframes = zmsg_size (z);
    for (size_t i = 0; i < nframes; i++) {
        zframe_t *f = zmsg_pop (z);
        int flags = i + 1 < nframes ? ZMQ_SNDMORE : 0;
        while (zmq_send (zsock_resolve (s_tx), zframe_data (f), zframe_size (f), flags) < 0)
            if (errno != EINTR)
                FAIL ("send failed: %s", zmq_strerror (errno));
        zframe_destroy (&f);
    }
    zmsg_destroy (&z);
    ah_msg_fault_t fault;
    ah_msg_t *m;
    while (!(m = ah_msg_recv_fault (s_rx, true, &fault)) && fault.error
           && streq (fault.error, "interrupted") && errno == EINTR)
        ah_msg_fault_clear (&fault);
    if (m && fault.error)
        FAIL ("a message and a fault: %s", fault.error);
    if (!m && !fault.error)
        FAIL ("no message and no fault");
    if (m) {
        if (frames != 3)
            FAIL ("a message from %zu frames", frames);
        if (strlen (ah_msg_peer (m)) != first_len [0] || memcmp (ah_msg_peer (m), first [0], first_len [0])
        ||  strlen (ah_msg_type (m)) != first_len [1] || memcmp (ah_msg_type (m), first [1], first_len [1]))
            FAIL ("route or type is not the frame sent");
        s_check_msg (m);
    }
    if (!memchr (fault.route, 0, sizeof fault.route) || !memchr (fault.type, 0, sizeof fault.type))
        FAIL ("fault strings not NUL-terminated");
    ah_msg_fault_clear (&fault);
    ah_msg_destroy (&m);
    return 0;
}
