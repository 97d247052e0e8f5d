/*  actors/desired.h: what a create or an update of an agent asks for
    (image, runtime, cpus, memory_mb, idle_minutes, and an admin's
    harness override: the JSON text of {"command", "env"} held to the
    catalog's "harness" rules, catalog/catalog.h), checked once: the
    API checks a body with it before asking lifecycle, and lifecycle
    checks every AGENT_CREATE and AGENT_UPDATE with it (whoever sent
    it), and what lua/limits.lua answers. Grammars are common/ident.h's,
    numbers common/bounds.h's.                                          */
#ifndef AH_DESIRED_H
#define AH_DESIRED_H

#include "proto/msg.h"

#include <stddef.h>

//  The desired fields of msg: each absent (or nil), or of its type, its
//  grammar and its bound; not both image and runtime. NULL when good,
//  else why in buf (a sentence naming the field: "field 'cpus' must be a
//  number from 0.01 to 1024 CPUs in steps of 0.01 (got 1e-12)").
const char *ah_desired_check (const ah_msg_t *msg, char *buf, size_t size);

#endif
