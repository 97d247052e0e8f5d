/*  tests/fuzz/fuzz_acp.c: the ACP client's reader (proto/acp.h) on what
    a harness writes: bytes fed to the line reader in pieces whose size
    the first byte chooses (and the bound: 64 bytes or the real 4 MiB),
    each line parsed, each request answered and the answer parsed back,
    each answer matched against a pending table. Never a crash, a read
    past the input or a leak; beyond that:
    - a call is a line or an error, never both; a line holds no "\n", is
      not blank and is within the bound; the reader never holds more;
    - the same calls in the same order fed in pieces as fed whole;
    - a parsed message has what its kind says; a refusal says why in
      printable ASCII, and names an id only when it may be answered;
    - our answer to a request is one line that parses to a result or an
      error with the same id;
    - a pending-table answer is the id asked; an id answered twice is a
      repeat the second time.                                           */
#include "proto/acp.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t max;
    uint64_t sum;                   //  over every call: its kind, its bytes
    size_t calls;
    ah_acp_pending_t pending;
    ah_acp_open_t open;
    bool check;                     //  parse and answer (the whole run only)
} run_t;

static void s_mix (run_t *run, const void *data, size_t size)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < size; i++)
        run->sum = (run->sum ^ p [i]) * 1099511628211ull;
}

static void s_printable (const char *text)
{
    if (!text || !*text)
        abort ();
    for (const char *c = text; *c; c++)
        if ((unsigned char) *c < 0x20 || (unsigned char) *c >= 0x7f)
            abort ();
}

//  Our line answering msg: one line, parsing to an answer with its id.
static void s_answer_back (char *line, const json_t *id, bool error)
{
    if (!line)
        return;                     //  out of memory, or an id jansson cannot copy
    size_t n = strlen (line);
    if (n < 2 || line [n - 1] != '\n' || memchr (line, '\n', n - 1))
        abort ();
    ah_acp_msg_t back;
    char why [AH_ACP_WHY_MAX];
    if (ah_acp_parse (line, n - 1, &back, why) != 0
    ||  back.kind != (error ? AH_ACP_ERROR : AH_ACP_RESULT)
    ||  !json_equal (back.id, id))
        abort ();
    ah_acp_msg_clear (&back);
    free (line);
}

static void s_check (run_t *run, const char *line, size_t size)
{
    ah_acp_msg_t msg;
    char why [AH_ACP_WHY_MAX];
    int rc = ah_acp_parse (line, size, &msg, why);
    if (rc != 0) {
        s_printable (why);
        if (msg.reply && !(json_is_integer (msg.id) || json_is_string (msg.id)))
            abort ();
        if (msg.reply)
            s_answer_back (ah_acp_error (msg.id, msg.reply_code, why), msg.id, true);
        ah_acp_msg_clear (&msg);
        return;
    }
    switch (msg.kind) {
        case AH_ACP_REQUEST:
            if (!msg.id || !msg.method || !*msg.method || (msg.params && !json_is_object (msg.params)))
                abort ();
            s_answer_back (ah_acp_result (msg.id, json_object ()), msg.id, false);
            s_answer_back (ah_acp_error (msg.id, AH_ACP_METHOD_NOT_FOUND, msg.method), msg.id, true);
            //  Open until answered; the same id twice while open collides.
            if (ah_acp_open_add (&run->open, msg.id) == 0) {
                if (ah_acp_open_add (&run->open, msg.id) != -1 || ah_acp_open_close (&run->open, msg.id) != 0)
                    abort ();
            }
            break;
        case AH_ACP_NOTIFICATION:
            if (msg.id || !msg.method || (msg.params && !json_is_object (msg.params)))
                abort ();
            break;
        case AH_ACP_RESULT:
        case AH_ACP_ERROR: {
            if (msg.kind == AH_ACP_RESULT ? !msg.id || !msg.result : !msg.message)
                abort ();
            ah_acp_pending_entry_t e;
            size_t before = run->pending.count;
            ah_acp_match_t m = ah_acp_pending_take (&run->pending, msg.id, &e);
            if (m == AH_ACP_ANSWERED) {
                if (e.id != json_integer_value (msg.id) || run->pending.count != before - 1
                ||  ah_acp_pending_take (&run->pending, msg.id, &e) != AH_ACP_REPEATED_ID)
                    abort ();
            }
            else
            if (run->pending.count != before)
                abort ();
            break;
        }
        default:
            abort ();
    }
    ah_acp_msg_clear (&msg);
}

static void s_line (void *ud, const char *line, size_t size, const char *error)
{
    run_t *run = ud;
    run->calls++;
    if ((line == NULL) == (error == NULL))
        abort ();
    if (error) {
        s_printable (error);
        s_mix (run, "!", 1);
        s_mix (run, error, strlen (error));
        return;
    }
    if (size == 0 || size > run->max || memchr (line, '\n', size))
        abort ();
    bool blank = true;
    for (size_t i = 0; i < size && blank; i++)
        blank = line [i] == ' ' || line [i] == '\t';
    if (blank)
        abort ();
    s_mix (run, "=", 1);
    s_mix (run, line, size);
    if (run->check)
        s_check (run, line, size);
}

static void s_run (const uint8_t *data, size_t size, size_t step, run_t *run)
{
    ah_acp_reader_t r;
    ah_acp_reader_init (&r, run->max);
    ah_acp_pending_init (&run->pending);
    ah_acp_open_init (&run->open);
    //  A few of ours outstanding, so answers can match (ids 1 to 4).
    for (int i = 0; i < 4; i++)
        ah_acp_pending_add (&run->pending, AH_ACP_M_SESSION_PROMPT, "c", i);
    size_t at = 0;
    while (at < size) {
        size_t n = step && size - at > step ? step : size - at;
        ah_acp_reader_feed (&r, data + at, n, s_line, run);
        if (ah_buf_size (&r.line) > run->max)
            abort ();
        at += n;
    }
    ah_acp_reader_eof (&r, s_line, run);
    ah_acp_reader_clear (&r);
    ah_acp_open_clear (&run->open);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t step = data [0] % 17;
    size_t max = data [0] & 0x80 ? 64 : AH_ACP_LINE_MAX;
    run_t whole = { .max = max, .check = true }, pieces = { .max = max };
    s_run (data + 1, size - 1, 0, &whole);
    s_run (data + 1, size - 1, step, &pieces);
    if (whole.sum != pieces.sum || whole.calls != pieces.calls)
        abort ();
    return 0;
}
