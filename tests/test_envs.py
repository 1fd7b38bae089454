"""`--torch SPEC`: isolated torch environments, their cache, and environment capture."""
import json
import os
import subprocess
import sys
import types

import pytest
import torch

from mpsprobe import envs
from mpsprobe.engine import environment
from mpsprobe.envs import EnvError, parse_spec


TORCH_VERSION = torch.__version__.split("+")[0]   # the torch this suite runs on: 2.13.0 in CI


# -- specs, names, commands ------------------------------------------------------------

@pytest.mark.parametrize("text, kind, requirement", [
    ("current", "current", None),
    ("2.5.1", "version", "torch==2.5.1"),
    ("2.6.0.dev20241001", "version", "torch==2.6.0.dev20241001"),
    ("2.5.1+cpu", "version", "torch==2.5.1+cpu"),
    ("torch>=2.4,<2.6", "requirement", "torch>=2.4,<2.6"),
    ("torch ~= 2.5.0", "requirement", "torch ~= 2.5.0"),
    ("nightly", "nightly", "torch"),
    ("/opt/py/bin/python", "path", None),
    ("./venv", "path", None),
])
def test_spec_kinds(text, kind, requirement):
    spec = parse_spec(text)
    assert (spec.kind, spec.requirement) == (kind, requirement)
    assert spec.pre == (kind == "nightly")


@pytest.mark.parametrize("text", ["numpy==1.0", "2.x", "torch==2.5.1 && echo", "latest", "torchvision"])
def test_bad_specs_are_refused(text):
    with pytest.raises(EnvError, match="expected current, nightly"):
        parse_spec(text)


def test_env_names_differ_for_every_build():
    names = {envs.env_name(parse_spec(s), "3.11", site)
             for s in ("2.5.1", "2.5.1+cpu", "torch>=2.4", "torch>=2.5", "nightly")
             for site in (False, True)}
    assert len(names) == 10
    assert envs.env_name(parse_spec("2.5.1"), "3.12") == "torch-2.5.1-py3.12"
    assert all("/" not in n and " " not in n for n in names)


def test_build_commands_uv_and_pip():
    nightly = parse_spec("nightly")
    uv_create, uv_install = envs.build_commands(nightly, "/c/e", "/usr/bin/python3", "uv")
    assert uv_create[:2] == ["uv", "venv"] and uv_create[-1] == "/c/e"
    assert uv_install[:3] == ["uv", "pip", "install"]
    assert ["--prerelease", "allow"] == uv_install[uv_install.index("--prerelease"):][:2]
    assert envs.NIGHTLY_INDEX in uv_install and "expecttest" in uv_install
    pip_create, pip_install = envs.build_commands(parse_spec("2.5.1"), "/c/e", "/py", "pip",
                                                  inherit_site=True)
    assert pip_create == ["/py", "-m", "venv", "--system-site-packages", "/c/e"]
    assert pip_install[0] == envs.env_python("/c/e") and "torch==2.5.1" in pip_install
    assert "--pre" not in pip_install and "--extra-index-url" not in pip_install


def test_installer_prefers_uv(monkeypatch):
    monkeypatch.delenv("MPSPROBE_INSTALLER", raising=False)
    monkeypatch.setattr(envs.shutil, "which", lambda name: "/usr/bin/uv" if name == "uv" else None)
    assert envs.installer() == "uv"
    monkeypatch.setenv("MPSPROBE_INSTALLER", "pip")
    assert envs.installer() == "pip"
    monkeypatch.delenv("MPSPROBE_INSTALLER")
    monkeypatch.setattr(envs.shutil, "which", lambda name: None)
    assert envs.installer() == "pip"


def test_cache_root(monkeypatch, tmp_path):
    monkeypatch.setenv("MPSPROBE_CACHE", str(tmp_path / "c"))
    assert envs.envs_dir() == str(tmp_path / "c" / "envs")


def test_environments_and_wheels_share_one_cache_root_on_a_mac(monkeypatch, tmp_path):
    # Environments went under ~/Library/Caches and wheels under ~/.cache on a Mac.
    import platformdirs.macos
    from mpsprobe import cachedirs
    from mpsprobe.ops.declared import history
    for name in ("MPSPROBE_CACHE", "MPSPROBE_WHEEL_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(cachedirs.platformdirs, "user_cache_dir",
                        lambda appname, appauthor=None: platformdirs.macos.MacOS(appname).user_cache_dir)
    mac_root = str(tmp_path / "Library" / "Caches" / "mpsprobe")
    assert envs.envs_dir() == os.path.join(mac_root, "envs")
    assert history.default_cache() == os.path.join(mac_root, "wheels")


PIP_OFFLINE = """\
Looking in links: /nowhere
ERROR: Could not find a version that satisfies the requirement torch==2.5.1 (from versions: none)
ERROR: No matching distribution found for torch==2.5.1
"""
UV_OFFLINE = """\
  × No solution found when resolving dependencies:
  ╰─▶ Because torch==2.5.1 was not found in the package registry and you require
      torch==2.5.1, we can conclude that your requirements are unsatisfiable.
"""


def test_installer_failure_line():
    assert envs._failure_line(PIP_OFFLINE).startswith("ERROR: Could not find a version")
    assert envs._failure_line(UV_OFFLINE).startswith("Because torch==2.5.1 was not found")


def test_list_and_rm(monkeypatch, tmp_path, run_cli):
    monkeypatch.setenv("MPSPROBE_CACHE", str(tmp_path))
    ready = tmp_path / "envs" / "torch-2.5.1-py3.11"
    (ready / "lib").mkdir(parents=True)
    (ready / "lib" / "blob").write_bytes(b"x" * 1000)
    (ready / envs.MARKER).write_text(json.dumps({"torch_version": "2.5.1", "python": "3.11.9"}))
    (tmp_path / "envs" / "torch-2.6.0-py3.11.building-123").mkdir()
    listed = run_cli("envs", "list", "--json")
    found = {e["name"]: e for e in json.loads(listed.stdout)}
    assert found["torch-2.5.1-py3.11"]["state"] == "ready"
    assert found["torch-2.5.1-py3.11"]["size_bytes"] >= 1000
    assert found["torch-2.6.0-py3.11.building-123"]["state"] == "incomplete"
    assert "torch 2.5.1" in run_cli("envs", "list").output
    missing = run_cli("envs", "rm", "torch-9-py3.11")
    assert missing.exit_code == 2 and "no cached environment" in missing.output
    assert run_cli("envs", "rm").exit_code == 2
    assert run_cli("envs", "rm", "torch-2.5.1-py3.11").exit_code == 0
    assert not ready.exists()
    assert run_cli("envs", "rm", "--all").exit_code == 0
    assert envs.list_envs() == []


# -- environment capture, from recorded command outputs ---------------------------------

IOREG = """+-o AGXAcceleratorG14G  <class AGXAcceleratorG14G, id 0x1000003a1>
    {
      "gpu-core-count" = 10
      "model" = "Apple M2"
    }
"""
SYSTEM_PROFILER_JSON = json.dumps({"SPDisplaysDataType": [
    {"_name": "kHW_AppleM1MaxItem", "sppci_cores": "32", "sppci_model": "Apple M1 Max"}]})

MAC = {
    ("sw_vers", "-productVersion"): "15.3.1",
    ("sw_vers", "-buildVersion"): "24D70",
    ("sysctl", "-n", "machdep.cpu.brand_string"): "Apple M2",
    ("sysctl", "-n", "hw.model"): "Mac14,2",
    ("sysctl", "-n", "hw.memsize"): "17179869184",
    ("sysctl", "-n", "kern.hv_vmm_present"): "1",
    ("ioreg", "-rd1", "-c", "AGXAccelerator"): IOREG,
}


def _target(kind, index=None):
    return types.SimpleNamespace(torch_device=types.SimpleNamespace(type=kind, index=index),
                                 name=kind, device_name=f"{kind} device", backend=None)


def _machine(monkeypatch, platform_name, commands, files=None):
    monkeypatch.setattr(environment.sys, "platform", platform_name)
    monkeypatch.setattr(environment, "_command", lambda *args: commands.get(args))
    monkeypatch.setattr(environment, "_read", lambda path: (files or {}).get(path))


def test_capture_mac(monkeypatch):
    _machine(monkeypatch, "darwin", MAC)
    env = environment.describe(_target("mps"))
    assert (env["os_name"], env["os_version"], env["os_build"]) == ("macOS", "15.3.1", "24D70")
    assert (env["chip"], env["hw_model"], env["gpu_cores"]) == ("Apple M2", "Mac14,2", 10)
    assert env["memory_bytes"] == 16 * 2**30 and env["virtualized"] == 1
    assert env["torch_version"] == torch.__version__
    assert env["torch_version_key"] == environment.version_key(torch.__version__)
    assert env["cuda_version"] is None and env["gpu_driver"] is None


def test_capture_mac_fallbacks(monkeypatch):
    commands = dict(MAC)
    del commands[("ioreg", "-rd1", "-c", "AGXAccelerator")]
    del commands[("sw_vers", "-productVersion")]
    commands[("sysctl", "-n", "kern.hv_vmm_present")] = "0"
    commands[("system_profiler", "-json", "SPDisplaysDataType")] = SYSTEM_PROFILER_JSON
    _machine(monkeypatch, "darwin", commands)
    monkeypatch.setattr(environment.platform, "mac_ver", lambda: ("14.6", ("", "", ""), "arm64"))
    env = environment.describe(_target("mps"))
    assert (env["gpu_cores"], env["os_version"], env["virtualized"]) == (32, "14.6", 0)
    assert environment.describe(_target("cpu"))["gpu_cores"] is None  # only asked for mps


LINUX_FILES = {
    "/etc/os-release": 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n',
    "/proc/cpuinfo": "processor\t: 0\nmodel name\t: AMD EPYC 7763 64-Core Processor\n"
                     "flags\t\t: fpu vme hypervisor avx2\n",
    "/proc/meminfo": "MemTotal:       65863248 kB\nMemFree:  1 kB\n",
    "/sys/devices/virtual/dmi/id/product_name": "Standard_NC24ads_A100_v4\n",
}


def test_capture_linux_cuda(monkeypatch):
    commands = {("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"):
                "550.54.15\n550.54.15"}
    _machine(monkeypatch, "linux", commands, LINUX_FILES)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: types.SimpleNamespace(multi_processor_count=108))
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    env = environment.describe(_target("cuda", 0))
    assert (env["os_name"], env["os_version"]) == ("Ubuntu", "22.04")
    assert env["chip"] == "AMD EPYC 7763 64-Core Processor"
    assert env["hw_model"] == "Standard_NC24ads_A100_v4"
    assert env["memory_bytes"] == 65863248 * 1024
    assert (env["gpu_cores"], env["cuda_version"], env["gpu_driver"]) == (108, "12.4", "550.54.15")
    assert env["virtualized"] == 1   # no systemd-detect-virt: the cpuinfo flag decides


def test_capture_linux_bare_metal_and_missing_files(monkeypatch):
    files = dict(LINUX_FILES, **{"/proc/cpuinfo": "model name\t: Xeon\nflags\t\t: fpu avx2\n"})
    _machine(monkeypatch, "linux", {}, files)
    assert environment.describe(_target("cpu"))["virtualized"] == 0
    _machine(monkeypatch, "linux", {("systemd-detect-virt", "--vm"): "kvm"}, {})
    env = environment.describe(_target("cpu"))
    assert env["virtualized"] == 1 and env["os_name"] == "Linux" and env["memory_bytes"] is None


# -- end to end: real environments, real workers ------------------------------------------

@pytest.fixture(scope="session")
def _run_add(fake_mps, run_cli):
    def _run_add(db, torch_spec, env, *extra):
        return run_cli("run", "--torch", torch_spec, "--backend", fake_mps, "--ops", "add",
                       "--dtypes", "float32", "--samples", 1, "--no-timing", "--workers", 1,
                       "--passes", "forward", "--db", db, "--json", *extra, env=env)
    return _run_add


@pytest.fixture(scope="session")
def torch_env(tmp_path_factory, _run_add):
    """`--torch <this suite's torch version>` built once per session.

    It inherits this interpreter's site-packages (MPSPROBE_ENV_SYSTEM_SITE), so
    pip finds the requested torch already installed instead of copying a
    gigabyte; the slow test below builds a fully isolated one.
    """
    cache = tmp_path_factory.mktemp("cache")
    env = {"MPSPROBE_CACHE": str(cache), "MPSPROBE_ENV_SYSTEM_SITE": "1",
           "MPSPROBE_INSTALLER": "pip"}
    db = str(tmp_path_factory.mktemp("envrun") / "versioned.db")
    result = _run_add(db, TORCH_VERSION, env)
    assert result.exit_code == 0, result.output
    return env, db, result


@pytest.mark.slow
def test_torch_version_end_to_end(torch_env, rows, run_cli, summary):
    env, db, result = torch_env
    assert "building a torch environment for torch==" + TORCH_VERSION in result.output
    assert summary(result)["torch"] == torch.__version__
    run = rows(db, "SELECT * FROM runs")[0]
    python = json.loads(run["options"])["python"]
    assert python.startswith(env["MPSPROBE_CACHE"]) and python != sys.executable
    assert run["torch_version_key"] == environment.version_key(torch.__version__)
    assert rows(db, "SELECT status FROM results") == [{"status": "pass"}]
    listed = json.loads(run_cli("envs", "list", "--json", env=env).stdout)
    assert [(e["state"], e["torch_version"]) for e in listed] == [("ready", torch.__version__)]


@pytest.mark.slow
def test_cached_environment_is_reused_and_a_path_works(torch_env, tmp_path, monkeypatch, _run_add, rows):
    env, db, _ = torch_env
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    said = []
    python = envs.ensure(TORCH_VERSION, say=said.append)
    assert said == []          # nothing built: the session's environment is reused
    assert python == json.loads(rows(db, "SELECT options FROM runs")[0]["options"])["python"]
    by_path = _run_add(tmp_path / "path.db", python, env)
    assert by_path.exit_code == 0, by_path.output
    run = rows(tmp_path / "path.db", "SELECT torch_version, options FROM runs")[0]
    assert run["torch_version"] == torch.__version__
    assert json.loads(run["options"])["python"] == python


@pytest.mark.slow
def test_bad_specs_error_cleanly(tmp_path, _run_add):
    db = tmp_path / "x.db"
    for spec, message in [("bogus!", "expected current, nightly"),
                          (str(tmp_path / "no" / "python"), "no executable Python")]:
        result = _run_add(db, spec, None)
        assert result.exit_code == 2 and message in result.output
        # `run` first says what it will do; then the error, on one line.
        lines = [l for l in result.output.strip().splitlines()
                 if not l.startswith(("mpsprobe run:", "loading the op catalogue"))]
        assert len(lines) == 1, result.output
    assert not db.exists()


@pytest.mark.slow
def test_python_without_torch_is_refused(tmp_path, _run_add):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    result = _run_add(tmp_path / "x.db", str(bare), None)   # a venv folder is accepted too
    assert result.exit_code == 2 and "cannot import torch" in result.output


@pytest.mark.slow
def test_offline_install_fails_with_one_line(tmp_path, _run_add):
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    env = {"MPSPROBE_CACHE": str(tmp_path / "cache"), "MPSPROBE_INSTALLER": "pip",
           "MPSPROBE_ENV_SYSTEM_SITE": None, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(empty)}
    result = _run_add(tmp_path / "x.db", TORCH_VERSION, env)
    assert result.exit_code == 2
    error = result.output.strip().splitlines()[-1]
    assert error.startswith(f"Error: could not install torch=={TORCH_VERSION} (pip): ERROR:")
    assert "offline?" in error
    cached = os.listdir(tmp_path / "cache" / "envs")
    assert all(name.endswith(".log") for name in cached)   # no half-built environment left


@pytest.mark.skipif(not os.environ.get("MPSPROBE_SLOW_TESTS"),
                    reason="builds a fully isolated torch environment (~1 GB, ~1 min): "
                           "set MPSPROBE_SLOW_TESTS=1")
@pytest.mark.slow
def test_fully_isolated_environment(tmp_path, _run_add, rows):
    env = {"MPSPROBE_CACHE": str(tmp_path / "cache"), "MPSPROBE_ENV_SYSTEM_SITE": None}
    result = _run_add(tmp_path / "iso.db", TORCH_VERSION, env)
    assert result.exit_code == 0, result.output
    python = json.loads(rows(tmp_path / "iso.db", "SELECT options FROM runs")[0]["options"])["python"]
    where = subprocess.run([python, "-c", "import torch; print(torch.__file__)"],
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(tmp_path / "cache"))   # its own torch, not this interpreter's
