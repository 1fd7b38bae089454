"""`mpsprobe check`: which aten ops a model dispatches, and what the database says of each.

The model runs on the CPU, under a TorchDispatchMode that records every aten
op (forward; with `train`, backward and one optimizer step too), the dtype
each call is filed under and the module that made it. The answers come from
one probe run (db/lookup.py explains how blame is placed).
"""
import contextlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from mpsprobe.db.query import blame as lookup

# torch is imported only where a model is captured: the site's check page
# answers exported op lists with this module and must not pay for torch.
OPTIMIZERS = ("sgd", "adam", "adamw")

# How each class is shown, most severe first; the summary line keeps this order.
CLASSES = (
    ("unsupported", "✗", "unsupported"),
    ("mismatch", "≠", "wrong numbers"),
    ("fallback", "⚠", "fall back to CPU"),
    ("unknown", "?", "never probed"),
    ("unchecked", "~", "native, values unchecked"),
    ("ok", "✓", "native and correct"),
)
SYMBOL = {name: symbol for name, symbol, _ in CLASSES}
ORDER = {name: i for i, (name, _, _) in enumerate(CLASSES)}

# --fail-on LEVEL: the classes that make `check` exit 1.
FAIL_ON = {
    "unknown": {"unsupported", "mismatch", "fallback", "unknown"},
    "fallback": {"unsupported", "mismatch", "fallback"},
    "mismatch": {"unsupported", "mismatch"},
    "unsupported": {"unsupported"},
    "never": set(),
}


class CheckError(Exception):
    """The model could not be captured: one line for the user."""


@dataclass
class OpUse:
    """One aten op, in one dtype, as the model uses it."""
    aten_op: str
    dtype: Optional[str]
    count: int
    places: list = field(default_factory=list)    # module paths, most calls first


@dataclass
class ModelOps:
    model: str
    mode: str                 # "forward" or "forward+backward"
    dtype: str
    ops: list
    calls: list = None        # replayable calls (probe/replay.py), when recorded

    def to_json(self):
        return {"model": self.model, "mode": self.mode, "dtype": self.dtype,
                "ops": [{"aten_op": u.aten_op, "dtype": u.dtype, "count": u.count,
                         "places": u.places} for u in self.ops]}

    @property
    def distinct(self):
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


def capture(loaded, train=False, optimizer="sgd", on_call=None, portable=True):
    """ModelOps for one forward (eval, no grad) or one training step of `loaded`.

    `portable`: capture the generic paths a non-CPU target takes (portable_dispatch).
    """
    import torch
    from . import load as models
    from mpsprobe.engine.aten import AtenCapture, ModuleTracker
    model = loaded.model
    tracker = ModuleTracker(model, root_name=loaded.name)
    cap = AtenCapture(where=tracker.current, on_call=on_call)
    optimizers = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}
    opt = optimizers[optimizer](model.parameters(), lr=1e-3) if train else None
    model.train(train)
    try:
        with portable_dispatch(portable), tracker, torch.set_grad_enabled(train):
            if train:
                opt.zero_grad(set_to_none=True)
            with cap:
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
        places = [p for p, _ in cap.places.get(name, Counter()).most_common()]
        for dtype, count in cap.main_dtypes.get(name, Counter()).most_common():
            uses.append(OpUse(name, dtype, count, places))
    dtype = str(next((p.dtype for p in model.parameters()), torch.get_default_dtype()))
    return ModelOps(loaded.name, "forward+backward" if train else "forward",
                    dtype.replace("torch.", ""), uses)


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
    uses = []
    for item in data["ops"]:
        if isinstance(item, str):
            item = {"aten_op": item}
        if not isinstance(item, dict) or not isinstance(item.get("aten_op"), str):
            raise CheckError(f"not an op entry: {item!r}")
        name = item["aten_op"].strip()
        if not name.startswith("aten::"):
            name = "aten::" + name
        uses.append(OpUse(name, item.get("dtype") or default_dtype, int(item.get("count") or 1),
                          list(item.get("places") or [])))
    return ModelOps(data.get("model") or "ops", data.get("mode") or "ops", default_dtype, uses)


@dataclass
class OpAnswer:
    use: OpUse
    klass: str
    status: Optional[str]
    note: str
    via: list
    message: Optional[str] = None
    timing: Optional[tuple] = None       # (CPU ms, target ms) median of single-op cases


@dataclass
class Report:
    model_ops: ModelOps
    run: dict
    answers: list

    def counts(self):
        return Counter(a.klass for a in self.answers)

    def failing(self, fail_on):
        return [a for a in self.answers if a.klass in FAIL_ON[fail_on]]

    def exit_code(self, fail_on):
        return 1 if self.failing(fail_on) else 0

    def to_json(self, fail_on="fallback"):
        run = self.run
        return {
            "model": self.model_ops.model, "mode": self.model_ops.mode,
            "dtype": self.model_ops.dtype, "distinct_ops": self.model_ops.distinct,
            "run": {k: run.get(k) for k in ("id", "device", "device_name", "backend",
                                            "torch_version", "os_name", "os_version",
                                            "chip", "started", "state")},
            "counts": {name: self.counts().get(name, 0) for name, _, _ in CLASSES},
            "fallback_calls": sum(a.use.count for a in self.answers if a.klass == "fallback"),
            "fail_on": fail_on, "exit_code": self.exit_code(fail_on),
            "ops": [{"aten_op": a.use.aten_op, "dtype": a.use.dtype, "class": a.klass,
                     "status": a.status, "note": a.note, "count": a.use.count,
                     "places": a.use.places, "probe_ops": a.via, "message": a.message,
                     "cpu_ms": a.timing[0] if a.timing else None,
                     "target_ms": a.timing[1] if a.timing else None}
                    for a in self.answers],
        }


def answer(conn, model_ops, run):
    """The Report for `model_ops` against one run (a runs-table row)."""
    found = lookup.evidence(conn, run["id"])
    answers = []
    for use in model_ops.ops:
        ev = found.get((use.aten_op, use.dtype))
        klass, status, note = lookup.verdict(ev)
        if klass == "unknown" and ev is None:
            elsewhere = lookup.other_dtypes(found, use.aten_op, use.dtype)
            if elsewhere:
                note = f"never probed in {use.dtype} (probed in {', '.join(elsewhere)})"
        answers.append(OpAnswer(use, klass, status, note, sorted(ev.via) if ev else [],
                                ev.messages[0] if ev and ev.messages else None,
                                lookup.timing(ev)))
    answers.sort(key=lambda a: (ORDER[a.klass], a.use.aten_op, a.use.dtype or ""))
    return Report(model_ops, run, answers)


def _names(answers, limit=3):
    names = [a.use.aten_op for a in answers]
    return ", ".join(names[:limit]) + (", …" if len(names) > limit else "")


def format_report(report, fail_on="fallback"):
    """The human-readable report, as a list of lines."""
    mo, run = report.model_ops, report.run
    target = f"{run['device']} ({run.get('device_name') or '?'})"
    where = " ".join(x for x in (run.get("os_name"), run.get("os_version")) if x)
    lines = [f"{mo.model} {mo.mode}, {mo.dtype} — {mo.distinct} distinct aten ops",
             f"answers from run {run['id'][:12]}: {target}, torch {run['torch_version']}, "
             f"{where}, {(run.get('started') or '')[:10]}"]
    if run.get("backend"):
        lines.append("  (a test backend: NOT a real device measurement)")
    summary = []
    for name, symbol, label in CLASSES:
        group = [a for a in report.answers if a.klass == name]
        if group:
            shown = f" ({_names(group)})" if name not in ("ok", "unchecked") else ""
            summary.append(f"{symbol} {len(group)} {label}{shown}")
    lines.append("  " + "   ".join(summary))
    fallback_calls = sum(a.use.count for a in report.answers if a.klass == "fallback")
    if fallback_calls:
        lines.append(f"  expected cost: {fallback_calls} CPU fallback call(s) per "
                     f"{'step' if mo.mode == 'forward+backward' else 'forward'}, "
                     "each copying its tensors to the CPU and back")
    lines.append("")
    width = max((len(a.use.aten_op) for a in report.answers), default=10)
    for a in report.answers:
        places = ", ".join(a.use.places[:3]) + (", …" if len(a.use.places) > 3 else "")
        timing = ""
        if a.timing:
            cpu_ms, target_ms = a.timing
            timing = f"; target {target_ms:.3g} ms vs CPU {cpu_ms:.3g} ms"
        lines.append(f"{SYMBOL[a.klass]} {a.use.aten_op:<{width}} {a.use.dtype or '-':<8} "
                     f"×{a.use.count:<4} {a.note}{timing}" + (f"  [{places}]" if places else ""))
        if a.klass in ("unsupported", "mismatch", "fallback") and a.message:
            lines.append(f"    {a.message[:160]}")
    failing = report.failing(fail_on)
    lines.append("")
    lines.append(f"exit 1: {len(failing)} op(s) at or above --fail-on {fail_on}" if failing
                 else f"exit 0: nothing at or above --fail-on {fail_on}")
    return lines
