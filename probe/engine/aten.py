"""Which aten ops a piece of code dispatches, named as PyTorch's messages name them."""
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def aten_name(func):
    """`aten::add.Tensor`, or `aten::relu` for a default overload: MPSFallback.mm's spelling."""
    schema = func._schema
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def main_dtype(args, kwargs, out):
    """The dtype a call is filed under: its first tensor argument's, else its first output's.

    The probe files a case under its sample's dtype, which is the first argument's
    (`nll_loss_forward(float32 input, int64 target)` is a float32 case).
    """
    for tree in ((args, kwargs), out):
        for x in tree_flatten(tree)[0]:
            if isinstance(x, torch.Tensor):
                return _dtype_name(x.dtype)
    return None


class AtenCapture(TorchDispatchMode):
    """Records each aten op dispatched inside it, with the dtypes of its tensor arguments.

    Optional extras, off by default: `where` is a callable naming the code that
    dispatched each call (a module path), collected in `places`; `on_call(func,
    args, kwargs, out)` sees every call (to record it for replay). `main_dtypes`
    counts, per op, the dtype each call is filed under (see main_dtype).
    """

    def __init__(self, where=None, on_call=None):
        super().__init__()
        self.counts = Counter()
        self.dtypes = {}
        self.main_dtypes = {}
        self.places = {}
        self._where = where
        self._on_call = on_call

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = aten_name(func)
        kwargs = kwargs or {}
        self.counts[name] += 1
        leaves, _ = tree_flatten((args, kwargs))
        seen = self.dtypes.setdefault(name, set())
        seen.update(_dtype_name(x.dtype) for x in leaves if isinstance(x, torch.Tensor))
        if self._where is not None:
            self.places.setdefault(name, Counter())[self._where()] += 1
        out = func(*args, **kwargs)
        self.main_dtypes.setdefault(name, Counter())[main_dtype(args, kwargs, out)] += 1
        if self._on_call is not None:
            self._on_call(func, args, kwargs, out)
        return out

    @property
    def ops(self):
        """Distinct op names in first-dispatch order."""
        return list(self.counts)


class _OpsAndShapes(TorchDispatchMode):
    """The lean recorder a case needs: the aten ops in first-dispatch order, and
    each op's first (successful) call's input shapes. It flattens a call's
    arguments only the first time an op is seen: a case dispatches the same few
    ops over and over."""

    def __init__(self, shapes):
        super().__init__()
        self._seen = {}
        self.shapes = shapes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = _NAMES.get(func) or _NAMES.setdefault(func, aten_name(func))
        kwargs = kwargs or {}
        self._seen.setdefault(name, None)
        out = func(*args, **kwargs)
        if name not in self.shapes:
            self.shapes[name] = [tuple(x.shape) for x in tree_flatten((args, kwargs))[0]
                                 if isinstance(x, torch.Tensor)]
        return out

    @property
    def ops(self):
        return list(self._seen)


_NAMES = {}  # OpOverload -> aten_name(it)


def recorder_with_shapes():
    """A recorder (its `.ops`: distinct aten ops in first-dispatch order) and the
    dict it fills with each op's first call's input shapes (what the precision
    allowance needs to infer a reduction length)."""
    shapes = {}
    return _OpsAndShapes(shapes), shapes
