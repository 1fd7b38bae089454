"""Coverage measured against the MPS kernels themselves, not against OpInfo.

The kernels: every function of a torch's native_functions.yaml with its own
MPS dispatch key, plus the MPS kernels torch registers from Python
(declared/python_kernels.py). A kernel is *reached* when a case of the
catalogue dispatched it, as the store recorded (results.aten_ops), directly
or through its structured delegate (`add.Tensor` and `add_.Tensor` run
`add.out`'s MPS kernel).

What the evidence is, is said with every answer: off a Mac, the aten ops a
case records are the CPU's dispatch, which differs from MPS's where MPS
dispatches to kernels of its own (`_mps_convolution`, `_lstm_mps`, …). Those
are answered from MPS_ONLY_DISPATCH: the public call whose CPU-recorded op
leads there on MPS, each checked against PyTorch's source (cited).
"""
from dataclasses import dataclass, field

from mpsprobe.vocabulary import PASS_COLUMN
from .declared import native_functions, python_kernels

# How a kernel was reached, by the ops table's source of the op whose case reached it.
SOURCES = ("opinfo", "module", "generated", "large")

YAML = "native_functions.yaml"


@dataclass(frozen=True)
class MpsOnly:
    """A function the CPU never dispatches (MPS's own, or MPS's and CUDA's), and what reaches it."""
    public: str            # the call a user writes
    cpu_ops: tuple         # aten ops the CPU records for that call (any of them) ...
    pass_: str             # ... in this pass
    where: str             # PyTorch's source that makes the call on MPS
    condition: str = ""    # when MPS takes this path; "" for always
    op_ids: tuple = ()     # ops whose cases make that call (when the CPU records nothing telling)
    mps_only: bool = True  # False: CUDA has a kernel too, the CPU has none


# Checked against PyTorch's source (torch 2.13):
# - aten/src/ATen/native/Convolution.cpp: _convolution's ConvBackend::Mps / MpsTranspose call
#   at::_mps_convolution / at::_mps_convolution_transpose; convolution_backward calls
#   mps_convolution_backward / mps_convolution_transpose_backward for the same backends.
# - aten/src/ATen/native/RNN.cpp: lstm(input, hx, params, …) calls at::_lstm_mps for an MPS
#   input; its derivative (tools/autograd/derivatives.yaml, _lstm_mps) is lstm_mps_backward.
#   The CPU records its own kernel (mkldnn_rnn_layer), so the LSTM probe's cases count.
# - aten/src/ATen/native/transformers/attention.cpp: scaled_dot_product_attention's math
#   backend calls at::_scaled_dot_product_attention_math_for_mps on MPS when no input
#   requires grad, dropout_p == 0 and q, k, v are contiguous and not nested.
# - aten/src/ATen/native/layer_norm.cpp: rms_norm calls at::_fused_rms_norm on MPS when it has
#   a weight and no input requires grad (on CUDA too); the CPU runs the composite.
# - tools/autograd/derivatives.yaml: max_pool2d's gradient is max_pool2d_backward; only MPS
#   dispatches max_pool2d itself (mps_max_pool2d), the CPU decomposes it into
#   max_pool2d_with_indices, whose backward it records instead.
# - aten/src/ATen/native/Copy.cpp: copy_ between MPS and another device calls at::_copy_from:
#   every case moves its inputs to the target and its outputs back.
# - native_functions.yaml: linear is CompositeImplicitAutograd with an MPS kernel of its own
#   (_mps_linear), so the CPU records what it decomposes into; tools/autograd/derivatives.yaml
#   differentiates linear with linear_backward, which only MPS (and nested tensors) dispatch.
# - native_functions.yaml: max_pool2d is CompositeImplicitAutograd with an MPS kernel
#   (mps_max_pool2d); the generated record calls aten::max_pool2d itself, so on MPS it runs there.
# - _weight_int4pack_mm and _convert_weight_to_int4pack have MPS and CUDA kernels only; the CPU's
#   are _weight_int4pack_mm_for_cpu / _convert_weight_to_int4pack_for_cpu, which the int4 probe
#   (ops/modules.py) calls on the CPU and the others on the target.
_CONV = "aten/src/ATen/native/Convolution.cpp"
MPS_ONLY_DISPATCH = {
    "_mps_convolution": MpsOnly(
        "F.conv1d/conv2d/conv3d, nn.ConvNd", ("aten::convolution",), "forward", _CONV, "transposed=False"),
    "_mps_convolution_transpose": MpsOnly(
        "F.conv_transpose1d/2d/3d, nn.ConvTransposeNd", ("aten::convolution",), "forward", _CONV,
        "transposed=True"),
    "mps_convolution_backward": MpsOnly(
        "the backward of F.convNd", ("aten::convolution_backward",), "backward", _CONV, "transposed=False"),
    "mps_convolution_transpose_backward": MpsOnly(
        "the backward of F.conv_transposeNd", ("aten::convolution_backward",), "backward", _CONV,
        "transposed=True"),
    "_lstm_mps": MpsOnly(
        "nn.LSTM, torch.lstm", (), "forward", "aten/src/ATen/native/RNN.cpp", op_ids=("module.nn.LSTM",)),
    "lstm_mps_backward": MpsOnly(
        "the backward of nn.LSTM", (), "backward", "aten/src/ATen/native/RNN.cpp",
        op_ids=("module.nn.LSTM",)),
    "_scaled_dot_product_attention_math_for_mps": MpsOnly(
        "F.scaled_dot_product_attention", (), "forward", "aten/src/ATen/native/transformers/attention.cpp",
        "no grad, dropout_p=0, contiguous q, k, v", op_ids=("nn.functional.scaled_dot_product_attention",)),
    "max_pool2d_backward": MpsOnly(
        "the backward of F.max_pool2d (return_indices=False), nn.MaxPool2d",
        ("aten::max_pool2d_with_indices_backward",), "backward", "tools/autograd/derivatives.yaml"),
    "linear": MpsOnly(
        "F.linear, nn.Linear", (), "forward", YAML, op_ids=("nn.functional.linear",)),
    "linear_backward": MpsOnly(
        "the backward of F.linear", (), "backward", "tools/autograd/derivatives.yaml",
        op_ids=("nn.functional.linear",)),
    "max_pool2d": MpsOnly(
        "F.max_pool2d (return_indices=False), torch.max_pool2d", (), "forward", YAML,
        op_ids=("generated.max_pool2d",)),
    "_copy_from": MpsOnly(
        "tensor.to('mps') and back", ("aten::_to_copy",), "forward", "aten/src/ATen/native/Copy.cpp"),
    "_fused_rms_norm": MpsOnly(
        "F.rms_norm, nn.RMSNorm", (), "forward", "aten/src/ATen/native/layer_norm.cpp",
        "a weight, no grad", op_ids=("module.nn.RMSNorm", "nn.functional.rms_norm"), mps_only=False),
    "_weight_int4pack_mm": MpsOnly(
        "torch._weight_int4pack_mm (weight-only int4 linear layers)", ("aten::_weight_int4pack_mm_for_cpu",),
        "forward", "ops/modules.py int4_linear", op_ids=("module.quant.int4_weight_linear",), mps_only=False),
    "_convert_weight_to_int4pack": MpsOnly(
        "torch._convert_weight_to_int4pack", ("aten::_convert_weight_to_int4pack_for_cpu",),
        "forward", "ops/modules.py int4_linear", op_ids=("module.quant.int4_weight_linear",), mps_only=False),
}

# Kernels that no case of a CPU run can speak for, and why.
UNREACHABLE_OFF_MAC = {
    "_copy_from_and_resize": "only through the CPU fallback: called only by PyTorch's CPU fallback "
                             "(aten/src/ATen/native/CPUFallback.cpp) to write a fallen-back op's outputs "
                             "into MPS tensors: reached on a Mac with --mps-fallback only",
}

# Kernels ops/generated.py makes no samples for, and why (a sample would give no verdict
# the evidence supports).
_RANDOM = ("a random kernel with no distribution check that draws through it: compared by value it "
           "would be a false mismatch, by shape only a pass that checks nothing")
NO_GENERATED_SAMPLES = {
    "bernoulli_.Tensor": _RANDOM,
    "random_": _RANDOM, "random_.from": _RANDOM, "random_.to": _RANDOM,
    "_standard_gamma": _RANDOM, "_sample_dirichlet": _RANDOM,
    "randperm.generator_out": _RANDOM + " (the distribution check's draws would share one out= buffer)",
    "_to_sparse.sparse_dim": "needs a sparse output compared: the probe compares dense (strided) tensors only",
}


@dataclass
class Kernel:
    function: str                     # aten name: "add.out", "_lstm_mps"
    declared_in: str                  # native_functions.yaml, or the Python file:line
    delegators: list = field(default_factory=list)   # functions whose structured_delegate it is
    reached_by: dict = field(default_factory=dict)   # {source: [op ids]}
    via: str = None                   # how the recorded evidence reaches it
    reason: str = None                # why it is left, when it is

    @property
    def reached(self):
        return bool(self.reached_by)

    def to_dict(self):
        return {"function": self.function, "declared_in": self.declared_in, "reached": self.reached,
                "sources": sorted(self.reached_by), "via": self.via,
                "ops": {s: sorted(ops)[:5] for s, ops in sorted(self.reached_by.items())},
                "reason": self.reason}


def mps_kernels(files):
    """The MPS kernels of one torch's files (a declared.wheel.TorchFiles): [Kernel], yaml first."""
    functions = native_functions.parse(files.native_functions) if files.native_functions else []
    kernels = {}
    for f in functions:
        if "MPS" in f["dispatch_keys"].split(", "):
            kernels[f["aten_name"]] = Kernel(f["aten_name"], YAML)
    for name, where in python_kernels.mps_kernels(files.python).items():
        kernels.setdefault(name, Kernel(name, where))
    for f in functions:
        delegate = kernels.get(f["structured_delegate"] or "")
        if delegate is not None:
            delegate.delegators.append(f["aten_name"])
    return list(kernels.values())


def _aten(function):
    """How the recorder names a function: 'aten::add.out'; the default overload has no dot."""
    return f"aten::{function}"


def _merge(into, found):
    for source, ops in found.items():
        into.setdefault(source, set()).update(ops)


def _reached_by(dispatched, names, pass_=None, op_ids=()):
    """{source: op ids} of the cases that recorded any of `names`, or are cases of `op_ids`
    (in `pass_`, or any)."""
    found = {}
    for (op, p), by_source in dispatched.items():
        if pass_ is not None and p != pass_:
            continue
        if op in names:
            _merge(found, by_source)
        elif op_ids:
            _merge(found, {s: ids & set(op_ids) for s, ids in by_source.items() if ids & set(op_ids)})
    return found


def measure(kernels, dispatched, on_mps=False, read=True, probes=None):
    """Mark each Kernel reached or left, from `dispatched` (db.query.coverage.dispatched).

    `on_mps`: the runs recorded MPS's own dispatch, so MPS-only kernels are read
    as recorded; otherwise they are read through MPS_ONLY_DISPATCH's public calls.
    `read`: whether any run was read at all (if not, every kernel is left, unmeasured).
    `probes`: {aten function: the module probe or generated record written to reach it}, to say so
    when it did not.
    """
    for k in kernels:
        if not read:
            k.reason = "not measured: no run read"
            continue
        direct = _reached_by(dispatched, {_aten(k.function)})
        if direct:
            k.reached_by, k.via = direct, "recorded"
            continue
        delegated = _reached_by(dispatched, {_aten(d) for d in k.delegators})
        if delegated:
            names = sorted({d for d in k.delegators if _reached_by(dispatched, {_aten(d)})})
            k.reached_by, k.via = delegated, f"structured delegate of {', '.join(names[:3])}"
            continue
        only = MPS_ONLY_DISPATCH.get(k.function)
        if only and not on_mps:
            proxied = _reached_by(dispatched, set(only.cpu_ops), only.pass_, only.op_ids)
            if proxied:
                k.reached_by = proxied
                k.via = f"MPS-only dispatch: {_path(only)}"
                continue
        k.reason = _why_left(k, on_mps)
        if (probes or {}).get(k.function):
            k.reason += f"; {probes[k.function]} is written to reach it: run it (--ops {probes[k.function]})"
    return kernels


def _path(only):
    """How a public call reaches a dispatch the CPU never makes, and what stands for it here."""
    when = f" when {only.condition}" if only.condition else ""
    seen = [" or ".join(only.cpu_ops) + " recorded"] if only.cpu_ops else []
    seen += [f"a case of {' or '.join(only.op_ids)}"] if only.op_ids else []
    return (f"{only.public} reaches it on MPS{when} ({only.where}); here: {' or '.join(seen)} "
            f"in the {only.pass_} pass")


def _why_left(k, on_mps):
    name = k.function
    if name in UNREACHABLE_OFF_MAC and not on_mps:
        return UNREACHABLE_OFF_MAC[name]
    if name in MPS_ONLY_DISPATCH and not on_mps:
        only = MPS_ONLY_DISPATCH[name]
        return f"MPS-only dispatch, not reached: {_path(only)}: none"
    if name in NO_GENERATED_SAMPLES:
        return f"no case dispatched it, and no sample is generated: {NO_GENERATED_SAMPLES[name]}"
    if "backward" in name:
        return "a backward kernel: no backward case dispatched it"
    if name.startswith("_foreach_"):
        return "a foreach kernel (optimizers' multi-tensor steps): no case dispatched it"
    base = name.split(".")[0]
    if base.endswith("_") and not (base.startswith("__") and base.endswith("__") and not base.startswith("__i")):
        return "an in-place kernel: no case dispatched it"
    return "no case dispatched it or a function delegating to it (no OpInfo sample, module probe " \
           "or generated sample reaches it)"


def summary(kernels, evidence):
    """The figures of a measured list of Kernels, as a dict (the JSON of `mpsprobe coverage`)."""
    reached = [k for k in kernels if k.reached]
    yaml_kernels = [k for k in kernels if k.declared_in == YAML]
    by_source = {s: sum(1 for k in reached if s in k.reached_by) for s in SOURCES}
    only_by = {s: sum(1 for k in reached if set(k.reached_by) == {s}) for s in SOURCES}
    by_via = {}
    for k in reached:
        how = "recorded" if k.via == "recorded" else "structured delegate" \
            if k.via.startswith("structured") else "MPS-only dispatch (public call recorded)"
        by_via[how] = by_via.get(how, 0) + 1
    return {
        "evidence": evidence,
        "kernels": len(kernels), "yaml_kernels": len(yaml_kernels),
        "python_kernels": len(kernels) - len(yaml_kernels),
        "reached": len(reached), "yaml_reached": sum(1 for k in yaml_kernels if k.reached),
        "left": len(kernels) - len(reached),
        "by_source": by_source, "only_by_source": only_by, "by_evidence": by_via,
        "mps_only_dispatch": [
            {"function": name, "public_call": only.public, "cpu_records": list(only.cpu_ops),
             "op_ids": list(only.op_ids), "mps_only": only.mps_only,
             PASS_COLUMN: only.pass_, "condition": only.condition, "source": only.where,
             "reached": any(k.reached for k in kernels if k.function == name)}
            for name, only in MPS_ONLY_DISPATCH.items()],
        "functions": [k.to_dict() for k in kernels],
    }
