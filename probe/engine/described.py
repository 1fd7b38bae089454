"""The device's last description, kept so that a complete run's re-run answers without torch.

A run's identity (plan.run_key) holds what a worker reads with torch: the torch build, the
device and its name. Starting a worker to read them again costs seconds, only to learn that
every pair is already recorded. So each description a worker gives is kept under the cache
root, keyed by everything that could change it without a new torch build: the interpreter,
the device asked for, the environment variables torch's device backends read, the host and
its boot (a GPU is only swapped, and an OS only upgraded, across a reboot).

The kept description is only ever used to recognise a complete run (Sweep.prepare): any
case still to run is run by workers that describe the device anew.
"""
import hashlib
import json
import os
import socket
import subprocess
import sys

from mpsprobe import cachedirs

# Environment variables that can change which device torch sees, or how it behaves.
_DEVICE_ENV_PREFIXES = ("PYTORCH_", "TORCH_", "CUDA_", "HIP_", "ROCR_", "NVIDIA_", "MTL_",
                        "METAL_", "LD_", "DYLD_")


def _boot():
    """This boot of the machine, or None where it cannot be told cheaply (no key then)."""
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                return f.read().strip() or None
        except OSError:
            return None
    if sys.platform == "darwin":
        try:
            out = subprocess.run(["sysctl", "-n", "kern.boottime"], capture_output=True, text=True,
                                 timeout=5)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() or None if out.returncode == 0 else None
    return None


def key(build, device, python, strict_precision, environ):
    """What the description of `device` under `python`'s torch `build` depends on, as text;
    None where a kept description could not be trusted (no torch build, an unknown boot)."""
    boot = _boot()
    if not build or not boot:
        return None
    return json.dumps({
        "torch": build, "device": device or "auto", "strict_precision": bool(strict_precision),
        "python": os.path.realpath(python or sys.executable), "hostname": socket.gethostname(),
        "boot": boot, "env": {k: v for k, v in sorted(environ.items()) if k.startswith(_DEVICE_ENV_PREFIXES)},
    }, sort_keys=True)


def _path(text):
    return os.path.join(cachedirs.folder("described"), hashlib.sha256(text.encode()).hexdigest()[:32] + ".json")


def load(text):
    """The description kept under key `text`, or None."""
    if not text:
        return None
    try:
        with open(_path(text)) as f:
            kept = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or kept.get("key") != text or not isinstance(kept.get("env"), dict):
        return None
    return kept["env"]


def save(text, env):
    """Keep `env` under key `text`."""
    if not text:
        return
    cachedirs.write_json(_path(text), {"key": text, "env": env})
