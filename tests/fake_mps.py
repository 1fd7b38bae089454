"""FAKE MPS: a test-only target that reproduces MPS's failure modes on the CPU.

It is NOT a measurement of anything, and it lives under tests/ only. It exists
so the whole pipeline can be driven through every way a real MPS device fails,
on machines without a Mac, with MPS's exact texts (see messages.py for where
each comes from):

- an op with no MPS kernel raises NotImplementedError with MPSFallback.mm's
  text (or an older torch's: `wording: "1.12"`, "is not current implemented";
  `wording: "2.0"`, the one pointing at issue 77764), or,
  with PYTORCH_ENABLE_MPS_FALLBACK=1, warns and runs on the CPU. Like
  MPSFallback.mm (a `static` read in TORCH_LIBRARY_IMPL), the switch is read
  once, when the backend loads;
- the ops MPSFallback.mm always sends to the CPU (FORCED_FALLBACK) warn and run;
  the warning is TORCH_WARN_ONCE: once per process, unless warn-always is on;
- a simulated macOS (`macos: "13.5"`): below 14, bfloat16 and complex tensors
  are refused when made on the device, and the kernels' own macOS-gated CPU
  fallbacks warn in their own words (KERNEL_FALLBACKS);
- float64 inputs are refused when moved to the device, as MPS does;
- an op gives wrong numbers in one dtype;
- an op aborts the process after printing what macOS or libc++ print first
  (a Metal failed assertion, an uncaught C++ exception naming the op, or
  MPSGraph's compiler error);
- an op hangs (always, or in the first process only); an op's error surfaces
  only at synchronize; an op raises a given MPS text; an op exits the process;
- an op runs out of memory, always or until the cache is emptied;
- an op refuses its input as over MPS's limit of 16 dimensions (a size limit),
  or refuses inputs of one rank only, in MPS's words (3-D convolution);
- a backward kernel is missing (softplus_backward, as on MPS for years), and
  another returns gradients off by a factor;
- under torch.compile (the compiled pass, through `compiler()`): an op Inductor has no
  lowering for, so the generated code calls the eager kernel (`compiled_no_lowering`), an
  op whose generated kernel gives wrong numbers (`compiled_wrong`) and an op whose lowering
  raises, failing the compile (`compiled_broken`), as a new backend's compiler might.
  Inductor's and AOTAutograd's graph caches are off meanwhile (their keys do not see lowerings);
- a simulated Mac (`machine: {"chip": "Apple M1", "gpu_cores": 8, "macos": "13.6",
  "virtualized": 0}`): the run records that machine's facts in place of the host's
  (its device name still says test backend, and so does every result), so a fleet
  of Macs can be simulated on one Linux box. Its `macos` is the simulated macOS;
  `torch` files the run under another torch release (the device name says which
  torch really ran underneath).

Which aten op does what is set by the FAKE_MPS environment variable (JSON,
keys as in DEFAULTS), so each test picks its own ops.

Use: mpsprobe run --backend tests/fake_mps.py --ops ...
"""
import contextlib
import json
import os
import sys
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
NOT_IMPLEMENTED_77764 = (  # torch 1.13 to 2.5
    "The operator '{op}' is not currently implemented for the MPS device. If you want this op to "
    "be added in priority during the prototype phase of this feature, please comment on "
    "https://github.com/pytorch/pytorch/issues/77764. As a temporary fix, you can set the "
    "environment variable `PYTORCH_ENABLE_MPS_FALLBACK=1` to use the CPU as a fallback for "
    "this op. WARNING: this will be slower than running natively on MPS.")
NOT_IMPLEMENTED_1_12 = (
    "The operator '{op}' is not current implemented for the MPS device. If you want this op to "
    "be added in priority during the prototype phase of this feature, please comment on "
    "https://github.com/pytorch/pytorch/issues/77764. As a temporary fix, you can set the "
    "environment variable `PYTORCH_ENABLE_MPS_FALLBACK=1` to use the CPU as a fallback for "
    "this op. WARNING: this will be slower than running natively on MPS.")
# `wording`: the not-implemented text of an older torch.
WORDINGS = {"1.12": NOT_IMPLEMENTED_1_12, "2.0": NOT_IMPLEMENTED_77764}
FLOAT64_REFUSED = (
    "Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support "
    "float64. Please use float32 instead.")
BFLOAT16_NEEDS_14 = "MPS BFloat16 is only supported on MacOS 14 or newer"
COMPLEX_NEEDS_14 = "MPS complex types are only supported on MacOS 14.0 or newer."
RANK_LIMIT = "MPS supports tensors with dimensions <= 16, but got {rank}."
OUT_OF_MEMORY = (
    "MPS backend out of memory (MPS allocated: 17.36 GB, other allocations: 613.56 MB, max "
    "allowed: 18.13 GB). Tried to allocate 192.00 MB on private pool. Use "
    "PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations "
    "(may cause system failure).")
# What an asynchronous failure looks like when it surfaces at torch.mps.synchronize().
AT_SYNCHRONIZE = "[srcBuf length] > 0 INTERNAL ASSERT FAILED at \"aten/src/ATen/native/mps/OperationUtils.mm\""
# What a dying process prints first (stderr), by kind of abort.
ABORT_LINES = {
    "assertion": ("/AppleInternal/Library/BuildRoots/0/Library/Caches/com.apple.xbs/Sources/"
                  "MetalPerformanceShaders/MPSCore/Types/MPSNDArray.mm:124: failed assertion "
                  "`[MPSNDArrayDescriptor sliceDimension:withSubrange:] error: subRange.start (6) is "
                  "not less than length of dimension[0] (6)'"),
    "ndarray": ("/AppleInternal/Library/BuildRoots/0/Library/Caches/com.apple.xbs/Sources/"
                "MetalPerformanceShaders/MPSCore/Types/MPSNDArray.mm:850: failed assertion "
                "`[MPSNDArray initWithDevice:descriptor:isTextureBacked:] Error: total bytes of NDArray > 2**32'"),
    "uncaught": ("libc++abi: terminating due to uncaught exception of type c10::NotImplementedError: "
                 + NOT_IMPLEMENTED),
    # MPSGraph's compiler rejecting a kernel's graph (pytorch#78879): the MLIR error, then LLVM's.
    "mlir": ('loc("mps_multiply"("(mpsFileLoc): /AppleInternal/Library/BuildRoots/0/Library/Caches/com.apple.xbs/'
             'Sources/MetalPerformanceShadersGraph/mpsgraph/MetalPerformanceShadersGraph/Core/Files/'
             'MPSGraphUtilities.mm":219:0)): error: input types \'tensor<5xf32>\' and \'tensor<5xi1>\' are not '
             "broadcast compatible\nLLVM ERROR: Failed to infer result type(s)."),
    "plain": None,
}

# MPSFallback.mm's `TORCH_LIBRARY_IMPL(aten, MPS, m)`: the ops that always run on
# the CPU (as on PyTorch's main branch), named as its warning names them.
FORCED_FALLBACK = ("aten::embedding_renorm_", "aten::linalg_svd", "aten::linalg_svd.U", "aten::col2im",
                   "aten::upsample_nearest3d.vec")
# A dispatch mode sees composite ops after they decompose: the names it sees for the listed ones.
_DECOMPOSED = {"aten::_linalg_svd": "aten::linalg_svd", "aten::upsample_nearest3d": "aten::upsample_nearest3d.vec"}

_FALLING_BACK = "Falling back on CPU. This may have performance implications."
# Kernels that fall back to the CPU on their own below a macOS version, in their own words
# (torch 2.6's nonzero; torch 2.0-2.3 for the others). The upsample text names no op.
KERNEL_FALLBACKS = {
    "aten::nonzero": ("14.0", "MPS: nonzero op is supported natively starting from macOS 14.0. " + _FALLING_BACK),
    "aten::median": ("13.0", "MPS: median op is supported natively starting from macOS 13.0. " + _FALLING_BACK),
    "aten::cumsum": ("13.0", "torch.cumsum supported by MPS on MacOS 13+, please upgrade"),
    "aten::upsample_bilinear2d": ("13.0", "MPS: passing scale factor to upsample ops is supported natively "
                                          "starting from macOS 13.0. " + _FALLING_BACK),
}

DEFAULTS = {
    "not_implemented": ["aten::histc", "aten::softplus_backward"],  # like ops MPS has no kernel for
    "fallback": list(FORCED_FALLBACK),           # MPSFallback.mm's explicit list
    "wrong": {"aten::exp": "float16"},           # native, but wrong numbers in this dtype
    "scaled": {"aten::sigmoid_backward": 2.0},   # native, but every value off by this factor
    "abort": {"aten::erfinv": "assertion"},      # op -> what it prints first (ABORT_LINES)
    "hang": ["aten::lgamma"],
    "hang_once": [],                             # ops that hang in the first process only (marker file
    "state_dir": None,                           #   in state_dir): the device is free again after the kill
    "exit": [],                                  # ops that end the process with os._exit(3)
    "raise": {},                                 # op -> an MPS text it raises as a RuntimeError
    "refuse_float64": True,
    "macos": None,                               # e.g. "13.5": refusals and fallbacks of that macOS
    "wording": None,                             # "1.12", "2.0": that torch's not-implemented text
    "sync_error": [],                            # ops whose error surfaces at synchronize only
    "out_of_memory": [],                         # ops that always run out of memory
    "out_of_memory_once": [],                    # ops that run out of memory until the cache is emptied after
    "rank_limit": [],                            # ops that refuse inputs of any rank (as if > 16)
    "refuse_rank": {},                           # op -> [rank, MPS text]: raised for inputs of that
                                                 #   rank only (5-D convolution below macOS 13.2)
    "machine": None,                             # a simulated Mac's facts (see the docstring)
    "compiled_no_lowering": ["aten::cos"],       # compiled: no lowering, a fallback kernel in the code
    "compiled_wrong": ["aten::sin"],             # compiled: the generated kernel is off (x * 1.25 + 0.5)
    "compiled_broken": ["aten::tan"],            # compiled: lowering it raises (the compile fails)
}

# Read once, when the backend loads, as MPSFallback.mm does.
FALLBACK_ENABLED = os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK", "0") not in ("", "0")

# TORCH_WARN_ONCE keeps one flag for the whole fallback function: after the
# first fallback of any op, a process says nothing more unless warn-always is on.
_warned_once = False


def _config():
    config = dict(DEFAULTS)
    config.update(json.loads(os.environ.get("FAKE_MPS", "{}")))
    if config["machine"] and config["machine"].get("macos") and not config["macos"]:
        config["macos"] = config["machine"]["macos"]   # a simulated Mac's macOS rules its refusals
    if isinstance(config["abort"], list):
        config["abort"] = {op: "assertion" for op in config["abort"]}
    return config


def _macos(config):
    version = config.get("macos")
    return tuple(int(x) for x in str(version).split(".")) if version else None


def _below(config, version):
    current = _macos(config)
    return current is not None and current < tuple(int(x) for x in version.split("."))


def _tensor_dtypes(args, kwargs):
    leaves = torch.utils._pytree.tree_flatten((args, kwargs))[0]
    return {x.dtype for x in leaves if isinstance(x, torch.Tensor)}


def _abort(kind, name):
    line = ABORT_LINES[kind]
    if line:
        sys.stderr.write(line.format(op=name) + "\n")
        sys.stderr.flush()
    os.abort()


class FakeMPSMode(TorchDispatchMode):
    def __init__(self, config, state=None):
        super().__init__()
        self.config = config
        self.state = state if state is not None else {}

    def _device_rules(self, name, args, kwargs):
        """What MPS refuses when a tensor is made on or moved to it."""
        if name not in ("aten::_to_copy", "aten::empty_strided", "aten::copy_", "aten::empty.memory_format"):
            return
        dtypes = _tensor_dtypes(args, kwargs) | {kwargs.get("dtype")}
        if self.config["refuse_float64"] and torch.float64 in dtypes:
            raise TypeError(FLOAT64_REFUSED)
        if _below(self.config, "14.0"):
            if torch.bfloat16 in dtypes:
                raise TypeError(BFLOAT16_NEEDS_14)   # TORCH_CHECK_TYPE in EmptyTensor.cpp
            if any(d is not None and d.is_complex for d in dtypes):
                raise TypeError(COMPLEX_NEEDS_14)

    def _first_time(self, name):
        marker = os.path.join(self.config["state_dir"], name.replace(":", "_") + ".hung")
        if os.path.exists(marker):
            return False
        open(marker, "w").close()
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        global _warned_once
        kwargs = kwargs or {}
        name = aten_name(func)
        config = self.config
        self._device_rules(name, args, kwargs)
        if name in config["abort"]:
            _abort(config["abort"][name], name)
        if name in config["hang"] or (name in config["hang_once"] and self._first_time(name)):
            while True:
                time.sleep(3600)
        if name in config["exit"]:
            os._exit(3)
        if name in config["raise"]:
            raise RuntimeError(config["raise"][name])
        if name in config["out_of_memory"]:
            raise RuntimeError(OUT_OF_MEMORY)
        if name in config["out_of_memory_once"] and not self.state.get("freed"):
            self.state["full"] = True
            raise RuntimeError(OUT_OF_MEMORY)
        refused = config["refuse_rank"].get(name)
        if refused and next((x.dim() for x in torch.utils._pytree.tree_flatten((args, kwargs))[0]
                             if isinstance(x, torch.Tensor)), None) == refused[0]:
            raise RuntimeError(refused[1])
        if name in config["rank_limit"]:
            raise RuntimeError(RANK_LIMIT.format(rank=17))
        falls_back = _DECOMPOSED.get(name, name) in config["fallback"]
        if name in config["not_implemented"]:
            if not FALLBACK_ENABLED:
                text = WORDINGS.get(config.get("wording"), NOT_IMPLEMENTED)
                raise NotImplementedError(text.format(op=name))
            falls_back = True
        if falls_back and (torch.is_warn_always_enabled() or not _warned_once):
            _warned_once = True
            warnings.warn(FALLBACK_WARNING.format(op=_DECOMPOSED.get(name, name)), UserWarning)
        gate = KERNEL_FALLBACKS.get(name)
        if gate and _below(config, gate[0]):
            warnings.warn(gate[1], UserWarning)
        if name in config["sync_error"]:
            self.state["pending_error"] = AT_SYNCHRONIZE
        out = func(*args, **kwargs)
        wrong_dtype = config["wrong"].get(name)
        if wrong_dtype and isinstance(out, torch.Tensor) and str(out.dtype) == f"torch.{wrong_dtype}":
            out = out * 1.25 + 0.5
        factor = config["scaled"].get(name)
        if factor is not None and isinstance(out, torch.Tensor):
            out = out * factor
        return out


class FakeMPS(Target):
    """A CPU device dressed as MPS. Results are filed under device 'fake-mps'."""

    def __init__(self):
        super().__init__("cpu")
        self.name = "fake-mps"
        self.config = _config()
        self.state = {}

    @property
    def device_name(self):
        machine = self.config.get("machine")
        if not machine:
            return "FAKE MPS (test backend on the CPU)"
        gpu = machine.get("gpu") or machine.get("chip") or "a Mac"
        cores = f" ({machine['gpu_cores']}-core GPU)" if machine.get("gpu_cores") else ""
        underneath = f", torch {torch.__version__} underneath" if machine.get("torch") else ""
        return f"FAKE MPS as {gpu}{cores} (test backend on the CPU{underneath})"

    def machine_facts(self):
        machine = self.config.get("machine")
        if not machine:
            return {}
        facts = {"os_name": "macOS", "os_version": machine.get("macos") or self.config.get("macos"),
                 "virtualized": int(bool(machine.get("virtualized")))}
        for key in ("chip", "gpu_cores", "os_build", "hw_model", "memory_bytes"):
            if machine.get(key) is not None:
                facts[key] = machine[key]
        if machine.get("torch"):
            facts["torch_version"] = machine["torch"]
        return facts

    def context(self):
        return FakeMPSMode(self.config, self.state)

    @contextlib.contextmanager
    def compiler(self):
        """Inductor as a backend whose compiler lacks a lowering and generates one wrong kernel."""
        from torch._functorch import config as functorch_config
        from torch._inductor import config as inductor_config, lowering
        saved = dict(lowering.lowerings)
        for overload in _overloads(self.config["compiled_no_lowering"]):
            lowering.lowerings.pop(overload, None)
        for overload in _overloads(self.config["compiled_wrong"]):
            if overload in saved:
                lowering.lowerings[overload] = _wrong_kernel(saved[overload], saved)
        for overload in _overloads(self.config["compiled_broken"]):
            lowering.lowerings[overload] = _broken_lowering
        try:
            # Neither graph cache keys on the lowerings: a real compile cached earlier would hide these faults.
            with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
                yield
        finally:   # an implicit fallback registers itself as a lowering: the table is put back whole
            lowering.lowerings.clear()
            lowering.lowerings.update(saved)

    def synchronize(self):
        error = self.state.pop("pending_error", None)
        if error:
            raise RuntimeError(error)

    def empty_cache(self):
        # Frees what an out-of-memory op was short of: it runs once the cache is emptied after it failed.
        if self.state.get("full"):
            self.state["freed"] = True


def _overloads(names):
    """The OpOverloads of each `aten::name`."""
    found = []
    for name in names:
        packet = getattr(torch.ops.aten, name.split("::", 1)[1].split(".")[0])
        found += [getattr(packet, overload) for overload in packet.overloads()]
    return found


def _wrong_kernel(right, table):
    """A lowering that computes `right`'s result * 1.25 + 0.5: a generated kernel that is wrong."""
    aten = torch.ops.aten

    def wrong(*args, **kwargs):
        out = right(*args, **kwargs)
        return table[aten.add.Tensor](table[aten.mul.Tensor](out, 1.25), 0.5)
    return wrong


def _broken_lowering(*args, **kwargs):
    raise NotImplementedError("the fake MPS compiler cannot lower this op")


def make_target():
    return FakeMPS()
