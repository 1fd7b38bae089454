"""Targets: the device under test, behind one small interface.

The reference is always the CPU. The target is `mps` where available, and
equally `cuda`, `cpu`, or a backend loaded from a Python file (how the test
suite reproduces MPS's failure modes on machines without a Mac).
"""
import contextlib
import importlib.util
import os
import threading
import time

import torch

from mpsprobe.errors import MpsprobeError


class DeviceError(MpsprobeError):
    """The requested device cannot be used here."""


class Target:
    """A torch device to probe. Subclass to change how calls on it behave."""

    def __init__(self, name):
        self.name = name                # what results are filed under: "mps", "cuda", "cpu"
        self.torch_device = torch.device(name)
        self.backend = None             # a file path for non-standard backends

    @property
    def device_name(self):
        kind = self.torch_device.type
        if kind == "cuda":
            return torch.cuda.get_device_name(self.torch_device)
        if kind == "mps":
            from .environment import mac_gpu_name
            return mac_gpu_name()
        return "CPU"

    def synchronize(self):
        kind = self.torch_device.type
        if kind == "cuda":
            torch.cuda.synchronize(self.torch_device)
        elif kind == "mps":
            torch.mps.synchronize()

    def empty_cache(self):
        """Give the device allocator's cached blocks back (before retrying out of memory)."""
        kind = self.torch_device.type
        if kind == "cuda":
            torch.cuda.empty_cache()
        elif kind == "mps":
            torch.mps.empty_cache()

    # Between pairs the cache is given back only above this: freeing it synchronises
    # the device, and the next pair would then allocate every block anew, on every pair.
    CACHE_KEPT_BYTES = 256 << 20

    def trim_cache(self):
        """Between pairs: empty the cache when it holds more than CACHE_KEPT_BYTES
        beyond what tensors use (no pair pays for another's memory)."""
        kind = self.torch_device.type
        if kind == "cuda":
            counters = self.memory()
            cached = counters["driver_allocated"] - counters["current_allocated"]
        elif kind == "mps":
            cached = torch.mps.driver_allocated_memory() - torch.mps.current_allocated_memory()
        else:
            cached = None
        if cached is None or cached > self.CACHE_KEPT_BYTES:
            self.empty_cache()

    def memory(self):
        """Device memory now, in bytes, as a dict for a result's notes ({} where the device has no counters).

        MPS: what tensors hold (`current_allocated`) and what the Metal driver
        holds for the process (`driver_allocated`). MPS keeps no peak counter,
        so `peak_allocated` there is the highest `current_allocated` seen at the
        points the case was measured; CUDA's is its own peak since the last reset.
        """
        kind = self.torch_device.type
        if kind == "mps":
            current = torch.mps.current_allocated_memory()
            return {"current_allocated": current, "driver_allocated": torch.mps.driver_allocated_memory(),
                    "peak_allocated": current}
        if kind == "cuda":
            # One read of the allocator's counters, unflattened: memory_allocated() and its siblings
            # each flatten every counter into a dict first (over a millisecond a case, twice a case).
            stats = torch.cuda.memory.memory_stats_as_nested_dict(self.torch_device)
            allocated, reserved = stats.get("allocated_bytes", {}), stats.get("reserved_bytes", {})
            return {"current_allocated": allocated.get("all", {}).get("current", 0),
                    "driver_allocated": reserved.get("all", {}).get("current", 0),
                    "peak_allocated": allocated.get("all", {}).get("peak", 0)}
        return {}

    def health_check(self, timeout=10.0):
        """Milliseconds a tiny synchronised op takes on the device, or None if it does not finish in `timeout`.

        After a hung case is killed the GPU may still be busy with its work
        (pytorch#135442); timings taken then are not the op's.
        """
        done = threading.Event()
        took = []

        def tiny():
            started = time.perf_counter()
            try:
                with self.context():
                    x = torch.ones(64, device=self.torch_device)
                    (x + x).sum().item()
                    self.synchronize()
            except Exception:
                return
            took.append((time.perf_counter() - started) * 1000.0)
            done.set()

        threading.Thread(target=tiny, daemon=True).start()
        return took[0] if done.wait(timeout) else None

    def machine_facts(self):
        """Facts of a machine this target simulates, replacing the host's in the run's
        record (runs columns: chip, os_version, virtualized, …); a real device has none."""
        return {}

    def context(self):
        """Entered around every call on the target."""
        return contextlib.nullcontext()

    def compiler(self):
        """Entered around compiling and calling an op's compiled form (the `compiled` pass):
        a test backend changes what the compiler generates here; a real device needs nothing."""
        return contextlib.nullcontext()

    def precision_modes(self):
        """The reduced-precision settings the target's kernels run with (precision.current_modes)."""
        from .precision import current_modes
        return current_modes(self.torch_device)


def _available(kind):
    if kind == "mps":
        return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    if kind == "cuda":
        return torch.cuda.is_available()
    if kind == "cpu":
        return True
    module = getattr(torch, kind, None)
    return bool(module and hasattr(module, "is_available") and module.is_available())


def auto_device():
    for kind in ("mps", "cuda"):
        if _available(kind):
            return kind
    return "cpu"


def load_backend(spec):
    """A Target from "path/to/file.py:factory" (factory() returns a Target)."""
    path, _, attr = spec.partition(":")
    if not os.path.isfile(path):
        raise DeviceError(f"backend file not found: {path}")
    module_spec = importlib.util.spec_from_file_location("mpsprobe_backend", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    factory = getattr(module, attr or "make_target", None)
    if factory is None:
        raise DeviceError(f"{path} defines no {attr or 'make_target'}()")
    target = factory()
    target.backend = os.path.abspath(path)
    return target


def resolve(device="auto", backend=None):
    """The Target for `device` ("auto", "mps", "cuda", "cuda:1", "cpu", …)."""
    if backend:
        return load_backend(backend)
    if device == "auto":
        device = auto_device()
    try:
        kind = torch.device(device).type
    except (RuntimeError, ValueError):
        raise DeviceError(f"unknown device: {device!r}") from None
    if not _available(kind):
        raise DeviceError(f"device {device!r} is not available here")
    return Target(device)
