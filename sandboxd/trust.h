/*  sandboxd/trust.h: the egress CA made trusted by what the sandbox runs
    (docs/egress.md "Secrets", docs/sandboxd.md "The egress CA").

    The server sends its installation's CA certificate (PEM; never a key,
    never a secret) in hello's `egress_ca`. sandboxd writes, in its trust
    directory (/tmp/agenthold-ca for the binary: /tmp is writable in
    every sandbox, a tmpfs under Docker, and the directory must be
    sandboxd's own, not writable by others, so what the agent left in
    /tmp cannot stand in for it), egress-ca.pem (the CA
    alone) and ca-bundle.pem (the image's own bundle, the first of the
    usual places, then the CA), both 0644 and each whole or not at all
    (a new file renamed over the old), and, in the binary, points the
    variables the common TLS clients read at them: SSL_CERT_FILE,
    REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, GIT_SSL_CAINFO, PIP_CERT at the
    bundle, NODE_EXTRA_CA_CERTS at the CA alone. Nothing runs before the
    first hello, so everything the agent runs has them. The system store
    itself is left as the image has it.                                */
#ifndef AH_SBD_TRUST_H
#define AH_SBD_TRUST_H

#include <stdbool.h>
#include <stddef.h>

#define AH_SBD_TRUST_DIR        "/tmp/agenthold-ca"     //  /run/agenthold is the tunnel's, read-only
#define AH_SBD_TRUST_CA         "egress-ca.pem"
#define AH_SBD_TRUST_BUNDLE     "ca-bundle.pem"

//  pem (n bytes, from hello) checked (one PEM certificate, printable,
//  at most 4096 bytes) and written in dir; with set_env, the variables
//  set (the binary only: the process's environment is what its children
//  get). 0, or -1 with *why (static text).
int ah_sbd_trust_write (const char *dir, const char *pem, size_t n, bool set_env, const char **why);

#endif
