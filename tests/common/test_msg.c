/*  tests/common/test_msg.c: the message map, its strict decoder, JSON.  */
#include "common/msg.h"
#include "check.h"
#include <stdlib.h>

static ah_msg_t *s_roundtrip (ah_msg_t *m)
{
    uint8_t *data; size_t size;
    CHECK (ah_msg_encode (m, &data, &size) == 0);
    char *err = NULL;
    ah_msg_t *d = ah_msg_decode (ah_msg_type (m), data, size, &err);
    CHECK (d != NULL);
    free (err);
    free (data);
    return d;
}

static void s_expect_bad (const uint8_t *data, size_t size, const char *what)
{
    char *err = NULL;
    ah_msg_t *m = ah_msg_decode ("X", data, size, &err);
    CHECK (m == NULL);
    CHECK (err != NULL);
    if (err && what && !strstr (err, what))
        { fprintf (stderr, "  error was '%s', wanted '%s'\n", err, what); CHECK (0); }
    free (err);
    ah_msg_destroy (&m);
}

int main (void)
{
    ah_msg_t *m = ah_msg_new ("SANDBOX_START");
    ah_msg_set_str (m, "agent", "ab12");
    ah_msg_set_int (m, "req", -42);
    ah_msg_set_int (m, "big", INT64_MAX);
    ah_msg_set_double (m, "cpus", 1.5);
    ah_msg_set_bool (m, "wait", true);
    ah_msg_set_nil (m, "error");
    ah_msg_set_bin (m, "data", "\0\1\2", 3);
    ah_msg_set_str (m, "agent", "cd34");           //  replaces
    const uint8_t nested [] = { 0x92, 0x01, 0xa1, 'x' };   //  [1, "x"]
    CHECK (ah_msg_set_raw (m, "list", nested, sizeof nested) == 0);
    const uint8_t bad_nested [] = { 0x92, 0x01 };
    CHECK (ah_msg_set_raw (m, "bad", bad_nested, sizeof bad_nested) == -1);
    CHECK (ah_msg_count (m) == 8);

    ah_msg_t *d = s_roundtrip (m);
    CHECK_STR (ah_msg_type (d), "SANDBOX_START");
    CHECK_STR (ah_msg_str (d, "agent"), "cd34");
    CHECK (ah_msg_int (d, "req", 0) == -42);
    CHECK (ah_msg_int (d, "big", 0) == INT64_MAX);
    CHECK (ah_msg_double (d, "cpus", 0) == 1.5);
    CHECK (ah_msg_double (d, "req", 0) == -42.0);  //  ints read as doubles
    CHECK (ah_msg_bool (d, "wait", false) == true);
    CHECK (ah_msg_is_nil (d, "error"));
    CHECK (ah_msg_str (d, "error") == NULL);
    CHECK (ah_msg_str (d, "req") == NULL);          //  wrong type -> NULL
    CHECK (ah_msg_int (d, "agent", 7) == 7);        //  wrong type -> default
    size_t size = 0;
    const uint8_t *bin = ah_msg_bin (d, "data", &size);
    CHECK (bin && size == 3 && bin [2] == 2);
    const uint8_t *raw = ah_msg_raw (d, "list", &size);
    CHECK (raw && size == sizeof nested && memcmp (raw, nested, size) == 0);

    char *json = ah_msg_to_json (d, "lifecycle");
    CHECK (json && strstr (json, "\"list\":[1,\"x\"]"));
    CHECK (json && strstr (json, "\"data\":{\"bin\":3}"));
    CHECK (json && strstr (json, "\"wait\":true"));
    CHECK (json && strstr (json, "\"cpus\":1.5"));
    CHECK (json && strstr (json, "\"req\":-42"));
    CHECK (json && strstr (json, "\"to\":\"lifecycle\""));
    free (json);
    //  Strings that are not UTF-8 (a file name a sandbox sends, a field
    //  of a hostile peer), in a raw field and as a plain one: JSON all the
    //  same, the bad bytes as '?', never a NULL that empties a listing.
    {
        ah_msg_t *u = ah_msg_new ("REPLY");
        static const uint8_t entries [] = { 0x91, 0x81, 0xa4, 'n', 'a', 'm', 'e', 0xa4, 'a', 0xff, 0xfe, 'b' };
        CHECK (ah_msg_set_raw (u, "reply", entries, sizeof entries) == 0);
        ah_msg_set_str (u, "detail", "ok\xc3(");
        char *uj = ah_msg_to_json (u, NULL);
        CHECK (uj && strstr (uj, "\"reply\":[{\"name\":\"a??b\"}]"));
        CHECK (uj && strstr (uj, "\"detail\":\"ok?(\""));
        free (uj);
        ah_msg_destroy (&u);
    }
    ah_msg_t *dup = ah_msg_dup (d);
    CHECK (dup && ah_msg_int (dup, "req", 0) == -42);
    ah_msg_destroy (&dup);

    //  A borrowed bin is encoded like a copied one and never freed by the
    //  message (a stack buffer here: ASan would catch a free), also when
    //  the field is replaced.
    {
        uint8_t bytes [300];
        for (size_t i = 0; i < sizeof bytes; i++)
            bytes [i] = (uint8_t) i;
        ah_msg_t *b = ah_msg_new ("CHAN_DATA");
        ah_msg_set_int (b, "chan", 7);
        ah_msg_set_bin_borrowed (b, "data", bytes, sizeof bytes);
        CHECK (ah_msg_bin (b, "data", &size) == bytes && size == sizeof bytes);
        ah_msg_t *bd = s_roundtrip (b);
        const uint8_t *got = ah_msg_bin (bd, "data", &size);
        CHECK (got && got != bytes && size == sizeof bytes && memcmp (got, bytes, size) == 0);
        ah_msg_set_bin_borrowed (b, "data", bytes, 1);
        ah_msg_set_bin (b, "data", bytes, 2);       //  a copy replaces the borrowed
        CHECK (ah_msg_bin (b, "data", &size) != bytes && size == 2);
        ah_msg_destroy (&bd);
        //  Decoded borrowing: the bin points into the encoded bytes, which
        //  the message holds and releases (ASan: neither leaked nor freed twice).
        uint8_t *enc = NULL;
        size_t enc_size = 0;
        ah_msg_set_bin_borrowed (b, "data", bytes, sizeof bytes);
        CHECK (ah_msg_encode (b, &enc, &enc_size) == 0);
        ah_msg_t *bb = ah_msg_decode_borrowing ("CHAN_DATA", enc, enc_size, NULL);
        CHECK (bb != NULL);
        got = ah_msg_bin (bb, "data", &size);
        CHECK (got && got > enc && got + size <= enc + enc_size && size == sizeof bytes
               && memcmp (got, bytes, size) == 0);
        CHECK (ah_msg_int (bb, "chan", 0) == 7);
        ah_msg_hold (bb, enc, free);
        ah_msg_t *bdup = ah_msg_dup (bb);           //  a dup copies: it outlives bb
        ah_msg_destroy (&bb);
        CHECK (bdup && ah_msg_bin (bdup, "data", &size) && size == sizeof bytes);
        ah_msg_destroy (&bdup);
        ah_msg_destroy (&b);
    }
    ah_msg_destroy (&d);
    ah_msg_destroy (&m);
    CHECK (m == NULL);
    ah_msg_destroy (&m);                           //  idempotent

    //  Hostile inputs.
    s_expect_bad ((const uint8_t *) "", 0, "empty");
    s_expect_bad ((const uint8_t []) { 0x91, 0x01 }, 2, "not a msgpack map");
    s_expect_bad ((const uint8_t []) { 0xdf, 0xff, 0xff, 0xff, 0xff }, 5, "container");
    s_expect_bad ((const uint8_t []) { 0x81, 0xa1, 'a', 0xdd, 0xff, 0xff, 0xff, 0xff }, 8, "container");
    s_expect_bad ((const uint8_t []) { 0x81, 0xa1, 'a', 0xdb, 0xff, 0xff, 0xff, 0xff }, 8, "truncated");
    s_expect_bad ((const uint8_t []) { 0x81, 0x01, 0x01 }, 3, "field names");
    s_expect_bad ((const uint8_t []) { 0x82, 0xa1, 'a', 0x01, 0xa1, 'a', 0x02 }, 7, "duplicate");
    s_expect_bad ((const uint8_t []) { 0x81, 0xa1, 'a', 0xc1 }, 4, "type byte");
    s_expect_bad ((const uint8_t []) { 0x80, 0x00 }, 2, "trailing");
    s_expect_bad ((const uint8_t []) { 0x81, 0xa1, 'a', 0xcf, 0xff, 0, 0, 0, 0, 0, 0, 0 }, 12, "range");
    s_expect_bad ((const uint8_t []) { 0x81, 0xa1, 'a', 0xa2, 'x', 0 }, 6, "NUL");
    //  Deep nesting is walked without recursion: 100000 nested arrays.
    size_t n = 100000;
    uint8_t *deep = malloc (n + 4);
    deep [0] = 0x81; deep [1] = 0xa1; deep [2] = 'a';
    memset (deep + 3, 0x91, n);
    deep [n + 3] = 0x01;
    char *err = NULL;
    ah_msg_t *dm = ah_msg_decode ("X", deep, n + 4, &err);
    CHECK (dm != NULL);
    ah_msg_destroy (&dm);
    free (err);
    free (deep);

    //  Replies.
    ah_msg_t *rq = ah_msg_new ("SANDBOX_STOP");
    ah_msg_set_int (rq, "req", 9);
    ah_msg_t *r = ah_msg_reply_error (rq, 409, "agent '%s' is %s", "x", "starting");
    CHECK_STR (ah_msg_type (r), "REPLY");
    CHECK (ah_msg_int (r, "req", 0) == 9);
    CHECK (ah_msg_int (r, "status", 0) == 409);
    CHECK (ah_msg_bool (r, "ok", true) == false);
    CHECK_STR (ah_msg_str (r, "error"), "agent 'x' is starting");
    ah_msg_destroy (&r);
    ah_msg_destroy (&rq);
    return CHECK_DONE ();
}
