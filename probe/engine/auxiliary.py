"""Auxiliary outputs: labelled, not judged as results.

Many aten ops return more than their result: batch norm's saved mean and
inverse std, layer norm's mean and rstd, cuDNN's reserve space, attention's
logsumexp and random-number state. These are implementation details, shaped
by the backend: in eval mode the CPU's `native_batch_norm` returns empty
saved statistics while CUDA returns (C,)-shaped ones; CUDA keeps layer norm's
statistics in float32 where the CPU keeps the input's dtype. Comparing them
like results turns a working device into "wrong numbers".

So, in the manner of PyTorch's OpInfo database, a small declarative table
(`AUXILIARY`): per aten op, which output positions are auxiliary, what each
promises (who consumes it, when it may be empty), how to compare it, and the
source of the fact (the op's schema in native_functions.yaml, the kernel
file). The primary outputs decide a verdict; `compare_auxiliary` checks an
auxiliary output only for what it promises and returns a note either way.

How to compare:
- IGNORE: nothing promised across backends (workspaces, reserve space, random
  state, debug masks, placeholders);
- SHAPE_ONLY: its shape is part of the contract with the matching backward;
- VALUES_IF_BOTH_NONEMPTY: values are promised only when both sides computed
  them (an empty tensor is a legitimate "not computed");
- DTYPE_FREE: always computed, but each backend picks its dtype: values are
  compared after casting both to float64.
Values are checked for gross breakage only (a tolerance of sqrt(eps) of the
coarser dtype): their precision is the matching backward's business, and the
backward is judged as a case of its own.
"""
import math
from dataclasses import dataclass

import torch

from mpsprobe.ops.generated import PREFIX as GENERATED_PREFIX

IGNORE, SHAPE_ONLY, VALUES_IF_BOTH_NONEMPTY, DTYPE_FREE = (
    "ignore", "shape_only", "values_if_both_nonempty", "dtype_free")
HOW = (IGNORE, SHAPE_ONLY, VALUES_IF_BOTH_NONEMPTY, DTYPE_FREE)

_YAML = "aten/src/ATen/native/native_functions.yaml"


@dataclass(frozen=True)
class AuxRule:
    name: str       # the output's name in the schema or the kernel
    how: str        # one of HOW
    promise: str    # what it is for, and when it may be empty
    source: str     # where the fact comes from


def _bn_stats(source, kernel="aten/src/ATen/native/Normalization.cpp"):
    promise = ("consumed by native_batch_norm_backward in training; in eval mode the CPU returns empty "
               "tensors, CUDA (C,)-shaped ones; float32 for reduced-precision inputs")
    return {1: AuxRule("save_mean", VALUES_IF_BOTH_NONEMPTY, promise, f"{source}; {kernel}"),
            2: AuxRule("save_invstd", VALUES_IF_BOTH_NONEMPTY, promise, f"{source}; {kernel}")}


def _reserve(index, source):
    return {index: AuxRule("reserve", IGNORE, "cuDNN reserve space for the backward; an empty uint8 tensor "
                           "elsewhere", source)}


def _norm_stats(names, source, consumer):
    promise = (f"consumed by {consumer}; float32 on CUDA for reduced-precision inputs, the input's dtype "
               "on the CPU")
    return {i: AuxRule(name, DTYPE_FREE, promise, source) for i, name in enumerate(names, start=1)}


def _attention(lse_index, lse_how, ignored, source):
    rules = {lse_index: AuxRule("logsumexp", lse_how, "consumed by the matching attention backward; "
                                "float32; layout and padding are the kernel's", source)}
    for index, name in ignored.items():
        rules[index] = AuxRule(name, IGNORE, "random state, sequence bookkeeping or a debug mask: "
                               "kernel-specific, often empty", source)
    return rules


_FLASH_REST = {2: "cum_seq_q", 3: "cum_seq_k", 4: "max_q", 5: "max_k", 6: "rng_state", 7: "unused",
               8: "debug_attn_mask"}

AUXILIARY = {
    # Batch norm: (output, save_mean, save_invstd[, reserve]).
    "native_batch_norm": _bn_stats(f"{_YAML}: native_batch_norm -> (Tensor, Tensor, Tensor)"),
    "_native_batch_norm_legit": _bn_stats(f"{_YAML}: _native_batch_norm_legit -> (Tensor, Tensor, Tensor)"),
    "_native_batch_norm_legit_no_training": _bn_stats(
        f"{_YAML}: _native_batch_norm_legit_no_training -> (Tensor, Tensor, Tensor)"),
    "_native_batch_norm_legit_functional": _bn_stats(
        f"{_YAML}: _native_batch_norm_legit_functional -> (Tensor, Tensor, Tensor, running_mean_out, "
        "running_var_out)"),
    "_batch_norm_with_update": {
        **_bn_stats(f"{_YAML}: _batch_norm_with_update -> (Tensor, Tensor, Tensor, Tensor)"),
        **_reserve(3, f"{_YAML}: _batch_norm_with_update; Normalization.cpp returns an empty uint8 reserve")},
    "_batch_norm_with_update_functional": {
        **_bn_stats(f"{_YAML}: _batch_norm_with_update_functional"),
        **_reserve(3, f"{_YAML}: _batch_norm_with_update_functional")},
    "_batch_norm_no_update": {
        **_bn_stats(f"{_YAML}: _batch_norm_no_update -> (Tensor, Tensor, Tensor, Tensor)"),
        **_reserve(3, f"{_YAML}: _batch_norm_no_update")},
    "cudnn_batch_norm": {
        **_bn_stats(f"{_YAML}: cudnn_batch_norm -> (Tensor, Tensor, Tensor, Tensor)",
                    "aten/src/ATen/native/cudnn/BatchNorm.cpp"),
        **_reserve(3, "aten/src/ATen/native/cudnn/BatchNorm.cpp")},
    "miopen_batch_norm": _bn_stats(f"{_YAML}: miopen_batch_norm -> (Tensor, Tensor, Tensor)",
                                   "aten/src/ATen/native/miopen/BatchNorm_miopen.cpp"),
    # Layer, group and RMS norm: statistics always computed, dtype the backend's.
    "native_layer_norm": _norm_stats(("mean", "rstd"), f"{_YAML}: native_layer_norm -> (Tensor, Tensor, Tensor); "
                                     "aten/src/ATen/native/layer_norm.cpp", "native_layer_norm_backward"),
    "native_group_norm": _norm_stats(("mean", "rstd"), f"{_YAML}: native_group_norm -> (Tensor, Tensor, Tensor); "
                                     "aten/src/ATen/native/group_norm.cpp", "native_group_norm_backward"),
    "_fused_rms_norm": _norm_stats(("rstd",), f"{_YAML}: _fused_rms_norm -> (Tensor, Tensor)",
                                   "_fused_rms_norm_backward"),
    # Recurrent kernels: reserve and workspace buffers.
    "_cudnn_rnn": {
        3: AuxRule("reserve", IGNORE, "cuDNN reserve space for _cudnn_rnn_backward",
                   f"{_YAML}: _cudnn_rnn -> (Tensor, Tensor, Tensor, Tensor, Tensor); cudnn/RNN.cpp"),
        4: AuxRule("weight_buf", IGNORE, "the flattened weight buffer cuDNN worked from",
                   "aten/src/ATen/native/cudnn/RNN.cpp")},
    "miopen_rnn": {
        3: AuxRule("reserve", IGNORE, "MIOpen reserve space", f"{_YAML}: miopen_rnn"),
        4: AuxRule("workspace", IGNORE, "MIOpen workspace", f"{_YAML}: miopen_rnn")},
    "_thnn_fused_lstm_cell": {
        2: AuxRule("workspace", SHAPE_ONLY, "the gates saved for _thnn_fused_lstm_cell_backward, (B, 4H)",
                   f"{_YAML}: _thnn_fused_lstm_cell -> (Tensor, Tensor, Tensor); cuda/RNN.cu")},
    "_thnn_fused_gru_cell": {
        1: AuxRule("workspace", SHAPE_ONLY, "the gates saved for _thnn_fused_gru_cell_backward, (B, 5H)",
                   f"{_YAML}: _thnn_fused_gru_cell -> (Tensor, Tensor); cuda/RNN.cu")},
    # Attention kernels: logsumexp for the backward, then bookkeeping and random state.
    "_scaled_dot_product_flash_attention": _attention(
        1, DTYPE_FREE, _FLASH_REST, f"{_YAML}: _scaled_dot_product_flash_attention -> (output, logsumexp, ...)"),
    "_scaled_dot_product_flash_attention_for_cpu": _attention(
        1, DTYPE_FREE, {}, f"{_YAML}: _scaled_dot_product_flash_attention_for_cpu -> (output, logsumexp)"),
    "_scaled_dot_product_fused_attention_overrideable": _attention(
        1, VALUES_IF_BOTH_NONEMPTY, {**_FLASH_REST, 6: "philox_seed", 7: "philox_offset"},
        f"{_YAML}: _scaled_dot_product_fused_attention_overrideable"),
    # The memory-efficient kernel pads logsumexp's query length to a multiple of 32 on CUDA.
    "_scaled_dot_product_efficient_attention": _attention(
        1, IGNORE, {2: "philox_seed", 3: "philox_offset"},
        f"{_YAML}: _scaled_dot_product_efficient_attention -> (output, log_sumexp, philox_seed, philox_offset); "
        "transformers/cuda/mem_eff_attention (kAlignLSE)"),
    "_scaled_dot_product_cudnn_attention": _attention(
        1, IGNORE, {**_FLASH_REST, 6: "philox_seed", 7: "philox_offset"},
        f"{_YAML}: _scaled_dot_product_cudnn_attention"),
    "_efficient_attention_forward": _attention(
        1, IGNORE, {2: "philox_seed", 3: "philox_offset", 4: "max_seqlen_batch_q", 5: "max_seqlen_batch_k"},
        f"{_YAML}: _efficient_attention_forward"),
    "_flash_attention_forward": _attention(
        1, DTYPE_FREE, {2: "rng_state", 3: "unused", 4: "debug_attn_mask"}, f"{_YAML}: _flash_attention_forward"),
    # Embedding bag: bookkeeping for _embedding_bag_backward, filled or not by mode and backend.
    "_embedding_bag": {
        1: AuxRule("offset2bag", IGNORE, "index -> bag map for the backward; the CPU leaves it empty for "
                   "mode='sum'", f"{_YAML}: _embedding_bag -> (Tensor, Tensor, Tensor, Tensor); EmbeddingBag.cpp"),
        2: AuxRule("bag_size", IGNORE, "elements per bag, used by the backward of mode='mean'",
                   "aten/src/ATen/native/EmbeddingBag.cpp"),
        3: AuxRule("max_indices", IGNORE, "argmax per bag in mode='max' (not unique under ties); "
                   "placeholder otherwise", "aten/src/ATen/native/EmbeddingBag.cpp")},
    # lstsq: residuals, rank and singular values exist only for some drivers (CUDA's gels: none).
    "linalg_lstsq": {
        1: AuxRule("residuals", VALUES_IF_BOTH_NONEMPTY, "only when m > n, every matrix has full rank and "
                   "the driver is not gelsy; empty otherwise", "torch.linalg.lstsq documentation; "
                   f"{_YAML}: linalg_lstsq"),
        2: AuxRule("rank", VALUES_IF_BOTH_NONEMPTY, "only for the gelsy, gelsd and gelss drivers",
                   "torch.linalg.lstsq documentation"),
        3: AuxRule("singular_values", VALUES_IF_BOTH_NONEMPTY, "only for the gelsd and gelss drivers",
                   "torch.linalg.lstsq documentation")},
}
AUXILIARY["_embedding_bag_forward_only"] = AUXILIARY["_embedding_bag"]

# OpInfo names -> the aten op whose outputs the OpInfo returns; None: the OpInfo
# returns the primary output only (its aten op's auxiliary outputs never reach it).
OPINFO_ATEN = {
    "native_batch_norm": "native_batch_norm",
    "_native_batch_norm_legit": "_native_batch_norm_legit",
    "_batch_norm_with_update": "_batch_norm_with_update",
    "native_layer_norm": "native_layer_norm",
    "native_group_norm": "native_group_norm",
    "linalg.lstsq": "linalg_lstsq",
    "nn.functional.batch_norm": None,
    "nn.functional.batch_norm.without_cudnn": None,
    "nn.functional.layer_norm": None,
    "nn.functional.group_norm": None,
    "nn.functional.instance_norm": None,
    "nn.functional.rms_norm": None,
    "nn.functional.scaled_dot_product_attention": None,
    "nn.functional.embedding_bag": None,
}

# Not auxiliary, but worth a note: these primary outputs are not unique under ties.
TIES_NOTE = {
    name: "indices are primary, but under ties in the input any tied position is correct"
    for name in ("max_pool2d_with_indices", "max_pool3d_with_indices", "adaptive_max_pool2d",
                 "adaptive_max_pool3d", "fractional_max_pool2d", "fractional_max_pool3d",
                 "nn.functional.max_pool1d", "nn.functional.max_pool2d", "nn.functional.max_pool3d",
                 "nn.functional.adaptive_max_pool1d", "nn.functional.adaptive_max_pool2d",
                 "nn.functional.adaptive_max_pool3d", "nn.functional.fractional_max_pool2d",
                 "nn.functional.fractional_max_pool3d")
}


def _base(name):
    """`aten::native_batch_norm`, `aten.native_batch_norm.default` -> `native_batch_norm`; a
    generated record (`generated._native_batch_norm_legit.no_stats`) calls the aten overload it is
    named after, so its outputs are that function's."""
    name = str(name)
    for prefix in ("aten::", "aten.", GENERATED_PREFIX):
        if name.startswith(prefix):
            return name[len(prefix):].split(".")[0]
    return name


def auxiliary_outputs(op_name_or_aten):
    """{output index: AuxRule} for an OpInfo name or an aten op; {} when every output is primary."""
    if op_name_or_aten in OPINFO_ATEN:
        aten = OPINFO_ATEN[op_name_or_aten]
        return dict(AUXILIARY.get(aten, {})) if aten else {}
    return dict(AUXILIARY.get(_base(op_name_or_aten), {}))


def _describe(t):
    return f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')}"


def _tolerance(a, b):
    """sqrt(eps) of the coarser dtype: gross breakage only (see the module docstring)."""
    eps = max(torch.finfo(d).eps if (d.is_floating_point or d.is_complex) else 0.0 for d in (a.dtype, b.dtype))
    return math.sqrt(eps) if eps else 0.0


def _values_close(cpu, target):
    wide = torch.complex128 if cpu.is_complex() or target.is_complex() else torch.float64
    c, t = cpu.detach().cpu().to(wide), target.detach().cpu().to(wide)
    if not (torch.equal(torch.isnan(c), torch.isnan(t)) and torch.equal(torch.isinf(c), torch.isinf(t))):
        return False
    if not torch.equal(c[torch.isinf(c)], t[torch.isinf(t)]):
        return False
    finite = torch.isfinite(c)
    c, t = c[finite], t[finite]
    if c.numel() == 0:
        return True
    tol = _tolerance(cpu, target)
    # relative to each value, with a floor at 1e-3 of the largest (statistics near 0)
    floor = 1e-3 * c.abs().max().item()
    return bool(torch.all((c - t).abs() <= tol * (c.abs() + floor) + (tol if floor == 0 else 0.0)))


def compare_auxiliary(rule, cpu_out, target_out):
    """(ok, note): whether `target_out` keeps `rule`'s promise against `cpu_out`.

    ok is False only when the promise is broken (a wrong shape where the shape
    is the contract, values far off where both computed them); the note says
    what differed either way, for the report.
    """
    label = f"{rule.name} (auxiliary)"
    if not isinstance(cpu_out, torch.Tensor) or not isinstance(target_out, torch.Tensor):
        return True, f"{label}: not a tensor on both sides, not compared"
    described = f"target {_describe(target_out)} vs CPU {_describe(cpu_out)}"
    if rule.how == IGNORE:
        differs = cpu_out.shape != target_out.shape or cpu_out.dtype != target_out.dtype
        return True, f"{label}: not compared ({rule.promise})" + (f"; {described}" if differs else "")
    if rule.how == SHAPE_ONLY:
        if cpu_out.shape != target_out.shape:
            return False, f"{label}: shape differs, {described}; {rule.promise}"
        return True, f"{label}: shape matches"
    if rule.how == VALUES_IF_BOTH_NONEMPTY and (cpu_out.numel() == 0 or target_out.numel() == 0):
        if cpu_out.numel() == target_out.numel() == 0:
            return True, f"{label}: empty on both"
        return True, f"{label}: computed on one side only, {described}; {rule.promise}"
    if cpu_out.shape != target_out.shape:
        return False, f"{label}: shape differs, {described}"
    if cpu_out.is_complex() != target_out.is_complex():
        return False, f"{label}: complex on one side only, {described}"
    if not _values_close(cpu_out, target_out):
        return False, f"{label}: values differ beyond sqrt(eps), {described}"
    if cpu_out.dtype != target_out.dtype:
        return True, f"{label}: values agree; dtype differs ({described}), which is the backend's choice"
    return True, f"{label}: values agree"
