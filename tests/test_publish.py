"""`mpsprobe publish` deploys a site that starts: the deploy installs this checkout's
mpsprobe (a wheel with the site's requirements), and a fresh virtual environment
holding exactly what the deploy installs serves the home page, the grid and an op
page, started the way the deploy starts it. Nothing temporary is left behind."""
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from mpsprobe.site.deploy import SITE_REQUIREMENTS, WHEEL_MOUNT

pytestmark = pytest.mark.slow

# Stands in for docker: keeps the build context `datasette package` hands it.
FAKE_DOCKER = """#!/bin/sh
cp -R . "$DEPLOY_CONTEXT"
"""


@pytest.fixture(scope="module")
def deployed(tmp_path_factory, run_cli, fake_mps):
    """`mpsprobe publish DB package` run for real, docker replaced by a copy of its context;
    returns (the context folder, the temporary folder publish ran with)."""
    folder = tmp_path_factory.mktemp("publish")
    db = folder / "site.db"
    result = run_cli("run", "--db", db, "--backend", fake_mps, "--ops", "add,exp", "--dtypes", "float32",
                     "--samples", 1, "--passes", "forward", "--no-timing", "--workers", 1, "--json")
    assert result.exit_code == 0, result.output
    bin_dir, context, scratch = folder / "bin", folder / "context", folder / "tmp"
    bin_dir.mkdir()
    scratch.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "DEPLOY_CONTEXT": str(context),
           "TMPDIR": str(scratch)}
    saved, tempfile.tempdir = tempfile.tempdir, None   # TMPDIR is read anew
    try:
        result = run_cli("publish", db, "package", "--", "--tag", "mpsprobe-test", env=env)
    finally:
        tempfile.tempdir = saved
    assert result.exit_code == 0, result.output
    return context, scratch


def _dockerfile(context):
    text = (context / "Dockerfile").read_text()
    runs = [line[len("RUN "):] for line in text.splitlines() if line.startswith("RUN ")]
    (cmd,) = [line[len("CMD "):] for line in text.splitlines() if line.startswith("CMD ")]
    return runs, cmd


def test_the_deploy_installs_this_mpsprobe_with_the_sites_requirements(deployed):
    context, _ = deployed
    runs, _ = _dockerfile(context)
    install = next(r for r in runs if r.startswith("pip install"))
    (wheel,) = [w for w in shlex.split(install) if w.endswith(".whl")]
    assert wheel.startswith(f"{WHEEL_MOUNT}/mpsprobe-") and (context / wheel).exists()
    with zipfile.ZipFile(context / wheel) as whl:
        metadata = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
        requires = [line.split(": ", 1)[1] for line in whl.read(metadata).decode().splitlines()
                    if line.startswith("Requires-Dist:")]
        assert "mpsprobe/site/plugins/grid.py" in whl.namelist()
    assert requires == list(SITE_REQUIREMENTS)   # no torch in a web server


def test_publish_leaves_no_temporary_folder(deployed):
    _, scratch = deployed
    assert list(scratch.iterdir()) == []


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url, deadline):
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_a_fresh_environment_with_what_the_deploy_installs_serves_the_site(deployed, tmp_path):
    context, _ = deployed
    runs, cmd = _dockerfile(context)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)   # no system site-packages
    bin_dir = venv / "bin"
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", PORT=str(_free_port()))
    env.pop("PYTHONPATH", None)
    for step in runs:   # pip install …, datasette inspect …: as the image is built
        done = subprocess.run(shlex.split(step), cwd=context, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, (step, done.stdout[-2000:], done.stderr[-2000:])
    assert subprocess.run([str(bin_dir / "python"), "-c", "import torch"], capture_output=True).returncode != 0
    command = shlex.split(cmd.replace("$PORT", env["PORT"]))
    assert command[:2] == ["datasette", "serve"]
    log = open(tmp_path / "serve.log", "w")
    server = subprocess.Popen([str(bin_dir / "datasette"), *command[1:]], cwd=context, env=env,
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{env['PORT']}"
        deadline = time.monotonic() + 120
        for path in ("/", "/-/grid", "/-/op/add"):
            status, body = _get(base + path, deadline)
            assert status == 200, (path, status, body[:500], (tmp_path / "serve.log").read_text()[-2000:])
        assert "add" in body and "FAKE MPS" in body
        status, grid = _get(base + "/-/grid.json", deadline)
        assert status == 200 and {r["op_id"] for r in json.loads(grid)["rows"]} == {"add", "exp"}
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def test_a_dry_run_keeps_its_files_only_where_asked(tmp_path, small_store, run_cli):
    db = small_store(tmp_path / "s.db", n=2)
    result = run_cli("publish", db, "cloudrun", "--dry-run", "--out", tmp_path / "deploy", "--", "--service", "x")
    assert result.exit_code == 0, result.output
    command = shlex.split(result.stdout)
    wheel = command[command.index("--install") + 1]
    static = [v for k, v in zip(command, command[1:]) if k == "--static" and v.startswith(WHEEL_MOUNT + ":")]
    assert static and (Path(static[0].split(":", 1)[1]) / Path(wheel).name).exists()
    assert re.search(r"--setting sql_time_limit_ms \d+", command[command.index("--extra-options") + 1])
