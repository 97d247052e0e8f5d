/*  tests/common/test_ident.c: every identifier grammar against the
    shared table (ident_cases.h), and the messages that explain them. */
#include "tests/common/check.h"
#include "tests/common/ident_cases.h"

#include <stdlib.h>

//  cp as UTF-8 without any check (so surrogates and past U+10FFFF can be
//  made too); its length.
static size_t s_encode (uint32_t cp, char *out)
{
    if (cp < 0x80) { out [0] = (char) cp; return 1; }
    if (cp < 0x800) {
        out [0] = (char) (0xc0 | (cp >> 6));
        out [1] = (char) (0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out [0] = (char) (0xe0 | (cp >> 12));
        out [1] = (char) (0x80 | ((cp >> 6) & 0x3f));
        out [2] = (char) (0x80 | (cp & 0x3f));
        return 3;
    }
    out [0] = (char) (0xf0 | ((cp >> 18) & 0x07));
    out [1] = (char) (0x80 | ((cp >> 12) & 0x3f));
    out [2] = (char) (0x80 | ((cp >> 6) & 0x3f));
    out [3] = (char) (0x80 | (cp & 0x3f));
    return 4;
}

static const char *s_bad_utf8 = "is not valid UTF-8";
static const char *s_control = "holds a control character (C0, DEL or C1)";

//  The free-text rule over every code point, and every malformed form.
static void s_text (void)
{
    char b [16];
    //  Every code point: decoded back to itself; refused exactly when it
    //  is C0, DEL or C1 (surrogates are not code points UTF-8 may carry).
    size_t wrong = 0;
    for (uint32_t cp = 0; cp <= 0x10ffff; cp++) {
        bool surrogate = cp >= 0xd800 && cp <= 0xdfff;
        size_t n = s_encode (cp, b);
        uint32_t got = 0;
        size_t len = ah_utf8_next (b, n, &got);
        const char *why = ah_text_check (b, n, false);
        const char *want = surrogate ? s_bad_utf8
                         : cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) ? s_control : NULL;
        bool ok = surrogate ? len == 0 : len == n && got == cp;
        ok = ok && (want ? why && !strcmp (why, want) : why == NULL);
        //  Lines: the same, but tab and newline are good.
        const char *why_lines = ah_text_check (b, n, true);
        ok = ok && ((cp == '\t' || cp == '\n') ? why_lines == NULL : (why_lines != NULL) == (why != NULL));
        if (!ok && wrong++ < 5)
            fprintf (stderr, "U+%04X: %s\n", cp, why ? why : "accepted");
    }
    CHECK (wrong == 0);
    //  The three of the report, in the middle of text.
    CHECK_STR (ah_text_check ("a\xc2\x85" "b", 4, false), s_control);
    CHECK_STR (ah_text_check ("a\xc2\x90" "b", 4, false), s_control);
    CHECK_STR (ah_text_check ("a\xc2\x9b" "31m", 6, false), s_control);
    const char *fine = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";
    CHECK (ah_text_check (fine, strlen (fine), false) == NULL);
    CHECK (ah_text_check ("\xc2\xa0", 2, false) == NULL);       //  U+00A0, the first after C1
    CHECK (ah_text_check ("", 0, false) == NULL);
    //  A NUL inside the bytes counts (a C string would have stopped there).
    CHECK_STR (ah_text_check ("a\0b", 3, false), s_control);

    //  Every lone byte that cannot start a character, and every lead byte
    //  without what must follow it.
    for (int c = 0x80; c <= 0xff; c++) {
        b [0] = (char) c;
        CHECK_STR (ah_text_check (b, 1, false), s_bad_utf8);
    }
    //  Overlong forms: the smallest and largest of each length that a
    //  shorter form would carry (NUL, '/', U+007F, U+07FF, U+FFFF).
    static const char *overlong [] = {
        "\xc0\x80", "\xc0\xaf", "\xc1\xbf", "\xe0\x80\x80", "\xe0\x80\xaf", "\xe0\x9f\xbf",
        "\xf0\x80\x80\x80", "\xf0\x80\x80\xaf", "\xf0\x8f\xbf\xbf",
        "\xf8\x88\x80\x80\x80", "\xfc\x84\x80\x80\x80\x80",        //  5 and 6 byte forms
    };
    for (size_t i = 0; i < sizeof overlong / sizeof overlong [0]; i++)
        CHECK_STR (ah_text_check (overlong [i], strlen (overlong [i]), false), s_bad_utf8);
    //  Past U+10FFFF: U+110000, the largest 4-byte form, F5..F7 leads.
    static const char *beyond [] = { "\xf4\x90\x80\x80", "\xf7\xbf\xbf\xbf", "\xf5\x80\x80\x80" };
    for (size_t i = 0; i < 3; i++)
        CHECK_STR (ah_text_check (beyond [i], 4, false), s_bad_utf8);
    //  Cut sequences: every proper prefix of a 2, 3 and 4 byte character,
    //  at the end and followed by ASCII.
    static const char *whole [] = { "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80" };
    for (size_t i = 0; i < 3; i++)
        for (size_t cut = 1; cut < strlen (whole [i]); cut++) {
            memcpy (b, whole [i], cut);
            CHECK_STR (ah_text_check (b, cut, false), s_bad_utf8);
            b [cut] = 'x';
            CHECK_STR (ah_text_check (b, cut + 1, false), s_bad_utf8);
        }
    //  A stray continuation byte after a good character.
    CHECK_STR (ah_text_check ("\xc3\xa9\xa9", 3, false), s_bad_utf8);

    //  The escape: what the rule refuses, written so a terminal shows it.
    static const struct { const char *in; bool lines; const char *out; } esc [] = {
        { "plain caf\xc3\xa9", false, "plain caf\xc3\xa9" },
        { "a\x1b[2Jb\x07", false, "a\\x1b[2Jb\\x07" },
        { "\xc2\x9b" "31m\xc2\x85\x7f", false, "\\u009b31m\\u0085\\x7f" },
        { "x\xff\xc0\xaf\xed\xa0\x80y", false, "x\\xff\\xc0\\xaf\\xed\\xa0\\x80y" },
        { "cut \xe2\x82", false, "cut \\xe2\\x82" },
        { "t\tn\n", false, "t\\x09n\\x0a" },
        { "t\tn\n\r", true, "t\tn\n\\x0d" },
    };
    for (size_t i = 0; i < sizeof esc / sizeof esc [0]; i++) {
        char *got = ah_text_escape (esc [i].in, strlen (esc [i].in), esc [i].lines);
        CHECK_STR (got, esc [i].out);
        //  What comes out keeps the rule.
        CHECK (got && !ah_text_check (got, strlen (got), esc [i].lines));
        free (got);
    }
    //  Every code point's escape keeps the rule.
    for (uint32_t cp = 0; cp <= 0x10ffff; cp += cp < 0x800 ? 1 : 97) {
        size_t n = s_encode (cp, b);
        char *got = ah_text_escape (b, n, false);
        CHECK (got && !ah_text_check (got, strlen (got), false));
        free (got);
    }

    //  No identifier grammar takes a control character or a byte past
    //  ASCII: each C0, DEL and C1 inside a good value of each kind.
    static const char *good [] = { "agent-1", "0123456789ab", "debian:bookworm", "claude", "acme", "ci-token" };
    for (int k = AH_IDENT_AGENT_NAME; k <= AH_IDENT_TOKEN_NAME; k++) {
        CHECK (ah_ident_ok ((ah_ident_t) k, good [k]));
        for (uint32_t cp = 0; cp <= 0x9f; cp++) {
            if (cp >= 0x20 && cp < 0x7f)
                continue;
            char v [32];
            size_t n = s_encode (cp, v + 1);
            v [0] = good [k][0];
            snprintf (v + 1 + n, sizeof v - 1 - n, "%s", good [k] + 1);
            if (cp == 0)
                continue;           //  a C string ends there: the API refuses NUL before
            CHECK (!ah_ident_ok ((ah_ident_t) k, v));
        }
    }
}

int main (void)
{
    s_text ();
    for (size_t i = 0; i < IDENT_CASES; i++) {
        const ident_case_t *c = &ident_cases [i];
        const char *why = ah_ident_check (c->kind, c->value);
        if ((why == NULL) != c->good)
            fprintf (stderr, "%s '%s': expected %s, got %s\n", ah_ident_what (c->kind), c->value,
                     c->good ? "good" : "bad", why ? why : "good");
        CHECK ((why == NULL) == c->good);
        CHECK (ah_ident_ok (c->kind, c->value) == c->good);
        if (why)
            CHECK (strstr (why, "must") == why);
    }
    CHECK (ah_ident_check (AH_IDENT_AGENT_NAME, NULL) != NULL);
    CHECK_STR (ah_ident_check (AH_IDENT_AGENT_NAME, "0123456789ab"),
               "must not look like an agent id (12 hexadecimal digits)");
    CHECK_STR (ah_ident_what (AH_IDENT_IMAGE), "image reference");
    return CHECK_DONE ();
}
