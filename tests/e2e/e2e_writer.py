#!/usr/bin/python3
"""tests/e2e/e2e_writer.py: the API's SQLite writes run off its network
thread (actors/api/writer.c), on the real `agenthold serve` with the fake
driver and its real database file.

A second process holds the database's write lock (BEGIN IMMEDIATE on its
own connection, as another actor's long write transaction would). While
it holds it:

  reads     GET /healthz, GET /api/v1/agents, GET /api/v1/tenants answer
            within READ_BOUND_S each, though writes of the API are waiting
            (a token create, a tenant create, PUT /policy, a session open,
            and the first use of a fresh token, whose last_used_at is a write)
  order     once the lock goes, every waiting write lands, and the answers
            say what was written (the tenant and token exist, the policy
            value is in force, the session is live)
  timeout   a lock held past the store's busy timeout (5 s): a token create
            is answered 500 naming the lock, reads still answer at once,
            and the same request succeeds once the lock is gone
  read only the API's own connection refuses a write (PRAGMA query_only):
            checked by the server's log holding no "attempt to write a
            readonly database"

usage: e2e_writer.py AGENTHOLD_BINARY [SCENARIO...]
Always kills what it started and removes its temporary directory."""
import json
import os
import sqlite3
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahlocal  # noqa: E402
import ahserver  # noqa: E402

CTX = ahlocal.context("ah-e2e-writer-")
Fail, check = CTX.fail, CTX.check
READ_BOUND_S = 0.5      # a read while writes wait: far below the 5 s a blocked thread would take


def db_path(srv):
    return os.path.join(srv.data, "agenthold.db")


class Lock:
    """The database's write lock, held by a connection of this process."""

    def __init__(self, srv):
        self.db = sqlite3.connect(db_path(srv), timeout=10, isolation_level=None)
        self.db.execute("BEGIN IMMEDIATE")

    def release(self):
        self.db.execute("ROLLBACK")
        self.db.close()


def in_background(fn):
    box = {}

    def run():
        try:
            box["answer"] = fn()
        except Exception as e:      # noqa: BLE001 - reported by the check
            box["error"] = repr(e)
    t = threading.Thread(target=run)
    t.start()
    return t, box


def timed(srv, method, path, tok=ahlocal.ADMIN):
    t0 = time.time()
    status, j = srv.call(method, path, tok)
    return status, j, time.time() - t0


def s_reads_and_order():
    srv = ahlocal.Local(CTX, "order").start()
    fresh = srv.ok("POST", "/api/v1/tokens", body={"tenant": "default", "name": "fresh"})["token"]
    lock = Lock(srv)
    try:
        waiting = [
            in_background(lambda: srv.call("POST", "/api/v1/tenants", body={"name": "lockco"})),
            in_background(lambda: srv.call("POST", "/api/v1/tokens", body={"tenant": "default",
                                                                           "name": "late"})),
            in_background(lambda: srv.call("PUT", "/api/v1/policy", body={"idle_minutes": 17})),
            in_background(lambda: srv.call("POST", "/api/v1/sessions", body={"scope": "run",
                                                                             "subject": "locked-run"})),
        ]
        time.sleep(0.5)             # the writes are queued behind the lock
        for method, path, tok in (("GET", "/healthz", None), ("GET", "/api/v1/agents", ahlocal.ADMIN),
                                  ("GET", "/api/v1/tenants", ahlocal.ADMIN),
                                  ("GET", "/api/v1/agents", fresh)):   # its first use: a touch queued
            status, j, took = timed(srv, method, path, tok)
            check(status == 200, "%s %s while the lock is held: %d %r" % (method, path, status, j))
            check(took < READ_BOUND_S, "%s %s answered in %.3f s while writes wait (bound %.1f s): the "
                  "network thread waited on the database" % (method, path, took, READ_BOUND_S))
        for t, box in waiting:
            check(t.is_alive(), "a write answered while the database was locked: %r" % box)
    finally:
        time.sleep(1.0)
        lock.release()
    answers = []
    for t, box in waiting:
        t.join(30)
        check("answer" in box, "a write never answered after the lock went: %r" % box)
        answers.append(box["answer"])
    check(answers[0][0] == 201 and answers[0][1]["name"] == "lockco", "tenant create: %r" % (answers[0],))
    check(answers[1][0] == 201 and answers[1][1].get("token"), "token create: %r" % (answers[1],))
    check(answers[2][0] == 200 and answers[2][1]["values"]["idle_minutes"] == 17,
          "policy: %r" % (answers[2],))
    check(answers[3][0] == 201 and answers[3][1]["state"] == "live", "session open: %r" % (answers[3],))
    check(srv.ok("GET", "/api/v1/tenants/lockco")["name"] == "lockco", "the tenant is there")
    names = [t["name"] for t in srv.ok("GET", "/api/v1/tokens")["tokens"]]
    check("late" in names, "the token is there: %r" % names)
    ahserver.wait_until(lambda: sqlite3.connect(db_path(srv)).execute(
        "SELECT last_used_at FROM api_tokens WHERE name = 'fresh'").fetchone()[0], 10,
        "the fresh token's first use noted", Fail)
    srv.stop()
    check(not ahserver.log_has(CTX.log, "readonly database"), "no write on the API's read connection")


def s_timeout():
    srv = ahlocal.Local(CTX, "timeout").start()
    lock = Lock(srv)
    try:
        t0 = time.time()
        status, j = srv.call("POST", "/api/v1/tokens", body={"tenant": "default", "name": "toolate"})
        took = time.time() - t0
        check(status == 500 and "database is locked" in json.dumps(j),
              "a write past the busy timeout: %d %r" % (status, j))
        check(took >= 4.0, "it waited the busy timeout first: %.1f s" % took)
        status, j, took = timed(srv, "GET", "/api/v1/agents")
        check(status == 200 and took < READ_BOUND_S, "reads still answer at once: %d %.3f s" % (status, took))
    finally:
        lock.release()
    status, j = srv.call("POST", "/api/v1/tokens", body={"tenant": "default", "name": "toolate"})
    check(status == 201 and j.get("token"), "the same create succeeds once the lock is gone: %d %r" % (status, j))
    srv.stop()


def main():
    for name, fn in (("order", s_reads_and_order), ("timeout", s_timeout)):
        if not CTX.only or name in CTX.only:
            t0 = time.time()
            fn()
            print("%-8s ok (%.1f s)" % (name, time.time() - t0))
    print("e2e.writer: %d checks passed" % check.count)


if __name__ == "__main__":
    sys.exit(ahserver.run(main, Fail, CTX.procs, CTX.tmp, CTX.log))
