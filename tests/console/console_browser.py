#!/usr/bin/python3
"""tests/console/console_browser.py: the web console in a real browser
(headless Chromium driven by Selenium, Debian's chromium, chromium-driver
and python3-selenium) against the real `agenthold serve` (fake driver,
ports from ahserver.free_port).

- a wrong token is refused with a visible message;
- a tenant's person signs in and sees their tenant's agents only (another
  tenant's agent is absent), creates an agent with the form and sees it
  reach running without a reload (the event stream);
- the terminal: `echo hello-$((6*7))` typed, hello-42 read from the screen;
  a terminal that lasts (issue 29): the URL names it, and after a browser
  reload the page reattaches to it and draws its screen (hello-42 again,
  typed nothing); `top` survives a reload (its screen drawn again, still
  updating) and q ends it; the API lists one console terminal;
  the window made narrower and the shell told the new width (stty size);
- files: a file of every byte value uploaded with the picker and listed,
  downloaded by the page and compared byte for byte; a folder made and
  deleted (with its confirmation);
- stop from the agent's page: sleeping shows without a reload; opening the
  terminal wakes it and the page says so; the echo works again;
- the session: an HttpOnly, SameSite=Strict cookie no script reads; a
  reload stays signed in; the token was in no URL or storage;
- sign-out: the page is cleared and shows the sign-in again, and the old
  cookie replayed to the API is refused; the second tenant's person sees
  only their own agent;
- the page at 400 px wide; a screenshot of each page is saved (the second
  argument, a folder); the browser's log holds no error from the console
  (the one expected 401 of the wrong token aside).

usage: console_browser.py AGENTHOLD_BINARY SCREENSHOT_DIR
Exits 77 (ctest: skipped) with a loud line when the browser is missing."""
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from consolelib import Fail, Server, check, checks, wait  # noqa: E402

CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None)
try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.common.exceptions import StaleElementReferenceException
except ImportError:
    webdriver = None

class Page:
    """One browser with its own profile and download folder."""

    def __init__(self, srv, tmp, shots, name):
        self.srv = srv
        self.shots = shots
        self.name = name
        self.downloads = os.path.join(tmp, "downloads-" + name)
        os.makedirs(self.downloads)
        opts = webdriver.ChromeOptions()
        for arg in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--no-first-run", "--disable-dev-shm-usage", "--window-size=1280,800",
                    "--user-data-dir=" + os.path.join(tmp, "profile-" + name)]:
            opts.add_argument(arg)
        opts.binary_location = CHROMIUM
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.d = webdriver.Chrome(service=Service(DRIVER), options=opts)
        self.d.set_script_timeout(30)
        self.d.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": self.downloads})
        self.log = []

    def quit(self):
        try:
            self.d.quit()
        except Exception:
            pass

    def js(self, script, *args):
        return self.d.execute_script(script, *args)

    def text(self, element_id):
        return self.js("const e = document.getElementById(arguments[0]); return e ? e.textContent : null;", element_id)

    def wait_text(self, element_id, needle, what, seconds=20):
        return wait(lambda: needle in (self.text(element_id) or ""), lambda: "%s (#%s to show %r, it shows %r)"
                    % (what, element_id, needle, (self.text(element_id) or "")[-300:]), seconds)

    def record(self, *ids):
        """From now on, every text the elements show is kept (seen())."""
        self.js("""window.__seen = window.__seen || [];
                   for (const id of arguments[0]) {
                     const e = document.getElementById(id);
                     new MutationObserver(() => window.__seen.push(id + ': ' + e.textContent))
                       .observe(e, { childList: true, characterData: true, subtree: true });
                   }""", list(ids))

    def seen(self):
        return self.js("return window.__seen || []")

    def wait_seen(self, needle, what, seconds=20):
        return wait(lambda: any(needle in t for t in self.seen()),
                    lambda: "%s (%r among %r)" % (what, needle, self.seen()[-8:]), seconds)

    def shot(self, label):
        os.makedirs(self.shots, exist_ok=True)
        self.d.save_screenshot(os.path.join(self.shots, "%s-%s.png" % (self.name, label)))

    def click(self, css, by=None):
        """Click what css names; the page redraws tables live (the event
        stream), so an element gone stale between finding and clicking is
        found again."""
        for attempt in range(5):
            try:
                self.d.find_element(by or By.CSS_SELECTOR, css).click()
                return
            except StaleElementReferenceException:
                if attempt == 4:
                    raise
                time.sleep(0.2)

    def collect_log(self):
        self.log += self.d.get_log("browser")

    def errors(self):
        """The SEVERE lines of the browser's log but Chromium's own
        ERR_NETWORK_CHANGED: Chromium aborts what is in flight when any
        interface of the host changes address, as the Docker Engine's
        bridges and veths do whenever another test (or the firewall probe)
        makes a network. The request is the browser's casualty, not the
        console's error; the console's next read (every 5 s, on events)
        recovers, which the tests go on to see."""
        return [e for e in self.log if e["level"] == "SEVERE" and "net::ERR_NETWORK_CHANGED" not in e["message"]]

    def sign_in(self, tok):
        field = self.d.find_element(By.ID, "token")
        field.clear()
        field.send_keys(tok)
        self.click("#signin-form button")

    def agent_row(self, name):
        return self.js("const r = document.querySelector(`#agents-body tr[data-agent='${arguments[0]}']`);"
                       "return r ? r.querySelector('.state').textContent : null;", name)

    def confirm(self):
        wait(lambda: self.js("return document.getElementById('confirm').open"), "the confirmation dialog")
        self.click("#confirm-yes")

    def fits(self, width, what):
        """At width px wide, nothing sticks out sideways."""
        self.d.set_window_size(width, 800)
        wait(lambda: self.js("return window.innerWidth") <= width, "the window %d px wide" % width)
        overflow = self.js("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        check(overflow <= 0, "%s: nothing wider than %d px (overflow %d px)" % (what, width, overflow))

    def labelled(self, what):
        """Every control shown has a name a screen reader reads (its text,
        a label, aria-label or aria-labelledby) and can take the focus."""
        missing = self.js("""
            const named = (e) => (e.getAttribute('aria-label') || '').trim() || (e.labels && e.labels.length)
              || (e.getAttribute('aria-labelledby') && document.getElementById(e.getAttribute('aria-labelledby')))
              || (e.textContent || '').trim() || (e.getAttribute('title') || '').trim();
            return [...document.querySelectorAll('button, input, select, a[href], [role=tab], textarea')]
              .filter((e) => e.offsetParent !== null || e.classList.contains('visually-hidden'))
              .filter((e) => !named(e) || e.tabIndex < 0)
              .map((e) => e.outerHTML.slice(0, 120));""")
        check(not missing, "%s: controls without a name a screen reader reads, or out of the Tab order: %s"
              % (what, missing))

    def both_sizes(self, label, what):
        """A screenshot at 1280x800, then the page at 400 px wide (checked
        and shot), then back; its controls labelled."""
        self.labelled(what)
        self.shot(label)
        self.fits(400, what)
        self.shot(label + "-400px")
        self.fits(1280, what)

    def tab_to(self, element_id, most=60):
        """Tab from the top of the page until element_id has the focus
        (keyboard only); then Enter on it."""
        self.js("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0);")
        body = self.d.find_element(By.TAG_NAME, "body")
        for _ in range(most):
            body = self.d.switch_to.active_element
            body.send_keys(Keys.TAB)
            if self.js("return document.activeElement && document.activeElement.id") == element_id:
                self.d.switch_to.active_element.send_keys(Keys.ENTER)
                return
        raise Fail("#%s is not reachable with the Tab key" % element_id)

    def terminal_text(self):
        return self.text("term") or ""

    def type_terminal(self, keys):
        term = self.d.find_element(By.ID, "term")
        term.click()
        term.send_keys(keys)


def tiny_png():
    """A valid 2x2 PNG, made here."""
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
    raw = b"".join(b"\x00" + b"\xff\x00\x00" * 2 for _ in range(2))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def row_exists(page, table, name):
    return page.js("return !!document.querySelector(`#${arguments[0]} tr[data-name='${arguments[1]}']`)", table, name)


def files_tree(srv, page, tok):
    """The file browser on the tree: toolchain folders behind a switch,
    uploads marked, the tree's limits said, at most 24 previews."""
    d = page.d
    fixture = ("mkdir -p .venv/lib uploads deep/1/2/3/4/5/6/7 deep/1/2/3/4/5/many pics && echo x > .venv/lib/x.py"
               " && echo hi > uploads/from-person.txt && echo deep > deep/1/2/3/4/5/6/7/bottom.txt"
               " && for i in $(seq -w 1 30); do printf 'note %s\\nline two\\n' $i > note-$i.txt; done"
               " && cd deep/1/2/3/4/5/many && seq 1 2100 | xargs touch")
    status, out = srv.call("POST", "/api/v1/agents/webby/exec", tok, {"cmd": fixture})
    check(status == 200 and out["status"] == 0, "the fixture: %s" % out)
    status, _ = srv.call("PUT", "/api/v1/agents/webby/files/pics/pic.png", tok, tiny_png())
    check(status in (200, 201), "pics/pic.png uploaded: %d" % status)
    page.click("#tab-files")
    page.wait_text("files-status", "entries", "the listing from the tree")
    wait(lambda: row_exists(page, "files-body", "note-01.txt"), "note-01.txt listed")
    status_text = page.text("files-status")
    check(not row_exists(page, "files-body", ".venv") and "toolchain folders" in status_text,
          "the toolchain folder hidden, and the page says so: %r" % status_text)
    check("levels down were not opened" in status_text, "the tree's depth limit said: %r" % status_text)
    deep = page.js("return document.querySelector(\"#files-body tr[data-name='deep']\").children[1].textContent")
    check("inside" in deep, "a folder says what it holds: %r" % deep)
    check("uploaded by a person" in page.js("return document.querySelector(\"#files-body tr[data-name='uploads']\").textContent"),
          "uploads/ marked")
    # At most 24 previews, text files' first lines.
    wait(lambda: page.js("return document.querySelectorAll('#previews figure').length") == 24,
         lambda: "24 previews (there are %s)" % page.js("return document.querySelectorAll('#previews figure').length"), 30)
    first = page.js("return document.querySelector(\"#previews figure[data-name='note-01.txt'] pre\").textContent")
    check(first == "note 01\nline two\n" or first.startswith("note 01\nline two"), "a text preview's first lines: %r" % first)
    page.wait_text("previews", "first 24 files", "the page saying previews stop at 24")
    page.shot("files-tree")
    # The switch shows the toolchain folders.
    page.click("#show-toolchain")
    wait(lambda: row_exists(page, "files-body", ".venv"), "the toolchain folder with the switch on")
    page.click("#show-toolchain")
    wait(lambda: not row_exists(page, "files-body", ".venv"), "hidden again with the switch off")
    # An image's preview, inside a folder.
    page.click("#files-body tr[data-name='pics'] button")
    wait(lambda: page.js("const i = document.querySelector(\"#previews figure[data-name='pic.png'] img\");"
                         "return i && i.complete && i.naturalWidth === 2"), "the image previewed")
    check(page.js("return document.querySelector('#previews img').alt") == "preview of pic.png", "the image has its alt text")
    page.click("#crumbs button")
    wait(lambda: row_exists(page, "files-body", "uploads"), "back home by the breadcrumb")
    page.click("#files-body tr[data-name='uploads'] button")
    wait(lambda: row_exists(page, "files-body", "from-person.txt"), "inside uploads/")
    check("uploaded by a person" in page.text("files-body"), "a file under uploads/ marked")
    page.click("#crumbs button")
    wait(lambda: row_exists(page, "files-body", "note-01.txt"), "home again")
    # A folder of 2,100 files, seven levels down: the tree's entries limit
    # and the page's own 500 rows, both said.
    for name in ("deep", "1", "2", "3", "4", "5", "many"):
        wait(lambda: row_exists(page, "files-body", name), "folder %s listed" % name)
        page.click("#files-body tr[data-name='%s'] button" % name)
    page.wait_text("files-status", "stopped at 2000 entries", "the tree's entries limit said")
    check("only the first 500 shown" in page.text("files-status"), "the page's row limit said: %r" % page.text("files-status"))
    check(page.js("return document.querySelectorAll('#files-body tr').length") == 500, "500 rows")
    check(page.text("crumbs").replace(" ", "") == "home/deep/1/2/3/4/5/many", "the breadcrumbs: %r" % page.text("crumbs"))
    page.click("#crumbs button")
    wait(lambda: row_exists(page, "files-body", "note-01.txt"), "home again")
    page.both_sizes("files-tree", "the files with previews")


def audit_filters(srv, page, tok):
    """The agent's audit trail through the operations API's filters."""
    status, out = srv.call("POST", "/api/v1/agents/webby/exec", tok, {"cmd": "echo failing; exit 3"})
    check(status == 200 and out["status"] == 3, "a failing exec: %s" % out)
    status, out = srv.call("POST", "/api/v1/agents/webby/exec", tok, {"cmd": "true"},
                           {"X-Agenthold-Run": "console-run-7"})
    check(status == 200, "an exec within a run: %d" % status)
    page.click("#tab-log")
    page.wait_text("audit-status", "operations", "the audit trail")

    def kinds():
        return page.js("return [...document.querySelectorAll('#audit li')].map(l => l.dataset.kind)")

    from selenium.webdriver.support.ui import Select
    Select(page.d.find_element(By.ID, "audit-kind")).select_by_value("fs.write")
    page.click("#audit-form button[type=submit]")
    wait(lambda: kinds() and set(kinds()) == {"fs.write"}, lambda: "only fs.write rows (%s)" % kinds())
    Select(page.d.find_element(By.ID, "audit-kind")).select_by_value("")
    page.click("#audit-failed")
    page.click("#audit-form button[type=submit]")
    wait(lambda: kinds() and page.js("return [...document.querySelectorAll('#audit li')].every(l => l.className === 'error')"),
         "only failures")
    check("exit 3" in page.text("audit"), "the failing exec among the failures: %r" % page.text("audit")[:300])
    page.click("#audit-failed")
    page.d.find_element(By.ID, "audit-run").send_keys("console-run-7")
    page.click("#audit-form button[type=submit]")
    wait(lambda: page.js("return document.querySelectorAll('#audit li').length") == 1
         and "console-run-7" in page.text("audit"), lambda: "the run's one operation (%r)" % page.text("audit")[:300])
    page.d.find_element(By.ID, "audit-run").clear()
    page.d.find_element(By.ID, "audit-q").send_keys("xargs touch")
    page.click("#audit-form button[type=submit]")
    wait(lambda: kinds() == ["exec"] and "xargs touch" in page.text("audit"), "the text filter finds the fixture's exec")
    page.d.find_element(By.ID, "audit-q").clear()
    page.click("#audit-form button[type=submit]")
    page.wait_text("audit-status", "operations", "the whole trail again")
    page.labelled("the activity tab")
    page.shot("activity")


def admin_pages(srv, admin):
    d = admin.d
    d.get(srv.url("/"))
    admin.sign_in(srv.admin)
    wait(lambda: d.find_element(By.ID, "agents").is_displayed(), "the admin's agents")
    admin.tab_to("nav-admin")
    wait(lambda: admin.js("return !!document.querySelector(\"#tenants-body tr[data-tenant='acme']\")"),
         "the tenants on the admin page")
    # A tenant made with the form.
    d.find_element(By.ID, "tenant-name").send_keys("globex")
    d.find_element(By.ID, "tenant-max-running").send_keys("2")
    admin.click("#tenant-form button")
    wait(lambda: admin.js("return !!document.querySelector(\"#tenants-body tr[data-tenant='globex']\")"),
         "the new tenant listed")
    status, t = srv.call("GET", "/api/v1/tenants/globex", srv.admin)
    check(status == 200 and t["max_running"] == 2, "the tenant as the API has it: %s" % t)
    # A token for it, shown once.
    wait(lambda: admin.js("return [...document.getElementById('token-tenant').options].some(o => o.value === 'globex')"),
         "globex among the token form's tenants")
    from selenium.webdriver.support.ui import Select
    Select(d.find_element(By.ID, "token-tenant")).select_by_value("globex")
    d.find_element(By.ID, "token-name").send_keys("globex-ci")
    d.find_element(By.ID, "token-user").send_keys("ci@globex.example")
    admin.click("#token-form button")
    wait(lambda: d.find_element(By.ID, "new-token").is_displayed(), "the new token shown")
    made = admin.js("return document.getElementById('new-token-value').value")
    check(len(made) == 64 and admin.js("return document.activeElement.id") == "new-token-value",
          "the new token shown once, focused to copy")
    status, me = srv.call("GET", "/api/v1/me", made)
    check(status == 200 and me["tenant"] == "globex" and me["user"] == "ci@globex.example",
          "the shown token acts for globex: %s" % me)
    wait(lambda: admin.js("return !!document.querySelector(\"#tokens-body tr[data-token='globex-ci'][data-state='active']\")"),
         "the new token listed as active")
    check(made not in admin.text("tokens-body"), "the token's value is not in the list")
    admin.shot("admin-new-token")
    admin.click("#new-token-done")
    check(not d.find_element(By.ID, "new-token").is_displayed()
          and admin.js("return document.getElementById('new-token-value').value") == "" and made not in d.page_source,
          "Done hides the token and the page holds it no more")
    # Revoked with its confirmation: the API refuses it from then on.
    admin.click("#tokens-body tr[data-token='globex-ci'] button[aria-label='Revoke token globex-ci']")
    admin.confirm()
    wait(lambda: admin.js("return !!document.querySelector(\"#tokens-body tr[data-token='globex-ci'][data-state='revoked']\")"),
         "the token shown revoked")
    status, _ = srv.call("GET", "/api/v1/me", made)
    check(status == 401, "the revoked token is refused: %d" % status)
    check(admin.js("return !document.querySelector(\"#tokens-body tr[data-token='admin'] button\")"),
          "the session's own token offers no revoke")
    admin.both_sizes("admin", "the admin page")
    # The tenant deleted with its confirmation.
    admin.click("#tenants-body tr[data-tenant='globex'] button[aria-label='Delete tenant globex']")
    admin.confirm()
    wait(lambda: admin.js("return !document.querySelector(\"#tenants-body tr[data-tenant='globex']\")"),
         "the tenant gone from the page")
    status, _ = srv.call("GET", "/api/v1/tenants/globex", srv.admin)
    check(status == 404, "the tenant gone from the API: %d" % status)
    admin.collect_log()


def run_browser(srv, tmp, shots):
    acme_tok = srv.tenant_token("acme")
    other_tok = srv.tenant_token("other")
    theirs = srv.agent("secret-plans", other_tok)

    page = Page(srv, tmp, shots, "acme")
    pages = [page]
    try:
        d = page.d
        d.get(srv.url("/"))
        page.shot("signin")

        # A wrong token: refused, and the page says so.
        page.sign_in("0" * 64)
        page.wait_text("signin-error", "Sign-in refused", "the wrong token's refusal")
        check("wrong token" in page.text("signin-error"), "the refusal says why: %r" % page.text("signin-error"))
        check(d.find_element(By.ID, "signin-error").is_displayed(), "the refusal is visible")
        check(not d.find_element(By.ID, "agents").is_displayed(), "no agents shown to a wrong token")
        page.shot("signin-refused")
        page.collect_log()
        expected_401 = len(page.log)

        # The tenant's person: their agents only.
        page.sign_in(acme_tok)
        wait(lambda: d.find_element(By.ID, "agents").is_displayed(), "the agents after signing in")
        page.wait_text("who", "tenant acme", "the header naming the tenant")
        d.find_element(By.ID, "create-name").send_keys("webby")
        page.click("#create-form button")
        wait(lambda: page.agent_row("webby") == "running", lambda: "the new agent to show running (it shows %r)"
             % page.agent_row("webby"), 30)
        status, created = srv.call("GET", "/api/v1/agents/webby", acme_tok)
        check(created["runtime"] and created["runtime"] in page.text("agents-body"),
              "created on the catalog's default runtime, shown: %s" % created["runtime"])
        check(page.agent_row("secret-plans") is None, "another tenant's agent is absent")
        page.labelled("the agents page")
        check(theirs["name"] not in page.text("agents-body") and theirs["id"] not in d.page_source,
              "no trace of another tenant's agent on the page")
        page.shot("agents")

        # The runtimes page, reached with the keyboard: the catalog as the
        # API has it, each image's state (unknown on the fake driver).
        page.tab_to("nav-runtimes")
        wait(lambda: d.find_element(By.ID, "runtimes").is_displayed(), "the runtimes page")
        status, catalog = srv.call("GET", "/api/v1/runtimes", acme_tok)
        check(status == 200 and catalog["runtimes"], "the API's catalog")
        for rt in catalog["runtimes"]:
            name = rt.get("alias") or rt.get("name")
            shown = wait(lambda: page.js("const r = document.querySelector(`#runtimes-body tr[data-runtime='${arguments[0]}']`);"
                                         "return r ? r.textContent : null;", name), "runtime %s listed" % name)
            check((rt["image_state"] or "unknown") in shown and (rt.get("description") or "")[:30] in shown,
                  "runtime %s with its state and description: %r" % (name, shown))
        check(page.js("return document.getElementById('nav-runtimes').getAttribute('aria-current')") == "page",
              "the nav says which page is shown")
        page.both_sizes("runtimes", "the runtimes page")

        # All files (seed 004): the tenant's files, grouped by agent, with
        # the access label; another tenant's absent; the search filters.
        status, out = srv.call("POST", "/api/v1/agents/webby/exec", acme_tok,
                               {"cmd": "mkdir -p uploads && echo q1 > report-all.txt && echo up > uploads/in.csv"})
        check(status == 200 and out["status"] == 0, "files made in webby: %r" % out)
        page.tab_to("nav-files")
        wait(lambda: d.find_element(By.ID, "allfiles").is_displayed(), "the all-files page")
        group = lambda: page.js("const g = document.querySelector(`#allfiles-groups section[data-agent='webby']`);"
                                "return g ? g.textContent : null;")
        shown = wait(lambda: (group() or "") if "report-all.txt" in (group() or "") else None,
                     "webby's files on the all-files page")
        check("uploads/in.csv" in shown and "direct" in shown and "uploaded by a person" in shown,
              "the group names its files, access label and uploads: %r" % shown)
        check("secret-plans" not in page.text("allfiles-groups"), "no group of another tenant")
        d.find_element(By.ID, "allfiles-uploads").click()
        wait(lambda: "report-all.txt" not in (group() or "report-all.txt") and "uploads/in.csv" in (group() or ""),
             "uploads only")
        d.find_element(By.ID, "allfiles-uploads").click()
        d.find_element(By.ID, "allfiles-q").send_keys("REPORT")
        page.click("#allfiles-form button")
        wait(lambda: "report-all.txt" in (group() or "") and "in.csv" not in (group() or ""), "the name search")
        page.labelled("the all-files page")
        page.both_sizes("allfiles", "the all-files page")
        page.tab_to("nav-agents")
        wait(lambda: page.agent_row("webby") == "running", "back to the agents with the keyboard")

        # The terminal.
        page.click("webby", By.LINK_TEXT)
        page.wait_text("term-status", "Connected", "the terminal to connect")
        page.type_terminal("echo hello-$((6*7))\n")
        wait(lambda: "hello-42" in page.terminal_text(), lambda: "hello-42 on the terminal's screen (it shows %r)"
             % page.terminal_text()[-400:])
        page.shot("terminal")
        # A terminal that lasts: the URL names it; a reload reattaches and
        # draws its screen, then top survives a reload too.
        wait(lambda: "/terminal/t" in d.current_url, "the terminal's id in the URL")
        tid = d.current_url.rsplit("/", 1)[1]
        d.refresh()
        page.wait_text("term-status", "Connected", "the terminal after a reload")
        wait(lambda: "hello-42" in page.terminal_text(), lambda: "the screen drawn again after a reload (%r)"
             % page.terminal_text()[-300:])
        check(d.current_url.endswith(tid), "the same terminal after the reload: %s" % d.current_url)
        page.type_terminal("top -d 1\n")
        wait(lambda: "load average" in page.terminal_text(), "top on the screen")
        d.refresh()
        page.wait_text("term-status", "Connected", "the terminal after the second reload")
        wait(lambda: "load average" in page.terminal_text(), lambda: "top drawn again after a reload (%r)"
             % page.terminal_text()[-300:])
        first = page.terminal_text()
        wait(lambda: page.terminal_text() != first, "top still updating after the reload", 10)
        page.type_terminal("q")
        page.type_terminal("echo after-top-$((2*3))\n")
        wait(lambda: "after-top-6" in page.terminal_text(), lambda: "q ended top, the shell answers (%r)"
             % page.terminal_text()[-300:])
        status, terms = srv.call("GET", "/api/v1/agents/webby/terminals", acme_tok)
        check(status == 200 and [t["id"] for t in terms["terminals"] if t["title"] == "console"] == [tid],
              "the API lists the one console terminal: %r" % terms)
        cols_before = page.js("return document.getElementById('term').textContent.length")
        d.set_window_size(700, 800)
        wait(lambda: page.js("return window.innerWidth") <= 700, "the window 700 px wide")
        time.sleep(0.6)         # pacing: the page tells no one when the terminal sent its new size
        page.type_terminal("echo size-$(stty size | tr ' ' x)\n")
        size = wait(lambda: [w for w in page.terminal_text().split() if w.startswith("size-") and "x" in w
                             and "$" not in w], "stty size after the resize")
        cols = int(size[-1].split("x")[1])
        check(20 <= cols < 80, "the shell learned the narrower width: %s" % size[-1])
        check(cols_before > 0, "the terminal drew")
        d.set_window_size(1280, 800)

        # Files: upload by the picker, listed, downloaded byte for byte.
        page.click("#tab-files")
        page.wait_text("files-status", "entries", "the listing")
        payload = bytes(range(256)) * 1200 + b"the end\n"
        src = os.path.join(tmp, "every-byte.bin")
        with open(src, "wb") as f:
            f.write(payload)
        d.find_element(By.ID, "upload").send_keys(src)
        wait(lambda: page.js("return !!document.querySelector(\"#files-body tr[data-name='every-byte.bin']\")"),
             lambda: "the uploaded file in the listing (status %r)" % page.text("files-status"), 30)
        page.shot("files")
        page.click("#files-body tr[data-name='every-byte.bin'] button[aria-label='Download every-byte.bin']")
        got = os.path.join(page.downloads, "every-byte.bin")
        wait(lambda: os.path.exists(got) and os.path.getsize(got) == len(payload), "the download on disk", 30)
        with open(got, "rb") as f:
            check(f.read() == payload, "the downloaded bytes are the uploaded ones")

        # A folder made, then deleted with its confirmation.
        d.find_element(By.ID, "mkdir-name").send_keys("notes")
        page.click("#mkdir")
        wait(lambda: page.js("return !!document.querySelector(\"#files-body tr[data-name='notes'][data-type='dir']\")"),
             "the new folder listed")
        page.click("#files-body tr[data-name='notes'] button[aria-label='Delete notes']")
        page.confirm()
        wait(lambda: page.js("return !document.querySelector(\"#files-body tr[data-name='notes']\")"),
             "the folder gone from the listing")
        status, listing = srv.call("GET", "/api/v1/agents/webby/files?path=.", acme_tok)
        names = [e["name"] for e in listing["entries"]]
        check("every-byte.bin" in names and "notes" not in names, "the home as the API sees it: %s" % names)

        # The briefing of its runtime, as the API has it.
        page.click("#tab-briefing")
        status, briefing = srv.call("GET", "/api/v1/agents/webby/briefing", acme_tok)
        check(status == 200 and briefing["text"], "the API's briefing: %d %s" % (status, briefing))
        wait(lambda: page.text("briefing") == briefing["text"], lambda: "the briefing on the page (%r)"
             % page.text("briefing-status"))
        check(briefing["runtime"] in page.text("briefing-status"), "the runtime named")
        page.shot("briefing")

        files_tree(srv, page, acme_tok)
        audit_filters(srv, page, acme_tok)

        # Stop: sleeping shows without a reload; the terminal wakes it.
        page.click("#tab-terminal")
        page.record("agent-summary", "term-status")
        page.click("#agent-actions button[aria-label='Stop webby']")
        page.wait_seen("agent-summary: webby: sleeping", "sleeping on the agent's page", 30)
        check(page.js("return performance.getEntriesByType('navigation').length") == 1, "no reload happened")
        wait(lambda: d.find_element(By.ID, "term-reconnect").is_displayed(), "the reconnect button")
        page.shot("sleeping")
        page.click("#term-reconnect")
        page.wait_seen("waking it", "the page saying the agent is being woken", 10)
        page.wait_text("term-status", "Connected", "the terminal after the wake", 60)
        page.type_terminal("echo again-$((6*7))\n")
        wait(lambda: "again-42" in page.terminal_text(), "again-42 after the wake", 30)
        status, a = srv.call("GET", "/api/v1/agents/webby", acme_tok)
        check(a["state"] == "running", "the agent runs again: %s" % a["state"])

        # The session is a cookie the page's scripts cannot read: a reload
        # stays signed in, with no token asked for.
        cookies = d.get_cookies()
        session = [c for c in cookies if c["name"] == "agenthold_session"]
        check(len(session) == 1 and session[0]["httpOnly"] and session[0].get("sameSite") == "Strict"
              and session[0]["value"] != acme_tok, "one HttpOnly, SameSite=Strict session cookie: %s"
              % [{k: v for k, v in c.items() if k != "value"} for c in cookies])
        check(page.js("return document.cookie") == "", "the page's scripts see no cookie")
        page.collect_log()
        d.refresh()
        wait(lambda: d.find_element(By.ID, "agent").is_displayed(), "the agent's page the URL names after a reload")
        check(not d.find_element(By.ID, "signin").is_displayed(), "a reload keeps the session")

        # The page at 400 px wide.
        page.js("location.hash = '#/'")
        wait(lambda: page.agent_row("webby") == "running", "the agents again")
        d.set_window_size(400, 800)
        wait(lambda: page.js("return window.innerWidth") <= 400, "the window 400 px wide")
        overflow = page.js("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        check(overflow <= 0, "nothing wider than 400 px (overflow %d px)" % overflow)
        page.shot("agents-400px")
        d.set_window_size(1280, 800)

        # The token was never in a URL, a cookie or the browser's storage.
        urls = page.js("return performance.getEntriesByType('resource').map(e => e.name)"
                       ".concat([location.href])")
        check(all(acme_tok not in u for u in urls), "the token in no URL the page used")
        check(page.js("return document.cookie") == "", "no cookie a script can read")
        check(page.js("return localStorage.length + sessionStorage.length") == 0, "nothing in storage")

        # Sign-out: the page forgets it.
        page.click("#signout")
        wait(lambda: d.find_element(By.ID, "signin").is_displayed(), "the sign-in after signing out")
        check(not d.find_element(By.ID, "agents").is_displayed() and page.text("agents-body") == "",
              "the agents are gone from the page")
        # The server ended the session: the old cookie, replayed, is refused.
        status, answer = srv.call("GET", "/api/v1/agents", None, None,
                                  {"Cookie": "agenthold_session=" + session[0]["value"]})
        check(status == 401, "the signed-out cookie replayed: 401, got %d %s" % (status, answer))
        d.refresh()
        wait(lambda: d.find_element(By.ID, "signin").is_displayed(), "the sign-in after a reload, signed out")
        page.collect_log()

        # The other tenant's person: their agent only.
        other = Page(srv, tmp, shots, "other")
        pages.append(other)
        other.d.get(srv.url("/"))
        other.sign_in(other_tok)
        wait(lambda: other.agent_row("secret-plans") == "running", "the other tenant's own agent")
        check(other.agent_row("webby") is None, "the first tenant's agent is absent for the other")
        other.shot("agents")
        other.collect_log()

        # A tenant's person has no admin page.
        check(not other.d.find_element(By.ID, "nav-admin").is_displayed(), "no admin link for a tenant's person")
        other.js("location.hash = '#/admin'")
        other.wait_text("admin-status", "for an admin token", "the admin page refused to a tenant's person")
        check(other.text("tokens-body") == "" and other.text("tenants-body") == "", "nothing of the admin's shown")
        other.collect_log()

        # The admin: tenants and tokens.
        admin = Page(srv, tmp, shots, "admin")
        pages.append(admin)
        admin_pages(srv, admin)

        # No error from the console in any browser's log.
        bad = [e for e in page.errors() if not (page.log.index(e) < expected_401 and "/api/v1/login" in
                                                e["message"] and "401" in e["message"])]
        bad += other.errors() + admin.errors()
        check(not bad, "errors in the browser's log: %s" % bad)
    finally:
        for p in pages:
            p.quit()


def main():
    if webdriver is None or not CHROMIUM or not DRIVER:
        print("SKIPPED: console.browser needs chromium, chromium-driver and python3-selenium "
              "(scripts/install-deps installs them); missing: %s" % ", ".join(
                  n for n, ok in (("python3-selenium", webdriver), ("chromium", CHROMIUM),
                                  ("chromium-driver", DRIVER)) if not ok), file=sys.stderr)
        print("SKIPPED: console.browser")
        return 77
    srv = Server(os.path.abspath(sys.argv[1]), "ah-console-browser-")
    shots = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else os.path.join(tempfile.gettempdir(), "ah-console-shots")
    shutil.rmtree(shots, ignore_errors=True)

    def body():
        srv.start()
        run_browser(srv, srv.tmp, shots)
        print("console.browser: %d checks passed; screenshots in %s" % (checks(), shots))
    return srv.run(body)


if __name__ == "__main__":
    sys.exit(main())
