"""Sample inputs: summarising them, moving them to a device, upcasting them."""
import torch
from torch.utils._pytree import tree_map

_SHORT = {
    "float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
    "complex64": "c64", "complex128": "c128", "complex32": "c32", "bool": "b8",
    "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8",
}


def _describe(x):
    if isinstance(x, torch.Tensor):
        dtype = str(x.dtype).replace("torch.", "")
        text = f"{_SHORT.get(dtype, dtype)}[{','.join(map(str, x.shape))}]"
        if x.layout != torch.strided:
            text += f"({str(x.layout).replace('torch.', '')})"
        elif x.numel() > 1 and not x.is_contiguous():
            text += "(noncontig)"
        if x.requires_grad:
            text += "(grad)"
        return text
    if isinstance(x, (list, tuple)):
        inner = ", ".join(_describe(v) for v in x[:6]) + (", …" if len(x) > 6 else "")
        return f"[{inner}]" if isinstance(x, list) else f"({inner})"
    if isinstance(x, torch.dtype):
        return str(x).replace("torch.", "")
    text = repr(x)
    return text if len(text) <= 40 else text[:37] + "…"


def summarize(sample, limit=300):
    """A one-line, human-readable account of a SampleInput."""
    parts = [_describe(sample.input)]
    parts += [_describe(a) for a in sample.args]
    parts += [f"{k}={_describe(v)}" for k, v in sample.kwargs.items()]
    text = ", ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _storage_copy(t, device, dtype, memo):
    """`t` rebuilt on `device` in `dtype` over a copy of its whole storage: the same
    offset and strides, so what a view reads beyond its visible elements (as_strided,
    a slice's base) reads the same there. Tensors sharing a storage share the copy."""
    key = (t.untyped_storage().data_ptr(), t.dtype)
    if key not in memo:
        n = t.untyped_storage().nbytes() // t.element_size()
        flat = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage(), 0, (n,), (1,))
        memo[key] = flat.detach().to(device=device, dtype=dtype, copy=True)
    moved = memo[key].as_strided(t.size(), t.stride(), t.storage_offset())
    if t.is_conj():
        moved = moved.conj()
    if t.is_neg():
        moved = torch._neg_view(moved)
    return moved


def _copy_tensor(t, device, dtype, memo):
    """A copy of `t` on `device` in `dtype` that never shares storage with `t`."""
    if t.layout == torch.strided and t.untyped_storage().nbytes() > 0:
        try:
            moved = _storage_copy(t.detach(), device, dtype, memo)
        except (RuntimeError, TypeError, NotImplementedError):  # storages some tensors lack
            moved = t.detach().to(device=device, dtype=dtype, copy=True)
    else:
        moved = t.detach().to(device=device, dtype=dtype, copy=True)
    return moved.detach().requires_grad_() if t.requires_grad else moved


def to_device(args, device):
    """`args` (any pytree) with every tensor copied to `device`, and every
    device argument (factory functions' `device=`, `Tensor.to(device)`) pointed at it."""
    device = torch.device(device)
    memo = {}

    def move(x):
        if isinstance(x, torch.Tensor):
            return _copy_tensor(x, device, x.dtype, memo)
        if isinstance(x, torch.device):
            return device
        return x
    moved = tree_map(move, args)
    if isinstance(moved, tuple) and len(moved) == 3 and isinstance(moved[2], dict) \
            and isinstance(moved[2].get("device"), str):
        moved[2]["device"] = device
    return moved


def upcast(args, dtype):
    """A copy of `args` with tensors of `dtype` raised to float64/complex128: the
    "truth" inputs. Always a copy (an in-place op must not reach the reference's
    inputs); None where `dtype` has no wider type (the CPU result is its own truth)."""
    if dtype.is_complex:
        wide = torch.complex128
    elif dtype.is_floating_point:
        wide = torch.float64
    else:
        return None
    if dtype == wide:
        return None
    memo = {}

    def up(x):
        if isinstance(x, torch.Tensor):
            return _copy_tensor(x, x.device, wide if x.dtype == dtype else x.dtype, memo)
        return x
    return tree_map(up, args)


def call_args(sample):
    """The sample as (input, args, kwargs): one pytree to move or upcast at once."""
    return (sample.input, tuple(sample.args), dict(sample.kwargs))


def unwritten_like(t):
    """A buffer for out=: NaN where a value can say "never written", else zeros."""
    if not isinstance(t, torch.Tensor):
        return t
    buffer = torch.empty_like(t, memory_format=torch.contiguous_format)
    return buffer.fill_(float("nan")) if (t.is_floating_point() or t.is_complex()) else buffer.zero_()
