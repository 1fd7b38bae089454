"""Op speed ladders: the default op set, the engine on the CPU, timing statistics, budgets, crossover."""
import dataclasses
import math

import pytest
import torch

from mpsprobe.engine import ladder as engine
from mpsprobe.engine.ladder import ALWAYS, LadderRow, crossover, crossovers, measure, run_ladder, summarize
from mpsprobe.ops import ladders
from mpsprobe.ops.ladders import LadderOp, Rung, TensorSpec
from mpsprobe.vocabulary import BACKWARD, FORWARD, REASON_KIND

OUT_OF_MEMORY = REASON_KIND["out_of_memory"].name


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One intra-op thread: on a shared machine, a second thread waiting for a core stalls tiny ops."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class FakeClock:
    """A clock that only moves when an op says it took time."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


def size_record(op, sizes=(100, 300, 1000, 3000, 10000), grad=(0,), build=ladders.make_inputs, name="synthetic"):
    rungs = tuple(Rung(inputs=(TensorSpec((1, n)),), largest=n) for n in sizes)
    return LadderOp(name, "elementwise", op, rungs, grad=grad, build=build, source="test")


def timed_op(clock, ms_per_100):
    """An op whose every call takes ms_per_100 ms per 100 elements of fake time."""
    def op(x):
        clock.advance(ms_per_100 * x.numel() / 100 / 1e3)
        return x * 1
    return op


# ------------------------------------------------------------------ the default set

def test_default_set_covers_the_families_with_documented_shapes():
    names = [r.name for r in ladders.DEFAULT]
    assert 45 <= len(names) <= 60 and len(set(names)) == len(names)
    assert {"elementwise", "reduction", "matmul", "conv", "norm", "pool", "linear", "attention",
            "embedding", "rnn", "fft", "resample"} <= set(ladders.FAMILIES)
    for prefix in ("resnet50.", "bert.", "vit_b16.", "lstm_lm.", "r3d_18."):
        assert any(n.startswith(prefix) for n in names), prefix
    for r in ladders.DEFAULT:
        assert r.source, r.name
        sizes = [g.size for g in r.rungs]
        assert sizes == sorted(sizes), r.name
        for g in r.rungs:
            assert g.largest * 4 <= ladders.GiB, (r.name, g.label)     # ≤ 1 GiB per tensor at float32
            assert g.flops is None or g.flops > 0
        batches = [g.batch for g in r.rungs if g.batch is not None]
        assert not batches or (batches[0] == 1 and len(batches) >= 3), r.name
    elementwise = [r for r in ladders.DEFAULT if r.family == "elementwise"]
    assert all(r.rungs[0].size == 100 and r.rungs[-1].size == 10 ** 8 for r in elementwise)


@pytest.mark.parametrize("record", ladders.DEFAULT, ids=lambda r: r.name)
def test_every_default_record_builds_and_runs_at_its_smallest_rung(record):
    rung = record.rungs[0]
    inputs = list(record.build(rung, "float32", "cpu", torch.Generator().manual_seed(0)))
    assert [tuple(t.shape) for t in inputs] == [s.shape for s in rung.inputs]
    for i in record.grad:
        inputs[i] = inputs[i].detach().requires_grad_()
    out = engine._first_tensor(record(*inputs))
    assert isinstance(out, torch.Tensor) and out.numel() > 0
    assert out.numel() <= rung.largest
    if record.has_backward:
        grads = torch.autograd.grad(out, [inputs[i] for i in record.grad], torch.randn_like(out))
        assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_select_rungs_caps_size_batch_and_memory():
    add, conv = ladders.BY_NAME["add"], ladders.BY_NAME["resnet50.conv1"]
    assert max(r.size for r in engine.select_rungs(add, max_size=10 ** 4)) == 10 ** 4
    assert [r.batch for r in engine.select_rungs(conv, max_batch=8)] == [1, 8]
    assert [r.batch for r in engine.select_rungs(conv, max_size=100, max_batch=8)] == [1, 8]   # size caps size ladders
    # float64 doubles the bytes: the 1e8 rung no longer fits under 512 MiB.
    assert engine.select_rungs(add, "float64", max_tensor_bytes=512 << 20)[-1].size == 3 * 10 ** 7


# ------------------------------------------------------------------ the engine on the CPU

def test_tiny_ladder_on_the_cpu():
    rows = engine.run_ladders([ladders.BY_NAME["add"], ladders.BY_NAME["argmax"]], "cpu",
                              max_size=3000, reps=10, warmup=1)
    add = [r for r in rows if r.op == "add"]
    assert [(r.pass_name, r.size) for r in add] == [(p, n) for n in (100, 300, 1000, 3000) for p in (FORWARD, BACKWARD)]
    assert {r.pass_name for r in rows if r.op == "argmax"} == {FORWARD}      # no backward
    for r in rows:
        assert r.reps == 10 and r.cpu_threads == torch.get_num_threads()
        assert r.cpu_ms > 0 and r.target_ms > 0 and r.cpu_spread >= 0
        # add's gradients are views of the incoming one: its backward moves nothing to rate.
        assert r.gbps > 0 if r.pass_name == FORWARD else r.gbps is None
        assert r.speedup == pytest.approx(r.cpu_ms / r.target_ms)
        assert engine.CPU_TARGET_NOTE in r.note and r.peak_bytes is None
    # Both sides are the CPU: no crossover to speak of.
    assert set(crossovers(rows).values()) == {None}
    assert dataclasses.asdict(rows[0])["pass_name"] == FORWARD


def test_gflops_from_the_cost_model():
    rows = run_ladder(ladders.BY_NAME["matmul"], "cpu", max_size=128 * 128, reps=10, warmup=1)
    fwd = [r for r in rows if r.pass_name == FORWARD]
    assert [r.rung for r in fwd] == ["n=64", "n=128"]
    for r in fwd:
        n = int(r.rung[2:])
        assert r.gflops == pytest.approx(2 * n ** 3 / (r.target_ms / 1e3) / 1e9)
    back = [r for r in rows if r.pass_name == BACKWARD]
    n = 64   # backward moves the incoming gradient and the two new ones
    assert back[0].gbps == pytest.approx(3 * n * n * 4 / (back[0].target_ms / 1e3) / 1e9)
    assert all(b.gflops == pytest.approx(2 * 2 * int(b.rung[2:]) ** 3 / b.target_ms / 1e6) for b in back)


# ------------------------------------------------------------------ timing statistics

def test_summarize_median_and_iqr():
    assert summarize([]) == (None, None)
    assert summarize([4.0]) == (4.0, 0.0)
    median, iqr = summarize([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 100.0])
    assert median == 5.5 and iqr == pytest.approx(7.75 - 3.25)     # the outlier does not move either


def test_measure_skips_warmup_and_projects_from_the_fastest_warmup():
    script = iter([50.0, 3.0] + [2.0, 4.0] * 5)          # a slow first call, then alternating
    m = measure(lambda: None, lambda fn: next(script), reps=10, warmup=2, budget_s=1.0)
    assert m.times == [2.0, 4.0] * 5 and m.median == 3.0 and m.estimate_ms == 3.0
    assert not m.over_budget
    slow = measure(lambda: None, lambda fn: 150.0, reps=10, warmup=1, budget_s=1.0)   # 10 x 150 ms > 1 s
    assert slow.over_budget and slow.times == [] and slow.median is None


def test_measure_times_the_call_not_its_setup():
    clock = FakeClock()
    m = measure(lambda state: clock.advance(0.002), engine.WallTimer(clock=clock), reps=10, warmup=1,
                setup=lambda: clock.advance(1.0))      # e.g. the forward that builds a graph to go back through
    assert m.median == pytest.approx(2.0) and len(m.times) == 10


def test_fake_clock_times_are_exact():
    clock = FakeClock()
    rows = run_ladder(size_record(timed_op(clock, 1.0)), "cpu", passes=(FORWARD,), reps=12, warmup=1,
                      clock=clock, max_size=1000)
    assert [r.cpu_ms for r in rows] == pytest.approx([1.0, 3.0, 10.0])
    assert [r.target_ms for r in rows] == pytest.approx([1.0, 3.0, 10.0])
    assert all(r.cpu_spread == pytest.approx(0) and r.reps == 12 for r in rows)
    # Bytes moved: the input read and the output written, at float32.
    assert rows[0].gbps == pytest.approx(2 * 100 * 4 / 1e-3 / 1e9)


def test_wall_timer_synchronises_around_the_call():
    events, clock = [], FakeClock()
    timer = engine.WallTimer(lambda: events.append("sync"), clock)
    assert timer(lambda: (events.append("call"), clock.advance(0.002))) == pytest.approx(2.0)
    assert events == ["sync", "call", "sync"]


# ------------------------------------------------------------------ budgets

def test_rung_budget_stops_the_climb_and_says_why():
    clock = FakeClock()
    # 10 ms per 100 elements: 10 reps of the 1000-element rung (100 ms each) exceed 0.5 s.
    rows = run_ladder(size_record(timed_op(clock, 10.0)), "cpu", passes=(FORWARD,), reps=10, warmup=1,
                      rung_budget_s=0.5, clock=clock)
    assert [r.size for r in rows] == [100, 300, 1000]
    assert rows[1].cpu_ms == pytest.approx(30.0)
    assert rows[-1].cpu_ms is None and rows[-1].target_ms is None and rows[-1].speedup is None
    assert "over the rung budget" in rows[-1].note


def test_op_budget_is_not_overrun():
    clock = FakeClock()
    # Each rung costs 24 calls (2 sides x (1 sizing + 1 warm-up + 10 reps)) at 1 ms per 100 elements:
    # 24 + 72 + 240 ms spent; the 3000 rung is projected at 720 ms more, past the 1 s budget.
    rows = run_ladder(size_record(timed_op(clock, 1.0)), "cpu", passes=(FORWARD,), reps=10, warmup=1,
                      op_budget_s=1.0, clock=clock)
    assert [r.size for r in rows] == [100, 300, 1000, 3000]
    assert rows[-1].note.startswith("not run: op budget") and rows[-1].cpu_ms is None
    assert clock.now <= 1.0


def test_op_budget_counts_one_off_costs_as_spent_but_does_not_project_them():
    clock = FakeClock()

    def slow_build(rung, dtype, device, generator):
        clock.advance(0.3)                  # building inputs is slow; the op itself is cheap
        return ladders.make_inputs(rung, dtype, device, generator)

    rows = run_ladder(size_record(timed_op(clock, 0.001), build=slow_build), "cpu", passes=(FORWARD,),
                      reps=10, warmup=1, op_budget_s=1.0, clock=clock)
    assert [r.size for r in rows] == [100, 300, 1000, 3000, 10000]
    assert all(r.cpu_ms for r in rows[:-1]) and rows[-1].note.startswith("not run: op budget")


# ------------------------------------------------------------------ out of memory and errors

def test_out_of_memory_in_the_builder_is_a_row_not_a_crash():
    def build(rung, dtype, device, generator):
        if rung.size >= 1000:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB")
        return ladders.make_inputs(rung, dtype, device, generator)

    rows = run_ladder(size_record(torch.relu, build=build), "cpu", reps=10, warmup=1)
    assert [r.size for r in rows if r.cpu_ms] == [100, 100, 300, 300]
    assert rows[-1].size == 1000 and rows[-1].reason == OUT_OF_MEMORY and rows[-1].cpu_ms is None


def test_out_of_memory_during_the_call_stops_every_pass():
    def op(x):
        if x.numel() >= 1000:
            raise RuntimeError("MPS backend out of memory (MPS allocated: 60.00 GB, other allocations: 0 bytes)")
        return torch.relu(x)

    rows = run_ladder(size_record(op), "cpu", reps=10, warmup=1)
    assert rows[-1].size == 1000 and rows[-1].pass_name == FORWARD and rows[-1].reason == OUT_OF_MEMORY
    assert "out of memory on the cpu" in rows[-1].note
    assert all(r.reason is None and r.cpu_ms for r in rows[:-1])


def test_a_backward_error_stops_only_the_backward():
    class NoBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            raise NotImplementedError("no backward for this op on this device")

    rows = run_ladder(size_record(NoBackward.apply, sizes=(100, 300, 1000)), "cpu", reps=10, warmup=1)
    assert [(r.pass_name, r.size) for r in rows] == [(FORWARD, 100), (BACKWARD, 100), (FORWARD, 300), (FORWARD, 1000)]
    assert "NotImplementedError" in rows[1].note and rows[1].reason is None
    assert rows[-1].cpu_ms > 0


def test_is_oom():
    assert engine.is_oom(torch.OutOfMemoryError("x"))
    assert engine.is_oom(RuntimeError("MPS backend out of memory (MPS allocated: 1 GB)"))
    assert engine.is_oom(RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"))
    assert not engine.is_oom(RuntimeError("shape mismatch"))
    assert not engine.is_oom(ValueError("out of memory"))


# ------------------------------------------------------------------ crossover

def rows_of(speedups, target="cuda", op="add", pass_=FORWARD, batches=False, noise=0.0):
    """Ladder rows with these speedups, each with an interval of +-`noise` around it."""
    out = []
    for i, s in enumerate(speedups):
        size = 100 * 10 ** i
        out.append(LadderRow(op, "elementwise", "float32", pass_, f"{size}", f"{size}", size,
                             2 ** i if batches else None, target, 16, cpu_ms=s, target_ms=1.0,
                             speedup=s, speedup_lo=None if s is None else s - noise,
                             speedup_hi=None if s is None else s + noise))
    return out


def test_crossover_never_always_and_from_a_rung():
    assert crossover(rows_of([0.1, 0.2, 0.5, 0.9])) is None
    assert crossover(rows_of([0.1, 0.5, 2.0, 0.8])) is None           # loses at the largest rung
    assert crossover(rows_of([1.5, 2.0, 3.0])) == ALWAYS
    assert crossover(rows_of([0.1, 0.5, 1.2, 3.0, 8.0])) == 10 ** 4
    assert crossover(rows_of([0.1, 0.5, 1.2, 3.0], batches=True), by="batch") == 4
    assert crossover([]) is None


def test_crossover_ignores_noise_below_it_and_unmeasured_rungs():
    # Wins and losses alternate at small sizes; the target wins for good from the fifth rung.
    assert crossover(rows_of([1.3, 0.7, 1.1, 0.9, 1.5, 2.0, 4.0])) == 100 * 10 ** 4
    # An unmeasured rung (over budget, out of memory) neither breaks nor makes a run of wins.
    assert crossover(rows_of([0.5, 1.5, None, 2.0])) == 1000
    # A margin keeps a speedup of 1.05 from counting as a win.
    assert crossover(rows_of([0.5, 1.05, 2.0]), margin=0.1) == 10 ** 4
    assert crossover(rows_of([0.5, 1.05, 2.0])) == 1000


def test_a_rung_wins_only_where_its_interval_excludes_one():
    # A median speedup of 1.3 whose interval reaches below 1 is noise, not a win.
    assert crossover(rows_of([0.5, 1.3, 2.0, 3.0], noise=0.4)) == 10 ** 4
    assert crossover(rows_of([1.3, 1.2], noise=0.4)) is None
    unsure = rows_of([2.0, 3.0])
    for r in unsure:   # too few repetitions for an interval: nothing to claim
        r.speedup_lo = r.speedup_hi = None
    assert crossover(unsure) is None


def test_the_median_interval_holds_its_confidence_from_order_statistics():
    from mpsprobe.engine.ladder import median_interval
    assert median_interval(list(range(1, 11))) == (2, 9)        # 10 reps: 2nd and 9th of 10
    assert median_interval([5, 1, 4, 2, 3, 7, 6]) == (1, 7)     # 7 reps: the extremes
    assert median_interval([1, 2, 3, 4, 5, 6]) == (None, None)   # 6 cannot reach 97.5%
    lo, hi = median_interval(list(range(100)))
    assert (lo, hi) == (38, 61)


def test_a_timed_rung_keeps_each_side_s_interval_and_the_speedup_s():
    rows = run_ladder(ladders.BY_NAME["add"], "cpu", passes=(FORWARD,), max_size=100, reps=10, warmup=1)
    r = rows[0]
    assert r.reps == r.cpu_reps == 10
    assert r.cpu_lo <= r.cpu_ms <= r.cpu_hi and r.target_lo <= r.target_ms <= r.target_hi
    assert r.speedup_lo == pytest.approx(r.cpu_lo / r.target_hi)
    assert r.speedup_lo <= r.speedup <= r.speedup_hi


def test_crossover_order_is_by_size_not_row_order():
    rows = rows_of([0.5, 0.8, 1.5, 3.0])
    assert crossover(list(reversed(rows))) == 10 ** 4


def test_crossover_with_a_cpu_target_or_mixed_ladders():
    assert crossover(rows_of([2.0, 3.0], target="cpu")) is None
    with pytest.raises(ValueError):
        crossover(rows_of([2.0]) + rows_of([2.0], op="mul"))
    both = rows_of([0.5, 2.0]) + rows_of([0.5, 0.5], pass_=BACKWARD)
    assert crossovers(both) == {("add", "float32", FORWARD): 1000, ("add", "float32", BACKWARD): None}
    assert math.isclose(rows_of([2.0])[0].speedup, 2.0)


# ------------------------------------------------------------------ device events and memory, with fakes

def test_event_timer_reads_the_device_events():
    clock, log = FakeClock(), []

    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.at = None

        def record(self):
            self.at = clock()

        def synchronize(self):
            log.append("wait")

        def elapsed_time(self, end):
            return (end.at - self.at) * 1e3

    timer = engine.EventTimer(Event, lambda: log.append("sync"))
    assert timer(lambda: clock.advance(0.004)) == pytest.approx(4.0)
    assert log == ["sync", "wait"]


def test_peak_memory_from_the_allocator_or_sampled():
    class CudaLike:
        def __init__(self):
            self.resets = 0

        def reset_peak_memory_stats(self, device):
            self.resets += 1

        def max_memory_allocated(self, device):
            return 4096

    class MpsLike:
        used = iter([100, 300, 200])

        def current_allocated_memory(self):
            return next(self.used)

    side = engine.Side("cpu")
    assert side.peak is None
    side.module = CudaLike()
    side.reset_peak()
    side.sample()
    assert side.peak == 4096 and side.module.resets == 1
    side.module = MpsLike()
    side.reset_peak()
    for _ in range(3):
        side.sample()
    assert side.peak == 300            # the largest sample, not the last
