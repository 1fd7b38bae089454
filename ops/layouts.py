"""Input layouts that break MPS kernels: the same sample, its input laid out otherwise.

The MPS bugs porters report most are about which input, not which op: a
kernel that reads a non-contiguous input as if it were contiguous (softplus
after moveaxis, pytorch#131736), ignores a storage offset, or mishandles a
stride of 0. OpInfo's samples are mostly contiguous. Each variant here holds
the sample's input in another layout, over a storage of its own; the engine
runs it as a case of its own (`layout` names it), the CPU reference on the
very same tensor, so any difference is the target's.

The values stay the sample's, except `expanded`: a stride of 0 repeats one
slice, so its input is the sample's first slice along dim 0, repeated (the
CPU sees the same).
"""
import copy

import torch

TRANSPOSED, STRIDED, EXPANDED, CHANNELS_LAST, OFFSET = (
    "transposed", "strided", "expanded", "channels_last", "offset")
LAYOUTS = (TRANSPOSED, STRIDED, EXPANDED, CHANNELS_LAST, OFFSET)
# 64 elements: an offset kernels must honour, at an alignment that vector loads need (torch
# 2.13's CPU _weight_int8pack_mm segfaults on a bfloat16 input 3 elements in).
OFFSET_ELEMENTS = 64


def _contiguous_strides(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.insert(0, step)
        step *= max(size, 1)
    return strides


def _over(x, strides, offset, extent):
    """`x`'s values in a tensor of `strides` at `offset`, over a new storage of `extent` elements."""
    base = torch.empty(offset + extent, dtype=x.dtype)
    laid = base.as_strided(x.shape, strides, offset)
    laid.copy_(x.detach())
    return laid


def relaid(x, layout):
    """`x` in `layout`, or None where the layout does not apply to it (or changes nothing)."""
    shape = tuple(x.shape)
    if layout == TRANSPOSED:
        if x.dim() < 2 or shape[-1] < 2 or shape[-2] < 2:
            return None
        swapped = shape[:-2] + (shape[-1], shape[-2])
        strides = _contiguous_strides(swapped)
        strides[-1], strides[-2] = strides[-2], strides[-1]
        return _over(x, strides, 0, x.numel())
    if layout == STRIDED:
        strides = _contiguous_strides(shape[:-1] + (2 * shape[-1],)) if shape else []
        if not shape or x.numel() < 2:
            return None
        strides[-1] = 2
        return _over(x, strides, 0, 2 * x.numel())
    if layout == EXPANDED:
        if x.dim() < 1 or shape[0] < 2:
            return None
        return _over(x.narrow(0, 0, 1), _contiguous_strides((1,) + shape[1:]), 0,
                     x.numel() // shape[0]).expand(shape)
    if layout == CHANNELS_LAST:
        if x.dim() != 4:
            return None
        laid = torch.empty(shape, dtype=x.dtype, memory_format=torch.channels_last)
        laid.copy_(x.detach())
        return None if laid.is_contiguous() else laid
    if layout == OFFSET:
        return _over(x, _contiguous_strides(shape), OFFSET_ELEMENTS, x.numel())
    raise ValueError(f"unknown layout {layout!r}")


def reference(variant):
    """The variant's contiguous twin: the same values, laid out as the CPU's kernels are surest of.
    The CPU reference runs on it, so a CPU kernel's own bug in a layout is charged to no target
    (torch 2.13's CPU nanmedian reads an expanded input's storage as if contiguous)."""
    twin = copy.copy(variant)
    twin.input = variant.input.detach().contiguous()
    return twin


def variants(sample, layouts=LAYOUTS):
    """[(layout, a copy of `sample` whose input is in that layout)] for each layout that applies:
    the input must be a strided tensor of more than one element."""
    x = sample.input
    if not isinstance(x, torch.Tensor) or x.layout != torch.strided or x.numel() < 2:
        return []
    found = []
    for layout in layouts:
        laid = relaid(x, layout)
        if laid is None:
            continue
        variant = copy.copy(sample)
        variant.input = laid.requires_grad_() if x.requires_grad and laid.is_leaf else laid
        found.append((layout, variant))
    return found
