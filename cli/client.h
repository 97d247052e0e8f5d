/*  cli/client.h: how the agenthold command reaches the server's REST API.

    Where: AGENTHOLD_URL, else http://<server.listen> from the
    configuration (a wildcard host becomes 127.0.0.1), https:// when the
    configuration gives the server a certificate (server.tls_cert).
    Whom to trust for https: AGENTHOLD_CA (a PEM file), else that
    certificate when the URL came from the configuration, else the
    system's certificate authorities.
    Within which tenant (an admin's token acting for one): AGENTHOLD_TENANT
    (the command's --tenant), sent as ?tenant= on every request.
    Who: AGENTHOLD_TOKEN, else the token file <server.data_dir>/admin.token
    that the server writes on its first start (mode 0600).
    The configuration is the server's own loader (config/config.h): the
    file from --config or AGENTHOLD_CONFIG, then AGENTHOLD_* variables.  */
#ifndef AH_CLI_CLIENT_H
#define AH_CLI_CLIENT_H

#include <jansson.h>
#include <stdbool.h>

typedef struct ah_client_t ah_client_t;

//  NULL with *err (caller frees) when there is no way to reach the server
//  (no token found, unusable configuration). need_token=false skips the
//  token (e.g. /healthz).
ah_client_t *ah_client_new (const char *config_path, bool need_token, char **err);
void ah_client_destroy (ah_client_t **self_p);
const char *ah_client_url (ah_client_t *self);
//  The URL of path (which starts with '/') on the server, with the tenant
//  when one is set (?tenant= or &tenant=). Caller frees; NULL: no memory.
char *ah_client_url_for (ah_client_t *self, const char *path);
//  The API token (NULL when not needed): for streaming calls made with
//  cli/http.h or a WebSocket directly (cli/sbx.c, cli/term.c).
const char *ah_client_token (ah_client_t *self);
//  Certificates to trust (a PEM file), or NULL for the system's.
const char *ah_client_ca (ah_client_t *self);
//  The request headers that carry the token ("Authorization: Bearer
//  ...\r\n", none without a token) followed by more (lines ending with
//  "\r\n", or NULL). Free with ah_client_auth_free (it wipes the token).
char *ah_client_auth (ah_client_t *self, const char *more);
void ah_client_auth_free (char *headers);

//  One request. body (borrowed) is sent as JSON when not NULL. Returns
//  the HTTP status, or 0 when the server could not be reached (*err set,
//  caller frees). *reply (caller decrefs) is the parsed JSON response or
//  NULL. timeout_s: 0 for the default (60 s).
long ah_client_call (ah_client_t *self, const char *method, const char *path, json_t *body,
                     long timeout_s, json_t **reply, char **err);

//  The message a failed response carries ({"error": ...}), or a
//  description of the status, fit for a terminal (ah_cmd_clean). Caller
//  frees; NULL when memory ran out.
char *ah_client_error (json_t *reply, long status);

#endif
