"""Which aten ops a piece of code dispatches, named as PyTorch's messages name them."""
import contextlib
import warnings
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map


def aten_name(func):
    """`aten::add.Tensor`, or `aten::relu` for a default overload: MPSFallback.mm's spelling."""
    schema = func._schema
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def tensors(tree):
    """The tensors among the leaves of nested lists, tuples and dicts, in tree_flatten's order.

    Aten arguments and outputs are made of nothing else, and a recorder looks at every
    dispatch: pytree's general flattening was most of its cost."""
    found = []
    stack = [tree]
    while stack:
        x = stack.pop()
        if isinstance(x, torch.Tensor):
            found.append(x)
        elif isinstance(x, (list, tuple)):
            stack.extend(reversed(x))
        elif isinstance(x, dict):
            stack.extend(reversed(list(x.values())))
    return found


def main_dtype(args, kwargs, out, inputs=None):
    """The dtype a call is filed under: its first tensor argument's, else its first output's.

    The probe files a case under its sample's dtype, which is the first argument's
    (`nll_loss_forward(float32 input, int64 target)` is a float32 case).
    `inputs`: the tensors of (args, kwargs), where the caller has them already.
    """
    first = (tensors((args, kwargs)) if inputs is None else inputs) or tensors(out)
    return _dtype_name(first[0].dtype) if first else None


# Conversions: filed under the dtype they convert to as well, since the target
# must hold a tensor of that dtype (`.double()` needs float64 on the device).
CONVERSIONS = ("aten::_to_copy", "aten::to.dtype", "aten::to.dtype_layout", "aten::to.other",
               "aten::to.device", "aten::_to_dtype")


def filed_dtypes(name, args, kwargs, out, inputs=None):
    """The dtypes one call is filed under: its main dtype and, for a conversion, the dtype it makes."""
    first = main_dtype(args, kwargs, out, inputs)
    if name in CONVERSIONS and isinstance(out, torch.Tensor) and _dtype_name(out.dtype) != first:
        return [first, _dtype_name(out.dtype)]
    return [first]


# Arguments that choose a kernel (beyond the input's rank), per aten op name
# without its overload: what a failure can depend on while the op name stays the same.
KERNEL_ARGUMENTS = {
    "convolution": ("transposed",), "convolution_backward": ("transposed",),
    "_convolution": ("transposed",),
    "grid_sampler_2d": ("interpolation_mode", "padding_mode", "align_corners"),
    "grid_sampler_3d": ("interpolation_mode", "padding_mode", "align_corners"),
    "grid_sampler_2d_backward": ("interpolation_mode", "padding_mode", "align_corners"),
    "upsample_bilinear2d": ("align_corners",), "upsample_bicubic2d": ("align_corners",),
    "upsample_trilinear3d": ("align_corners",), "upsample_linear1d": ("align_corners",),
    "_fft_r2c": ("dim", "onesided"), "_fft_c2r": ("dim",), "_fft_c2c": ("dim", "forward"),
}
# Reductions: which dims they reduce chooses the kernel (the last dim, all of them, …).
REDUCTIONS = {"sum", "mean", "amax", "amin", "prod", "var", "std", "var_mean", "std_mean",
              "linalg_vector_norm", "norm", "argmax", "argmin", "max", "min", "logsumexp",
              "any", "all", "nansum", "count_nonzero"}


def _argument(func, args, kwargs, name):
    for i, arg in enumerate(func._schema.arguments):
        if arg.name == name:
            if name in kwargs:
                return kwargs[name]
            if i < len(args):
                return args[i]
            return None
    return None


def _dims(value, rank):
    """Reduction/FFT dims counted from the end (-1 is the last), so the same choice
    on inputs of other ranks reads the same: "(-1)", or "all"."""
    dims = [] if value is None else [value] if isinstance(value, int) else list(value)
    ends = sorted({d - rank if d >= 0 else d for d in dims})
    if not ends or len(ends) == rank:
        return "all"
    return "(" + ",".join(map(str, ends)) + ")"


def variant(func, args, kwargs, inputs=None):
    """What selects the kernel one call runs, beyond its name and dtype: the rank of
    its first tensor ("4-D", "2-D empty" when it has no elements) and the arguments
    KERNEL_ARGUMENTS and REDUCTIONS list.
    The probe records it per case and `check` per model call, so each is answered
    from cases that ran the same variant."""
    inputs = tensors((args, kwargs)) if inputs is None else inputs
    first = inputs[0] if inputs else None
    rank = first.dim() if first is not None else 0
    parts = [f"{rank}-D" if first is not None else "no tensor"]
    if first is not None and first.numel() == 0 and rank:
        parts.append("empty")      # a pass on no elements says little of the kernel
    base = func._schema.name.split("::", 1)[-1]
    for name in KERNEL_ARGUMENTS.get(base, ()):
        value = _argument(func, args, kwargs, name)
        if value is not None:
            parts.append(f"{name}={_dims(value, rank) if name == 'dim' else value}")
    if base in REDUCTIONS:
        parts.append(f"dim={_dims(_argument(func, args, kwargs, 'dim'), rank)}")
    return " ".join(parts)


class AtenCapture(TorchDispatchMode):
    """Records each aten op dispatched inside it, with the dtypes of its tensor arguments.

    Optional extras, off by default: `where` is a callable naming the code that
    dispatched each call (a module path), collected in `places` per (op, dtype), and
    `source` one naming its line in the user's code ("model.py:12"), in `lines`;
    `on_call(func, args, kwargs, out)` sees every call (to record it for replay).
    `main_dtypes` counts, per op, the dtypes each call is filed under (filed_dtypes);
    `variants` keeps, per op, the kernel variants it ran (variant) and
    `filed_variants` the same per (op, dtype).
    """

    @classmethod
    def _should_skip_dynamo(cls):
        # Otherwise torch wraps __torch_dispatch__ to keep Dynamo out of it, importing all of
        # torch._dynamo on the first call (4 s of a 12 s `check`); the capture runs eager code only.
        return False

    def __init__(self, where=None, on_call=None, source=None, widen_low=False):
        super().__init__()
        self.lines = {}
        self.widened = set()     # ops the CPU could not run in float16/bfloat16 (widen_low)
        self._widen_low = widen_low
        self.filing_as = None    # a low dtype: float32 calls are filed under it (WidenLow)
        self.paused = False      # while WidenLow converts arguments: not the model's calls
        self.counts = Counter()
        self.dtypes = {}
        self.main_dtypes = {}
        self.places = {}
        self.variants = {}
        self.filed_variants = {}
        self._where = where
        self._source = source
        self._on_call = on_call

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.paused:
            return func(*args, **kwargs)
        name = aten_name(func)
        self.counts[name] += 1
        inputs = tensors((args, kwargs))
        seen = self.dtypes.setdefault(name, set())
        seen.update(_dtype_name(x.dtype) for x in inputs)
        where = self._where() if self._where is not None else None
        line = self._source() if self._source is not None else None
        try:
            kind = variant(func, args, kwargs, inputs)
        except Exception:   # an argument of an unexpected kind: the call still counts
            kind = None
        widened = self.filing_as is not None
        try:
            out = func(*args, **kwargs)
        except Exception:
            if not self._widen_low:
                raise
            out = self._widened(func, args, kwargs)
            widened = True
        for dtype in filed_dtypes(name, args, kwargs, out, inputs):
            if self.filing_as is not None:
                dtype = _FILED_AS[self.filing_as].get(dtype, dtype)
            if widened:
                self.widened.add((name, dtype))
            self.main_dtypes.setdefault(name, Counter())[dtype] += 1
            if where is not None:
                self.places.setdefault((name, dtype), Counter())[where] += 1
            if line is not None:
                self.lines.setdefault((name, dtype), Counter())[line] += 1
            if kind is not None:
                self.filed_variants.setdefault((name, dtype), Counter())[kind] += 1
        if kind is not None:
            self.variants.setdefault(name, set()).add(kind)
        if self._on_call is not None:
            self._on_call(func, args, kwargs, out)
        return out

    def _widened(self, func, args, kwargs):
        """`func` run in float32 where the CPU has no float16/bfloat16 kernel (it raised):
        outputs back in the low dtype, written-to arguments updated. Raises the
        original error when there is nothing to widen or float32 fails too."""
        leaves = tree_flatten((args, kwargs))[0]
        floating = {x.dtype for x in leaves if isinstance(x, torch.Tensor) and x.is_floating_point()}
        low = next(iter(floating), None)
        if len(floating) != 1 or low not in (torch.float16, torch.bfloat16):
            return func(*args, **kwargs)    # raises again, as it did: not a missing low kernel
        widen = (lambda x: x.float() if isinstance(x, torch.Tensor) and x.dtype == low else x)
        with self._paused():
            wide_args, wide_kwargs = tree_map(widen, tuple(args)), tree_map(widen, dict(kwargs))
        out = func(*wide_args, **wide_kwargs)
        for i, arg in enumerate(func._schema.arguments[:len(args)]):
            if arg.alias_info is not None and arg.alias_info.is_write \
                    and isinstance(args[i], torch.Tensor):
                args[i].copy_(wide_args[i])
                if out is wide_args[i]:
                    out = args[i]
        with self._paused():
            return tree_map(_narrower(low), out)

    @contextlib.contextmanager
    def _paused(self):
        self.paused = True
        try:
            yield
        finally:
            self.paused = False

    def widen_functions(self):
        """A TorchFunctionMode for the capture of a float16/bfloat16 model: a torch
        function the CPU refuses in that dtype before any kernel runs (torch.fft
        refuses float16 up front) runs again in float32, its calls filed under the
        low dtype and marked as widened."""
        return WidenLow(self)

    def variants_json(self):
        """{op: [variants]}, sorted: what a case records in results.aten_variants."""
        return {name: sorted(kinds) for name, kinds in self.variants.items()}

    @property
    def ops(self):
        """Distinct op names in first-dispatch order."""
        return list(self.counts)


class _OpsAndShapes(TorchDispatchMode):
    """The lean recorder a case needs: the aten ops in first-dispatch order, and
    each op's first (successful) call's input shapes, taken only the first time
    an op is seen: a case dispatches the same few ops over and over. `variants`
    and `dtypes` keep, per op, every call's kernel variant and the dtypes it is
    filed under (filed_dtypes, as a model's calls are: a float32 irfft2 runs
    `_fft_c2r` on complex64)."""

    def __init__(self, shapes):
        super().__init__()
        self._seen = {}
        self.shapes = shapes
        self.variants = {}
        self.dtypes = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = _NAMES.get(func) or _NAMES.setdefault(func, aten_name(func))
        kwargs = kwargs or {}
        self._seen.setdefault(name, None)
        inputs = tensors((args, kwargs))   # looked at once, shapes and ranks as after the call
        try:
            out = func(*args, **kwargs)
        except Exception:
            self._file(name, args, kwargs, None, inputs)   # the call that raised ran in these
            raise
        self._file(name, args, kwargs, out, inputs)
        if name not in self.shapes:
            self.shapes[name] = [tuple(x.shape) for x in inputs]
        try:
            self.variants.setdefault(name, set()).add(variant(func, args, kwargs, inputs))
        except Exception:   # an argument of an unexpected kind: the call still counts
            pass
        return out

    def _file(self, name, args, kwargs, out, inputs):
        try:
            filed = filed_dtypes(name, args, kwargs, out, inputs)
        except Exception:   # an argument of an unexpected kind: the op stays unfiled
            return
        self.dtypes.setdefault(name, set()).update(d for d in filed if d is not None)

    def variants_json(self):
        """{op: [variants]}, sorted: what a case records in results.aten_variants."""
        return {name: sorted(kinds) for name, kinds in self.variants.items()}

    def dtypes_json(self):
        """{op: [dtypes]}, sorted: what a case records in results.aten_dtypes."""
        return {name: sorted(found) for name, found in self.dtypes.items() if found}

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


def recorded_once(cache, key, run):
    """(ops, first-call shapes, variants, dtypes) of what `run(recorder)` dispatches inside the
    recorder it is given, cached under `key` (an op, dtype and sample signature
    dispatch the same ops every time). An exception ends the recording, not the case:
    the ops dispatched before it are kept."""
    if cache is not None and key in cache:
        return cache[key]
    recorder, shapes = recorder_with_shapes()
    try:
        run(recorder)
    except Exception:
        pass
    recorded = (recorder.ops, shapes, recorder.variants_json(), recorder.dtypes_json())
    if cache is not None:
        cache[key] = recorded
    return recorded


class WidenLow(torch.overrides.TorchFunctionMode):
    """See AtenCapture.widen_functions."""

    def __init__(self, capture):
        super().__init__()
        self.capture = capture

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            return func(*args, **kwargs)
        except Exception:
            leaves = tree_flatten((args, kwargs))[0]
            lows = {x.dtype for x in leaves if isinstance(x, torch.Tensor) and x.dtype in _WIDER}
            if not lows or self.capture.filing_as is not None:
                raise
        low = torch.bfloat16 if torch.bfloat16 in lows else torch.float16
        widen = (lambda x: x.to(_WIDER[x.dtype]) if isinstance(x, torch.Tensor) and x.dtype in _WIDER else x)
        with self.capture._paused():
            wide_args, wide_kwargs = tree_map(widen, tuple(args)), tree_map(widen, dict(kwargs))
        self.capture.filing_as = _dtype_name(low)
        try:
            out = func(*wide_args, **wide_kwargs)
        finally:
            self.capture.filing_as = None
        with self.capture._paused():
            return tree_map(_narrower(low), out)


# Under a widened call, the dtypes a call is filed under instead.
_FILED_AS = {"float16": {"float32": "float16", "complex64": "complex32"},
             "bfloat16": {"float32": "bfloat16"}}
# Low-precision dtypes and what they are widened to when the CPU lacks a kernel.
_WIDER = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.complex32: torch.complex64}


def _narrower(low):
    """Back from float32 to `low`; complex64 to complex32 for float16 (what an FFT of
    float16 makes)."""
    back = {torch.float32: low}
    if low == torch.float16:
        back[torch.complex64] = torch.complex32

    def narrow(x):
        if not (isinstance(x, torch.Tensor) and x.dtype in back):
            return x
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # "ComplexHalf support is experimental"
            return x.to(back[x.dtype])
    return narrow
