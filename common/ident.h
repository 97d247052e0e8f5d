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

    docs/api.md states the same rules for clients.                     */
#ifndef AH_IDENT_H
#define AH_IDENT_H

#include <stdbool.h>

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

#endif
