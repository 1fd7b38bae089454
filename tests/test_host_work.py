"""Less host work per case, the same verdicts: the reply protocol's held results,
workers started together and fed at once, sample generation's light bookkeeping."""
import io
import json
import unittest

import pytest
import torch

from mpsprobe.engine.pool import Pool
from mpsprobe.engine.timing import MAX_REPS
from mpsprobe.engine.worker import _Sender
from mpsprobe.ops import opinfo
from mpsprobe.ops import samples as sample_tools
from mpsprobe.vocabulary import PASS


class _Pipe(io.StringIO):
    def __init__(self):
        super().__init__()
        self.sent = ""

    def flush(self):
        self.sent = self.getvalue()


def test_a_held_result_goes_out_with_the_next_message_and_carries_the_token():
    pipe = _Pipe()
    send = _Sender(pipe, "secret")
    send.hold({"type": "result", "index": 0})
    assert pipe.sent == ""                                # not yet: no write of its own
    send({"type": "begin", "index": 1})
    lines = pipe.sent.splitlines()
    assert [line.count('"token": "secret"') for line in lines] == [1, 1]
    assert '"result"' in lines[0] and '"begin"' in lines[1]


@pytest.mark.slow
def test_workers_start_together_before_any_request():
    pool = Pool({"device": "cpu", "samples": 1, "timing": False}, size=3)
    with pool:
        pool.start()
        assert len(pool.workers) == 3 and all(w.alive() for w in pool.workers)
        assert pool.request({"cmd": "describe"})["env"]["device"] == "cpu"


@pytest.mark.slow
def test_a_worker_is_fed_its_next_pair_before_the_last_one_is_recorded():
    held = []
    pool = Pool({"device": "cpu", "samples": 1, "timing": False, "passes": ["forward"]}, size=1)
    pairs = [{"op": op, "dtype": "float32"} for op in ("abs", "neg", "exp")]
    cases = []
    with pool:
        pool.run(pairs, lambda pair, index, sample, result: cases.append(result["status"]),
                 lambda pair, n: held.append([w.task["op"] for w in pool.workers if w.task]))
    assert cases == [PASS] * 3
    assert held == [["neg"], ["exp"], []]


def _signature(samples):
    out = []
    for s in samples:
        out.append(sample_tools.summarize(s))
        for x in torch.utils._pytree.tree_flatten(sample_tools.call_args(s))[0]:
            if isinstance(x, torch.Tensor):
                out.append((x.dtype, tuple(x.shape), x.detach().resolve_conj().tolist()))
            else:
                out.append(repr(x))
    return out


def test_light_bookkeeping_leaves_samples_and_seeds_unchanged(monkeypatch):
    import contextlib
    ops = opinfo.load_op_db()
    chosen = ["add", "nn.functional.dropout", "normal", "linalg.svd", "index_put", "std_mean"]
    light = {}
    for key in chosen:
        op = opinfo.find(ops, key)
        light[key] = _signature(opinfo.samples(op, torch.float32, 3))
    after_light = torch.rand(3).tolist()
    monkeypatch.setattr(opinfo, "_light_bookkeeping", contextlib.nullcontext)
    for key in chosen:
        op = opinfo.find(ops, key)
        assert _signature(opinfo.samples(op, torch.float32, 3)) == light[key], key
    assert torch.rand(3).tolist() == after_light         # the generator left in the same state


class _Finder(unittest.TestCase):
    __test__ = False   # a test case only for the stack walk below

    def test_something(self):
        return opinfo._test_fn_on_stack()


def test_the_running_test_is_found_as_pytorch_finds_it():
    from torch.testing._internal.common_utils import extract_test_fn
    case = _Finder("test_something")
    assert case.test_something() is _Finder.test_something
    assert opinfo._test_fn_on_stack() is None and extract_test_fn() is None


def test_between_pairs_a_small_device_cache_is_kept_a_large_one_given_back(monkeypatch):
    from mpsprobe.engine.devices import Target
    emptied, driver = [], [5000]
    monkeypatch.setattr(torch.mps, "current_allocated_memory", lambda: 1000)
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: driver[0])
    monkeypatch.setattr(torch.mps, "empty_cache", lambda: emptied.append(True))
    target = Target.__new__(Target)
    target.torch_device = torch.device("mps")
    target.trim_cache()
    assert emptied == []                                  # 4 kB cached: kept, no device sync
    driver[0] = 1000 + Target.CACHE_KEPT_BYTES + 1
    target.trim_cache()
    assert emptied == [True]


@pytest.mark.parametrize("device, workers, backend, known", [
    ("cuda", 0, None, True), ("cpu", 0, None, True), ("cuda:1", 0, None, True),
    ("auto", 0, None, False), ("mps", 0, None, False),        # MPS defaults to one worker
    ("mps", 3, None, True), ("auto", 2, None, True),
    ("cpu", 0, "tests/fake_mps.py", False)])                   # a backend names its device
def test_workers_start_before_describe_only_when_their_number_is_settled(tmp_path, device, workers,
                                                                        backend, known):
    from mpsprobe.engine.sweep import Sweep, SweepOptions
    sweep = Sweep(SweepOptions(db_path=str(tmp_path / "x.db"), device=device, workers=workers,
                               backend=backend))
    assert sweep._size_is_known() is known
    sweep.pool.close()


@pytest.mark.slow
def test_a_sweeps_parent_imports_neither_torch_nor_the_catalogue(tmp_path):
    """The workers describe the device and plan; the parent only hands out and records."""
    import subprocess
    import sys
    code = ("import sys, mpsprobe\n"
            f"run = mpsprobe.probe(ops=['abs'], dtypes=['float32'], device='cpu', samples=1, "
            f"timing=False, passes=['forward'], workers=1, db={str(tmp_path / 'x.db')!r})\n"
            "print(run.state, 'torch' in sys.modules, "
            "any(m.startswith('torch.testing') for m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["complete", "False", "False"], done.stderr[-2000:]


def test_aten_ops_recorded_once_per_sample_signature_are_those_of_every_call():
    """The worker records what a case dispatches once per (op, dtype, sample summary);
    each sample recorded on its own call must give the same ops, variants and dtypes."""
    from mpsprobe.engine.devices import Target
    from mpsprobe.engine.execute import run_case
    ops = opinfo.load_op_db()
    fields = ("aten_ops", "aten_variants", "aten_dtypes")
    shared = 0
    # Ops whose samples share a summary (values, or arguments the summary shortens, differ).
    for key in ("nn.functional.leaky_relu", "nn.functional.gelu", "nn.functional.scaled_dot_product_attention",
                "linalg.svd", "nn.functional.nll_loss", "_unsafe_masked_index", "nonzero", "prod", "put",
                "scatter_reduce.amax", "logcumsumexp", "nn.functional.group_norm", "allclose"):
        op = opinfo.find(ops, key)
        cache = {}
        for sample in opinfo.samples(op, torch.float32, 6):
            cached = run_case(op.op, torch.float32, sample, Target("cpu"), timing=False,
                              op_key=key, aten_cache=cache)
            alone = run_case(op.op, torch.float32, sample, Target("cpu"), timing=False, op_key=key)
            assert {f: cached[f] for f in fields} == {f: alone[f] for f in fields}, (key, sample)
        shared += sum(1 for s in opinfo.samples(op, torch.float32, 6)) - len(cache)
    assert shared > 0   # some samples did share a signature (the cache was used)


def test_a_sweep_times_one_passing_case_per_pair_and_pass(tmp_path, run_cli, rows, fake_mps):
    """Per-case timing is what the verdict and the speed columns need: the first case of
    each (op, dtype) and pass that passed; none of a case that did not pass."""
    db = tmp_path / "timed.db"
    result = run_cli("run", "--db", db, "--backend", fake_mps, "--ops", "exp", "--dtypes", "float16,float32",
                     "--samples", 3, "--workers", 1, "--passes", "forward,backward,out")
    assert result.exit_code == 0, result.output
    found = rows(db, "SELECT dtype, pass, status, target_ms, ref_ms, notes, case_id FROM results ORDER BY case_id")
    assert any(r["status"] != PASS for r in found)   # the fake backend's exp is wrong in float16
    for dtype in ("float16", "float32"):
        for pass_ in ("forward", "backward", "out"):
            cases = [r for r in found if r["dtype"] == dtype and r["pass"] == pass_]
            assert len(cases) == 3
            timed = [r for r in cases if r["target_ms"] is not None]
            first_pass = next(r for r in cases if r["status"] == PASS)
            assert timed == [first_pass] and first_pass["ref_ms"] > 0
            # Each side's repetitions (within the budget) and spread: the figure with its noise.
            noise = json.loads(first_pass["notes"])["timing"]
            assert 1 <= noise["ref_reps"] <= MAX_REPS and 1 <= noise["target_reps"] <= MAX_REPS
            assert noise["ref_spread_ms"] >= 0 and noise["target_spread_ms"] >= 0
            assert all("timing" not in json.loads(r["notes"] or "{}") for r in cases if r is not first_pass)


def test_the_recorders_tensor_walk_finds_what_tree_flatten_finds():
    """The recorder finds a call's tensors without pytree (aten.tensors): the same tensors
    in the same order, so the dtype a call is filed under and its kernel variant are unchanged."""
    from collections import OrderedDict, namedtuple
    from torch.utils._pytree import tree_flatten
    from mpsprobe.engine.aten import main_dtype, tensors
    a, b, c = torch.ones(2, dtype=torch.int64), torch.ones(3, 2), torch.ones(1, dtype=torch.float16)
    pair = namedtuple("pair", "x y")
    for args, kwargs in [((a, b), {}), (([b, None, a], 2), {"out": c}), ((1, torch.Size([2, 3])), {"w": c}),
                         ((pair(c, [a, (b,)]),), OrderedDict(z=a, y=b)), ((), {}), ((None, [[]]), {"k": [c, a]})]:
        expected = [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor)]
        assert [id(x) for x in tensors((args, kwargs))] == [id(x) for x in expected], (args, kwargs)
    assert main_dtype((1, [a]), {}, b) == "int64" and main_dtype((1,), {}, (None, c)) == "float16"
    assert main_dtype((), {}, None) is None
