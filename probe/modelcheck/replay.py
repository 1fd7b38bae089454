"""Replaying a model's captured aten calls on a target, one probe case per distinct call.

Each call is kept as metadata: tensors become (shape, stride, dtype) and are
regenerated with seeded random values, except integer and bool tensors, whose
values are kept (they are indices, targets, masks: random ones would be out of
range). Calls that differ only in tensor values are one case. Each case goes
through the probe's own run_case (CPU reference, float64 truth, the target,
fallback warnings, tolerance policy, timing) in the same isolated worker pool
as a sweep, so a call that crashes or hangs costs one case, and is recorded
like any probe case, under op id = the aten op, in a run of source 'model'.
This module is imported by workers too: it touches the store only in replay().
"""
import base64
import json
import os
import pickle
import time
import zlib
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from torch.utils._pytree import tree_map

import mpsprobe
from mpsprobe.engine.aten import aten_name, main_dtype
from mpsprobe.engine.execute import run_case
from mpsprobe.engine.rulebook import DeviceSlot, filled
from mpsprobe.ops import opinfo
from mpsprobe.vocabulary import ERROR


@dataclass
class TensorMeta:
    shape: tuple
    stride: tuple
    offset: int
    dtype: torch.dtype
    values: torch.Tensor = None     # kept for integer and bool tensors

    def __repr__(self):
        kept = f",values={zlib.crc32(self.values.numpy().tobytes())}" if self.values is not None else ""
        return f"T({self.dtype},{self.shape},{self.stride},{self.offset}{kept})"


def _meta(x):
    if isinstance(x, torch.Tensor):
        if x.layout != torch.strided:
            raise TypeError("only strided tensors are replayed")
        keep = not (x.is_floating_point() or x.is_complex())
        return TensorMeta(tuple(x.shape), tuple(x.stride()), x.storage_offset(), x.dtype,
                          x.detach().clone() if keep else None)
    if isinstance(x, torch.device):
        return DeviceSlot()
    return x


def _storage_size(meta):
    if any(n == 0 for n in meta.shape):
        return meta.offset
    return meta.offset + 1 + sum((n - 1) * s for n, s in zip(meta.shape, meta.stride))


def _tensor(meta, generator):
    """A CPU tensor with `meta`'s shape, stride and dtype."""
    size = _storage_size(meta)
    if meta.values is not None:
        if meta.values.is_contiguous() and meta.stride == meta.values.stride() and meta.offset == 0:
            return meta.values.clone()
        flat = torch.zeros(size, dtype=meta.dtype)
        view = flat.as_strided(meta.shape, meta.stride, meta.offset)
        try:
            view.copy_(meta.values)
            return view
        except RuntimeError:  # overlapping strides: keep the values, lose the layout
            return meta.values.clone()
    wide = torch.complex64 if meta.dtype.is_complex else torch.float32
    flat = torch.randn(size, generator=generator, dtype=wide).to(meta.dtype)
    return flat.as_strided(meta.shape, meta.stride, meta.offset)


@dataclass
class Call:
    func: object
    name: str
    dtype: str
    args: tuple
    kwargs: dict
    signature: str
    count: int = 1

    @property
    def index(self):
        """The case's sample index: fixed by the signature, so equal calls share a case."""
        return zlib.crc32(self.signature.encode())

    def sample(self, seed=0):
        """A SampleInput-like object: input is a 0-size anchor tensor whose device the
        call reads to place its device arguments; args/kwargs are the call's own."""
        generator = torch.Generator().manual_seed(seed + self.index)
        materialize = (lambda x: _tensor(x, generator) if isinstance(x, TensorMeta) else x)
        return SimpleNamespace(input=torch.empty(0, dtype=torch.bool),
                               args=tree_map(materialize, self.args),
                               kwargs=tree_map(materialize, self.kwargs))

    def op(self, anchor, *args, **kwargs):
        args, kwargs = filled(anchor, (args, kwargs))
        return self.func(*args, **kwargs)

    def summary(self, limit=300):
        def describe(x):
            if isinstance(x, TensorMeta):
                dims = ",".join(map(str, x.shape))
                return f"{str(x.dtype).replace('torch.', '')}[{dims}]"
            return repr(x)
        parts = [describe(a) for a in tree_map(lambda x: x, self.args)]
        parts += [f"{k}={describe(v)}" for k, v in self.kwargs.items()]
        text = f"{self.name}({', '.join(parts)})"
        return text if len(text) <= limit else text[: limit - 1] + "…"


class CallRecorder:
    """AtenCapture's on_call hook: keeps each distinct aten call once, counting repeats."""

    def __init__(self):
        self.calls = {}
        self.skipped = {}

    def __call__(self, func, args, kwargs, out):
        name = aten_name(func)
        if not name.startswith("aten::"):
            return
        try:
            margs, mkwargs = tree_map(_meta, tuple(args)), tree_map(_meta, dict(kwargs))
        except TypeError as e:
            self.skipped[name] = str(e)
            return
        signature = f"{name}{margs!r}{sorted(mkwargs.items())!r}"
        if signature in self.calls:
            self.calls[signature].count += 1
        else:
            self.calls[signature] = Call(func, name, main_dtype(args, kwargs, out) or "none",
                                         margs, mkwargs, signature)

    def list(self):
        return list(self.calls.values())


def _nondeterministic(call):
    tags = getattr(call.func, "tags", ())
    base = call.name.split("::", 1)[1].split(".")[0]
    return torch.Tag.nondeterministic_seeded in tags or opinfo.is_nondeterministic(base)


def encode(call):
    """A call as text for the worker protocol (its function by name, its arguments pickled)."""
    payload = (call.name, call.dtype, call.args, call.kwargs, call.signature, call.count)
    return base64.b64encode(pickle.dumps(payload)).decode("ascii")


def _function(name):
    """The OpOverload an aten name spells: "aten::add.Tensor", "aten::relu" (default)."""
    namespace, _, rest = name.partition("::")
    op, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, namespace), op), overload or "default")


def decode(text):
    name, dtype, args, kwargs, signature, count = pickle.loads(base64.b64decode(text))
    return Call(_function(name), name, dtype, args, kwargs, signature, count)


def run_call(call, target, timing=True, modes=None):
    """One replayed call as a probe case on `target`: a result dict (see execute.run_case).
    `modes`: the target's precision settings, to judge kernels that ran in a reduced one."""
    try:
        return run_case(call.op, getattr(torch, call.dtype, torch.float32), call.sample(),
                        target, nondeterministic=_nondeterministic(call), timing=timing,
                        op_key=call.name, modes=modes)
    except Exception as e:  # a fault of the replay's, reported as such
        return {"status": ERROR, "check_kind": "none",
                "reason": "mpsprobe could not replay this call",
                "error_type": type(e).__name__, "message": str(e)[:500]}


def pairs(calls):
    """The pool's work: one pair per (aten op, dtype), its calls as the samples."""
    grouped = {}
    for call in calls:
        pair = grouped.setdefault((call.name, call.dtype), {
            "op": call.name, "dtype": call.dtype, "name": call.name, "variant": "",
            "aten_name": call.name.split("::", 1)[1], "source": "model", "cmd": "replay",
            "calls": []})
        pair["calls"].append(encode(call))
    return list(grouped.values())


def replay(db, calls, pool, env, model_name, timing=True, on_case=None):
    """Run every call in `pool`'s isolated workers and record a run of source 'model'.

    A call that crashes or hangs its worker costs that call (status crash or
    timeout, as in a sweep); the rest go on in a new worker. Returns
    (writer, [(call, result)]).
    """
    from mpsprobe.db.writer import RunWriter
    options = {"model": model_name, "source": "model", "timing": timing,
               "mps_fallback": os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK", "0") not in ("", "0")}
    key = "model:" + hex(zlib.crc32(json.dumps([model_name, sorted(c.signature for c in calls)]).encode()))
    writer = RunWriter.start(db, key, dict(env, source="model"), options, mpsprobe.__version__,
                             os.getpid())
    by_index = {(c.name, c.dtype, c.index): c for c in calls}
    results, state = [], "interrupted"
    started = time.monotonic()

    def case(pair, index, sample, result):
        writer.record(pair, index, sample, result)
        call = by_index.get((pair["op"], pair["dtype"], index))
        if call is not None:
            results.append((call, result))
        if on_case:
            on_case(call, result)
    try:
        with pool:
            pool.run(pairs(calls), case, writer.pair_done)
        state = "complete"
    finally:
        writer.finish(state, time.monotonic() - started)
    return writer, results


def model_time(results):
    """(CPU ms, target ms) for one pass of the model: Σ count × median time, over timed calls."""
    cpu = target = 0.0
    timed = 0
    for call, result in results:
        if result.get("ref_ms") is not None and result.get("target_ms") is not None:
            cpu += call.count * result["ref_ms"]
            target += call.count * result["target_ms"]
            timed += 1
    return (cpu, target, timed) if timed else None
