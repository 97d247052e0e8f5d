#!/usr/bin/python3
"""tests/console/console_docker.py: the web console in headless Chromium
(Selenium) against the real `agenthold serve` on the Docker driver with
the shipped catalog and its default runtime (not the fake driver, not a
test image): a person signs in, creates an agent with the form and sees
it reach running (the runtime's image is built first if this machine has
not got it, up to 10 minutes), types `echo hello-$((6*7))` in the
terminal and reads hello-42, uploads a file with the picker and downloads
it byte for byte, sees the sleep countdown there at once, ticking, and
moved on by a command, stops the agent and sees sleeping without a
reload; the browser's log holds no error. Screenshots into the second
argument (docker-*.png).

usage: console_docker.py AGENTHOLD_BINARY [SCREENSHOT_DIR] (sandboxd next to it)
Exits 77 with a loud line without a Docker Engine, Chromium,
chromium-driver or python3-selenium. Ports from ahserver.free_port, pool
10.213.212.0/22, prefix consoledocker<pid>."""
import datetime
import os
import sys
import tempfile
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "docker"))
import console_browser as cb  # noqa: E402
from ahdocker import Harness, engine_up, SOCK, SKIP  # noqa: E402
from consolelib import Fail, wait  # noqa: E402

BUILD_WAIT = 600                # the debian runtime's first build on a fresh machine


class Site:
    """What console_browser.Page needs of a server."""

    def __init__(self, h):
        self.h = h

    def url(self, path=""):
        return "http://127.0.0.1:%d%s" % (self.h.api_port, path)


def iso_ms(text):
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp() * 1000


def scenario(h, shots):
    h.start_server()
    status, catalog = h.api("GET", "/api/v1/runtimes")
    h.check(status == 200, "the shipped catalog: %d" % status)
    default = [rt for rt in catalog["runtimes"] if rt.get("default")]
    h.check(len(default) == 1, "one default runtime in the shipped catalog")
    runtime = default[0]["alias"]
    status, _ = h.api("POST", "/api/v1/tenants", {"name": "acme"})
    h.check(status == 201, "tenant acme: %d" % status)
    status, made = h.api("POST", "/api/v1/tokens", {"tenant": "acme"})
    h.check(status == 201, "a token for acme: %d" % status)
    tok = made["token"]
    page = cb.Page(Site(h), h.tmp, shots, "docker")
    try:
        d = page.d
        d.get(Site(h).url("/"))
        page.sign_in(tok)
        wait(lambda: d.find_element(cb.By.ID, "agents").is_displayed(), "the agents after signing in")
        wait(lambda: page.js("return document.getElementById('create-runtime').value") == runtime,
             "the catalog's default runtime chosen in the form")
        d.find_element(cb.By.ID, "create-name").send_keys("dockie")
        page.click("#create-form button")
        wait(lambda: page.agent_row("dockie") == "running", lambda: "dockie running (it shows %r: %s)"
             % (page.agent_row("dockie"), page.text("agents-status")), BUILD_WAIT)
        status, a = h.api("GET", "/api/v1/agents/dockie?tenant=acme")
        h.check(a["runtime"] == runtime and a["state"] == "running" and h.container(a["id"]),
                "a container of runtime %s runs: %s" % (runtime, a.get("state")))
        # The countdown is there at once (sleeps_at from the start) and ticks.
        cell = "#agents-body tr[data-agent='dockie'] .sleeps"
        first = wait(lambda: (lambda t: t if t.startswith("sleeps in ") else None)(
            page.js("return document.querySelector(arguments[0]).textContent", cell)),
            "the countdown as the agent runs (the page reads the agent once its state settles)", 3)
        h.check("min" in first, "the countdown at once, in minutes: %r" % first)
        later = wait(lambda: (lambda t: t if t != first else None)(
            page.js("return document.querySelector(arguments[0]).textContent", cell)),
            lambda: "the countdown to tick from %r" % first, 5)
        h.check(later.startswith("sleeps in ") and later != first, "the countdown ticks: %r then %r" % (first, later))
        page.shot("agents")

        # The terminal.
        page.click("dockie", cb.By.LINK_TEXT)
        page.wait_text("term-status", "Connected", "the terminal to connect", 60)
        before = wait(lambda: page.js("const c = document.querySelector('#agent-actions .sleeps');"
                                      "return c && c.dataset.sleepsAt"), "the agent page's countdown")
        time.sleep(1.5)         # pacing: the command's use must be 1 s after the countdown read (checked below)
        page.type_terminal("echo hello-$((6*7))\n")
        wait(lambda: "hello-42" in page.terminal_text(), lambda: "hello-42 on the terminal's screen (it shows %r)"
             % page.terminal_text()[-400:], 30)
        page.shot("terminal")
        # The command moved the countdown on (the page reads the agents
        # every 5 s and on events).
        wait(lambda: iso_ms(page.js("return document.querySelector('#agent-actions .sleeps').dataset.sleepsAt") or before)
             > iso_ms(before) + 1000, lambda: "the countdown moved after the command (from %s)" % before, 20)

        # Files: upload by the picker, listed, downloaded byte for byte.
        page.click("#tab-files")
        page.wait_text("files-status", "entries", "the listing", 30)
        payload = bytes(range(256)) * 600 + b"docker end\n"
        src = os.path.join(h.tmp, "every-byte.bin")
        with open(src, "wb") as f:
            f.write(payload)
        d.find_element(cb.By.ID, "upload").send_keys(src)
        wait(lambda: cb.row_exists(page, "files-body", "every-byte.bin"),
             lambda: "the uploaded file listed (status %r)" % page.text("files-status"), 60)
        page.click("#files-body tr[data-name='every-byte.bin'] button[aria-label='Download every-byte.bin']")
        got = os.path.join(page.downloads, "every-byte.bin")
        wait(lambda: os.path.exists(got) and os.path.getsize(got) == len(payload), "the download on disk", 30)
        with open(got, "rb") as f:
            h.check(f.read() == payload, "the downloaded bytes are the uploaded ones")
        page.shot("files")

        # Stop: sleeping without a reload.
        page.click("#tab-terminal")
        page.record("agent-summary")
        page.click("#agent-actions button[aria-label='Stop dockie']")
        page.wait_seen("agent-summary: dockie: sleeping", "sleeping on the agent's page", 60)
        h.check(page.js("return performance.getEntriesByType('navigation').length") == 1, "no reload happened")
        page.shot("sleeping")
        page.collect_log()
        bad = page.errors()
        h.check(not bad, "errors in the browser's log: %s" % bad)
    finally:
        page.quit()
    status, _ = h.api("DELETE", "/api/v1/agents/dockie?tenant=acme&wait=1", timeout=120)
    h.check(status in (200, 202, 204), "dockie deleted: %d" % status)
    h.finish()


def main():
    if cb.webdriver is None or not cb.CHROMIUM or not cb.DRIVER:
        print("\n*** console.docker SKIPPED: needs chromium, chromium-driver and python3-selenium ***\n",
              file=sys.stderr)
        return SKIP
    if not engine_up():
        print("\n*** console.docker SKIPPED: no Docker Engine at %s ***\n" % SOCK, file=sys.stderr)
        return SKIP
    shots = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else os.path.join(tempfile.gettempdir(), "ah-console-shots")
    h = Harness("console.docker", sys.argv[1], "10.213.212.0/22", shipped_catalog=True)
    # The shipped defaults, not the harness's test image and small memory.
    for key in ("AGENTHOLD_SANDBOX_DEFAULT_IMAGE", "AGENTHOLD_SANDBOX_DEFAULT_MEMORY_MB"):
        h.env.pop(key, None)
    return h.run(lambda h: scenario(h, shots))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Fail as e:
        print("FAILED: %s" % e, file=sys.stderr)
        sys.exit(1)
