"""Targets: the device under test, behind one small interface.

The reference is always the CPU. The target is `mps` where available, and
equally `cuda`, `cpu`, or a backend loaded from a Python file (how the test
suite reproduces MPS's failure modes on machines without a Mac).
"""
import contextlib
import importlib.util
import os

import torch


class DeviceError(Exception):
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
            return "Apple MPS"
        return "CPU"

    def synchronize(self):
        kind = self.torch_device.type
        if kind == "cuda":
            torch.cuda.synchronize(self.torch_device)
        elif kind == "mps":
            torch.mps.synchronize()

    def context(self):
        """Entered around every call on the target."""
        return contextlib.nullcontext()


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
