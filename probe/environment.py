"""Where a run was measured: torch, Python, OS, machine, chip, device.

Runs inside the worker's interpreter, so it describes the torch actually probed.
"""
import os
import platform
import socket
import subprocess
import sys

import torch


def _command(*args):
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _memory_bytes():
    if sys.platform == "darwin":
        value = _command("sysctl", "-n", "hw.memsize")
        return int(value) if value and value.isdigit() else None
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _linux_os():
    try:
        info = platform.freedesktop_os_release()
        return info.get("PRETTY_NAME") or info.get("NAME"), info.get("VERSION_ID")
    except (OSError, AttributeError):
        return "Linux", None


def _linux_chip():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _virtualized():
    if sys.platform == "darwin":
        # 1 on a macOS guest (GitHub's hosted runners are), 0 on bare metal.
        value = _command("sysctl", "-n", "kern.hv_vmm_present")
        return int(value) if value in ("0", "1") else None
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            if " hypervisor" in f.read():
                return 1
        return 0
    return None


def _mac_gpu_cores():
    text = _command("system_profiler", "SPDisplaysDataType")
    for line in (text or "").splitlines():
        if "Total Number of Cores" in line:
            value = line.split(":", 1)[1].strip()
            return int(value) if value.isdigit() else None
    return None


def describe(target):
    """A dict of the runs-table fields that describe this machine and `target`."""
    if sys.platform == "darwin":
        os_name = "macOS"
        os_version = platform.mac_ver()[0] or None
        os_build = _command("sw_vers", "-buildVersion")
        chip = _command("sysctl", "-n", "machdep.cpu.brand_string")
        gpu_cores = _mac_gpu_cores() if target.torch_device.type == "mps" else None
    elif sys.platform.startswith("linux"):
        os_name, os_version = _linux_os()
        os_build, chip, gpu_cores = None, _linux_chip(), None
    else:
        os_name, os_version = platform.system(), platform.version()
        os_build, chip, gpu_cores = None, platform.processor() or None, None
    if target.torch_device.type == "cuda":
        props = torch.cuda.get_device_properties(target.torch_device)
        gpu_cores = props.multi_processor_count
    return {
        "torch_version": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "python": platform.python_version(),
        "os_name": os_name, "os_version": os_version, "os_build": os_build,
        "kernel": platform.release(),
        "machine": platform.machine(),
        "chip": chip, "gpu_cores": gpu_cores,
        "memory_bytes": _memory_bytes(),
        "virtualized": _virtualized(),
        "device": target.name,
        "device_name": target.device_name,
        "backend": target.backend,
        "hostname": socket.gethostname(),
    }
