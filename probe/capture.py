"""Which aten ops a piece of code dispatches, named as PyTorch's messages name them."""
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def aten_name(func):
    """`aten::add.Tensor`, or `aten::relu` for a default overload: MPSFallback.mm's spelling."""
    schema = func._schema
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


class AtenCapture(TorchDispatchMode):
    """Records each aten op dispatched inside it, with the dtypes of its tensor arguments."""

    def __init__(self):
        super().__init__()
        self.counts = Counter()
        self.dtypes = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = aten_name(func)
        self.counts[name] += 1
        leaves, _ = tree_flatten((args, kwargs or {}))
        seen = self.dtypes.setdefault(name, set())
        seen.update(str(x.dtype).replace("torch.", "") for x in leaves if isinstance(x, torch.Tensor))
        return func(*args, **(kwargs or {}))

    @property
    def ops(self):
        """Distinct op names in first-dispatch order."""
        return list(self.counts)
