"""A real browser against `mpsprobe serve`: the matrix renders coloured cells.

Drives Debian's headless Chromium (`apt-get install chromium`); skips only
when no Chromium is installed.
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory, fake_mps_db, cpu_db, site_db):
    db = site_db
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mpsprobe", "serve", db, "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(base + "/-/matrix", timeout=2)
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"mpsprobe serve exited: {proc.stdout.read().decode()}")
                time.sleep(0.2)
        yield base, db
    finally:
        proc.terminate()
        proc.wait(10)


def chromium(tmp_path, *args):
    profile = tmp_path / "profile"
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
               f"--user-data-dir={profile}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_matrix_renders_coloured_cells_in_a_browser(server, tmp_path, rows):
    base, db = server
    run = rows(db, "SELECT id FROM runs WHERE device = 'fake-mps' "
               "ORDER BY torch_version_key DESC LIMIT 1")[0]["id"]
    dom = chromium(tmp_path, "--dump-dom", f"{base}/-/matrix?run={run}").stdout
    cells = set(re.findall(r'<td class="st-(\w+)"><a href=', dom))
    expected = {r["status"] for r in rows(
        db, "SELECT DISTINCT status FROM op_dtype_status WHERE run_id = ?", [run])}
    assert len(expected) >= 4 and cells == expected
    assert 'class="mp-legend"' in dom
    shot = tmp_path / "matrix.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,900",
             "--hide-scrollbars", f"{base}/-/matrix?run={run}")
    assert shot.exists() and shot.stat().st_size > 10_000
    with open(shot, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # The page links the stylesheet that colours the cells, and it is served.
    assert '/mpsprobe-static/site.css' in dom
    css = urllib.request.urlopen(base + "/mpsprobe-static/site.css").read().decode()
    assert ".st-pass" in css
    if os.environ.get("MPSPROBE_SCREENSHOT"):
        shutil.copy(shot, os.environ["MPSPROBE_SCREENSHOT"])
