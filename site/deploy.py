"""What a deployed site runs: this checkout's mpsprobe, as a wheel, beside Datasette.

The site's plugins import `mpsprobe` (the query layer, the vocabulary), so a
host that installs only Datasette cannot load them. `publish` builds a wheel of
the checked-out mpsprobe and hands it to `datasette publish`/`package` as a
static folder (copied into the deploy) and an `--install` of its path there.

The wheel's requirements are the site's, not the probe's: a host serving pages
never runs torch, and `pip install` of the full requirements would pull a
multi-GB CUDA torch into a web server's image. tests/test_publish.py builds a
fresh virtual environment with exactly what the deploy installs and serves the
site from it, so a requirement the site lacks shows there.
"""
import base64
import csv
import hashlib
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from mpsprobe.errors import MpsprobeError

# The folder name the wheel travels under, in the deploy and on the site (/mpsprobe-wheel/…).
WHEEL_MOUNT = "mpsprobe-wheel"
# What the site imports (checked by tests/test_publish.py in a fresh environment): db/query
# reads versions with packaging; never torch.
SITE_REQUIREMENTS = ("datasette>=0.65,<0.66", "sqlite-utils>=3.35", "click>=8.1", "packaging>=22", "platformdirs>=3")
# What a wheel is built from: the project file, its readme, the package folders.
SOURCES = ("pyproject.toml", "README.md", "probe", "ops", "db", "site")


class DeployError(MpsprobeError):
    """The deploy cannot be prepared: one line for the user."""


def checkout():
    """The mpsprobe checkout this code runs from, or DeployError."""
    root = Path(__file__).resolve().parent.parent
    project = root / "pyproject.toml"
    if not project.exists() or 'name = "mpsprobe"' not in project.read_text():
        raise DeployError("publish builds the deployed mpsprobe from a checkout of its repository; "
                          "this mpsprobe was installed without one (clone it and `pip install -e .`)")
    return root


def build_wheel(folder):
    """Build a wheel of the checkout into `folder`, with the site's requirements; returns its path."""
    root = checkout()
    with tempfile.TemporaryDirectory(prefix="mpsprobe-wheel-") as scratch:
        source = Path(scratch) / "src"
        source.mkdir()
        for name in SOURCES:   # a copy: building leaves build/ and egg-info behind
            path = root / name
            if path.is_dir():
                shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc",
                                                                                  "screenshots"))
            else:
                shutil.copy(path, source / name)
        isolation = ["--no-build-isolation"] if _can_build_here() else []
        built = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q",
             "-w", str(Path(scratch) / "dist"), str(source)], capture_output=True, text=True)
        if built.returncode != 0:
            last = (built.stderr.strip().splitlines() or ["pip wheel failed"])[-1]
            raise DeployError(f"could not build the mpsprobe wheel: {last}")
        (wheel,) = (Path(scratch) / "dist").glob("mpsprobe-*.whl")
        os.makedirs(folder, exist_ok=True)
        target = Path(folder) / wheel.name
        with_site_requirements(wheel, target)
    return target


def _can_build_here():
    """Whether this Python builds the wheel itself (setuptools with bdist_wheel: 70.1 or newer,
    or the `wheel` package); else pip builds it in isolation, fetching setuptools."""
    try:
        import setuptools
    except ImportError:
        return False
    if importlib.util.find_spec("wheel") is not None:
        return True
    parts = [int(p) if p.isdigit() else 0 for p in setuptools.__version__.split(".")[:2]]
    return tuple(parts) >= (70, 1)


def _record_hash(data):
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def with_site_requirements(wheel, target):
    """Copy `wheel` to `target` with its Requires-Dist replaced by SITE_REQUIREMENTS (RECORD updated)."""
    with zipfile.ZipFile(wheel) as src:
        names = src.namelist()
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        contents = {n: src.read(n) for n in names}
        infos = {n: src.getinfo(n) for n in names}
    lines = contents[metadata].decode().split("\n")
    header_end = lines.index("") if "" in lines else len(lines)
    kept = [line for line in lines[:header_end] if not line.startswith(("Requires-Dist:", "Provides-Extra:"))]
    kept += [f"Requires-Dist: {r}" for r in SITE_REQUIREMENTS]
    contents[metadata] = "\n".join(kept + lines[header_end:]).encode()
    rows = []
    for row in csv.reader(io.StringIO(contents[record].decode())):
        if row and row[0] == metadata:
            row = [metadata, _record_hash(contents[metadata]), str(len(contents[metadata]))]
        rows.append(row)
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    contents[record] = out.getvalue().encode()
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst:
        for name in names:
            dst.writestr(infos[name], contents[name])
    return target


def publish_command(datasette, verb, db_path, folder, extra=()):
    """The `datasette publish`/`package` command that deploys `db_path` with the site, building
    the metadata and the mpsprobe wheel into `folder`, which must outlive the command."""
    import json

    from mpsprobe.site import datasette_args, site_metadata
    metadata_path = os.path.join(folder, "metadata.json")
    with open(metadata_path, "w") as f:
        json.dump(site_metadata(db_path), f, indent=2)
    wheels = os.path.join(folder, WHEEL_MOUNT)
    wheel = build_wheel(wheels)
    return [datasette, *verb, db_path, *datasette_args(metadata_path),
            "--static", f"{WHEEL_MOUNT}:{wheels}", "--install", f"{WHEEL_MOUNT}/{wheel.name}", *extra]
