/*  tests/common/ident_cases.h: one table of good and bad identifiers,
    fed through every entry point that takes them (ah_ident itself, the
    API, lifecycle, the catalog, the docker driver). A value is good or
    bad everywhere, or the test that sees it otherwise fails.          */
#ifndef AH_TEST_IDENT_CASES_H
#define AH_TEST_IDENT_CASES_H

#include "common/ident.h"

typedef struct {
    ah_ident_t kind;
    const char *value;
    bool good;
} ident_case_t;

static const ident_case_t ident_cases [] = {
    { AH_IDENT_AGENT_NAME, "alice", true },
    { AH_IDENT_AGENT_NAME, "a", true },
    { AH_IDENT_AGENT_NAME, "9lives", true },
    { AH_IDENT_AGENT_NAME, "build.bot_2-x", true },
    { AH_IDENT_AGENT_NAME, "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0", true },
    { AH_IDENT_AGENT_NAME, "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz01", false },
    { AH_IDENT_AGENT_NAME, "", false },
    { AH_IDENT_AGENT_NAME, "Alice", false },
    { AH_IDENT_AGENT_NAME, "-alice", false },
    { AH_IDENT_AGENT_NAME, ".alice", false },
    { AH_IDENT_AGENT_NAME, "_alice", false },
    { AH_IDENT_AGENT_NAME, "al ice", false },
    { AH_IDENT_AGENT_NAME, "al/ice", false },
    { AH_IDENT_AGENT_NAME, "..", false },
    { AH_IDENT_AGENT_NAME, "alice\n", false },
    { AH_IDENT_AGENT_NAME, "ali\rce", false },
    { AH_IDENT_AGENT_NAME, "ali%2fce", false },
    { AH_IDENT_AGENT_NAME, "\xc3\xa9t\xc3\xa9", false },
    { AH_IDENT_AGENT_NAME, "0123456789ab", false },        //  the shape of an id
    { AH_IDENT_AGENT_NAME, "deadbeef0000", false },
    { AH_IDENT_AGENT_NAME, "0123456789abc", true },        //  13: not an id
    { AH_IDENT_AGENT_NAME, "0123456789ag", true },         //  not hex
    { AH_IDENT_AGENT_ID, "0123456789ab", true },
    { AH_IDENT_AGENT_ID, "0123456789AB", false },
    { AH_IDENT_AGENT_ID, "0123456789a", false },
    { AH_IDENT_AGENT_ID, "0123456789abc", false },
    { AH_IDENT_AGENT_ID, "alice", false },
    { AH_IDENT_AGENT_ID, "../../etc/pa", false },
    { AH_IDENT_AGENT_ID, "", false },
    { AH_IDENT_IMAGE, "debian:bookworm-slim", true },
    { AH_IDENT_IMAGE, "agenthold/busybox:1", true },
    { AH_IDENT_IMAGE, "busybox", true },
    { AH_IDENT_IMAGE, "registry.example:5000/team/image:v1.2_3", true },
    { AH_IDENT_IMAGE, "localhost/x", true },
    { AH_IDENT_IMAGE, "a__b/c-d--e.f:latest", true },
    { AH_IDENT_IMAGE, "busybox@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", true },
    { AH_IDENT_IMAGE, "busybox:1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", true },
    { AH_IDENT_IMAGE, "", false },
    { AH_IDENT_IMAGE, "Debian:12", false },
    { AH_IDENT_IMAGE, "debian:", false },
    { AH_IDENT_IMAGE, "debian/", false },
    { AH_IDENT_IMAGE, "/debian", false },
    { AH_IDENT_IMAGE, ":tag", false },
    { AH_IDENT_IMAGE, "debian:-x", false },
    { AH_IDENT_IMAGE, "debian:.x", false },
    { AH_IDENT_IMAGE, "deb ian", false },
    { AH_IDENT_IMAGE, "debian:12\n", false },
    { AH_IDENT_IMAGE, "debian?fromImage=x", false },
    { AH_IDENT_IMAGE, "debian#x", false },
    { AH_IDENT_IMAGE, "a//b", false },
    { AH_IDENT_IMAGE, "a/../b", false },
    { AH_IDENT_IMAGE, "a/-b", false },
    { AH_IDENT_IMAGE, "busybox@sha256:xyz", false },
    { AH_IDENT_IMAGE, "busybox@:0123456789abcdef0123456789abcdef0123456789abcdef", false },
    { AH_IDENT_RUNTIME, "debian", true },
    { AH_IDENT_RUNTIME, "python-3", true },
    { AH_IDENT_RUNTIME, "3python", false },
    { AH_IDENT_RUNTIME, "py.thon", false },
    { AH_IDENT_RUNTIME, "Python", false },
    { AH_IDENT_RUNTIME, "", false },
    { AH_IDENT_TENANT, "acme", true },
    { AH_IDENT_TENANT, "acme-2", true },
    { AH_IDENT_TENANT, "2acme", false },
    { AH_IDENT_TENANT, "ac me", false },
    { AH_IDENT_TENANT, "ACME", false },
    { AH_IDENT_TOKEN_NAME, "ci-bot.2_A", true },
    { AH_IDENT_TOKEN_NAME, "ci bot", false },
    { AH_IDENT_TOKEN_NAME, "", false },
};
#define IDENT_CASES (sizeof ident_cases / sizeof ident_cases [0])

#endif
