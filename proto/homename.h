/*  proto/homename.h: the names in a home that a listing a person reads
    leaves out unless asked (`all`): one rule for the server's own tree
    (common/homefs.c) and sandboxd's fs.tree channel (docs/tunnel.md),
    so a tree looks the same whichever side walked it.

    The toolchain folders (.venv, venv, node_modules, __pycache__,
    .pytest_cache, .mypy_cache, .ruff_cache, .tox, .git, .next, .cache),
    the product's own names (.agenthold*), and the temporary file of an
    upload in progress (".<name>.ah-<8 hex digits>", sandboxd/fs.c).
    A plain function, no state, no dependency (sandboxd links it).      */
#ifndef AH_PROTO_HOMENAME_H
#define AH_PROTO_HOMENAME_H

#include <stdbool.h>

bool ah_homename_hidden (const char *name);

#endif
