"""Isolated torch environments: probe any torch version from one mpsprobe.

`--torch SPEC` names the torch a run probes:

    current            this interpreter's torch (the default; nothing is built)
    2.5.1              a released version (torch==2.5.1)
    "torch>=2.4,<2.6"  any pip requirement on torch
    nightly            PyTorch's nightly index, pre-releases allowed
    /path/to/python    an interpreter that already has torch (and expecttest)

Anything but `current` and a path becomes a virtual environment, cached under
the user cache dir (MPSPROBE_CACHE overrides it) and reused by later runs. The
workers run there; mpsprobe itself is never installed there, since workers load
it from this installation (see launch.py): an environment holds only torch,
expecttest and numpy. `uv` builds it when present, else `venv` + pip.

An environment is built in a scratch folder and renamed into place only once
torch imports in it, so a failed or interrupted install leaves nothing that
looks usable.
"""
import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

from mpsprobe.errors import MpsprobeError

NIGHTLY_INDEX = "https://download.pytorch.org/whl/nightly/cpu"
MARKER = "mpsprobe-env.json"
WORKER_PACKAGES = ("expecttest", "numpy")   # what a worker needs besides torch
_VERSION_SPEC = re.compile(r"^\d+(\.\d+){0,2}((a|b|rc|\.dev|\.post)\d+)?(\+[\w.]+)?$")
_REQUIREMENT = re.compile(r"^torch\s*(\[[\w,\s]+\])?\s*(([<>=!~]=?|===)\s*[\w.*+!]+\s*,?\s*)*$"
                          r"|^torch\s*@\s*\S+$")


class EnvError(MpsprobeError):
    """The torch environment cannot be made or used: one line for the user."""


@dataclass(frozen=True)
class TorchSpec:
    text: str              # as given
    kind: str              # current | path | version | requirement | nightly
    requirement: str = None
    pre: bool = False      # allow pre-releases (nightly)
    index: str = None      # an extra index to search (nightly)


def parse_spec(text):
    """The TorchSpec for a --torch value; raises EnvError for anything else."""
    text = (text or "current").strip()
    if text == "current":
        return TorchSpec(text, "current")
    if text == "nightly":
        index = os.environ.get("MPSPROBE_NIGHTLY_INDEX", NIGHTLY_INDEX)
        return TorchSpec(text, "nightly", "torch", pre=True, index=index)
    if os.sep in text or text.startswith(".") or os.path.exists(text):
        return TorchSpec(text, "path")
    if _VERSION_SPEC.match(text):
        return TorchSpec(text, "version", f"torch=={text}")
    if _REQUIREMENT.match(text):
        return TorchSpec(text, "requirement", text)
    raise EnvError(f"--torch {text!r}: expected current, nightly, a version like 2.5.1, "
                   "a requirement like 'torch>=2.4,<2.6', or a path to a Python that has torch")


# -- where environments live ---------------------------------------------------

def cache_root():
    from mpsprobe import cachedirs
    return cachedirs.root()


def envs_dir():
    return os.path.join(cache_root(), "envs")


def env_python(path):
    if os.name == "nt":
        return os.path.join(path, "Scripts", "python.exe")
    return os.path.join(path, "bin", "python")


def _inherit_site():
    """MPSPROBE_ENV_SYSTEM_SITE=1: environments also see this interpreter's packages,
    so a torch that is already installed in the right version is reused, not copied."""
    return os.environ.get("MPSPROBE_ENV_SYSTEM_SITE", "") not in ("", "0")


def env_name(spec, python_version, inherit_site=False):
    """The cache folder name: readable, and distinct for every build that differs."""
    if spec.kind == "version":
        stem = f"torch-{spec.text}"
    elif spec.kind == "nightly":
        # A nightly is rebuilt at most once a day; `mpsprobe envs rm` clears old ones.
        stem = f"nightly-{datetime.date.today():%Y%m%d}"
    else:
        digest = hashlib.sha256(spec.requirement.encode()).hexdigest()[:10]
        stem = f"req-{digest}"
    stem = re.sub(r"[^\w.+-]", "_", stem)
    return f"{stem}-py{python_version}" + ("-site" if inherit_site else "")


# -- probing an interpreter ------------------------------------------------------

_PROBE = ("import json, sys, torch\n"
          "try:\n    import expecttest\n    has_expecttest = True\n"
          "except ImportError:\n    has_expecttest = False\n"
          "print(json.dumps({'torch': str(torch.__version__), "
          "'git': getattr(torch.version, 'git_version', None), "
          "'python': '%d.%d.%d' % sys.version_info[:3], 'expecttest': has_expecttest}))")


def probe_interpreter(python):
    """{torch, git, python, expecttest} of `python`; raises EnvError if torch is missing."""
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        raise EnvError(f"cannot run {python}: {e}") from None
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["it failed"])[-1]
        raise EnvError(f"{python} cannot import torch ({last})")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _python_version(python):
    out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise EnvError(f"cannot run {python}: exit status {out.returncode}")
    return out.stdout.strip()


# -- building ----------------------------------------------------------------------

def installer():
    """"uv" when it is on PATH (MPSPROBE_INSTALLER=pip forces pip), else "pip"."""
    choice = os.environ.get("MPSPROBE_INSTALLER", "auto")
    if choice == "pip":
        return "pip"
    if choice == "uv" or shutil.which("uv"):
        return "uv"
    return "pip"


def build_commands(spec, path, base_python, tool, inherit_site=False):
    """The commands that create the environment at `path` and install into it."""
    packages = [spec.requirement, *WORKER_PACKAGES]
    site = ["--system-site-packages"] if inherit_site else []
    if tool == "uv":
        create = ["uv", "venv", "--quiet", "--python", base_python, *site, path]
        install = ["uv", "pip", "install", "--python", env_python(path)]
        if spec.pre:
            install += ["--prerelease", "allow"]
    else:
        create = [base_python, "-m", "venv", *site, path]
        install = [env_python(path), "-m", "pip", "install", "--disable-pip-version-check"]
        if spec.pre:
            install.append("--pre")
    if spec.index:
        install += ["--extra-index-url", spec.index]
    return [create, install + packages]


def _failure_line(log_text):
    """The line of an installer's output that says why it failed."""
    lines = [x.strip(" ╰─▶") for x in log_text.splitlines() if x.strip()]
    for prefixes in (("ERROR:", "error:"), ("Because",), ("×",)):
        for line in lines:  # pip and uv put the cause first, the generic advice last
            if line.startswith(prefixes):
                return line
    return lines[-1] if lines else "no output"


def _run_logged(command, log):
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    try:
        return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode
    except OSError as e:
        log.write(f"{e}\n")
        return 127


def ensure(spec, base_python=None, say=lambda text: None):
    """The interpreter to run workers with for `spec`, building its environment if needed.

    Raises EnvError with one line (the installer's own reason) when it cannot.
    """
    if isinstance(spec, str):
        spec = parse_spec(spec)
    if spec.kind == "current":
        return sys.executable
    if spec.kind == "path":
        python = os.path.abspath(os.path.expanduser(spec.text))
        if os.path.isdir(python):
            python = env_python(python)   # a virtual environment's folder
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            raise EnvError(f"--torch {spec.text}: no executable Python interpreter there")
        info = probe_interpreter(python)
        if not info["expecttest"]:
            raise EnvError(f"{python} has torch {info['torch']} but not expecttest, which "
                           f"PyTorch's OpInfo database imports: `{python} -m pip install expecttest`")
        return python
    base_python = base_python or os.environ.get("MPSPROBE_ENV_PYTHON") or sys.executable
    inherit = _inherit_site()
    name = env_name(spec, _python_version(base_python), inherit)
    path = os.path.join(envs_dir(), name)
    if os.path.exists(os.path.join(path, MARKER)):
        return env_python(path)
    return _build(spec, path, base_python, inherit, say)


def _build(spec, path, base_python, inherit, say):
    os.makedirs(envs_dir(), exist_ok=True)
    scratch = f"{path}.building-{os.getpid()}"
    log_path = f"{path}.log"
    tool = installer()
    say(f"building a torch environment for {spec.requirement} with {tool} in {path} "
        f"(log: {log_path})")
    try:
        with open(log_path, "w") as log:
            for command in build_commands(spec, scratch, base_python, tool, inherit):
                if _run_logged(command, log) != 0:
                    log.flush()
                    with open(log_path) as f:
                        reason = _failure_line(f.read())
                    raise EnvError(f"could not install {spec.requirement} ({tool}): {reason}"
                                   f" [offline? full log: {log_path}]")
        info = probe_interpreter(env_python(scratch))
        record = {"spec": spec.text, "requirement": spec.requirement, "installer": tool,
                  "torch_version": info["torch"], "torch_git": info["git"],
                  "python": info["python"], "system_site_packages": inherit,
                  "created": datetime.datetime.now(datetime.timezone.utc).isoformat(
                      timespec="seconds")}
        with open(os.path.join(scratch, MARKER), "w") as f:
            json.dump(record, f, indent=2)
        try:
            os.rename(scratch, path)
        except OSError:
            if not os.path.exists(os.path.join(path, MARKER)):
                raise
            # Another process finished the same environment first: use theirs.
    finally:
        if os.path.exists(scratch):
            shutil.rmtree(scratch, ignore_errors=True)
    say(f"torch {record['torch_version']} ready")
    return env_python(path)


# -- the cache -------------------------------------------------------------------------

def _size(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def list_envs(sizes=True):
    """Every cached environment (and leftover partial build), as dicts."""
    root = envs_dir()
    if not os.path.isdir(root):
        return []
    found = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if not os.path.isdir(path):
            continue
        record = {}
        try:
            with open(os.path.join(path, MARKER)) as f:
                record = json.load(f)
        except (OSError, ValueError):
            pass
        found.append({"name": name, "path": path, "state": "ready" if record else "incomplete",
                      "torch_version": record.get("torch_version"),
                      "spec": record.get("spec"), "python": record.get("python"),
                      "created": record.get("created"),
                      "size_bytes": _size(path) if sizes else None})
    return found


def remove_envs(names=(), everything=False):
    """Delete cached environments by name (or all); returns the names removed."""
    known = {e["name"]: e for e in list_envs(sizes=False)}
    if everything:
        names = list(known)
    missing = [n for n in names if n not in known]
    if missing:
        raise EnvError(f"no cached environment named {missing[0]!r} (see `mpsprobe envs list`)")
    for name in names:
        shutil.rmtree(known[name]["path"])
        log = known[name]["path"] + ".log"
        if os.path.exists(log):
            os.remove(log)
    return list(names)
