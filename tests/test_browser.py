"""A real browser against `mpsprobe serve`: every page renders, at desktop and phone width.

Drives Debian's headless Chromium (`apt-get install chromium`) over the
DevTools protocol (websocket-client, a test dependency); skips only when
Chromium or websocket-client is missing. The walk loads the site's pages and
the links on them at 1400 px and 390 px on a multi-run database with hostile
strings, and fails on a 5xx, markup from the data, a console error, a page
wider than the window, or a table whose op column leaves the screen.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
websocket = pytest.importorskip("websocket", reason="websocket-client is not installed")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")

WIDTHS = (1400, 390)
PAGES_PER_WIDTH = 28

# Evaluated in each page: what the walk checks, as JSON.
PROBE = """JSON.stringify((() => {
  const width = window.innerWidth;
  const tables = [...document.querySelectorAll('table.mp-matrix')].map(t => {
    const box = t.closest('.mp-scroll') || t.parentElement;
    box.scrollLeft = box.scrollWidth;               // scrolled right, the op column stays
    const first = t.querySelector('tbody tr th.mp-op');
    const r = first ? first.getBoundingClientRect() : null;
    const b = box.getBoundingClientRect();
    box.scrollLeft = 0;
    return r ? {left: r.left, right: r.right, boxLeft: b.left, width: r.width} : null;
  }).filter(Boolean);
  return {
    scrollWidth: document.documentElement.scrollWidth, width,
    scripts: [...document.scripts].filter(s => s.textContent.includes('alert(1)')).length,
    nav: !!document.querySelector('.mp-nav'),
    tables,
    links: [...document.querySelectorAll('a[href]')].map(a => a.href)
             .filter(h => h.startsWith(location.origin)),
  };
})())"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url, proc, what):
    for _ in range(150):
        try:
            return urllib.request.urlopen(url, timeout=2).read()
        except OSError:
            if proc.poll() is not None:
                pytest.fail(f"{what} exited: {proc.stdout.read().decode(errors='replace')[-2000:]}")
            time.sleep(0.2)
    pytest.fail(f"{what} did not answer")


@pytest.fixture(scope="module")
def server(extra_db):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mpsprobe", "serve", extra_db, "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(base + "/-/legend", proc, "mpsprobe serve")
        yield base, extra_db
    finally:
        proc.terminate()
        proc.wait(10)


class Browser:
    """One headless Chromium tab, driven over the DevTools protocol."""

    def __init__(self, tmp_path):
        port = free_port()
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}",
             f"--remote-debugging-port={port}", "about:blank"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        tabs = json.loads(wait_for(f"http://127.0.0.1:{port}/json/list", self.proc, "chromium"))
        page = next(t for t in tabs if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60,
                                              suppress_origin=True)
        self.next_id, self.errors = 0, []
        for method in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.call(method)

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.event(message)

    def event(self, message):
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            self.errors.append(params["exceptionDetails"].get("text"))
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.errors.append(str(params.get("args")))
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.errors.append(params["entry"].get("text"))
        return method

    def open(self, url, width):
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=900,
                  deviceScaleFactor=1, mobile=width < 600)
        self.call("Page.navigate", url=url)
        while self.event(json.loads(self.ws.recv())) != "Page.loadEventFired":
            pass
        result = self.call("Runtime.evaluate", expression=PROBE, returnByValue=True)
        return json.loads(result["result"]["value"])

    def screenshot(self, path):
        import base64
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        self.ws.close()
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    tab = Browser(tmp_path_factory.mktemp("chromium"))
    yield tab
    tab.close()


def status_of(url):
    try:
        return urllib.request.urlopen(url, timeout=30).status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.mark.parametrize("width", WIDTHS)
def test_walk_every_page_at_desktop_and_phone_width(server, browser, width):
    base, db = server
    name = os.path.splitext(os.path.basename(db))[0]
    queue = [f"{base}{p}" for p in ("/-/grid", "/-/matrix", "/-/op/histc", "/-/compare", "/-/legend",
                                    "/-/findings", "/-/check-ops?ops=add%0Ahistc", "/",
                                    f"/{name}/search?q=conv", f"/{name}/fallbacks",
                                    "/-/op/nn.functional.interpolate",
                                    "/-/op/" + urllib.parse.quote("<script>alert(1)</script>", safe=""))]
    seen, visited = set(queue), 0
    while queue and visited < PAGES_PER_WIDTH:
        url = queue.pop(0)
        if url.endswith((".csv", ".json", ".db")) or "/-/static" in url or "_sort" in url:
            continue
        status = status_of(url)
        assert status < 500, url
        browser.errors.clear()
        page = browser.open(url, width)
        visited += 1
        # A missing page's own 404 is logged as a failed load; nothing else may be.
        errors = [e for e in browser.errors if not (status == 404 and "status of 404" in e)]
        assert not errors, (url, errors)
        assert page["scripts"] == 0, url
        assert page["nav"], url
        assert page["scrollWidth"] <= page["width"] + 1, (url, page["scrollWidth"], width)
        for table in page["tables"]:
            assert table["left"] >= table["boxLeft"] - 1 and table["right"] <= width + 1, (url, table)
        for link in page["links"]:
            link = link.split("#")[0]
            if link not in seen:
                seen.add(link)
                queue.append(link)
    assert visited >= 12


def test_matrix_cells_are_coloured_and_carry_symbols(server, browser):
    from mpsprobe.vocabulary import STATUS
    base, _ = server
    browser.open(f"{base}/-/matrix", 1400)
    found = json.loads(browser.call("Runtime.evaluate", returnByValue=True, expression="""
        JSON.stringify([...document.querySelectorAll('table.mp-matrix td[class^="st-"]')].map(
            td => [td.className, td.textContent.trim(), getComputedStyle(td).backgroundColor]))
    """)["result"]["value"])
    assert found
    for klass, text, colour in found:
        status = klass.split()[0][3:]
        assert text == STATUS[status].symbol
        assert colour not in ("rgba(0, 0, 0, 0)", "rgb(255, 255, 255)")


def test_screenshots_of_the_grid_and_an_op_page(server, browser, tmp_path):
    """Also writes the README's screenshots when MPSPROBE_SCREENSHOTS names a folder."""
    base, _ = server
    out = os.environ.get("MPSPROBE_SCREENSHOTS") or str(tmp_path)
    for page, path in (("grid", "/-/grid"), ("op", "/-/op/histc")):
        for width, label in ((1400, "desktop"), (390, "phone")):
            browser.open(base + path, width)
            shot = os.path.join(out, f"{page}-{label}.png")
            browser.screenshot(shot)
            with open(shot, "rb") as f:
                assert f.read(8) == b"\x89PNG\r\n\x1a\n"
