/*  sandboxd/net.h: what a sandbox with a network may not reach.

    A sandbox whose runtime needs a network sits on a bridge with a way
    out, and the engine still delivers what it sends to the host's own
    addresses to the host (its INPUT chain, which Docker leaves open). At
    boot, while root with CAP_NET_ADMIN in the sandbox's own network
    namespace, sandboxd adds a "prohibit" route for each destination the
    driver names in boot.json's blocked: connecting there fails at once
    (EACCES) whatever listens. The agent, never root and under
    no-new-privileges, cannot remove them.                             */
#ifndef AH_SANDBOXD_NET_H
#define AH_SANDBOXD_NET_H

#include <stddef.h>
#include <stdio.h>

//  cidrs: IPv4 "a.b.c.d/n" (or "a.b.c.d", a /32), separated by spaces.
//  Checks them all, then adds a prohibit route for each. The number
//  added, or -1 with err (a malformed entry: nothing added; or the kernel
//  refused one).
int ah_net_block (const char *cidrs, char *err, size_t err_size);

//  `sandboxd --host-addresses`: every IPv4 address of this network
//  namespace but loopback's, one a line, to out. The Docker driver runs
//  it in a throw-away container sharing the host's network namespace when
//  the server itself runs in a container and cannot see the host's
//  addresses (they join boot.json's blocked). 0 / -1 (said on stderr).
int ah_net_print_addresses (FILE *out);

#endif
