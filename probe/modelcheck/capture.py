"""Capturing a model: which aten ops it dispatches, in which dtype, from which module.

The model runs on the CPU, under a TorchDispatchMode that records every aten
op (forward; with `train`, backward and one optimizer step too), the dtype
each call is filed under and the module that made it. An exported op list
(`check --export`) reads back as the same ModelOps.
"""
import contextlib
import json
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from mpsprobe.errors import MpsprobeError
from . import kernels

# torch is imported only where a model is captured: the site's check page
# reads exported op lists with this module and must not pay for torch.
OPTIMIZERS = ("sgd", "adam", "adamw")


class CheckError(MpsprobeError):
    """The model could not be captured: one line for the user."""


@dataclass
class OpUse:
    """One aten op, in one dtype, as the model uses it."""
    aten_op: str
    dtype: Optional[str]
    count: int
    places: list = field(default_factory=list)    # module paths, most calls first
    lines: list = field(default_factory=list)     # "file.py:12" in the user's code, most calls first
    variants: list = field(default_factory=list)  # kernel variants run (engine.aten.variant)
    widened: bool = False      # the CPU has no kernel in this dtype: captured in float32
    on_mps: Optional[str] = None   # what a Mac runs for it, mapped from the CPU's trace (kernels.py)


@dataclass
class ModelOps:
    model: str
    mode: str                 # "forward" or "forward+backward"
    dtype: str
    ops: list
    calls: list = None        # replayable calls (modelcheck/replay.py), when recorded
    kept: tuple = ()          # tensors --dtype left in float64 (load.cast)

    def to_json(self):
        return {"model": self.model, "mode": self.mode, "dtype": self.dtype,
                "ops": [{"aten_op": u.aten_op, "dtype": u.dtype, "count": u.count,
                         "places": u.places, "lines": u.lines, "variants": u.variants,
                         **({"on_mps": u.on_mps} if u.on_mps else {})}
                        for u in self.ops]}

    @property
    def distinct(self):
        """Distinct aten op names (a name used in two dtypes counts once)."""
        return len({u.aten_op for u in self.ops})


@contextlib.contextmanager
def portable_dispatch(enabled=True):
    """Make the CPU take the generic paths a non-CPU target takes: no fused
    MultiheadAttention fast path (CPU/CUDA only), no oneDNN RNN kernels, and
    the math scaled-dot-product attention rather than the CPU's flash kernel.
    Otherwise the capture would list CPU-only kernels no other device runs."""
    import torch
    if not enabled:
        yield
        return
    with contextlib.ExitStack() as stack:
        mha = getattr(torch.backends, "mha", None)
        if mha is not None and hasattr(mha, "set_fastpath_enabled"):
            before = mha.get_fastpath_enabled()
            mha.set_fastpath_enabled(False)
            stack.callback(mha.set_fastpath_enabled, before)
        if hasattr(torch._C, "_set_mkldnn_enabled"):  # the flags() helper warns about TF32
            before_mkldnn = torch._C._get_mkldnn_enabled()
            torch._C._set_mkldnn_enabled(False)
            stack.callback(torch._C._set_mkldnn_enabled, before_mkldnn)
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            stack.enter_context(sdpa_kernel([SDPBackend.MATH]))
        except ImportError:
            pass
        yield


def capture(loaded, train=False, optimizer="sgd", on_call=None, portable=True, for_mps=None):
    """ModelOps for one forward (eval, no grad) or one training step of `loaded`.

    `portable`: capture the generic paths a non-CPU target takes (portable_dispatch);
    `for_mps` (default: `portable`): say what a Mac runs in their place where it runs a
    kernel of its own (kernels.py).
    """
    import torch
    from mpsprobe.engine.aten import AtenCapture
    from . import load as models
    # A torch.compile'd model is traced as the eager module it wraps: its ops are the question.
    model = getattr(loaded.model, COMPILED, loaded.model)
    tracker = ModuleTracker(model, root_name=loaded.name)
    cap = AtenCapture(where=tracker.current, on_call=on_call, source=user_line,
                      widen_low=_has_low_precision(model, loaded.inputs))
    optimizers = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}
    if train and not any(p.requires_grad for p in model.parameters()):
        raise CheckError(f"--train: {loaded.name} has no trainable parameters, so there is no "
                         "training step to capture; check it without --train")
    opt = optimizers[optimizer](model.parameters(), lr=1e-3) if train else None
    model.train(train)
    for_mps = portable if for_mps is None else for_mps
    fused = kernels.fused_calls(tracker.current, user_line, train) if for_mps else contextlib.nullcontext()
    try:
        with portable_dispatch(portable), tracker, torch.set_grad_enabled(train), fused:
            if train:
                opt.zero_grad(set_to_none=True)
            with cap, (cap.widen_functions() if cap._widen_low else contextlib.nullcontext()):
                output = models.call(model, loaded.inputs)
                if train:
                    tracker.phase = "loss"
                    loss = (loaded.loss or models.default_loss)(output)
                    tracker.label(loss, "loss")
                    tracker.phase = "backward"
                    loss.backward()
                    tracker.phase = "optimizer"
                    opt.step()
    except models.ModelError:
        raise
    except Exception as e:
        where = "training step" if train else "forward pass"
        text = str(e).strip().splitlines()
        raise CheckError(f"the model raised during its {where} on the CPU: "
                         f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")) from None
    uses = []
    for name in cap.ops:
        if not name.startswith("aten::"):
            continue  # profiler markers and the like are not kernels
        for dtype, count in cap.main_dtypes.get(name, Counter()).most_common():
            def ranked(table):
                return [k for k, _ in table.get((name, dtype), Counter()).most_common()]
            uses.append(OpUse(name, dtype, count, ranked(cap.places), ranked(cap.lines),
                              ranked(cap.filed_variants), (name, dtype) in cap.widened))
            if for_mps:
                uses[-1].on_mps = kernels.routed_note(name, uses[-1].variants) or kernels.cpu_only_note(name)
    for (kernel, dtype), (count, places, lines, note) in getattr(fused, "calls", {}).items():
        def most(table):
            return sorted(table, key=table.get, reverse=True)
        uses.append(OpUse(kernel, dtype, count, most(places), most(lines), on_mps=note))
    dtype = str(next((p.dtype for p in model.parameters()), torch.get_default_dtype()))
    return ModelOps(loaded.name, "forward+backward" if train else "forward",
                    dtype.replace("torch.", ""), uses, kept=tuple(getattr(loaded, "kept", ())))


def _has_low_precision(model, inputs):
    import torch
    from torch.utils._pytree import tree_flatten
    tensors = list(model.parameters()) + list(model.buffers()) + \
        [x for x in tree_flatten(inputs)[0] if isinstance(x, torch.Tensor)]
    return any(t.dtype in (torch.float16, torch.bfloat16) for t in tensors)


_FOLDERS = None


def _folders():
    """(mpsprobe's folder, torch's and the standard library's, installed packages')."""
    global _FOLDERS
    if _FOLDERS is None:
        import site
        import sysconfig
        import torch
        import mpsprobe

        def real(*dirs):
            return tuple(os.path.realpath(d) + os.sep for d in dirs if d)
        packages = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
        packages.update(getattr(site, "getsitepackages", lambda: [])())
        _FOLDERS = (real(os.path.dirname(mpsprobe.__file__)),
                    real(os.path.dirname(torch.__file__), sysconfig.get_paths()["stdlib"]),
                    real(*packages))
    return _FOLDERS


def _shown(path, line):
    shown = os.path.relpath(path)
    return f"{path if shown.startswith('..') else shown}:{line}"


def user_line(frame=None):
    """"path/to/model.py:12": the line of the model's code that is running, from the
    Python stack: the innermost frame outside torch and the standard library, and
    outside installed packages where the model's own file is further out (a
    torchvision model has only torchvision's). Only frames inside the call mpsprobe
    made count; None for a backward pass (only the autograd engine runs)."""
    frame = frame or sys._getframe(1)
    ours, libraries, packages = _folders()
    in_package = None
    while frame is not None:
        path = frame.f_code.co_filename
        if not path.startswith("<"):
            real = os.path.realpath(path)
            if real.startswith(ours):
                if real.startswith(os.path.join(ours[0], "modelcheck", "")):
                    return in_package     # back at the call into the model
            elif real.startswith(packages) and not real.startswith(libraries):
                in_package = in_package or _shown(real, frame.f_lineno)
            elif not real.startswith(libraries):
                return _shown(real, frame.f_lineno)
        frame = frame.f_back
    return in_package


def ops_from_json(data):
    """ModelOps from `check --export` JSON, a list of names, or text with one name a line."""
    if isinstance(data, str):
        names = [x.strip() for x in data.replace(",", "\n").splitlines() if x.strip()]
        data = names
    if isinstance(data, list):
        data = {"ops": data}
    if not isinstance(data, dict) or not isinstance(data.get("ops"), list):
        raise CheckError('expected {"ops": [...]}, a JSON list of aten op names, or one name a line')
    default_dtype = data.get("dtype") or "float32"
    for key in ("model", "mode", "dtype"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise CheckError(f"{key}: expected a string, got {json.dumps(data[key])}")
    uses = []
    for i, item in enumerate(data["ops"]):
        if isinstance(item, str):
            item = {"aten_op": item}
        if not isinstance(item, dict) or not isinstance(item.get("aten_op"), str):
            raise CheckError(f"ops[{i}]: expected an object with an aten_op string, got {json.dumps(item)[:80]}")
        _check_fields(item, i)
        name = item["aten_op"].strip()
        if not name.startswith("aten::"):
            name = "aten::" + name
        uses.append(OpUse(name, item.get("dtype") or default_dtype, int(item.get("count") or 1),
                          list(item.get("places") or []), list(item.get("lines") or []),
                          list(item.get("variants") or []),
                          on_mps=item.get("on_mps") or kernels.cpu_only_note(name)))
    return ModelOps(data.get("model") or "ops", data.get("mode") or "ops", default_dtype, uses)



# An op entry's optional fields and the type each must have.
_FIELDS = {"dtype": (str, "a string"), "count": (int, "a positive integer"), "places": (list, "a list of strings"),
           "lines": (list, "a list of strings"), "variants": (list, "a list of strings"),
           "on_mps": (str, "a string")}


def _check_fields(item, i):
    """Refuses an op entry whose field has the wrong type, naming the field and the type."""
    for key, (kind, expected) in _FIELDS.items():
        value = item.get(key)
        if value is None:
            continue
        wrong = not isinstance(value, kind) or isinstance(value, bool) or (
            kind is list and not all(isinstance(x, str) for x in value)) or (kind is int and value < 1)
        if wrong:
            raise CheckError(f"ops[{i}].{key} ({item['aten_op']}): expected {expected}, "
                             f"got {json.dumps(value)[:60]}")


def _grad_fns(tree):
    import torch
    from torch.utils._pytree import tree_flatten
    return [x.grad_fn for x in tree_flatten(tree)[0]
            if isinstance(x, torch.Tensor) and x.grad_fn is not None]


COMPILED = "_orig_mod"   # torch.compile's wrapper holds the model under this name


def module_name(path, module, root_name):
    """A module as a porter reads it: its path with its class, `layer1.0.conv1 (Conv2d)`;
    the model itself by its name; torch.compile's `_orig_mod` wrapper level left out."""
    parts = [p for p in path.split(".") if p and p != COMPILED]
    if not parts:
        return root_name
    return f"{'.'.join(parts)} ({type(module).__name__})"


class ModuleTracker:
    """Names the module that dispatched each op: `features.0 (Conv2d)`,
    `encoder.layers.1.self_attn (MultiheadAttention)`.

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
            name = module_name(path, module, self.root_name)
            try:
                self._handles.append(module.register_forward_pre_hook(self._enter_hook(name)))
            except RuntimeError:
                continue  # a scripted module takes no hooks: its ops count under its nearest
                          # hookable parent (or the model)
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
        import torch
        node = torch._C._current_autograd_node()
        if node is not None:
            return self.node_owner.get(node, self.phase or "backward")
        if self.stack:
            return self.stack[-1]
        return self.phase or self.root_name
