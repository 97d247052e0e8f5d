#!/usr/bin/python3
"""tests/docker/shipped_images_docker.py: the shipped catalog's images are
made on this machine, with no registry, by the server itself.

The real `agenthold serve` with the SHIPPED catalog and the default
configuration (no test image, no runtime named) and the Docker driver: its
builder makes every runtime of catalog/runtimes.json that the engine does
not have (the debian runtime from the host's Debian mirror with mmdebstrap
on a fresh machine: minutes; a second run finds them and builds nothing),
and GET /api/v1/runtimes must show each one present with no error, its
image in the engine.

It is the ctest fixture `ah_shipped_images` (tests/docker/CMakeLists.txt):
every Docker test on the shipped catalog requires it, so the images are
built once, by one server, before those tests run two at a time; none of
them starts a second build of the same image beside it.

usage: shipped_images_docker.py AGENTHOLD_BINARY SOURCE_DIR
Exits 77 without a Docker Engine. Ports from ahserver.free_port, prefix
dockershippedimages<pid>. The shipped images are kept (a user's server
keeps them too); nothing else is left."""
import json
import os
import sys
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import engine, q, Harness  # noqa: E402

h = Harness("docker.shipped_images", sys.argv[1], "10.213.236.0/22", shipped_catalog=True)
CATALOG = os.path.join(os.path.abspath(sys.argv[2]), "catalog", "runtimes.json")
h.env["AGENTHOLD_CATALOG_PATH"] = CATALOG
# The shipped defaults, not the harness's test image and small memory.
for key in ("AGENTHOLD_SANDBOX_DEFAULT_IMAGE", "AGENTHOLD_SANDBOX_DEFAULT_MEMORY_MB",
            "AGENTHOLD_SANDBOX_DEFAULT_CPUS"):
    h.env.pop(key, None)
FIRST_BUILD = 2400                      # debian and workbench from nothing on a fresh, loaded machine


def scenario(h):
    with open(CATALOG) as f:
        aliases = [r["alias"] for r in json.load(f)["runtimes"]]
    h.check(len(aliases) >= 2, "the shipped catalog names its runtimes: %r" % aliases)
    h.start_server()
    t0 = time.time()
    deadline = t0 + FIRST_BUILD
    last = None
    while True:
        st, j = h.api("GET", "/api/v1/runtimes")
        h.check(st == 200, "GET /api/v1/runtimes: %d %r" % (st, j))
        rts = {r["alias"]: r for r in j["runtimes"]}
        h.check(set(rts) == set(aliases), "every shipped runtime is listed: %r" % sorted(rts))
        states = {a: rts[a]["image_state"] for a in aliases}
        for a in aliases:
            h.check(states[a] != "error", "runtime %s could not be made here: %s"
                    % (a, rts[a].get("image_error")))
        if states != last:
            print("%6.1f s: %s" % (time.time() - t0, states), flush=True)
            last = states
        if all(s == "present" for s in states.values()):
            break
        h.check(time.time() < deadline, "the shipped runtimes are not all present after %d s: %r"
                % (FIRST_BUILD, states))
        time.sleep(1)
    for a in aliases:
        image = rts[a]["image"]
        st, _ = engine("GET", "/images/%s/json" % q(image))
        h.check(st == 200, "runtime %s's image %s is in the engine: %d" % (a, image, st))
    print("every shipped runtime present after %.1f s" % (time.time() - t0))
    h.finish()


sys.exit(h.run(scenario))
