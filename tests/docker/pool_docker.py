#!/usr/bin/python3
"""tests/docker/pool_docker.py: warm pools (issue 31) on the Docker driver
with the shipped catalog's default runtime, the shipped lua/pool.lua (two
warm sandboxes of the default runtime) and the real static sandboxd.

- the pool fills: two warm containers, frozen (the shipped pool.lua says
  frozen: the engine says State.Paused), no tenant's (not listed,
  /metrics counts them as agenthold_warm_sandboxes, state frozen), each
  made from the engine's id of the runtime's image (agents.image_id);
- a create of the default shape is `running` in its 201 (`warm`: true),
  its container unpaused by then, the thaw audited by the create's token,
  its home fresh and its own (the agent user's, holding just what a
  cold sandbox's holds: the image's skeleton), its
  first exec answers, its boot token's hash is its own (the database read);
- the pool refills (a third container, two warm frozen again); `agenthold
  pool` and /metrics say size 2, ready 2, frozen 2, one hit;
- two tenants each take from the one pool and see nothing of each other;
- another shape (memory_mb) is a cold create;
- kill -9 of the server right after a take, the refill under way (the pool
  half made), and a restart: the pool is full (and frozen) again and every
  container of the run belongs to a row of the database (nothing orphaned);
- the runtime's image made again behind the server's back: first another
  image tagged as the runtime's reference (a build FROM it with one more
  label), then that tag removed, which the builder makes again itself
  (from its build cache: another id than the tagged one). Each time the
  warm sandboxes made from the old image are destroyed (their containers
  gone, drains counted, `pool.drain` audited by `pool` with the reason)
  and two new ones made from the engine's new id, frozen; the agents
  taken before are untouched (running, their containers the old image's);
- a restart with sandbox.warm_pool_max 0 drains the pool; the agents
  stay; rm leaves nothing.

usage: pool_docker.py AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine. Pool 10.213.220.0/22, prefix
dockerpool<pid>; removes everything it made, even on failure, and puts
the runtime's reference back on the image it named at the start."""
import json
import os
import re
import sqlite3
import sys
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import Harness, build_image, engine, q  # noqa: E402
import ahserver  # noqa: E402

h = Harness("docker.pool", sys.argv[1], "10.213.220.0/22", shipped_catalog=True)
for key in ("AGENTHOLD_SANDBOX_DEFAULT_IMAGE", "AGENTHOLD_SANDBOX_DEFAULT_MEMORY_MB",
            "AGENTHOLD_SANDBOX_DEFAULT_CPUS"):
    h.env.pop(key, None)
h.env["AGENTHOLD_SANDBOX_WARM_POOL_MAX"] = "2"


def warm(state="frozen"):
    """agenthold_warm_sandboxes{runtime="debian",state=...} from /metrics."""
    st, text = ahserver.request(h.port(), "GET", "/metrics", None, h.token(), {}, 10)
    if st != 200:
        return -1
    m = re.search(r'^agenthold_warm_sandboxes\{runtime="debian",state="%s"\} (\d+)$' % state,
                  text if isinstance(text, str) else text.decode(), re.M)
    return int(m.group(1)) if m else 0


def wait_warm(n, seconds, what):
    """n warm sandboxes frozen, and none in another state."""
    ahserver.wait_until(lambda: warm() == n and len(warm_rows()) == n, seconds, what, h.fail, interval=0.2)


def warm_rows():
    """{agent id: image id} of the warm rows."""
    return dict(db("SELECT id, coalesce(image_id, '') FROM agents WHERE pool IS NOT NULL"))


def inspect(cid):
    st, j = engine("GET", "/containers/%s/json" % q(cid))
    return j if st == 200 else None


def image_id(ref):
    st, j = engine("GET", "/images/%s/json" % q(ref))
    return j["Id"] if st == 200 else None


def containers():
    _, c = engine("GET", "/containers/json?all=1&filters=" + h.label_filter())
    return {x["Labels"].get("agenthold.agent"): x for x in (c or [])}


def db(sql, *args):
    con = sqlite3.connect("file:%s?mode=ro" % os.path.join(h.data, "agenthold.db"), uri=True, timeout=10)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def call(method, path, body=None, token=None, timeout=60):
    st, text = ahserver.request(h.port(), method, path, json.dumps(body) if body is not None else None,
                                token or h.token(), {"Content-Type": "application/json"}, timeout)
    try:
        return st, json.loads(text) if text else None
    except ValueError:
        return st, None


def home_of(name, token=None):
    """What the agent's home holds (names), after checking it is the
    agent user's."""
    st, r = call("POST", "/api/v1/agents/%s/exec" % name,
                 {"cmd": "stat -c %U /home/agent; id -un; ls -A /home/agent", "timeout": 20}, token)
    out = (r or {}).get("stdout", "").split("\n")
    h.check(st == 200 and len(out) >= 2 and out[0] == out[1] and out[0],
            "%s's home is its user's: %d %r" % (name, st, r))
    return sorted(x for x in out[2:] if x)


def take(name, token=None):
    """A create of the default shape; it must be a warm take."""
    t0 = time.monotonic()
    st, a = call("POST", "/api/v1/agents", {"name": name}, token)
    took = time.monotonic() - t0
    h.check(st == 201 and a and a.get("state") == "running" and a.get("warm") is True,
            "create %s takes a warm sandbox, running in its 201: %d %r" % (name, st, a))
    return (a or {}).get("id"), took


def scenario(h):
    h.start_server()
    # The pool fills with the shipped default runtime (its image may have to
    # be built first: minutes on a cold machine).
    wait_warm(2, 900, "two warm sandboxes running")
    warm_ids = {r[0] for r in db("SELECT id FROM agents WHERE pool = 'debian' AND tenant = ''")}
    h.check(len(warm_ids) == 2, "two warm rows, no tenant's: %r" % warm_ids)
    c = containers()
    h.check(set(c) == warm_ids and all(x["State"] == "paused" for x in c.values()),
            "their two containers are paused: %r" % {k: v["State"] for k, v in c.items()})
    h.check(all(inspect(x["Id"])["State"]["Paused"] is True for x in c.values()),
            "the engine says State.Paused of each")
    image = db("SELECT image FROM agents WHERE pool = 'debian'")[0][0]
    first_id = image_id(image)
    h.check(first_id and set(warm_rows().values()) == {first_id}
            and all(inspect(x["Id"])["Image"] == first_id for x in c.values()),
            "each warm row records the engine's id of the image its container was made from: %r, %s"
            % (warm_rows(), first_id))
    st, listed = call("GET", "/api/v1/agents")
    h.check(st == 200 and listed.get("agents") == [], "warm sandboxes are nobody's agents: %r" % listed)

    # A take: running at once, its home empty and its own, exec works.
    aid, took = take("alice")
    h.check(aid in warm_ids, "alice is one of the warm sandboxes")
    print("create (warm, frozen: thawed) answered running in %.3f s" % took)
    st, a = call("GET", "/api/v1/agents/alice")
    h.check(st == 200 and a["state"] == "running" and a["frozen_at"] is None,
            "alice reads running once the create answered: %d %r" % (st, a))
    ci = inspect(c[aid]["Id"])
    h.check(ci["State"]["Running"] and ci["State"]["Paused"] is False,
            "alice's container is unpaused: %r" % ci["State"])
    t0 = time.monotonic()
    st, r = call("POST", "/api/v1/agents/alice/exec", {"cmd": "true", "timeout": 20})
    first_exec = time.monotonic() - t0
    print("its first exec (true) answered in %.3f s" % first_exec)
    h.check(st == 200 and r["status"] == 0, "its first exec answers: %d %r" % (st, r))
    # At once: the tunnel came through the freeze, no redial (a redial
    # would wait for sandboxd's 45 s silence).
    h.check(first_exec < 5, "its first exec answers at once: %.3f s" % first_exec)
    # The recorder writes in batches (its flush interval): waited for.
    def audited():
        steps = db("SELECT actor, detail FROM operations WHERE agent_id = ? AND kind = 'state' ORDER BY id", aid)
        return (any(d and d.startswith("frozen") and a_ == "pool" for a_, d in steps)
                and any(d and d.startswith("thawing") and a_.startswith("api:") for a_, d in steps)
                and db("SELECT count(*) FROM operations WHERE agent_id = ? AND kind = 'pool.take'", aid)[0][0] == 1)
    ahserver.wait_until(audited, 30, "the freeze audited by pool, the thaw by the create's token, the take too",
                        h.fail, interval=0.5)
    home = home_of("alice")
    hashes = db("SELECT agent_id, boot_token_hash FROM sandboxes")
    mine = [hh for i, hh in hashes if i == aid]
    h.check(mine and mine[0] and len(mine[0]) == 64 and [hh for _, hh in hashes].count(mine[0]) == 1,
            "its boot token is its own: %r" % hashes)
    st, a = call("GET", "/api/v1/agents/alice")
    h.check(st == 200 and a["tenant"] == "default" and a["state"] == "running" and a["connected"],
            "alice is the default tenant's, running, connected: %r" % a)

    # The pool refills.
    wait_warm(2, 120, "the pool refilled")
    h.check(len(containers()) == 3, "three containers: alice and two warm")
    rc, out, err = h.run_cli("pool")
    h.check(rc == 0 and re.search(r"^debian\s+2\s+2\s+0\s+2\s+\d+s\s*$", out, re.M)
            and "hits 1, misses 0, drained 0 (sandbox.warm_pool_max 2)" in out,
            "agenthold pool: size 2, ready 2, making 0, frozen 2, one hit: %d %r %r" % (rc, out, err))
    h.check(all(x["State"] == "paused" for k, x in containers().items() if k in warm_rows()),
            "the refilled pool's containers are paused")
    st, text = ahserver.request(h.port(), "GET", "/metrics", None, h.token(), {}, 10)
    text = text.decode() if isinstance(text, bytes) else text
    h.check(st == 200 and "\nagenthold_warm_pool_hits_total 1\n" in text
            and "\nagenthold_warm_pool_misses_total 0\n" in text, "/metrics counts the hit")

    # Two tenants from the one pool, seeing nothing of each other.
    tokens = {}
    for t in ("acme", "globex"):
        st, _ = call("POST", "/api/v1/tenants", {"name": t})
        h.check(st in (200, 201), "tenant %s made: %d" % (t, st))
        rc, out, err = h.run_cli("--tenant", t, "token", "create", "--name", t + "-ci")
        h.check(rc == 0 and len(out.strip()) == 64, "a token of %s: %d %r" % (t, rc, err))
        tokens[t] = out.strip()
    ids = {}
    for t in ("acme", "globex"):
        ids[t], _ = take("w-" + t, tokens[t])
        st, r = call("POST", "/api/v1/agents/w-%s/exec" % t,
                     {"cmd": "echo %s > /home/agent/mine.txt" % t, "timeout": 20}, tokens[t])
        h.check(st == 200 and r["status"] == 0, "%s writes a file: %d %r" % (t, st, r))
        got = home_of("w-" + t, tokens[t])
        h.check(got == sorted(home + ["mine.txt"]), "%s's home holds its own file and nothing of another "
                "agent: %r" % (t, got))
    for t, other in (("acme", "globex"), ("globex", "acme")):
        st, listed = call("GET", "/api/v1/agents", token=tokens[t])
        names = [a["name"] for a in (listed or {}).get("agents", [])]
        h.check(st == 200 and names == ["w-" + t], "%s lists only its own: %r" % (t, names))
        st, _ = call("GET", "/api/v1/agents/%s" % ids[other], token=tokens[t])
        h.check(st == 404, "%s cannot see %s's agent by id: %d" % (t, other, st))
        st, _ = call("POST", "/api/v1/agents/w-%s/exec" % other, {"cmd": "true"}, tokens[t])
        h.check(st == 404, "%s cannot exec in %s's agent: %d" % (t, other, st))

    # Another shape: a cold create.
    st, a = call("POST", "/api/v1/agents", {"name": "bob", "memory_mb": 256})
    h.check(st == 201 and a["state"] == "creating" and not a.get("warm"), "another shape is cold: %d %r" % (st, a))
    h.wait_state("bob", "running", 120)
    cold_home = home_of("bob")
    h.check(home == cold_home, "a warm sandbox's home holds what a cold one's holds (the image's "
            "skeleton) and nothing else: %r vs %r" % (home, cold_home))

    # kill -9 with the pool half made: take one, kill at once.
    wait_warm(2, 120, "the pool full before the kill")
    cid, _ = take("carol")
    h.kill_server()
    h.start_server()
    wait_warm(2, 180, "the pool full again after the restart")
    rows = {r[0] for r in db("SELECT id FROM agents")}
    c = containers()
    h.check(set(c) <= rows, "every container belongs to a row (nothing orphaned): %r" % (set(c) - rows))
    h.check(len(rows) == 7 and len(c) == 7,
            "alice, w-acme, w-globex, bob, carol and two warm: %d rows, %d containers" % (len(rows), len(c)))
    h.wait_state("carol", "running", 60)
    h.check(all(x["State"] == "paused" for k, x in containers().items() if k in warm_rows()),
            "after the restart the warm containers are paused again")
    st, r = call("POST", "/api/v1/agents/carol/exec", {"cmd": "true", "timeout": 30})
    h.check(st == 200 and r["status"] == 0, "carol's exec answers after the restart: %d %r" % (st, r))

    rebuilt(image, first_id)

    # No warm pools any more: the pool drains, the agents stay.
    h.server.terminate()
    h.check(h.server.wait(timeout=30) == 0, "the server exits 0 on SIGTERM")
    h.env["AGENTHOLD_SANDBOX_WARM_POOL_MAX"] = "0"
    h.start_server()
    ahserver.wait_until(lambda: not db("SELECT id FROM agents WHERE pool IS NOT NULL"), 120,
                        "the warm rows drained", h.fail, interval=0.2)
    ahserver.wait_until(lambda: len(containers()) == 5, 60, "five containers left", h.fail, interval=0.2)
    for name, tok in (("alice", None), ("bob", None), ("carol", None),
                      ("w-acme", tokens["acme"]), ("w-globex", tokens["globex"])):
        st, _ = call("DELETE", "/api/v1/agents/%s" % name, token=tok)
        h.check(st in (200, 202), "rm %s: %d" % (name, st))
    ahserver.wait_until(lambda: not any(h.leftovers()), 120, "nothing left", h.fail, interval=0.5)
    h.finish()


ASIDE = "agenthold-test-aside:" + h.prefix      # the runtime's first image, held while the test moves its tag
OTHER = "agenthold-test-other:" + h.prefix      # another image, FROM the runtime's


def split_ref(ref):
    repo, _, tag = ref.rpartition(":")
    return repo, tag


def tag(src, ref):
    repo, t = split_ref(ref)
    st, _ = engine("POST", "/images/%s/tag?repo=%s&tag=%s" % (q(src), q(repo), q(t)))
    h.check(st == 201, "tagging %s as %s: %d" % (src, ref, st))


def drained_to(image, old_ids, taken, what):
    """The warm sandboxes of old_ids drained (rows and containers gone,
    audited) and two new ones made from the engine's id of image now,
    frozen; the taken agents untouched. Returns that id."""
    ahserver.wait_until(lambda: not set(old_ids) & set(warm_rows()) and len(warm_rows()) == 2
                        and set(warm_rows().values()) == {image_id(image)} and warm() == 2,
                        300, what, h.fail, interval=0.5)
    now_id = image_id(image)
    c = containers()
    h.check(not set(old_ids) & set(c), "the drained warm sandboxes' containers are gone: %r"
            % (set(old_ids) & set(c)))
    h.check(all(inspect(c[i]["Id"])["Image"] == now_id and c[i]["State"] == "paused" for i in warm_rows()),
            "the new warm containers are made from %s and paused" % now_id)
    for i in old_ids:
        def drain_rows():
            return db("SELECT actor, detail FROM operations WHERE agent_id = ? AND kind = 'pool.drain'", i)
        ahserver.wait_until(lambda: drain_rows(), 30, "the drain of %s audited" % i, h.fail, interval=0.5)
        rows = drain_rows()
        h.check(len(rows) == 1 and rows[0][0] == "pool" and "image was made again" in rows[0][1],
                "the drain of %s is audited with its cause: %r" % (i, rows))
    for name, (aid, iid) in taken.items():
        ci = inspect(c[aid]["Id"]) if aid in c else None
        h.check(ci and ci["State"]["Running"] and ci["Image"] == iid,
                "%s untouched: its container runs, from its own image" % name)
        st, a = call("GET", "/api/v1/agents/" + name)
        h.check(st == 200 and a["state"] == "running" and a["id"] == aid, "%s still running: %r" % (name, a))
    return now_id


def drained_count():
    rc, out, _ = h.run_cli("pool")
    m = re.search(r"drained (\d+)", out)
    return int(m.group(1)) if m else -1


def rebuilt(image, first_id):
    """The runtime's image made again while the server runs."""
    taken = {n: (i, first_id) for n, i in
             db("SELECT name, id FROM agents WHERE pool IS NULL AND name IN ('alice', 'carol')")}
    h.check(len(taken) == 2, "alice and carol taken: %r" % taken)
    before = drained_count()
    # Held aside: the test puts the reference back on it at the end.
    STATE.update(image=image, first_id=first_id)
    tag(image, ASIDE)
    # 1. Another image under the runtime's reference (a tag moved: the
    # engine's "tag" event; the builder's check finds another id).
    old = dict(warm_rows())
    build_image(OTHER, {}, "FROM %s\nLABEL agenthold.test=%s\n" % (image, h.prefix))
    other_id = STATE["other_id"] = image_id(OTHER)
    h.check(other_id and other_id != first_id, "another image: %s" % other_id)
    tag(OTHER, image)
    h.check(image_id(image) == other_id, "the runtime's reference names it now")
    t0 = time.monotonic()
    drained_to(image, old, taken, "the warm sandboxes of the first image drained, two of the other made")
    print("tag moved: %s -> %s, the pool drained and refilled in %.1f s" % (first_id[:19], other_id[:19],
                                                                           time.monotonic() - t0))
    h.check(drained_count() == before + 2, "two drains counted: %d" % drained_count())
    # 2. The reference removed: the builder makes the image again itself
    # (its Dockerfile, cached: not the other image).
    old = dict(warm_rows())
    st, j = engine("DELETE", "/images/%s?force=1" % q(image))
    h.check(st == 200 and image_id(image) is None, "the runtime's reference removed: %d %r" % (st, j))
    t0 = time.monotonic()
    remade = drained_to(image, old, taken, "the image made again, the other's warm sandboxes drained")
    print("tag removed: the builder made %s again (%s), the pool drained and refilled in %.1f s"
          % (image, remade[:19], time.monotonic() - t0))
    h.check(remade != other_id, "the builder made another image than the one removed: %s" % remade)
    h.check(drained_count() == before + 4, "two more drains counted: %d" % drained_count())
    h.check("is gone (" in open(h.log, errors="replace").read(),
            "the builder heard of the removal and made the image again")


STATE = {}                                      # what restore() needs: the reference, its first id, images made


def restore():
    """Clean-up: the runtime's reference back on its first image (held
    by the aside tag), the test's tags gone."""
    image, first_id = STATE.get("image"), STATE.get("first_id")
    if image and first_id and image_id(ASIDE) == first_id and image_id(image) != first_id:
        STATE["left"] = image_id(image)
        repo, t = split_ref(image)
        engine("POST", "/images/%s/tag?repo=%s&tag=%s" % (q(ASIDE), q(repo), q(t)))
    engine("DELETE", "/images/%s" % q(ASIDE))
    engine("DELETE", "/images/%s" % q(OTHER))


def run_all(h):
    try:
        scenario(h)
    finally:
        restore()


rc = h.run(run_all)
# Once the harness removed the containers: the images the test made or
# left without a reference (none is the runtime's first).
for iid in (STATE.get("other_id"), STATE.get("left")):
    if iid and iid != STATE.get("first_id"):
        engine("DELETE", "/images/%s" % q(iid))
sys.exit(rc)
