"""Where a run was measured: torch, Python, OS, machine, chip, device.

`describe()` runs inside the worker's interpreter, so it describes the torch
actually probed. It must work on every torch from 2.1 on: anything a version
or a machine lacks is recorded as null, never an error.

Every fact comes from a command or a file through `_command` / `_read`, so the
parsing is tested with recorded outputs of machines this code never runs on.
"""
import json
import platform
import re
import socket
import subprocess
import sys

from mpsprobe.versions import major_version, version_key  # noqa: F401 (recorded per run)


def _command(*args):
    """The stripped stdout of a command, or None if it is missing or fails."""
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _int(text):
    text = (text or "").strip()
    return int(text) if text.isdigit() else None


# -- macOS ------------------------------------------------------------------

def mac_gpu(profiler_json=None):
    """(model, GPU core count) of a Mac's GPU from `system_profiler SPDisplaysDataType -json`.

    Apple silicon reports {"sppci_model": "Apple M2 Max", "sppci_cores": "38"};
    either is None when missing.
    """
    text = profiler_json if profiler_json is not None else _command(
        "system_profiler", "-json", "SPDisplaysDataType")
    try:
        for gpu in json.loads(text or "{}").get("SPDisplaysDataType", []):
            model, cores = gpu.get("sppci_model"), _int(str(gpu.get("sppci_cores") or ""))
            if model or cores:
                return model, cores
    except (ValueError, AttributeError):
        pass
    return None, None


def mac_gpu_name(profiler_json=None, brand=None):
    """What an MPS device is: "Apple M2 Max (38-core GPU)"; the CPU's brand string where
    System Profiler says nothing; "Apple MPS" only when neither answers."""
    model, cores = mac_gpu(profiler_json)
    model = model or brand or _command("sysctl", "-n", "machdep.cpu.brand_string")
    if not model:
        return "Apple MPS"
    return f"{model} ({cores}-core GPU)" if cores else model


def _mac_gpu_cores():
    """GPU core count of an Apple-silicon Mac, from the IORegistry or System Profiler."""
    text = _command("ioreg", "-rd1", "-c", "AGXAccelerator")
    match = re.search(r'"gpu-core-count"\s*=\s*(\d+)', text or "")
    if match:
        return int(match.group(1))
    return mac_gpu()[1]


def _mac():
    version = _command("sw_vers", "-productVersion") or platform.mac_ver()[0] or None
    return {
        "os_name": "macOS", "os_version": version,
        "os_build": _command("sw_vers", "-buildVersion"),
        "chip": _command("sysctl", "-n", "machdep.cpu.brand_string"),
        "hw_model": _command("sysctl", "-n", "hw.model"),
        "memory_bytes": _int(_command("sysctl", "-n", "hw.memsize")),
        "virtualized": mac_virtualized(_command("sysctl", "-n", "kern.hv_vmm_present")),
    }


# What a macOS guest's GPU calls itself (GitHub's hosted arm64 runners show it).
PARAVIRTUAL_GPU = "Apple Paravirtual device"


def mac_virtualized(hv_vmm_present, environ=None, gpu_model=None):
    """1 on a macOS guest, 0 on bare metal, None when unknown.

    `kern.hv_vmm_present` is 1 inside a VM. GitHub's hosted macOS runners are
    VMs (about 1 GB for MPS, outputs unlike a real Mac's: actions/runner-images
    #9918, #11899, #14380); they say so in their environment too, and their GPU
    is the "Apple Paravirtual device", either of which counts even where the
    sysctl is missing.
    """
    import os
    environ = os.environ if environ is None else environ
    if environ.get("GITHUB_ACTIONS") == "true" and environ.get("RUNNER_ENVIRONMENT") == "github-hosted":
        return 1
    if gpu_model and "paravirtual" in gpu_model.lower():
        return 1
    return _int(hv_vmm_present)


# -- Linux ------------------------------------------------------------------

def _os_release(text):
    fields = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip('"').strip("'")
    return fields


def _linux_virtualized():
    kind = _command("systemd-detect-virt", "--vm")  # a container is not a VM
    if kind:  # bare metal prints "none" and exits 1, so arrives here as None
        return 1
    cpuinfo = _read("/proc/cpuinfo")
    if cpuinfo is None:
        return None
    return 1 if re.search(r"^flags\s*:.*\bhypervisor\b", cpuinfo, re.M) else 0


def _linux():
    release = _os_release(_read("/etc/os-release") or _read("/usr/lib/os-release"))
    chip = None
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            chip = line.split(":", 1)[1].strip()
            break
    meminfo = re.search(r"^MemTotal:\s+(\d+) kB", _read("/proc/meminfo") or "", re.M)
    return {
        "os_name": release.get("NAME") or "Linux",
        "os_version": release.get("VERSION_ID"),
        "os_build": release.get("PRETTY_NAME"),
        "chip": chip or platform.processor() or None,
        "hw_model": (_read("/sys/devices/virtual/dmi/id/product_name") or "").strip() or None,
        "memory_bytes": int(meminfo.group(1)) * 1024 if meminfo else None,
        "virtualized": _linux_virtualized(),
    }


def _nvidia_driver():
    """The NVIDIA driver version (one driver serves every GPU of a host)."""
    text = _command("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
    lines = (text or "").splitlines()
    return lines[0].strip() if lines else None


# -- the record ---------------------------------------------------------------

def _translated():
    """1 when this Python runs under Rosetta (x86 code on Apple silicon), 0 when
    native on a Mac, None elsewhere."""
    if sys.platform != "darwin":
        return None
    return _int(_command("sysctl", "-n", "sysctl.proc_translated")) or 0


def device_env(environ=None):
    """The environment settings that change how the MPS backend behaves."""
    import os
    environ = os.environ if environ is None else environ
    return {k: v for k, v in sorted(environ.items())
            if k.startswith("PYTORCH_MPS_") or k == "PYTORCH_ENABLE_MPS_FALLBACK"}


def runner_label(explicit=None, environ=None):
    """Which machine of a fleet ran this: the label given (`run --runner-label`, or
    MPSPROBE_RUNNER_LABEL, which the fleet's workflow sets to its matrix label), else
    the runner's name under GitHub Actions, else None (a laptop)."""
    import os
    environ = os.environ if environ is None else environ
    if explicit:
        return explicit
    if environ.get("MPSPROBE_RUNNER_LABEL"):
        return environ["MPSPROBE_RUNNER_LABEL"]
    if environ.get("GITHUB_ACTIONS") == "true" and environ.get("RUNNER_NAME"):
        return environ["RUNNER_NAME"]
    return None


def command_line(argv=None):
    """The exact command this process was started with, as a shell would take it back."""
    import os
    import shlex
    argv = sys.argv if argv is None else argv
    if not argv:
        return None
    return shlex.join([os.path.basename(argv[0]) or argv[0], *argv[1:]])


def describe(target):
    """A dict of the runs-table fields that describe this machine and `target`.

    A test target may stand in for a machine it simulates (Target.machine_facts):
    its facts replace the host's, and its `backend` still marks every result as
    a test backend's."""
    import torch
    if sys.platform == "darwin":
        facts = _mac()
    elif sys.platform.startswith("linux"):
        facts = _linux()
    else:
        facts = {"os_name": platform.system(), "os_version": platform.version(),
                 "chip": platform.processor() or None}
    kind = target.torch_device.type
    gpu_cores = cuda_version = gpu_driver = None
    device_name = target.device_name
    if kind == "mps" and sys.platform == "darwin":
        gpu_cores = _mac_gpu_cores()
        if PARAVIRTUAL_GPU.lower() in (device_name or "").lower():
            facts["virtualized"] = 1   # a guest whose sysctl says nothing still names its GPU
    if kind == "cuda":
        props = torch.cuda.get_device_properties(target.torch_device)
        gpu_cores = props.multi_processor_count  # streaming multiprocessors
        cuda_version = getattr(torch.version, "cuda", None) or getattr(torch.version, "hip", None)
        gpu_driver = _nvidia_driver()
    version = torch.__version__
    record = {
        "torch_version": version,
        "torch_version_key": version_key(version),
        "torch_git": getattr(torch.version, "git_version", None),
        "python": platform.python_version(),
        "os_name": facts.get("os_name"), "os_version": facts.get("os_version"),
        "os_build": facts.get("os_build"),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "chip": facts.get("chip"), "hw_model": facts.get("hw_model"),
        "gpu_cores": gpu_cores,
        "memory_bytes": facts.get("memory_bytes"),
        "virtualized": facts.get("virtualized"),
        "cuda_version": cuda_version, "gpu_driver": gpu_driver,
        "device": target.name,
        "device_name": device_name,
        "backend": target.backend,
        "hostname": socket.gethostname(),
        "translated": _translated(),
        "device_env": device_env(),
    }
    simulated = getattr(target, "machine_facts", dict)()
    if simulated:
        record.update(simulated)
        record["torch_version_key"] = version_key(record["torch_version"])
    return record
