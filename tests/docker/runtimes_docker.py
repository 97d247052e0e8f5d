#!/usr/bin/python3
"""tests/docker/runtimes_docker.py: runtimes as a user gets them, with the
Docker driver, the real `agenthold serve`, the real static sandboxd and
no registry. Three scenarios, one per ctest test:

shipped  The SHIPPED catalog and configuration (no test image, no runtime
         named): `agenthold create alice` waits until the default runtime
         (debian, built here from the host's Debian mirror the first time,
         then cached) runs; as the agent (uid 10001): write and read in
         /home/agent, use /tmp, run python3 and git, see the runtime's env
         vars, read the briefing (/etc/agenthold/briefing.md, read-only,
         the same text as GET /agents/alice/briefing and `show`); `fs put`
         / `fs get` round trip; the same after stop/start and after a
         rebuild; the small busybox runtime on --runtime.
build    A base_image runtime with setup commands and pip packages from a
         local index the test serves (python3 -m http.server over a simple
         index holding a wheel made here): the agent imports the package,
         sees the setup's mark and the env var; `agenthold runtimes` says
         present; a second create reuses the image (no build).
base     A base the engine does not have and no registry serves
         (debian:12-slim, the host's release under another tag): the pull
         fails, the driver makes it with mmdebstrap from the host's mirror
         and imports it, the runtime is built on it; progress says so.
         Run on every machine (the shipped scenario meets this path only
         on a fresh one); the base and the runtime are removed after.
workbench The shipped workbench runtime (seed 004) on --runtime: its
         briefing; a PDF made with reportlab read back with pdftotext, an
         ODP made with odfpy turned into a pptx and that into a PDF by
         soffice, an xlsx from pandas converted to CSV by soffice, OCR of
         a rendered page, a matplotlib PNG (Agg), every promised library
         imported, node and npm, the tools, no C compiler, its env vars.
failed   A base_image runtime whose setup fails: tried 3 times at start,
         then "error" with the reason in `agenthold runtimes`; a create
         asks again (2 attempts, "attempt 2 of 2" in the progress), then
         the agent is in error with the build's reason, and create exits 1
         saying it.

usage: runtimes_docker.py AGENTHOLD_BINARY shipped|workbench|build|failed|base
Exits 77 without a Docker Engine. Ports from ahserver.free_port, pool
10.213.192.0/20 (workbench: 10.214.164.0/22), prefix
dockerruntimes<scenario><pid>. The shipped runtimes' images
(agenthold/rt-debian:*, agenthold/rt-workbench:*, debian:bookworm-slim,
agenthold/busybox:2) are kept between tests: built once per machine, as a
user's server keeps them; a scenario's own runtime images are removed."""
import http.server
import io
import json
import os
import socketserver
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import engine, q, package_index, Harness  # noqa: E402

SCENARIO = sys.argv[2] if len(sys.argv) > 2 else "shipped"
POOL = {"shipped": "10.213.192.0/22", "build": "10.213.196.0/22", "failed": "10.213.200.0/22",
        "base": "10.213.204.0/22", "workbench": "10.214.164.0/22"}[SCENARIO]
h = Harness("docker.runtimes" + SCENARIO, sys.argv[1], POOL, shipped_catalog=True)
# The shipped defaults, not the harness's test image and small memory.
for key in ("AGENTHOLD_SANDBOX_DEFAULT_IMAGE", "AGENTHOLD_SANDBOX_DEFAULT_MEMORY_MB"):
    h.env.pop(key, None)
BUILD_WAIT = 600                        # the first build of the debian runtime on a fresh machine


def run(*args, timeout=BUILD_WAIT + 60, stdin=None):
    """The CLI as a user types it (no --json added): (status, stdout, stderr)."""
    p = subprocess.run([h.bin] + list(args), env=h.cli_env(), cwd=h.tmp, capture_output=True,
                       text=True, timeout=timeout, input=stdin)
    return p.returncode, p.stdout, p.stderr


def as_agent(name, script, timeout=60):
    rc, out, err = run("exec", name, "--", "sh", "-c", script, timeout=timeout)
    h.check(rc == 0, "exec %r in %s: %d %s %s" % (script, name, rc, out, err))
    return out


def create(name, *extra):
    rc, out, err = run("create", name, "--json", *extra)
    h.check(rc == 0, "agenthold create %s: %d: %s" % (name, rc, err))
    return json.loads(out), err


def the_sandbox_works(name, briefing, marker):
    """Everything an agent does first, as the agent; marker: what an
    earlier pass left in the home ("" on the first pass)."""
    out = as_agent(name, "id -u; id -un; echo $HOME; pwd")
    h.check(out.split() == ["10001", "agent", "/home/agent", "/home/agent"],
            "the agent is uid 10001 in its home: %r" % out)
    out = as_agent(name, "echo hi > ~/x && cat ~/x && ls -ld /home/agent")
    h.check(out.startswith("hi\n") and " agent agent " in out, "writes and reads its home: %r" % out)
    if marker:
        h.check(as_agent(name, "cat ~/kept") == marker, "the home kept what the last pass wrote")
    out = as_agent(name, "echo t > /tmp/t.$$ && cat /tmp/t.$$ && rm /tmp/t.$$ && stat -c %a /tmp")
    h.check(out == "t\n1777\n", "/tmp is there and usable: %r" % out)
    out = as_agent(name, "python3 -c 'import sys; print(sys.version_info[0])'")
    h.check(out == "3\n", "python3 runs: %r" % out)
    out = as_agent(name, "cd ~ && rm -rf repo && git init -q repo && cd repo && git config user.email a@b && "
                         "git config user.name a && echo x > f && git add f && git commit -qm one && git log --oneline | wc -l")
    h.check(out.strip() == "1", "git works in the home: %r" % out)
    out = as_agent(name, "echo $LANG $PIP_USER $PIP_BREAK_SYSTEM_PACKAGES")
    h.check(out == "C.UTF-8 1 1\n", "the runtime's env vars: %r" % out)
    out = as_agent(name, "cat /etc/agenthold/briefing.md")
    h.check(out == briefing, "the sandbox holds the briefing: %r" % out[:200])
    out = as_agent(name, "stat -c '%U %a' /etc/agenthold/briefing.md; echo x 2>&1 > /etc/agenthold/briefing.md"
                         " || echo refused")
    h.check(out.startswith("root 444\n") and out.rstrip().endswith("refused"),
            "the briefing is read-only for the agent: %r" % out)
    # fs put / get round trip, through the tunnel.
    data = os.urandom(70000)
    local = os.path.join(h.tmp, "put.bin")
    with open(local, "wb") as f:
        f.write(data)
    rc, out, err = run("fs", "put", name, "put.bin", local, timeout=60)
    h.check(rc == 0, "fs put: %s %s" % (out, err))
    back = os.path.join(h.tmp, "got.bin")
    rc, out, err = run("fs", "get", name, "put.bin", back, timeout=60)
    h.check(rc == 0, "fs get: %s %s" % (out, err))
    with open(back, "rb") as f:
        h.check(f.read() == data, "fs get returns what fs put wrote")
    out = as_agent(name, "stat -c '%U %s' ~/put.bin")
    h.check(out == "agent 70000\n", "the put file is the agent's: %r" % out)


def shipped(h):
    h.start_server()
    t0 = time.time()
    a, err = create("alice")
    print("create alice took %.1f s; it said: %s" % (time.time() - t0, err.strip()[:600]))
    h.check(a["state"] == "running" and a["runtime"] == "debian" and
            a["image"].startswith("agenthold/rt-debian:") and a["memory_mb"] == 2048,
            "no runtime named: the shipped default runs: %r" % a)
    c = h.container(a["id"])
    h.check(c["Config"]["Image"] == a["image"] and "LANG=C.UTF-8" in c["Config"]["Env"],
            "the container runs the runtime's image with its env vars")
    st, b = h.api("GET", "/api/v1/agents/alice/briefing")
    h.check(st == 200 and b["runtime"] == "debian" and "the debian runtime" in b["text"],
            "GET /agents/alice/briefing: %d %r" % (st, b))
    briefing = b["text"]
    rc, out, _ = run("show", "alice", timeout=30)
    h.check(rc == 0 and "runtime:          debian" in out and "  # Your sandbox: the debian runtime" in out,
            "show prints the runtime and the briefing")
    the_sandbox_works("alice", briefing, "")
    as_agent("alice", "printf one > ~/kept")
    rc, out, err = run("stop", "alice", timeout=120)
    h.check(rc == 0 and "sleeping" in out, "stop: %s %s" % (out, err))
    rc, out, err = run("start", "alice", timeout=120)
    h.check(rc == 0 and "running" in out, "start: %s %s" % (out, err))
    the_sandbox_works("alice", briefing, "one")
    rc, out, err = run("rebuild", "alice", timeout=180)
    h.check(rc == 0 and "running" in out, "rebuild: %s %s" % (out, err))
    h.check(h.container(a["id"])["Id"] != c["Id"], "the rebuild made a new container")
    the_sandbox_works("alice", briefing, "one")
    # The small runtime, by name.
    s, _ = create("sam", "--runtime", "busybox")
    h.check(s["runtime"] == "busybox" and s["memory_mb"] == 256, "--runtime busybox: %r" % s)
    out = as_agent("sam", "id -u; echo hi > ~/x && cat ~/x; touch /tmp/y && echo tmp-ok; "
                          "grep -c 'the busybox runtime' /etc/agenthold/briefing.md")
    h.check(out == "10001\nhi\ntmp-ok\n1\n", "the busybox runtime works: %r" % out)
    rt = {r["alias"]: r for r in h.cli("runtimes")}
    h.check(rt["debian"]["image_state"] == "present" and rt["debian"]["default"] and
            rt["busybox"]["image_state"] == "present", "runtimes: %r" % rt)
    for name in ("alice", "sam"):
        rc, out, err = run("rm", name, timeout=120)
        h.check(rc == 0, "rm %s: %s" % (name, err))


def serve_index(root):
    """python3 -m http.server's handler over root, on the host, for the
    build container (it reaches the host at the default bridge's gateway)."""
    handler = lambda *a, **kw: http.server.SimpleHTTPRequestHandler(*a, directory=root, **kw)  # noqa: E731
    server = socketserver.ThreadingTCPServer(("0.0.0.0", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    h.cleanups.append(server.shutdown)
    _, net = engine("GET", "/networks/bridge")
    cfg = net["IPAM"]["Config"][0]
    # The engine names no gateway when it picked the default: the subnet's first host.
    gateway = cfg.get("Gateway") or cfg["Subnet"].split("/")[0].rsplit(".", 1)[0] + ".1"
    return "http://%s:%d/simple/" % (gateway, server.server_address[1]), server


def write_catalog(entries):
    path = os.path.join(h.tmp, "catalog.json")
    with open(path, "w") as f:
        json.dump({"version": 2, "runtimes": entries}, f)
    h.env["AGENTHOLD_CATALOG_PATH"] = path


def shipped_setup():
    """The shipped debian runtime's setup commands: the same first layers,
    so the classic builder's cache serves them (built once per machine)."""
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "catalog", "runtimes.json")) as f:
        return json.load(f)["runtimes"][0]["setup_commands"]


def forget_image(alias):
    """The scenario's own runtime image is removed at the end."""
    def remove():
        _, imgs = engine("GET", "/images/json?filters=" + q(json.dumps({"reference": ["agenthold/rt-%s" % alias]})))
        for img in imgs or []:
            for tag in img.get("RepoTags") or []:
                engine("DELETE", "/images/%s?force=true" % q(tag))
    h.cleanups.append(remove)


def build(h):
    root = tempfile.mkdtemp(dir=h.tmp)
    package_index(root)
    url, index = serve_index(root)
    alias = "probe%d" % os.getpid()
    write_catalog([{
        "alias": alias, "description": "Debian with a probe package from a local index.",
        "base_image": "debian:bookworm-slim",
        "setup_commands": shipped_setup() + ["echo setup-ran > /etc/probe-setup"],
        "packages": ["agenthold-probe==1.0"],
        "env_vars": {"PROBE_MODE": "on \"quoted\" $notexpanded"},
        "briefing": "The probe runtime of the build test.",
        "mem_limit": "512m", "needs_network": True}])
    forget_image(alias)
    h.env["AGENTHOLD_CATALOG_PIP_INDEX_URL"] = url
    h.start_server()
    a, err = create("pia")
    h.check(a["state"] == "running" and a["runtime"] == alias and a["memory_mb"] == 512, "create: %r" % a)
    out = as_agent("pia", "python3 -c 'import agenthold_probe; print(agenthold_probe.VALUE)'; "
                          "cat /etc/probe-setup; echo \"$PROBE_MODE\"; id -u")
    h.check(out == 'probe-ok\nsetup-ran\non "quoted" $notexpanded\n10001\n',
            "the pip package imports as the agent, the setup ran, the env var is there: %r" % out)
    rt = h.cli("runtimes")[0]
    h.check(rt["image_state"] == "present" and rt["image_error"] is None and rt["packages"] == ["agenthold-probe==1.0"],
            "runtimes: %r" % rt)
    # The index served the wheel to the build; a second create needs no build.
    b, err = create("pib")
    h.check(b["image"] == a["image"] and "Preparing" not in err, "the image is reused: %r %r" % (b, err))
    with open(h.log) as f:
        log = f.read()
    h.check(log.count("built image agenthold/rt-%s:" % alias) == 1, "one build for two agents")
    for name in ("pia", "pib"):
        run("rm", name, timeout=120)


def failed(h):
    alias = "broken%d" % os.getpid()
    write_catalog([{
        "alias": alias, "description": "A runtime whose setup fails.",
        "base_image": "debian:bookworm-slim",
        "setup_commands": ["echo about to fail; exit 3"]}])
    forget_image(alias)
    h.start_server()
    # Prewarm: 3 attempts (5 s and 10 s apart), then the error and its reason.
    deadline = time.time() + 120
    while True:
        rt = h.cli("runtimes")[0]
        if rt["image_state"] == "error" or time.time() > deadline:
            break
        time.sleep(0.5)
    h.check(rt["image_state"] == "error" and "non-zero code: 3" in (rt["image_error"] or ""),
            "prewarm ends in error with the reason: %r" % rt)
    with open(h.log) as f:
        log = f.read()
    h.check("attempt 3 of 3" in log and "attempt 4" not in log, "three attempts at start")
    rc, out, err = run("runtimes")
    h.check(rc == 0 and " error " in out and "building image 'agenthold/rt-%s:" % alias in out,
            "agenthold runtimes shows the state and the last error: %r" % out)
    # On demand: two more attempts, progress on the way, then the agent's error.
    rc, out, err = run("create", "doomed", timeout=300)
    h.check(rc == 1 and "Preparing the sandbox" in err and "attempt 1 of 2 failed" in err,
            "create says it is preparing and retrying: %r" % err)
    h.check("agenthold: doomed: preparing the sandbox: runtime %s:" % alias in err and "non-zero code: 3" in err,
            "create fails with the build's reason: %r" % err)
    a = h.cli("show", "doomed")
    h.check(a["state"] == "error" and "non-zero code: 3" in a["error"] and a["progress"] is None,
            "the agent is in error with the reason: %r" % a)
    with open(h.log) as f:
        log = f.read()
    h.check(log.count("attempt 2 of 2") >= 1, "two attempts on demand")
    # start (and rebuild) say what preparing does as create does.
    rc, out, err = run("start", "doomed", timeout=300)
    h.check(rc == 1 and "Preparing the sandbox" in err and "non-zero code: 3" in err,
            "start says it is preparing, then the build's reason: %r %r" % (out, err))
    rc, out, err = run("rm", "doomed", timeout=120)
    h.check(rc == 0, "rm: %s" % err)


def base(h):
    with open("/etc/os-release") as f:
        release = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    if release.get("ID") != "debian" or release.get("VERSION_ID", "").strip('"') != "12":
        print("*** docker.runtimes.base: the host is not Debian 12; the base it can make is another ***",
              file=sys.stderr)
        return
    tag = "debian:12-slim"
    st, _ = engine("GET", "/images/%s/json" % q(tag))
    h.check(st == 404, "the engine has no %s to begin with (remove it to run this test)" % tag)
    h.cleanups.append(lambda: engine("DELETE", "/images/%s?force=true" % q(tag)))
    alias = "base%d" % os.getpid()
    write_catalog([{
        "alias": alias, "description": "A runtime on a base made here.", "base_image": tag,
        "setup_commands": ["echo made > /etc/base-marker"]}])
    forget_image(alias)
    h.start_server()
    rc, out, err = run("create", "basil", timeout=600)
    h.check(rc == 0 and "state:            running" in out, "create on a made base: %d %s %s" % (rc, out, err))
    h.check("making debian:12-slim from the host's Debian mirror" in err, "create says the base is being made: %r" % err)
    st, img = engine("GET", "/images/%s/json" % q(tag))
    h.check(st == 200, "the base is in the engine now")
    out = as_agent("basil", "cat /etc/base-marker; . /etc/os-release; echo $VERSION_ID; id -u; ls -d ~")
    h.check(out == "made\n12\n10001\n/home/agent\n", "the runtime runs on the made base: %r" % out)
    with open(h.log) as f:
        log = f.read()
    h.check("making it from the host's Debian mirror instead" in log and "made debian:12-slim" in log,
            "the log says why and what it made")
    run("rm", "basil", timeout=120)


# What the workbench runtime promises (catalog/runtimes.json, docs/runtimes.md):
# each a real piece of work done as the agent, its result checked.
WORKBENCH_IMPORTS = ("pypdf", "docx", "openpyxl", "xlsxwriter", "odf", "reportlab", "pandas", "tabulate",
                     "matplotlib", "PIL", "httpx", "requests", "bs4", "lxml", "html2text", "yaml")
WORKBENCH_WORK = r"""
set -e
cd ~ && rm -rf wb && mkdir wb && cd wb
python3 - <<'PY'
from reportlab.lib.pagesizes import A4
from reportlab.pdfgen import canvas
c = canvas.Canvas("report.pdf", pagesize=A4)
c.drawString(72, 760, "Quarterly figures: apples 42")
c.showPage(); c.save()
from odf.opendocument import OpenDocumentPresentation
from odf.style import Style, MasterPage, PageLayout
from odf.draw import Page, Frame, TextBox
from odf.text import P
doc = OpenDocumentPresentation()
layout = PageLayout(name="L"); doc.automaticstyles.addElement(layout)
master = MasterPage(name="M", pagelayoutname=layout); doc.masterstyles.addElement(master)
page = Page(masterpagename=master); doc.presentation.addElement(page)
frame = Frame(width="20cm", height="3cm", x="2cm", y="2cm"); page.addElement(frame)
box = TextBox(); frame.addElement(box); box.addElement(P(text="Slide about pears"))
doc.save("deck.odp")
import matplotlib
import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [1, 4, 9]); plt.savefig("plot.png")
print("backend", matplotlib.get_backend())
from PIL import Image, ImageDraw, ImageFont
img = Image.new("L", (1400, 200), 255)
font = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 72)
ImageDraw.Draw(img).text((40, 50), "HELLO WORKBENCH", font=font, fill=0)
img.save("scan.png")
import pandas, tabulate
df = pandas.DataFrame({"fruit": ["apples", "pears"], "n": [42, 7]})
df.to_excel("fruit.xlsx", index=False)
print("xlsx", pandas.read_excel("fruit.xlsx")["n"].sum())
import html2text
print("md", html2text.html2text("<h1>Title</h1>").strip())
PY
echo "pdf: $(pdftotext report.pdf - | tr -s ' \n' ' ')"
pdfinfo report.pdf | grep -c '^Pages: *1$'
soffice --headless --convert-to pptx deck.odp > /dev/null 2>&1
soffice --headless --convert-to pdf deck.pptx > /dev/null 2>&1
echo "pptx: $(unzip -l deck.pptx | grep -c 'ppt/slides/slide1.xml') $(pdftotext deck.pdf - | tr -s ' \n' ' ')"
soffice --headless --convert-to csv fruit.xlsx > /dev/null 2>&1
echo "csv: $(tr -d '\r' < fruit.csv | tr '\n' ' ')"
echo "ocr: $(tesseract scan.png - 2>/dev/null | tr -s ' \n' ' ')"
echo "png: $(head -c 8 plot.png | od -An -tx1 | tr -d ' \n')"
echo "node: $(node -e 'console.log(6*7)') npm $(npm --version | cut -d. -f1)"
echo "tools: $(for t in git curl rg fd fdfind jq less ps zip unzip pdftotext tesseract soffice; do command -v $t > /dev/null || echo missing-$t; done)"
echo "cc: $(for c in cc gcc c++ g++ clang tcc; do command -v $c; done)"
echo "env: $MPLBACKEND $PYTHONUTF8 $PYTHONUNBUFFERED $PYTHONDONTWRITEBYTECODE"
ls /usr/share/zoneinfo/Europe/Paris > /dev/null && echo tz-ok
"""


def workbench(h):
    """The shipped workbench runtime (seed 004), built by the product from
    the host's Debian mirror (docker.shipped_images made it first)."""
    h.start_server()
    t0 = time.time()
    a, err = create("wendy", "--runtime", "workbench")
    print("create wendy took %.1f s" % (time.time() - t0))
    h.check(a["state"] == "running" and a["runtime"] == "workbench" and
            a["image"].startswith("agenthold/rt-workbench:") and a["memory_mb"] == 4096,
            "--runtime workbench: %r" % a)
    st, b = h.api("GET", "/api/v1/agents/wendy/briefing")
    h.check(st == 200 and "the workbench runtime" in b["text"], "the workbench's briefing: %d %r" % (st, b))
    for said in ("soffice --headless --convert-to", "No C compiler", "tesseract", "POSIX `/bin/sh`",
                 "odfpy", "html2text"):
        h.check(said in b["text"], "the briefing says %r: %s" % (said, b["text"]))
    the_sandbox_works("wendy", b["text"], "")
    out = as_agent("wendy", "python3 -c 'import %s; print(\"imported\")'" % ", ".join(WORKBENCH_IMPORTS))
    h.check(out == "imported\n", "every promised Python library imports: %r" % out)
    out = as_agent("wendy", WORKBENCH_WORK, timeout=280)
    lines = dict(x.split(": ", 1) if ": " in x else (x.split(" ", 1) + [""])[:2] for x in out.splitlines())
    print(out)
    h.check(lines.get("backend") == "agg", "matplotlib draws with Agg: %r" % out)
    h.check(lines.get("xlsx") == "49", "pandas wrote and read an xlsx: %r" % out)
    h.check(lines.get("md") == "# Title", "html2text made Markdown: %r" % out)
    h.check("Quarterly figures: apples 42" in lines.get("pdf", ""), "pdftotext reads reportlab's PDF: %r" % out)
    h.check(lines.get("1") is not None or "\n1\n" in "\n" + out, "pdfinfo: one page: %r" % out)
    h.check(lines.get("pptx", "").startswith("1 ") and "Slide about pears" in lines.get("pptx", ""),
            "soffice made a pptx and converted it to a PDF that says the slide: %r" % out)
    h.check(lines.get("csv", "").split() == ["fruit,n", "apples,42", "pears,7"], "soffice converted the xlsx: %r" % out)
    h.check("HELLO WORKBENCH" in lines.get("ocr", ""), "tesseract read the rendered page: %r" % out)
    h.check(lines.get("png") == "89504e470d0a1a0a", "matplotlib wrote a PNG: %r" % out)
    h.check(lines.get("node", "").startswith("42 npm "), "node and npm run: %r" % out)
    h.check(lines.get("tools", "x").strip() == "", "every promised tool is there: %r" % out)
    h.check(lines.get("cc", "x").strip() == "", "no C compiler: %r" % out)
    h.check(lines.get("env") == "Agg 1 1 1", "the workbench's environment: %r" % out)
    h.check("tz-ok" in out, "tzdata is there")
    rt = {r["alias"]: r for r in h.cli("runtimes")}
    h.check(rt["workbench"]["image_state"] == "present" and not rt["workbench"]["default"] and
            rt["debian"]["default"], "runtimes: debian stays the default, workbench present: %r" % rt)
    run("rm", "wendy", timeout=120)


sys.exit(h.run({"workbench": workbench, "shipped": shipped, "build": build, "failed": failed, "base": base}[SCENARIO]))
