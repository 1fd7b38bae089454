"""Torch releases by range, and their macOS arm64 wheels, downloaded once and cached.

`mpsprobe declared --versions 2.0..2.13` reads the declarations of every
release in a range: a minor (`2.8`) stands for its latest patch release
(2.8.0), a full version (`2.8.0`) for itself. The versions PyPI has are listed
with `pip index versions`; each wheel is fetched with `pip download` for
macOS arm64 (the platform MPS runs on: any platform's wheel holds the same
declaration files, this one is what Mac users install), trying the platform
tags in turn (wheels up to 2.11 are macosx_11_0, later ones macosx_14_0).
A wheel is downloaded into a scratch folder and moved into the cache only
once complete, so an interrupted download leaves nothing behind.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

from mpsprobe.errors import MpsprobeError

CACHE_ENV = "MPSPROBE_WHEEL_CACHE"
PLATFORMS = ("macosx_11_0_arm64", "macosx_14_0_arm64")
PYTHONS = ("3.11", "3.10", "3.12")
# Fail fast when offline: one retry, a 30 s socket timeout.
PIP_NETWORK = ("--disable-pip-version-check", "--retries", "1", "--timeout", "30")
# What pip prints when it could not reach the index at all.
OFFLINE = ("NewConnectionError", "Network is unreachable", "Temporary failure in name resolution",
           "ConnectTimeout", "ProxyError", "Max retries exceeded")
_ITEM = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


class RangeError(MpsprobeError):
    """A --versions value that is not a version, a range or a list of them."""


class DownloadError(MpsprobeError):
    """One release's wheel could not be listed or fetched."""


def default_cache():
    """$MPSPROBE_WHEEL_CACHE, else the wheels folder of mpsprobe's cache (cachedirs)."""
    if os.environ.get(CACHE_ENV):
        return os.environ[CACHE_ENV]
    from mpsprobe import cachedirs
    return cachedirs.folder("wheels")


def _item(text, spec):
    m = _ITEM.fullmatch(text.strip())
    if not m:
        raise RangeError(f"--versions {spec!r}: {text.strip()!r} is not a torch version "
                         "(write 2.8, 2.8.0, 2.0..2.13 or a comma-separated list)")
    major, minor, patch = m.groups()
    return int(major), int(minor), None if patch is None else int(patch)


def parse_range(spec):
    """[(major, minor, patch or None)] that `spec` asks for, in order, without repeats.

    "2.0..2.13": every minor from 2.0 to 2.13; "2.8": 2.8's latest patch;
    "2.8.0": exactly 2.8.0; items joined by commas ("2.0..2.3,2.8.0").
    """
    wanted = []
    for part in (spec or "").split(","):
        if ".." in part:
            start, _, end = part.partition("..")
            (a_major, a_minor, a_patch), (b_major, b_minor, b_patch) = \
                _item(start, spec), _item(end, spec)
            if a_patch is not None or b_patch is not None:
                raise RangeError(f"--versions {spec!r}: a range runs from minor to minor "
                                 "(2.0..2.13), without patch numbers")
            if a_major != b_major:
                raise RangeError(f"--versions {spec!r}: a range stays within one major "
                                 "version (2.0..2.13)")
            if a_minor > b_minor:
                raise RangeError(f"--versions {spec!r}: the range runs backwards")
            wanted += [(a_major, minor, None) for minor in range(a_minor, b_minor + 1)]
        else:
            wanted.append(_item(part, spec))
    return list(dict.fromkeys(wanted))


def _release(version):
    """(major, minor, patch) of a plain release ("2.8.0"); None for local or pre-releases."""
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", version)
    return tuple(int(x) for x in m.groups()) if m else None


def resolve(wanted, available):
    """[(asked, version or None)]: the release each wanted item stands for, among `available`."""
    releases = {}
    for v in available:
        r = _release(v)
        if r:
            releases[r] = v
    out = []
    for major, minor, patch in wanted:
        asked = f"{major}.{minor}" + ("" if patch is None else f".{patch}")
        matching = [r for r in releases if r[:2] == (major, minor)
                    and (patch is None or r[2] == patch)]
        out.append((asked, releases[max(matching)] if matching else None))
    return out


def pip_versions():
    """The torch versions PyPI lists for macOS arm64 (`pip index versions`)."""
    command = [sys.executable, "-m", "pip", "index", "versions", "torch", "--only-binary=:all:",
               "--python-version", PYTHONS[0], *PIP_NETWORK]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise DownloadError(f"could not list torch versions: {e}") from None
    m = re.search(r"Available versions:\s*(.+)", done.stdout)
    if done.returncode != 0 or not m:
        last = (done.stderr.strip().splitlines() or ["no answer"])[-1]
        raise DownloadError(f"could not list torch versions (offline?): {last}")
    return [v.strip() for v in m.group(1).split(",")]


def cached_versions(cache_dir):
    """The torch versions with a macOS arm64 wheel in the cache: what works offline."""
    names = glob.glob(os.path.join(glob.escape(cache_dir), "torch-*macosx*arm64.whl"))
    return [os.path.basename(n).split("-")[1] for n in names]


def cached(version, cache_dir):
    """A macOS arm64 wheel of `version` already in the cache, or None."""
    found = glob.glob(os.path.join(glob.escape(cache_dir), f"torch-{version}-*macosx*arm64.whl"))
    return sorted(found)[0] if found else None


def pip_download(version, dest):
    """Fetch torch==`version`'s macOS arm64 wheel into `dest` with pip; its path.

    Tries each (Python, platform tag) in turn until pip finds a wheel; stops at
    once when PyPI cannot be reached.
    """
    last = "no platform tried"
    for python in PYTHONS:
        for platform in PLATFORMS:
            command = [sys.executable, "-m", "pip", "download", f"torch=={version}", "--no-deps",
                       "--only-binary=:all:", "--platform", platform, "--python-version", python,
                       *PIP_NETWORK, "--quiet", "-d", dest]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
            except (OSError, subprocess.TimeoutExpired) as e:
                raise DownloadError(f"pip download torch=={version}: {e}") from None
            wheels = glob.glob(os.path.join(glob.escape(dest), "torch-*.whl"))
            if done.returncode == 0 and wheels:
                return wheels[0]
            last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            if any(sign in done.stderr for sign in OFFLINE):
                raise DownloadError(f"torch {version}: PyPI cannot be reached (offline?)")
    raise DownloadError(f"no macOS arm64 wheel of torch {version}: {last}")


def fetch(version, cache_dir, downloader=pip_download):
    """The cached wheel of `version`, downloading it first when absent.

    `downloader(version, dest)` puts the wheel in the empty folder `dest` and
    returns its path (pip_download; tests pass their own). Raises DownloadError.
    """
    hit = cached(version, cache_dir)
    if hit:
        return hit
    os.makedirs(cache_dir, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=".download-", dir=cache_dir)
    try:
        path = downloader(version, scratch)
        final = os.path.join(cache_dir, os.path.basename(path))
        os.replace(path, final)
        return final
    except DownloadError:
        raise
    except Exception as e:            # a downloader's own failure costs its version only
        raise DownloadError(f"torch {version}: {type(e).__name__}: {e}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

