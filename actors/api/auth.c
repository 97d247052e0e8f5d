/*  actors/api/auth.c: who is asking (see api_int.h).

    A bearer token in the Authorization header, or, on a WebSocket route
    (browsers cannot set headers there), a token= query argument. Only
    token hashes are stored (api_tokens.hash); every stored hash is
    compared in constant time and the token itself is wiped once hashed. */
#include "actors/api/api_int.h"
#include "common/token.h"

#include <strings.h>

int api_auth (req_t *r)
{
    memset (&r->who, 0, sizeof r->who);
    const char *token = NULL;
    const char *header = ah_http_header (&r->head, "authorization");
    if (header) {
        if (ah_http_header_count (&r->head, "authorization") != 1 || strncasecmp (header, "Bearer ", 7))
            return 401;
        token = header + 7;
    }
    else if (r->route && (r->route->flags & R_UPGRADE))
        token = api_query (r, "token");
    if (!token)
        return 401;
    while (*token == ' ')
        token++;
    if (!*token || strlen (token) > 256)
        return 401;
    char hash [AH_TOKEN_HEX];
    ah_token_hash (token, hash);

    sqlite3_stmt *stmt = ah_store_prepare (r->api->store, "SELECT name, hash, tenant, admin FROM api_tokens");
    if (!stmt)
        return 500;
    bool found = false;
    int rc;
    while ((rc = ah_store_step (r->api->store, stmt)) == SQLITE_ROW) {
        const char *stored = (const char *) sqlite3_column_text (stmt, 1);
        if (stored && ah_token_equal (hash, stored) && !found) {
            found = true;
            const char *name = (const char *) sqlite3_column_text (stmt, 0);
            const char *tenant = (const char *) sqlite3_column_text (stmt, 2);
            snprintf (r->who.token_name, sizeof r->who.token_name, "%s", name ? name : "?");
            snprintf (r->who.tenant, sizeof r->who.tenant, "%s", tenant ? tenant : "default");
            r->who.admin = sqlite3_column_int (stmt, 3) != 0;
        }
    }
    sqlite3_reset (stmt);
    explicit_bzero (hash, sizeof hash);
    if (rc != SQLITE_DONE)
        return 500;
    r->who.ok = found;
    return found ? 0 : 401;
}
