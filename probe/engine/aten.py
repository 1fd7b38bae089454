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


def _grad_fns(tree):
    return [x.grad_fn for x in tree_flatten(tree)[0]
            if isinstance(x, torch.Tensor) and x.grad_fn is not None]


class ModuleTracker:
    """Names the module that dispatched each op: `features.0`, `encoder.layers.1.self_attn`.

    Forward: module hooks keep a stack of the modules running. Backward: the
    autograd engine runs one graph node at a time, and each node made during a
    module's forward is labelled with that module when its forward returns
    (innermost first), so `torch._C._current_autograd_node()` leads back to it.
    """

    def __init__(self, root, root_name="model"):
        self.root = root
        self.root_name = root_name
        self.stack = []
        self.node_owner = {}
        self.phase = None      # a name for code outside any module: "loss", "optimizer"
        self._handles = []
        self._boundaries = []

    def __enter__(self):
        for path, module in self.root.named_modules():
            name = path or self.root_name
            self._handles.append(module.register_forward_pre_hook(self._enter_hook(name)))
            self._handles.append(module.register_forward_hook(self._exit_hook(name)))
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.node_owner.clear()    # drop references to the autograd graph

    def _enter_hook(self, name):
        def hook(module, args):
            self.stack.append(name)
            self._boundaries.append(set(_grad_fns(args)))
        return hook

    def _exit_hook(self, name):
        def hook(module, args, output):
            self.label(output, name, self._boundaries.pop() if self._boundaries else set())
            if self.stack:
                self.stack.pop()
        return hook

    def label(self, outputs, name, boundary=frozenset()):
        """Label the autograd nodes behind `outputs` not yet owned, up to `boundary` (the inputs')."""
        todo, seen = _grad_fns(outputs), set()
        while todo:
            node = todo.pop()
            if node is None or node in seen or node in boundary:
                continue
            seen.add(node)
            self.node_owner.setdefault(node, name)  # inner modules labelled theirs first
            todo.extend(next_node for next_node, _ in node.next_functions)

    def current(self):
        """Where the op being dispatched now comes from."""
        node = torch._C._current_autograd_node()
        if node is not None:
            return self.node_owner.get(node, self.phase or "backward")
        if self.stack:
            return self.stack[-1]
        return self.phase or self.root_name
