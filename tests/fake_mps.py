"""FAKE MPS: a test-only target that reproduces MPS's failure modes on the CPU.

It is NOT a measurement of anything. It exists so the whole pipeline can be
driven through every way a real MPS device fails, on machines without a Mac:

- an op with no MPS kernel raises NotImplementedError with MPSFallback.mm's
  text, or, with PYTORCH_ENABLE_MPS_FALLBACK=1, warns and runs on the CPU;
- an op on MPSFallback.mm's explicit fallback list always warns and runs;
  the warning is TORCH_WARN_ONCE: once per process, unless warn-always is on;
- float64 inputs are refused when moved to the device, as MPS does;
- an op gives wrong numbers in one dtype;
- an op aborts the process (a hard crash); an op hangs.

Which aten op does what is set by the FAKE_MPS environment variable (JSON,
keys as in DEFAULTS), so each test picks its own ops.

Use: mpsprobe run --backend tests/fake_mps.py --ops ...
"""
import json
import os
import time
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mpsprobe.engine.aten import aten_name
from mpsprobe.engine.devices import Target

FALLBACK_WARNING = (
    "The operator '{op}' is not currently supported on the MPS backend and will fall back "
    "to run on the CPU. This may have performance implications.")
NOT_IMPLEMENTED = (
    "The operator '{op}' is not currently implemented for the MPS device. If you want this "
    "op to be considered for addition please comment on "
    "https://github.com/pytorch/pytorch/issues/141287 and mention use-case, that resulted "
    "in missing op as well as commit hash 0000000. As a temporary fix, you can set the "
    "environment variable `PYTORCH_ENABLE_MPS_FALLBACK=1` to use the CPU as a fallback for "
    "this op. WARNING: this will be slower than running natively on MPS.")
FLOAT64_REFUSED = (
    "Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support "
    "float64. Please use float32 instead.")

DEFAULTS = {
    "not_implemented": ["aten::histc"],          # like ops MPS has no kernel for
    "fallback": ["aten::bitwise_and.Tensor"],    # like MPSFallback.mm's explicit list
    "wrong": {"aten::exp": "float16"},           # native, but wrong numbers in this dtype
    "abort": ["aten::erfinv"],
    "hang": ["aten::lgamma"],
    "refuse_float64": True,
}

# TORCH_WARN_ONCE keeps one flag for the whole fallback function: after the
# first fallback of any op, a process says nothing more unless warn-always is on.
_warned_once = False


def _config():
    config = dict(DEFAULTS)
    config.update(json.loads(os.environ.get("FAKE_MPS", "{}")))
    return config


def _tensor_dtypes(args, kwargs):
    leaves = torch.utils._pytree.tree_flatten((args, kwargs))[0]
    return {x.dtype for x in leaves if isinstance(x, torch.Tensor)}


class FakeMPSMode(TorchDispatchMode):
    def __init__(self, config):
        super().__init__()
        self.config = config

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        global _warned_once
        kwargs = kwargs or {}
        name = aten_name(func)
        config = self.config
        if config["refuse_float64"] and name in ("aten::_to_copy", "aten::empty_strided", "aten::copy_"):
            if torch.float64 in _tensor_dtypes(args, kwargs) or kwargs.get("dtype") == torch.float64:
                raise TypeError(FLOAT64_REFUSED)
        if name in config["abort"]:
            os.abort()
        if name in config["hang"]:
            while True:
                time.sleep(3600)
        falls_back = name in config["fallback"]
        if name in config["not_implemented"]:
            if os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK", "0") in ("", "0"):
                raise NotImplementedError(NOT_IMPLEMENTED.format(op=name))
            falls_back = True
        if falls_back and (torch.is_warn_always_enabled() or not _warned_once):
            _warned_once = True
            warnings.warn(FALLBACK_WARNING.format(op=name), UserWarning)
        out = func(*args, **kwargs)
        wrong_dtype = config["wrong"].get(name)
        if wrong_dtype and isinstance(out, torch.Tensor) and str(out.dtype) == f"torch.{wrong_dtype}":
            out = out * 1.25 + 0.5
        return out


class FakeMPS(Target):
    """A CPU device dressed as MPS. Results are filed under device 'fake-mps'."""

    def __init__(self):
        super().__init__("cpu")
        self.name = "fake-mps"
        self.config = _config()

    @property
    def device_name(self):
        return "FAKE MPS (test backend on the CPU)"

    def context(self):
        return FakeMPSMode(self.config)


def make_target():
    return FakeMPS()
