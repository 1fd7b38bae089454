"""Headless Chromium driven over the DevTools protocol: one tab, for the browser
tests (tests/test_browser.py) and the README's screenshots
(benchmarks/site_screenshots.py). Needs Chromium on the PATH and websocket-client."""
import base64
import json
import shutil
import socket
import subprocess
import time
import urllib.request

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url, proc, what):
    """The body at `url` once it answers; RuntimeError if `proc` exits or 30 s pass."""
    for _ in range(150):
        try:
            return urllib.request.urlopen(url, timeout=2).read()
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited: {proc.stdout.read().decode(errors='replace')[-2000:]}")
            time.sleep(0.2)
    raise RuntimeError(f"{what} did not answer")


class Browser:
    """One headless Chromium tab; console errors and uncaught exceptions collect in `errors`."""

    def __init__(self, profile_dir, hide_scrollbars=False):
        import websocket
        port = free_port()
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", f"--user-data-dir={profile_dir}",
             f"--remote-debugging-port={port}", "about:blank"]
            + (["--hide-scrollbars"] if hide_scrollbars else []),
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

    def open(self, url, width, height=900):
        """Load `url` in a window `width` px wide (a phone below 600 px)."""
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=width < 600)
        self.call("Page.navigate", url=url)
        while self.event(json.loads(self.ws.recv())) != "Page.loadEventFired":
            pass

    def evaluate(self, expression):
        """The value of a JavaScript expression that returns JSON text, decoded."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return json.loads(result["result"]["value"])

    def screenshot(self, path, selector=None, full_page=0):
        """A PNG of the window, of the element `selector` names, or with `full_page` (a
        height in px) of the whole page down to that height."""
        params = {"format": "png"}
        if full_page:
            size = self.evaluate("JSON.stringify([window.innerWidth, document.documentElement.scrollHeight])")
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size[0], "height": min(size[1], full_page), "scale": 1})
        elif selector:
            box = self.evaluate(f"""JSON.stringify((() => {{
                const e = document.querySelector({json.dumps(selector)}); e.scrollIntoView();
                const r = e.getBoundingClientRect();
                return {{x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height}}; }})())""")
            params["clip"] = dict(box, scale=1)
        data = self.call("Page.captureScreenshot", **params)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        self.ws.close()
        self.proc.terminate()
        self.proc.wait(10)
