"""Running an op's speed ladder on the CPU and the target.

For each rung of a record from `mpsprobe.ops.ladders` (smallest first), and
for each pass (forward; backward where the record has one), the op is timed
on the CPU (all the threads torch uses; the count goes in every row) and on
the target:

* inputs are built once per rung on the CPU from a seeded generator and
  copied to the target, so both sides compute on the same values;
* forward runs under `no_grad` (what inference pays); backward times
  `autograd.grad` alone, over a fresh graph built by an untimed forward
  before each call (repeating backward over one retained graph is not what
  training does, and some kernels, CPU LSTM for one, run it several times
  slower);
* one call to size the output, `warmup` more, then `reps` (≥ 10 by default)
  synchronised repetitions, timed by device events where the device has them
  (`torch.cuda.Event`, `torch.mps.Event`), else by the wall clock around a
  synchronised call; the row keeps each side's repetitions, median,
  interquartile range and an interval for the median (median_interval), and
  the speedup's interval from those;
* achieved GB/s from the bytes a call must move (forward: every input read,
  the output written, unless the record says otherwise; backward: the
  incoming gradient read, each new gradient written) and GFLOP/s where the
  record models the FLOPs, both at the target's median;
* the target's peak memory (cuda: the allocator's peak since a reset; mps:
  allocated memory sampled while the output is alive).

Climbing stops, with the reason in the row's note, when a pass's projected
repetitions would exceed the rung budget (that pass stops; the others go on),
when the op's budget would be spent by the next rung (projected from the last
rung's medians scaled by size), or when a side runs out of memory (every pass
stops: larger rungs need more). Another error stops that pass only.

The crossover is read from the rows afterwards: `crossover(rows)`, counting a
rung as a win only where the speedup's interval excludes 1.
"""
import gc
import math
import time
from dataclasses import dataclass
from typing import Optional

import torch

from ..vocabulary import BACKWARD, FORWARD, REASON_KIND
from mpsprobe.ops.ladders import GiB
from .timing import summarize  # noqa: F401  (a ladder's median and spread; also imported from here)

OUT_OF_MEMORY = REASON_KIND["out_of_memory"].name
ALWAYS = "always"   # crossover(): the target wins from the first measured rung
CPU_TARGET_NOTE = "target is the CPU: both sides run on the CPU, so the speedup is about 1 and there is no crossover"


@dataclass
class LadderRow:
    """One (op, dtype, pass, rung) measurement, ready for a database table (`dataclasses.asdict`).

    Times are milliseconds per call: median and interquartile range. gbps and
    gflops are achieved on the target. A field is None where it was not
    measured; `note` says why and `reason` names a reason kind from the
    vocabulary where one applies (out of memory).
    """
    op: str
    family: str
    dtype: str
    pass_name: str      # FORWARD or BACKWARD, from the vocabulary
    shape: str          # the main input's shape, e.g. "8x64x56x56"
    rung: str           # the rung's label: "b8 s128", "n=1024", or the shape
    size: int           # elements in the main input
    batch: Optional[int]
    target: str
    cpu_threads: int
    cpu_ms: Optional[float] = None
    cpu_spread: Optional[float] = None
    target_ms: Optional[float] = None
    target_spread: Optional[float] = None
    speedup: Optional[float] = None     # cpu_ms / target_ms: above 1, the target wins
    gbps: Optional[float] = None
    gflops: Optional[float] = None
    peak_bytes: Optional[int] = None
    reps: int = 0       # the target's timed repetitions
    note: str = ""
    reason: Optional[str] = None
    cpu_reps: int = 0
    cpu_lo: Optional[float] = None      # each median's interval (median_interval)
    cpu_hi: Optional[float] = None
    target_lo: Optional[float] = None
    target_hi: Optional[float] = None
    speedup_lo: Optional[float] = None  # cpu_lo / target_hi .. cpu_hi / target_lo
    speedup_hi: Optional[float] = None


# ------------------------------------------------------------------ timing

class WallTimer:
    """Milliseconds of one call by the wall clock, synchronised on both sides."""

    def __init__(self, synchronize=lambda: None, clock=time.perf_counter):
        self.synchronize = synchronize
        self.clock = clock

    def __call__(self, fn):
        self.synchronize()                  # nothing queued from before counts
        start = self.clock()
        fn()
        self.synchronize()
        return (self.clock() - start) * 1e3


class EventTimer:
    """Milliseconds of one call between two device events (what the device spent)."""

    def __init__(self, event, synchronize):
        self.event = event
        self.synchronize = synchronize

    def __call__(self, fn):
        start, end = self.event(enable_timing=True), self.event(enable_timing=True)
        self.synchronize()
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)


# Each side's median gets a distribution-free interval at this confidence; a speedup's
# interval spans the ratios of the two, so it holds at >= 95% (Bonferroni).
SIDE_CONFIDENCE = 0.975


def median_interval(times_ms, confidence=SIDE_CONFIDENCE):
    """(lo, hi): an interval holding the median with at least `confidence`, from order
    statistics alone (binomial ranks, no assumption on the times' distribution);
    (None, None) when there are too few times for one (fewer than 7 at 0.975)."""
    n = len(times_ms)
    ordered = sorted(times_ms)
    # The largest k with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2: [x_k, x_(n+1-k)].
    tail, k, below = (1 - confidence) / 2, 0, 0.0
    while k < n // 2:
        below += math.comb(n, k) / 2 ** n
        if below > tail:
            break
        k += 1
    if k == 0:
        return None, None
    return ordered[k - 1], ordered[n - k]


@dataclass
class Measurement:
    times: list
    estimate_ms: float          # the fastest warm-up call: what the budget was projected from
    over_budget: bool = False

    @property
    def median(self):
        return summarize(self.times)[0]

    @property
    def spread(self):
        return summarize(self.times)[1]

    @property
    def interval(self):
        return median_interval(self.times)


def measure(call, timer, *, reps=10, warmup=2, budget_s=2.0, setup=None):
    """Time `call`: `warmup` calls, then `reps` timed ones unless they would exceed `budget_s`.

    The projection uses the fastest warm-up (the first call may pay one-off
    costs: kernel compilation, allocator growth), so a rung is only refused
    when even its best call cannot fit. With `setup`, each call is
    `call(setup())` and only `call` is timed.
    """
    def once():
        if setup is None:
            return timer(call)
        state = setup()
        return timer(lambda: call(state))

    warm = [once() for _ in range(max(warmup, 1))]
    estimate = min(warm)
    if estimate * reps / 1e3 > budget_s:
        return Measurement([], estimate, over_budget=True)
    return Measurement([once() for _ in range(reps)], estimate)


# ------------------------------------------------------------------ devices

class Side:
    """One device to time on: its timer, synchronisation and memory accounting."""

    def __init__(self, device, clock=time.perf_counter):
        self.device = torch.device(device)
        self.module = getattr(torch, self.device.type, None) if self.device.type != "cpu" else None
        if self.device.index is not None and hasattr(self.module, "set_device"):
            # Events record on the current device's stream: make the target current.
            self.module.set_device(self.device)
        sync = getattr(self.module, "synchronize", None) or (lambda: None)
        self.synchronize = sync
        event = getattr(self.module, "Event", None)
        # Device events time the device's own work; the wall clock covers the rest.
        self.timer = EventTimer(event, sync) if event is not None and clock is time.perf_counter \
            else WallTimer(sync, clock)
        self._peak = None

    def reset_peak(self):
        self._peak = None
        if hasattr(self.module, "reset_peak_memory_stats"):
            self.module.reset_peak_memory_stats(self.device)

    def sample(self):
        """Note memory in use now (keeps the maximum seen since reset_peak)."""
        if hasattr(self.module, "max_memory_allocated"):
            self._peak = self.module.max_memory_allocated(self.device)
        elif hasattr(self.module, "current_allocated_memory"):       # mps: no peak counter
            self._peak = max(self._peak or 0, self.module.current_allocated_memory())

    @property
    def peak(self):
        return self._peak

    def release(self):
        gc.collect()
        if hasattr(self.module, "empty_cache"):
            self.module.empty_cache()


def is_oom(exc):
    if isinstance(exc, getattr(torch, "OutOfMemoryError", ())):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def _first_line(exc):
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:200] if lines else ''}"


# ------------------------------------------------------------------ one pass on one side

def _first_tensor(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def _prepare(record, rung, inputs, pass_, side, seed, itemsize):
    """(call, setup, bytes moved per call) for one pass; runs the op once."""
    if pass_ == FORWARD:
        def call():
            with torch.no_grad():
                return record(*inputs)
        out = call()
        side.synchronize()
        side.sample()                       # the output is alive now
        if record.bytes_moved is not None:
            moved = record.bytes_moved(rung, itemsize)
        else:
            moved = _nbytes(inputs) + _nbytes(out if isinstance(out, (tuple, list)) else [out])
        return call, None, moved
    args = list(inputs)
    for i in record.grad:
        args[i] = args[i].detach().requires_grad_()
    leaves = [args[i] for i in record.grad]

    def forward():
        return _first_tensor(record(*args))

    out = forward()
    gen = torch.Generator().manual_seed(seed + 1)
    grad_out = torch.randn(out.shape, generator=gen, dtype=out.dtype).to(out.device)
    grads = torch.autograd.grad(out, leaves, grad_out)
    side.synchronize()
    side.sample()
    # What a backward must move: read the incoming gradient, write each new one. What it
    # reads besides (saved inputs, masks) depends on the op, so this is a lower bound.
    # A gradient that is a view of the incoming one (add, sum) moves nothing: no GB/s.
    incoming = grad_out.untyped_storage().data_ptr()
    written = [g for g in grads if g is not None and g.untyped_storage().data_ptr() != incoming]
    moved = _nbytes([grad_out]) + _nbytes(written) if written else None
    del out, grads

    def call(out):
        return torch.autograd.grad(out, leaves, grad_out)
    return call, forward, moved


@dataclass
class SideResult:
    measurement: Optional[Measurement] = None
    moved: Optional[int] = None
    peak: Optional[int] = None
    error: str = ""
    oom: bool = False


def _run_side(record, rung, inputs, pass_, side, seed, reps, warmup, budget_s, itemsize):
    try:
        side.reset_peak()
        call, setup, moved = _prepare(record, rung, inputs, pass_, side, seed, itemsize)
        m = measure(call, side.timer, reps=reps, warmup=warmup, budget_s=budget_s, setup=setup)
        side.sample()
        return SideResult(m, moved, side.peak)
    except Exception as exc:    # noqa: BLE001 - a failing rung is a result, not a crash of the ladder
        result = SideResult(error=_first_line(exc), oom=is_oom(exc))
    if result.oom:
        side.release()
    return result


# ------------------------------------------------------------------ the ladder

def select_rungs(record, dtype="float32", max_size=None, max_batch=None, max_tensor_bytes=GiB):
    """The record's rungs under the caps.

    max_size caps size ladders (elements in the main input), max_batch caps
    layer ladders (their shapes are the model's, only the batch climbs), and
    max_tensor_bytes caps every rung's largest tensor.
    """
    itemsize = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    return [r for r in record.rungs
            if (max_size is None or r.batch is not None or r.size <= max_size)
            and (max_batch is None or r.batch is None or r.batch <= max_batch)
            and r.largest * itemsize <= max_tensor_bytes]


def run_ladder(record, target="cpu", *, dtype="float32", passes=(FORWARD, BACKWARD), reps=10, warmup=2,
               rung_budget_s=2.0, op_budget_s=30.0, max_size=None, max_batch=None, max_tensor_bytes=GiB,
               seed=0, clock=time.perf_counter):
    """Rows for one record's ladder on the CPU and `target` ("cpu", "cuda", "cuda:1", "mps", …).

    rung_budget_s bounds one pass's timed repetitions on one side; op_budget_s
    bounds the whole ladder: a rung is not started when the time spent plus
    the last rung's cost (its medians times the calls a rung makes) scaled by
    size would pass it. `clock` replaces the wall clock (and then device
    events too), for tests.
    """
    passes = [p for p in passes if p == FORWARD or (p == BACKWARD and record.has_backward)]
    cpu, tgt = Side("cpu", clock), Side(target, clock)
    target_is_cpu = tgt.device.type == "cpu"
    threads = torch.get_num_threads()
    itemsize = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    calls = 1 + max(warmup, 1) + reps       # per pass and side: sizing call, warm-up, timed reps
    rows, start, last = [], clock(), None

    def row(rung, pass_, **fields):
        notes = [n for n in (fields.pop("note", ""), CPU_TARGET_NOTE if target_is_cpu else "") if n]
        return LadderRow(record.name, record.family, dtype, pass_, rung.shape, rung.label or rung.shape,
                         rung.size, rung.batch, str(tgt.device), threads, note="; ".join(notes), **fields)

    for rung in select_rungs(record, dtype, max_size, max_batch, max_tensor_bytes):
        if not passes:
            break
        spent = clock() - start
        projected = last[0] * rung.size / last[1] if last else 0.0
        if spent + projected > op_budget_s:
            rows.append(row(rung, passes[0], note=f"not run: op budget {op_budget_s:g} s "
                                                  f"(spent {spent:.2f} s, this rung projected {projected:.2f} s)"))
            break
        first_row = len(rows)
        try:
            cpu_inputs = record.build(rung, dtype, "cpu", torch.Generator().manual_seed(seed))
        except Exception as exc:    # noqa: BLE001
            oom = is_oom(exc)
            rows.append(row(rung, passes[0], reason=OUT_OF_MEMORY if oom else None,
                            note=f"building inputs failed on the cpu: {_first_line(exc)}"))
            break
        try:
            tgt_inputs = cpu_inputs if target_is_cpu else tuple(t.to(tgt.device) for t in cpu_inputs)
        except Exception as exc:    # noqa: BLE001
            tgt_inputs, copy_error = None, exc
        stop_all = False
        for pass_ in list(passes):
            c = _run_side(record, rung, cpu_inputs, pass_, cpu, seed, reps, warmup, rung_budget_s, itemsize)
            if tgt_inputs is None:
                t = SideResult(error=f"copying inputs to the target: {_first_line(copy_error)}",
                               oom=is_oom(copy_error))
            else:
                t = _run_side(record, rung, tgt_inputs, pass_, tgt, seed, reps, warmup, rung_budget_s, itemsize)
            rows.append(_row_from(row, record, rung, pass_, c, t, reps))
            if c.oom or t.oom:
                stop_all = True
                break
            if c.error or t.error or _over(c) or _over(t):
                passes.remove(pass_)         # this pass stops climbing; the others go on
        del cpu_inputs, tgt_inputs
        if stop_all:
            tgt.release()
            cpu.release()
            break
        # What this rung's surviving passes cost in op time, from their medians:
        # one-off costs (building inputs, first-call setup) do not recur at the next rung.
        ms = {r.pass_name: (r.cpu_ms or 0) + (r.target_ms or 0) for r in rows[first_row:]}
        cost_ms = sum(ms.get(p, 0) for p in passes)
        if BACKWARD in passes:
            cost_ms += ms.get(FORWARD, 0)   # each backward call also pays its untimed forward
        last = (calls * cost_ms / 1e3, rung.size)
    return rows


def _over(result):
    return result.measurement is not None and result.measurement.over_budget


def _row_from(row, record, rung, pass_, c, t, reps):
    notes = []
    for side_name, r in (("cpu", c), ("target", t)):
        if r.oom:
            notes.append(f"out of memory on the {side_name}; larger rungs not run")
        elif r.error:
            notes.append(f"error on the {side_name}: {r.error}; this pass stops here")
        elif _over(r):
            notes.append(f"over the rung budget on the {side_name}: one call takes ~{r.measurement.estimate_ms:.1f} ms "
                         f"x {reps} reps; this pass stops climbing")
    cpu_ms, cpu_spread = (c.measurement.median, c.measurement.spread) if c.measurement else (None, None)
    tgt_ms, tgt_spread = (t.measurement.median, t.measurement.spread) if t.measurement else (None, None)
    fields = dict(cpu_ms=cpu_ms, cpu_spread=cpu_spread, target_ms=tgt_ms, target_spread=tgt_spread,
                  peak_bytes=t.peak if not t.error else None, note="; ".join(notes),
                  reason=OUT_OF_MEMORY if (c.oom or t.oom) else None,
                  reps=len(t.measurement.times) if t.measurement else 0)
    if c.measurement:
        fields["cpu_reps"] = len(c.measurement.times)
        fields["cpu_lo"], fields["cpu_hi"] = c.measurement.interval
    if t.measurement:
        fields["target_lo"], fields["target_hi"] = t.measurement.interval
    if cpu_ms and tgt_ms:
        fields["speedup"] = cpu_ms / tgt_ms
    if fields.get("cpu_lo") and fields.get("target_lo"):
        fields["speedup_lo"] = fields["cpu_lo"] / fields["target_hi"]
        fields["speedup_hi"] = fields["cpu_hi"] / fields["target_lo"]
    if tgt_ms:
        fields["gbps"] = t.moved / tgt_ms / 1e6 if t.moved else None
        flops = rung.flops
        if pass_ == BACKWARD:
            flops = flops * record.backward_flops if flops and record.backward_flops else None
        fields["gflops"] = flops / tgt_ms / 1e6 if flops else None
    return row(rung, pass_, **fields)


def run_ladders(records, target="cpu", on_row=None, **options):
    """Rows for several records, in order; on_row(row) is called as each arrives."""
    out = []
    for record in records:
        for r in run_ladder(record, target, **options):
            out.append(r)
            if on_row:
                on_row(r)
    return out


# ------------------------------------------------------------------ crossover

def crossover(rows, by="size", margin=0.0):
    """The smallest rung from which the target beats the CPU at every larger measured rung.

    `rows` are one ladder's rows (one op, dtype and pass). Rows without both
    times are left out. Returns the crossover rung's `by` field ("size",
    "batch" or "rung"), ALWAYS when the target wins from the first measured
    rung, None when it does not win at the largest one (or nothing was
    measured, or the target is the CPU). A rung is a win only when its speedup's
    interval lies above 1 (+ `margin`): noise around 1 is no win, and a rung
    without an interval (too few repetitions) proves nothing.
    """
    measured = [r for r in rows if r.speedup is not None]
    if len({(r.op, r.dtype, r.pass_name) for r in measured}) > 1:
        raise ValueError("crossover() takes one ladder's rows: one op, dtype and pass; use crossovers()")
    if not measured or all(r.target.split(":")[0] == "cpu" for r in measured):
        return None
    measured.sort(key=lambda r: (r.size, r.batch or 0))
    k = len(measured)
    while k > 0 and wins(measured[k - 1], margin):
        k -= 1
    if k == len(measured):
        return None
    return ALWAYS if k == 0 else getattr(measured[k], by)


def wins(row, margin=0.0):
    """Whether the target beats the CPU at this row: its speedup's interval lies above 1 + margin."""
    return row.speedup_lo is not None and row.speedup_lo > 1.0 + margin


def crossovers(rows, by="size", margin=0.0):
    """{(op, dtype, pass): crossover} for rows of several ladders."""
    groups = {}
    for r in rows:
        groups.setdefault((r.op, r.dtype, r.pass_name), []).append(r)
    return {key: crossover(group, by, margin) for key, group in groups.items()}


def crossover_summary(rows, margin=0.0):
    """speed_crossovers' row for one ladder's rows (one op, dtype and pass), or None if empty.

    `by` is "batch" for layer ladders (the batch climbs), else "size";
    `crossover` is the first size/batch from which the target always wins,
    `always` 1 when it wins from the first measured rung (then `crossover` is
    null), both null when it does not win at the largest measured rung.
    """
    if not rows:
        return None
    first = rows[0]
    by = "batch" if first.batch is not None else "size"
    point = crossover(rows, by, margin)
    measured = [r for r in rows if r.speedup is not None]
    best = max(measured, key=lambda r: r.speedup, default=None)
    return {"op": first.op, "dtype": first.dtype, "pass_name": first.pass_name, "family": first.family,
            "by": by, "crossover": None if point in (None, ALWAYS) else point,
            "always": int(point == ALWAYS), "best_speedup": best.speedup if best else None,
            "best_speedup_lo": best.speedup_lo if best else None,
            "best_speedup_hi": best.speedup_hi if best else None,
            "no_target": int(first.target.split(":")[0] == "cpu"),
            "best_at": getattr(best, by) if best else None,
            "largest": max((getattr(r, by) for r in measured), default=None), "rungs": len(measured)}


def crossover_summaries(rows, margin=0.0):
    """crossover_summary() per (op, dtype, pass) of `rows`, in the order they first appear."""
    groups = {}
    for r in rows:
        groups.setdefault((r.op, r.dtype, r.pass_name), []).append(r)
    return [crossover_summary(group, margin) for group in groups.values()]
