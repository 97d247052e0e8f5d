/*  hostd/hostd_home.h: HOSTD_HOME, hostd reading a home for the server
    (docs/hostd.md "Homes"): a sleeping, stopped or failed sandbox's files
    read without waking it. hostd (root) reads the home its Docker driver
    binds, so the server (its own unprivileged user, maybe on another
    machine) gets every file, whatever the agent's modes, and never opens
    hostd's directories itself. Paths are confined by common/homefs (the
    kernel resolves every path beneath the home). */
#ifndef AH_HOSTD_HOME_H
#define AH_HOSTD_HOME_H

#include "config/config.h"
#include "proto/msg.h"

#define AH_HOSTD_HOME_CHUNK     (1u << 20)  //  the most one read answers

//  req's fields: agent_id, op ("list", "tree", "read"), path (relative to
//  the home, by the grammar of common/homepath.h), all (bool); tree:
//  max_depth, max_entries; read: offset, length. Fills reply: list and
//  tree "json" (the text common/homefs makes); read "size" (the file's)
//  and "data" (at most length bytes, at most AH_HOSTD_HOME_CHUNK, from
//  offset). A refusal of the path by the file system (absent, a symlink
//  that escapes, not a regular file...) is a reply too: "errno"
//  (positive) and "why". 0, or -1 with *err (caller frees) when the
//  request itself is malformed (a path that breaks the grammar too) or
//  the home cannot be opened.
int ah_hostd_home (const ah_config_t *config, const ah_msg_t *req, ah_msg_t *reply, char **err);

#endif
