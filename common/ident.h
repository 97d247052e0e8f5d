/*  common/ident.h: the grammar of every identifier agenthold accepts,
    in one place. The API, lifecycle, the drivers, the catalog and the
    CLI all check names, ids and references here, so a value one of them
    accepts is never refused later by another.

    agent name   1..63 of a-z 0-9 . _ -, starting with a-z or 0-9; never
                 the shape of an agent id (12 hex digits), so a key in a
                 URL is never ambiguous
    agent id     exactly 12 of 0-9 a-f (made by the server)
    image        a Docker image reference: [host[:port]/]path[:tag][@digest],
                 path components of a-z 0-9 separated by . _ __ or -+,
                 a tag of A-Z a-z 0-9 _ . - (1..128, not starting with . or
                 -), a digest ALGO:HEX; at most 255 characters
    runtime      1..63 of a-z 0-9 -, starting with a-z (a catalog alias)
    tenant       1..63 of a-z 0-9 -, starting with a-z
    token name   1..64 of A-Z a-z 0-9 . _ -

    Free text a client names something with and the server shows back
    (a session's subject, a token's user, a catalog entry's values) has
    one rule: well-formed UTF-8 (no overlong form, no surrogate, nothing
    past U+10FFFF, no cut sequence) without a control character: C0
    (U+0000..U+001F), DEL (U+007F) or C1 (U+0080..U+009F). Those would
    drive a terminal that shows the text (ESC, CSI U+009B, NEL U+0085).

    docs/api.md states the same rules for clients.                     */
#ifndef AH_IDENT_H
#define AH_IDENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    AH_IDENT_AGENT_NAME,
    AH_IDENT_AGENT_ID,
    AH_IDENT_IMAGE,
    AH_IDENT_RUNTIME,
    AH_IDENT_TENANT,
    AH_IDENT_TOKEN_NAME,
} ah_ident_t;

#define AH_AGENT_ID_LEN     12
#define AH_NAME_MAX         63
#define AH_IMAGE_MAX        255

//  NULL when value (NULL counts as empty) is valid; otherwise a static
//  sentence that completes "<what> ..." and says the rule, e.g. "must be
//  1 to 63 characters of a-z, 0-9, '.', '_' and '-', starting with a
//  letter or a digit".
const char *ah_ident_check (ah_ident_t kind, const char *value);
static inline bool ah_ident_ok (ah_ident_t kind, const char *value)
{
    return ah_ident_check (kind, value) == 0;
}
//  What the kind is called in messages ("agent name", "image reference").
const char *ah_ident_what (ah_ident_t kind);

//  The well-formed UTF-8 sequence at s (n bytes there): its length (1..4)
//  with its code point in *cp, or 0 when the bytes are not one (a stray
//  continuation byte, an overlong form, a surrogate, past U+10FFFF, cut).
size_t ah_utf8_next (const char *s, size_t n, uint32_t *cp);
//  C0, DEL or C1: what the free-text rule refuses and the CLI escapes.
static inline bool ah_utf8_control (uint32_t cp)
{
    return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f);
}
//  The free-text rule over n bytes of s: NULL when they keep it, else a
//  static sentence completing "<field> ...": "is not valid UTF-8" or
//  "holds a control character (C0, DEL or C1)". lines: text of several
//  lines (a shell script, a briefing) may also hold tab and newline.
const char *ah_text_check (const char *s, size_t n, bool lines);
//  n bytes of s with what the rule refuses escaped, fit for a terminal
//  or a log: a C0 control or DEL as \x1b, a C1 control as \u009b, a byte
//  that is not UTF-8 as \xff (lines: tab and newline kept). A new string
//  (caller frees); NULL when memory ran out.
char *ah_text_escape (const char *s, size_t n, bool lines);

#endif
