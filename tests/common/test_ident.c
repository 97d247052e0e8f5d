/*  tests/common/test_ident.c: every identifier grammar against the
    shared table (ident_cases.h), and the messages that explain them. */
#include "tests/common/check.h"
#include "tests/common/ident_cases.h"

int main (void)
{
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
