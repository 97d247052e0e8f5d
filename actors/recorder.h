/*  actors/recorder.h: the recorder actor, bus name "recorder".

    It owns the operations table (docs/schema.md): the audit trail of what
    was done to and inside each sandbox, by whom. Rows hold paths and
    command lines, never file contents or output.

    Messages (docs/messages.md, section recorder):
      OP_RECORD {req?, at?, agent_id?, tenant?, agent_name?, run?, actor, kind,
                 detail?, bytes?, ok, error?}
          appended in batched transactions; with "req" the REPLY comes once
          the row is committed (for callers that must know it is durable).
      SANDBOX_STATE {agent_id, state, error?, op?, by?}
          recorded as kind "state" (actor: "by", else the sender).
      OP_LIST {req, agent_id?, tenant?, kind?, run?, failed?, q?, limit?, before?}
          REPLY {operations (raw: array of maps, newest id first), next};
          a tenant's rows from its created_at on only.
      TENANT_REMOVED {req, tenant, at}
          the tenant's rows (and remembered agents) relabelled
          "<name> (removed <time>)"; REPLY {label, relabelled}.

    Pipe commands: "$TERM" (flush, then exit), "FLUSH" (flush now, then
    signal 0 on the pipe: tests and orderly shutdown use it), "SWEEP"
    [offset_ms] (tests: the retention sweep now, as if the clock said
    now + offset_ms; answers the count deleted as a string).

    DESIGN. One actor thread (common/actor.h), one SQLite connection of
    its own.
    Rows wait in memory for at most flush_ms or until flush_rows are
    pending, then go in one BEGIN IMMEDIATE transaction: the audit trail
    must never slow the actors that feed it. A retention sweep deletes
    rows older than retention_days at start and then daily; a sweep that
    deleted rows records itself (kind "retention.sweep", its count in
    the detail).            */
#ifndef AH_RECORDER_H
#define AH_RECORDER_H

#include "common/actor.h"

typedef struct {
    const char *db_path;            //  borrowed until ah_actor_new returns
    double      retention_days;     //  0: 30 days
    int         flush_rows;         //  0: 256
    int         flush_ms;           //  0: 200
} ah_recorder_args_t;

//  ah_actor_new (&ah_recorder_actor, &args, &err); NULL with the reason
//  when the database or the bus cannot be had.
extern const ah_actor_def_t ah_recorder_actor;

#endif
