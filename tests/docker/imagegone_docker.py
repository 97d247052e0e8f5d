#!/usr/bin/python3
"""tests/docker/imagegone_docker.py: a runtime's image removed behind the
server's back (docs/catalog.md, "An image removed behind the server's
back"), on the SHIPPED catalog and configuration, with the real server,
the real static sandboxd and the real Docker Engine; as one root process
(server.user none) and, run with AH_TEST_DOCKER_VIA=hostd
(docker.imagegone.hostd), in the README's default shape (the server as
the agenthold user with the remote driver, a local hostd holding the
socket, the engine's image events reaching the server through hostd).

Each case removes the default runtime's tag from the engine (the Engine
API's DELETE /images, what `docker rmi` sends) and then:

none     while no agent exists, then a create at once: it waits
         preparing with the build's progress on the event stream and
         runs the rebuilt image; the builder, told by the engine's event,
         made the image again by itself (its log line; GET /runtimes
         back to present).
asleep   while agents are asleep: the builder makes the image again by
         itself, with no request (the engine's event); then `agenthold
         start` runs each agent and each home kept its file.
rebuild  at once followed by `agenthold rebuild`: the rebuild waits for
         the image (or meets it missing and asks the builder) and runs;
         the home kept its file.

Why a tag is put aside first: the default runtime's image takes minutes
to build from nothing. Before each removal the test tags the same image
`agenthold-test-aside:<prefix>`, so the removal takes only the runtime's
tag and its layers stay: the server's own rebuild (the builder's
Dockerfile through POST /build, with its "Step n/m" progress lines) is
then a cached build of seconds. The product's path is the one a user
meets; only its duration is shortened. The aside tag goes at the end, and
the runtime's tag is put back from it if a failure left it missing.

usage: imagegone_docker.py AGENTHOLD_BINARY
Exits 77 without a Docker Engine. Ports from ahserver.free_port, pool
10.213.208.0/22, prefix dockerimagegone<pid> (.hostd: the same)."""
import http.client
import json
import os
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import engine, q, Harness  # noqa: E402

h = Harness("docker.imagegone", sys.argv[1], "10.213.208.0/22", shipped_catalog=True)
# The shipped defaults, not the harness's test image and small memory.
for key in ("AGENTHOLD_SANDBOX_DEFAULT_IMAGE", "AGENTHOLD_SANDBOX_DEFAULT_MEMORY_MB"):
    h.env.pop(key, None)
FIRST_BUILD = 900                       # the debian runtime from nothing on a fresh machine
ASIDE = "agenthold-test-aside:" + h.prefix


def run(*args, timeout=300):
    p = subprocess.run([h.bin] + list(args), env=h.cli_env(), cwd=h.tmp, capture_output=True,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def runtime(alias):
    st, j = h.api("GET", "/api/v1/runtimes")
    h.check(st == 200, "GET /api/v1/runtimes: %d %r" % (st, j))
    for r in j["runtimes"]:
        if r["alias"] == alias:
            return r
    raise h.fail("no runtime %s in GET /api/v1/runtimes" % alias)


def wait_present(alias, seconds):
    deadline = time.time() + seconds
    while True:
        r = runtime(alias)
        if r["image_state"] == "present":
            return r
        h.check(r["image_state"] != "error", "runtime %s: %s" % (alias, r.get("image_error")))
        h.check(time.time() < deadline, "runtime %s not present after %d s: %r" % (alias, seconds, r))
        time.sleep(0.5)


def image_there(ref):
    return engine("GET", "/images/%s/json" % q(ref))[0] == 200


def split_ref(ref):
    repo, _, tag = ref.rpartition(":")
    return repo, tag


def restore(image):
    """Clean-up: the runtime's tag back from the aside one if it is missing,
    then the aside tag removed (only a tag: the image stays with the
    runtime's)."""
    if not image_there(image) and image_there(ASIDE):
        repo, tag = split_ref(image)
        engine("POST", "/images/%s/tag?repo=%s&tag=%s" % (q(ASIDE), q(repo), q(tag)))
    if image_there(image):
        engine("DELETE", "/images/%s" % q(ASIDE))


def remove_tag(image):
    """`docker rmi` of the runtime's tag, its layers kept by the aside tag."""
    repo, tag = split_ref(ASIDE)
    st, _ = engine("POST", "/images/%s/tag?repo=%s&tag=%s" % (q(image), q(repo), q(tag)))
    h.check(st == 201, "tagging %s aside as %s: %d" % (image, ASIDE, st))
    st, j = engine("DELETE", "/images/%s" % q(image))
    h.check(st == 200 and image_there(ASIDE) and not image_there(image),
            "the runtime's tag %s removed, its image kept aside: %d %r" % (image, st, j))


EVENT = "is gone (removed from the engine)"     # the engine's event reached the builder
ANY = "is gone ("                                # that, or a driver call that met it missing


def remade_by_itself(alias, image, gone_before, how=EVENT, seconds=120):
    """The builder noticed the removal (how: by the engine's event, its
    log line; ANY: or by a create that met it missing) and made the image
    again. The states
    GET /runtimes went through (it leaves "present" at once, but a cached
    rebuild may be back before the first look: printed, not asserted)."""
    seen = []
    deadline = time.time() + seconds
    while True:
        state = runtime(alias)["image_state"]
        if not seen or seen[-1] != state:
            seen.append(state)
        if gone_lines(how) > gone_before and state == "present" and image_there(image):
            return seen
        h.check(time.time() < deadline, "runtime %s: its removed image was not made again within %d s "
                "(states %r, log lines %r: %d)" % (alias, seconds, seen, how, gone_lines(how)))
        time.sleep(0.05)


def gone_lines(how):
    """How many times the server logged an image found gone (actors/builder.c)."""
    try:
        with open(h.log) as f:
            return f.read().count(how)
    except OSError:
        return 0


class Events:
    """GET /api/v1/events followed in a thread: every event, parsed."""

    def __init__(self):
        self.seen = []
        self.conn = http.client.HTTPConnection("127.0.0.1", h.port(), timeout=3600)
        self.conn.request("GET", "/api/v1/events", headers={"Authorization": "Bearer " + h.token()})
        self.resp = self.conn.getresponse()
        h.check(self.resp.status == 200, "GET /api/v1/events: %d" % self.resp.status)
        threading.Thread(target=self.follow, daemon=True).start()
        h.cleanups.append(self.conn.close)

    def follow(self):
        try:
            for line in self.resp:
                if line.startswith(b"data: "):
                    self.seen.append(json.loads(line[6:]))
        except (OSError, ValueError, http.client.HTTPException):
            pass

    def messages(self, name, state):
        return [e.get("message") or "" for e in list(self.seen)
                if e.get("name") == name and e.get("state") == state]


def as_agent(name, script):
    rc, out, err = run("exec", name, "--", "sh", "-c", script, timeout=60)
    h.check(rc == 0, "exec %r in %s: %d %s %s" % (script, name, rc, out, err))
    return out


def scenario(h):
    h.start_server()
    rt = wait_present("debian", FIRST_BUILD)
    image = rt["image"]
    h.check(rt["default"] and image.startswith("agenthold/rt-debian:"), "the shipped default: %r" % rt)
    h.cleanups.append(lambda: restore(image))
    events = Events()

    # none: no agent exists; the image goes; a create at once (POST
    # /agents: whether the create meets the image missing itself or joins
    # the builder's rebuild the engine's event started, it waits
    # preparing; only a rebuild finished before the create reached the
    # server would spare it that, and a cached one takes longer than a
    # request).
    gone = gone_lines(ANY)
    remove_tag(image)
    st, a = h.api("POST", "/api/v1/agents", {"name": "fresh"})
    h.check(st == 201, "POST /api/v1/agents after the image went: %d %r" % (st, a))
    a = h.wait_state("fresh", "running", 300)
    h.check(a["image"] == image, "the created agent runs the runtime's image: %r" % a)
    prep = [m for m in events.messages("fresh", "creating") if m.startswith("Preparing the sandbox")]
    print("the create's progress: %s" % prep[:6])
    h.check(prep, "the create waited preparing, with the build's progress on the event stream")
    print("no agents: GET /runtimes went %s" % remade_by_itself("debian", image, gone, ANY))
    as_agent("fresh", "echo fresh-kept > ~/kept")

    # asleep: agents asleep; the image goes; GET /runtimes says so; a start.
    rc, out, err = run("create", "sleepy", "--json")
    h.check(rc == 0, "create sleepy: %s" % err)
    as_agent("sleepy", "echo sleepy-kept > ~/kept")
    for name in ("fresh", "sleepy"):
        rc, out, err = run("stop", name)
        h.check(rc == 0, "stop %s: %s" % (name, err))
    gone = gone_lines(EVENT)
    remove_tag(image)
    print("agents asleep: GET /runtimes went %s" % remade_by_itself("debian", image, gone))
    for name, kept in (("sleepy", "sleepy-kept"), ("fresh", "fresh-kept")):
        rc, out, err = run("start", name)
        h.check(rc == 0, "start %s after the image went: %d %s" % (name, rc, err))
        h.check(as_agent(name, "cat ~/kept") == kept + "\n", "%s's home kept its file" % name)

    # rebuild: the image goes and a rebuild of the sleeping agent follows
    # at once (its create may meet the image missing before the engine's
    # event reached the builder: then it asks the builder itself).
    rc, out, err = run("stop", "sleepy")
    h.check(rc == 0, "stop sleepy: %s" % err)
    remove_tag(image)
    rc, out, err = run("rebuild", "sleepy")
    h.check(rc == 0, "rebuild after the image went: %d %s" % (rc, err))
    h.wait_state("sleepy", "running", 120)
    print("rebuild said: %s; its events: %s" % (err.strip()[-400:], events.messages("sleepy", "rebuilding")[:6]))
    h.check(as_agent("sleepy", "cat ~/kept") == "sleepy-kept\n", "the rebuilt sandbox kept its home")
    c = h.container(h.cli("show", "sleepy")["id"])
    h.check(c and c["Config"]["Image"] == image, "the rebuilt container runs the runtime's image")
    wait_present("debian", 300)

    for name in ("fresh", "sleepy"):
        rc, out, err = run("rm", name)
        h.check(rc == 0, "rm %s: %s" % (name, err))
    h.finish()


sys.exit(h.run(scenario))
