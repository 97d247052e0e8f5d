/*  sandboxd/boot.h: /etc/agenthold/boot.json, the sandbox's boot card.

    {"agent_id": "...", "token": "...", "tunnel_url": "ws://IP:PORT/tunnel",
     "blocked"?: "CIDR CIDR ..."}

    blocked (a sandbox with a network only): IPv4 destinations sandboxd
    makes unreachable at boot (sandboxd/net.h), space-separated.

    Parsed by a small strict JSON reader of our own (jansson does not link
    into the static binary and a flat object of strings needs no more):
    one object, string values only, the usual escapes (\uXXXX within the
    BMP and surrogate pairs, encoded as UTF-8; \u0000 refused), no
    duplicate keys, unknown keys ignored, at most AH_BOOT_MAX bytes.  */
#ifndef AH_SANDBOXD_BOOT_H
#define AH_SANDBOXD_BOOT_H

#include <stddef.h>
#include "proto/ws.h"

#define AH_BOOT_MAX     16384       //  largest boot.json accepted
#define AH_BOOT_VALUE   1024        //  longest value

typedef struct {
    char agent_id [AH_BOOT_VALUE];
    char token [AH_BOOT_VALUE];
    char tunnel_url [AH_BOOT_VALUE];
    char blocked [AH_BOOT_VALUE];   //  "" when absent
} ah_boot_card_t;

//  Parse text (size bytes). 0, or -1 with a message in err.
int ah_boot_parse (const char *text, size_t size, ah_boot_card_t *out,
                   char *err, size_t err_size);
//  Read and parse a file. 0, or -1 with a message naming the file.
int ah_boot_load (const char *path, ah_boot_card_t *out, char *err, size_t err_size);
//  The card's tunnel_url: ws://IP[:PORT]/path, an IP literal (there is no
//  resolver in a scratch image) and no wss (no TLS inside the sandbox).
//  0, or -1 with *err (static).
int ah_boot_tunnel_url (const char *text, ah_ws_url_t *url, const char **err);

#endif
