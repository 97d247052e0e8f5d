/*  tests/fuzz/fuzz_boot.c: libFuzzer target for sandboxd's boot card
    reader (sandboxd/boot.c: ah_boot_parse and ah_boot_tunnel_url).

    Checks beyond "no crash": a card or an error message, never a card
    with a value longer than AH_BOOT_VALUE - 1 or not NUL-terminated, no
    error without a message; a card's tunnel_url, when it parses, is a
    ws:// URL to an IP literal or a ws+unix:// socket (an address).      */
#include "sandboxd/boot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define FAIL(...) do { fprintf (stderr, __VA_ARGS__); fputc ('\n', stderr); abort (); } while (0)

static void s_value (const char *v, const char *name)
{
    if (!memchr (v, 0, AH_BOOT_VALUE))
        FAIL ("%s is not NUL-terminated", name);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    ah_boot_card_t card;
    char err [256] = "";
    memset (&card, 0xa5, sizeof card);
    int rc = ah_boot_parse ((const char *) data, size, &card, err, sizeof err);
    if (rc != 0) {
        if (rc != -1 || !err [0])
            FAIL ("refused (%d) without a message", rc);
        return 0;
    }
    if (size > AH_BOOT_MAX)
        FAIL ("a card of %zu bytes accepted", size);
    s_value (card.agent_id, "agent_id");
    s_value (card.token, "token");
    s_value (card.tunnel_url, "tunnel_url");
    s_value (card.blocked, "blocked");
    ah_ws_url_t url;
    const char *why = NULL;
    if (ah_boot_tunnel_url (card.tunnel_url, &url, &why) == 0) {
        if (url.secure)
            FAIL ("a wss:// tunnel_url accepted: %s", card.tunnel_url);
        if (url.addr_len == 0
        ||  (url.addr.ss_family != AF_INET && url.addr.ss_family != AF_INET6
            &&  url.addr.ss_family != AF_UNIX))
            FAIL ("a tunnel_url without an IP literal accepted: %s", card.tunnel_url);
        if (!memchr (url.host, 0, sizeof url.host) || !memchr (url.path, 0, sizeof url.path))
            FAIL ("url parts not NUL-terminated");
    }
    else if (!why)
        FAIL ("tunnel_url refused without a reason");
    return 0;
}
