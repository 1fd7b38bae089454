"""LAYOUT BUG: a test-only target whose softplus, silu and gelu ignore their input's strides.

It is NOT a measurement of anything. It stands in for an MPS kernel that reads a
non-contiguous input as if it were contiguous (softplus after moveaxis,
pytorch#131736): right on every contiguous input, a storage offset included,
wrong on a transposed, strided, expanded or channels_last one. Everything else
runs as on the CPU. Results are filed under device 'layout-bug'.
"""
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mpsprobe.engine.devices import Target

BUGGY = ("aten::softplus", "aten::silu", "aten::gelu")


def _as_if_contiguous(x):
    """What a kernel that ignores strides reads: the storage in order from the offset."""
    strides, step = [], 1
    for size in reversed(x.shape):
        strides.insert(0, step)
        step *= size
    available = x.untyped_storage().nbytes() // x.element_size() - x.storage_offset()
    if available >= x.numel():
        return torch.as_strided(x, x.shape, strides, x.storage_offset())
    # A stride of 0 stores fewer elements than it shows: what lies past them reads as zeros.
    read = torch.zeros(x.numel(), dtype=x.dtype)
    read[:available] = torch.as_strided(x, (available,), (1,), x.storage_offset())
    return read.view(x.shape)


class _IgnoresStrides(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = f"aten::{func._schema.name.split('::')[-1]}"
        if name in BUGGY and isinstance(args[0], torch.Tensor) and not args[0].is_contiguous():
            args = (_as_if_contiguous(args[0]),) + tuple(args[1:])
        return func(*args, **kwargs)


class LayoutBug(Target):
    def __init__(self):
        super().__init__("cpu")
        self.name = "layout-bug"

    @property
    def device_name(self):
        return "LAYOUT BUG (test backend on the CPU)"

    def context(self):
        return _IgnoresStrides()


def make_target():
    return LayoutBug()
