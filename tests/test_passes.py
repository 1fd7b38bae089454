"""Backward, in-place and out= cases: planned per pass, judged, recorded, resumed, answered.

The fake MPS backend lacks softplus_backward (MPS's own not-implemented text) and
returns sigmoid's gradient doubled; both must be caught, with the op named. On
the CPU against itself every pass is clean, and what has no unique gradient is
skipped with the reason. (Resuming across passes: tests/test_resume.py.)
"""
import json
import sqlite3

import pytest
import torch
from torch.testing._internal.opinfo.core import SampleInput

import fake_mps as fake_backend
from mpsprobe.db.query import blame, findings
from mpsprobe.engine.backward import run_backward_case
from mpsprobe.engine.devices import Target
from mpsprobe.vocabulary import (BACKWARD, ERROR, FORWARD, INPLACE, MISMATCH, OUT, PASS,
                                 PASS_COLUMN, SKIP, UNSUPPORTED)

from wrong_backend import WrongTarget

CPU = Target("cpu")
FAKE_OPS = "nn.functional.softplus,sigmoid,add,nn.functional.relu"

MODEL = '''
import torch
import torch.nn as nn


def build():
    model = nn.Sequential(nn.Linear(4, 4), nn.Softplus(), nn.Linear(4, 4), nn.Sigmoid(),
                          nn.Linear(4, 2), nn.ReLU(inplace=True))
    return model, torch.randn(3, 4), lambda out: out.sum()
'''


@pytest.fixture(scope="module")
def fake_db(tmp_path_factory, run_cli, fake_mps):
    path = tmp_path_factory.mktemp("passes") / "fake.db"
    result = run_cli("run", "--db", path, "--backend", fake_mps, "--ops", FAKE_OPS,
                     "--dtypes", "float32", "--samples", 2, "--no-timing", "--workers", 2, "--json")
    assert result.exit_code == 0, result.output
    return str(path)


def _cases(rows, db, op, pass_):
    return rows(db, f"SELECT r.*, c.sample FROM results r JOIN cases c ON c.id = r.case_id "
                    f"WHERE r.op_id = ? AND r.{PASS_COLUMN} = ? ORDER BY r.case_id", (op, pass_))


@pytest.mark.slow
def test_a_missing_backward_kernel_is_unsupported_with_the_op_named(fake_db, rows):
    found = _cases(rows, fake_db, "nn.functional.softplus", BACKWARD)
    assert found and all(r["status"] == UNSUPPORTED for r in found)
    for r in found:
        assert r["aten_op"] == "aten::softplus_backward"
        assert r["message"].startswith("The operator 'aten::softplus_backward' is not currently "
                                       "implemented for the MPS device.")
        assert r["case_id"].endswith("|backward")
    # Its forward works: only the gradient is missing.
    assert {r["status"] for r in _cases(rows, fake_db, "nn.functional.softplus", FORWARD)} == {PASS}


@pytest.mark.slow
def test_a_wrong_gradient_is_a_mismatch(fake_db, rows):
    found = _cases(rows, fake_db, "sigmoid", BACKWARD)
    with_values = [r for r in found if ",0" not in r["sample"] and "[0" not in r["sample"]]
    assert with_values and all(r["status"] == MISMATCH and r["reason_kind"] == "values" for r in with_values)
    assert all("aten::sigmoid_backward" in json.loads(r["aten_ops"]) for r in with_values)
    assert all(r["reason"].startswith("gradient") for r in with_values)
    assert {r["status"] for r in _cases(rows, fake_db, "sigmoid", FORWARD)} == {PASS}
    # The in-place and out= forms of sigmoid use the forward kernels: they pass.
    assert {r["status"] for r in _cases(rows, fake_db, "sigmoid", INPLACE)} == {PASS}
    assert {r["status"] for r in _cases(rows, fake_db, "sigmoid", OUT)} == {PASS}


@pytest.mark.slow
def test_every_pass_of_an_op_is_a_case_of_its_own(fake_db, rows):
    found = rows(fake_db, f"SELECT {PASS_COLUMN} AS p, count(*) AS n FROM results "
                          f"WHERE op_id = 'add' GROUP BY {PASS_COLUMN}")
    assert {r["p"]: r["n"] for r in found} == {FORWARD: 2, BACKWARD: 2, INPLACE: 2, OUT: 2}
    inplace = _cases(rows, fake_db, "add", INPLACE)
    assert all("aten::add_.Tensor" in json.loads(r["aten_ops"]) for r in inplace)
    # F.relu has no OpInfo in-place variant, but takes inplace=True: aten::relu_.
    relu = _cases(rows, fake_db, "nn.functional.relu", INPLACE)
    assert relu and all(json.loads(r["aten_ops"]) == ["aten::relu_"] for r in relu)
    # Backward cases record what the backward dispatched, not the forward.
    ops = {o for r in _cases(rows, fake_db, "nn.functional.relu", BACKWARD) for o in json.loads(r["aten_ops"])}
    assert "aten::threshold_backward" in ops and "aten::relu" not in ops
    view = rows(fake_db, f"SELECT status FROM op_dtype_status WHERE op_id = 'sigmoid' AND {PASS_COLUMN} = ?",
                (BACKWARD,))
    assert [v["status"] for v in view] == [MISMATCH]


@pytest.mark.slow
def test_check_train_answers_backward_kernels_from_backward_evidence(fake_db, tmp_path, run_cli):
    model = tmp_path / "model.py"
    model.write_text(MODEL)
    result = run_cli("check", model, "--train", "--db", fake_db, "--json")
    ops = {o["aten_op"]: o for o in json.loads(result.output[result.output.index("{"):])["ops"]
           if o["dtype"] == "float32"}
    assert ops["aten::softplus_backward"]["class"] == UNSUPPORTED
    assert "nn.functional.softplus" in ops["aten::softplus_backward"]["probe_ops"]
    assert ops["aten::sigmoid_backward"]["class"] == MISMATCH
    assert ops["aten::threshold_backward"]["class"] == "ok"
    assert ops["aten::relu_"]["class"] == "ok"     # probed in place (inplace=True)
    assert result.exit_code == 1


@pytest.mark.slow
def test_in_place_answered_from_the_out_of_place_op_says_so(fake_db):
    from mpsprobe.modelcheck.capture import ModelOps, OpUse
    from mpsprobe.modelcheck.report import answer
    conn = sqlite3.connect(fake_db)
    conn.row_factory = sqlite3.Row
    run = dict(conn.execute("SELECT * FROM runs").fetchone())
    uses = [OpUse("aten::softplus_", "float32", 1), OpUse("aten::lgamma_", "float32", 1)]
    report = answer(conn, ModelOps("m", "forward", "float32", uses), run)
    by_op = {a.aten_op: a for a in report.answers}
    assert by_op["aten::softplus_"].note.startswith("only the out-of-place op probed (aten::softplus")
    assert by_op["aten::lgamma_"].klass == "unknown"   # nothing probed either way
    assert blame.out_of_place("aten::add_.Tensor") == "aten::add.Tensor"
    assert blame.out_of_place("aten::_softmax") is None


@pytest.mark.slow
def test_backward_findings_against_the_gradient_lists(fake_db):
    conn = sqlite3.connect(fake_db)
    conn.row_factory = sqlite3.Row
    version = conn.execute("SELECT torch_version FROM runs").fetchone()[0]
    with conn:
        conn.execute("CREATE TABLE IF NOT EXISTS declared (torch_version TEXT, device TEXT, op_id TEXT, "
                     "dtype TEXT, status TEXT, source TEXT, note TEXT)")
        conn.execute("CREATE TABLE IF NOT EXISTS declared_entries (torch_version TEXT, modifier TEXT, "
                     "list_name TEXT, list_key TEXT, op_id TEXT, dtypes TEXT, gate TEXT)")
        for op in ("sigmoid", "nn.functional.softplus", "add"):
            conn.execute("INSERT INTO declared VALUES (?, 'mps', ?, 'float32', ?, 'common_mps', '')",
                         [version, op, PASS])
        conn.execute("INSERT INTO declared_entries VALUES (?, 'grad', 'XFAILLIST_GRAD', 'add', 'add', "
                     "'[\"float32\"]', NULL)", [version])
    try:
        found = findings.report(conn, against="mps")["findings"]
    finally:
        conn.close()
    backward = {(f["kind"], f["op_id"]) for f in found if f[PASS_COLUMN] == BACKWARD}
    assert backward == {("stale_xfail", "add"), ("undeclared_failure", "sigmoid"),
                        ("undeclared_failure", "nn.functional.softplus")}


@pytest.fixture(scope="module")
def cpu_db(tmp_path_factory, run_cli):
    path = tmp_path_factory.mktemp("passes") / "cpu.db"
    result = run_cli("run", "--db", path, "--device", "cpu", "--samples", 3, "--no-timing",
                     "--ops", "add,nn.functional.dropout,max.reduction_with_dim,linalg.eigh,"
                              "nn.functional.conv2d", "--dtypes", "float32", "--workers", 2)
    assert result.exit_code == 0, result.output
    return str(path)


@pytest.mark.slow
def test_the_cpu_against_itself_is_clean_in_every_pass(cpu_db, rows):
    found = rows(cpu_db, f"SELECT {PASS_COLUMN} AS p, status, count(*) AS n FROM results "
                         f"GROUP BY {PASS_COLUMN}, status")
    assert {r["p"] for r in found} == {FORWARD, BACKWARD, INPLACE, OUT}
    assert not [r for r in found if r["status"] not in (PASS, SKIP)], found
    assert not [r for r in found if r["status"] == ERROR]


@pytest.mark.slow
def test_no_unique_gradient_is_skipped_with_the_reason(cpu_db, rows):
    eigh = _cases(rows, cpu_db, "linalg.eigh", BACKWARD)  # distinct eigenvalues: judged through their phases
    assert eigh and all((r["status"], r["check_kind"]) == (PASS, "values") for r in eigh), eigh
    dropout = _cases(rows, cpu_db, "nn.functional.dropout", BACKWARD)  # drawn: judged by distribution
    assert {(r["status"], r["check_kind"]) for r in dropout} == {(PASS, "values"), (PASS, "distribution")}
    # An in-place add that would broadcast into its input: the CPU refuses too.
    refused = [r for r in _cases(rows, cpu_db, "add", INPLACE) if r["status"] == SKIP]
    assert refused and all(r["reason_kind"] == "reference_failed" and r["message"] for r in refused)


def test_fake_backend_has_the_gradient_faults():
    assert "aten::softplus_backward" in fake_backend.DEFAULTS["not_implemented"]
    assert fake_backend.DEFAULTS["scaled"] == {"aten::sigmoid_backward": 2.0}


# --- gradients through eigen and singular vectors --------------------------------------

VECTOR_OPS = {"linalg.eigh": torch.linalg.eigh, "linalg.eig": torch.linalg.eig,
              "linalg.svd": lambda a: torch.linalg.svd(a, full_matrices=False), "svd": torch.svd,
              "linalg.qr": torch.linalg.qr}


def _matrix(key, seed=3):
    a = torch.randn(2, 4, 4, dtype=torch.complex64, generator=torch.Generator().manual_seed(seed))
    return (a + a.mH if key == "linalg.eigh" else a).requires_grad_()


@pytest.mark.parametrize("key", sorted(VECTOR_OPS))
def test_vector_gradients_in_another_phase_pass_and_wrong_ones_do_not(key):
    op = VECTOR_OPS[key]
    result = run_backward_case(op, torch.complex64, SampleInput(_matrix(key)), WrongTarget("phase"), key,
                               timing=False)
    assert (result["status"], result["check_kind"]) == (PASS, "values"), result
    calls = []

    values = 0 if key.startswith("linalg.eig") else 1

    def off_on_target(a):  # the same forward; the values' gradient 5 % off, on the target's call only
        calls.append(1)
        out = list(op(a))
        if len(calls) == 4:  # reference, float64 truth, aten record, target
            out[values] = out[values] + 0.05 * (out[values] - out[values].detach())
        return tuple(out)
    result = run_backward_case(off_on_target, torch.complex64, SampleInput(_matrix(key)), CPU, key, timing=False)
    assert result["status"] == MISMATCH, result


def test_repeated_eigenvalues_have_no_unique_vector_gradient():
    q = torch.linalg.qr(torch.randn(4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(4)))[0]
    a = (q @ torch.diag(torch.tensor([1.0, 1.0, 2.0, 3.0], dtype=torch.float64)) @ q.mT).float()
    result = run_backward_case(torch.linalg.eigh, torch.float32, SampleInput(a.requires_grad_()), CPU,
                               "linalg.eigh", timing=False)
    assert (result["status"], result["reason_kind"]) == (SKIP, "no_unique_answer"), result
    assert "repeated" in result["reason"]


def test_ties_leave_a_gradient_unjudged_only_where_they_decide_it():
    ties = torch.tensor([[3.0, 1.0, 3.0], [2.0, 2.0, 0.0]])
    across = torch.tensor([[3.0, 1.0, 2.0], [3.0, 1.0, 0.0]])  # equal values, none along dim 1

    def gradient_of(op, key, x, *args):
        return run_backward_case(op, torch.float32, SampleInput(x.clone().requires_grad_(), args=args), CPU,
                                 key, timing=False)
    # Shared evenly among equal values on every device: judged.
    for key, op in (("aminmax", torch.aminmax), ("amax", torch.amax), ("max.reduction_no_dim", torch.max)):
        result = gradient_of(op, key, ties)
        assert (result["status"], result["check_kind"]) == (PASS, "values"), (key, result)
    # An index chosen among ties along the dim: not unique.
    result = gradient_of(torch.max, "max.reduction_with_dim", ties, 1)
    assert (result["status"], result["reason_kind"]) == (SKIP, "no_unique_answer"), result
    for key, op, args in (("max.reduction_with_dim", torch.max, (1,)), ("topk", torch.topk, (2, 1))):
        result = gradient_of(op, key, across, *args)
        assert (result["status"], result["check_kind"]) == (PASS, "values"), (key, result)
    result = gradient_of(torch.quantile, "quantile", ties, 0.5)
    assert (result["status"], result["reason_kind"]) == (SKIP, "no_unique_answer"), result
    # Scans and msort choose along one dim: equal values across it leave the gradient unique.
    for key, op, x, args, unique in (("cummax", torch.cummax, across, (1,), True),
                                     ("cummax", torch.cummax, ties, (1,), False),
                                     ("msort", torch.msort, across.T, (), True),
                                     ("msort", torch.msort, ties.T, (), False)):
        result = gradient_of(op, key, x, *args)
        assert (result["status"] == PASS) == unique, (key, x, result)
        assert unique or result["reason_kind"] == "no_unique_answer", result


@pytest.mark.slow
def test_a_backward_kernel_that_falls_back_is_named_and_not_timed(tmp_path, fake_mps, rows, run_cli):
    db = tmp_path / "fb.db"
    result = run_cli("run", "--db", db, "--backend", fake_mps, "--ops", "nn.functional.softplus",
                     "--dtypes", "float32", "--samples", 2, "--passes", "backward", "--mps-fallback",
                     "--workers", 1)
    assert result.exit_code == 0, result.output
    found = _cases(rows, db, "nn.functional.softplus", BACKWARD)
    assert found and all(r["status"] == "fallback" for r in found), found
    assert all(json.loads(r["fallback_ops"]) == ["aten::softplus_backward"] for r in found)
    # A fallback's time is the CPU's, not the kernel's: only a passing case is timed.
    assert all(r["ref_ms"] is None and r["target_ms"] is None for r in found)


# --- gradients of random samples -------------------------------------------------------

class _Dropout(torch.autograd.Function):
    """Dropout with a backward that is wrong in one way: `how` is "fresh_mask" (a mask of
    its own) or "unscaled" (the forward's mask, without 1 / (1 - p))."""

    @staticmethod
    def forward(ctx, x, p, how):
        mask = (torch.rand(x.shape) >= p).to(x.dtype)
        ctx.p, ctx.how = p, how
        ctx.save_for_backward(mask)
        return x * mask / (1 - p)

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        if ctx.how == "fresh_mask":
            return g * (torch.rand(g.shape) >= ctx.p).to(g.dtype) / (1 - ctx.p), None, None
        return g * mask, None, None


def test_a_dropout_gradient_is_judged_by_its_distribution_and_its_forwards_mask(monkeypatch):
    import dataclasses
    from mpsprobe.engine import distributions
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(2))
    sample = SampleInput(x.clone().requires_grad_(), kwargs={"p": 0.4, "training": True})
    result = run_backward_case(torch.nn.functional.dropout, torch.float32, sample, CPU, "nn.functional.dropout",
                               timing=False)
    assert (result["status"], result["check_kind"]) == (PASS, "distribution"), result
    record = distributions.RANDOM_OPS["nn.functional.dropout"]
    for how, says in (("fresh_mask", "kept where the forward dropped"), ("unscaled", "each value kept")):
        monkeypatch.setitem(distributions.RANDOM_OPS, "nn.functional.dropout", dataclasses.replace(
            record, call=lambda i, a, k, how=how: _Dropout.apply(i, k["p"], how)))
        result = run_backward_case(torch.nn.functional.dropout, torch.float32, sample, CPU,
                                   "nn.functional.dropout", timing=False)
        assert (result["status"], result["check_kind"]) == (MISMATCH, "distribution"), (how, result)
        assert says in result["reason"], result["reason"]


def test_a_draw_whose_gradient_is_zeros_is_judged_by_value_whatever_was_drawn():
    mean = torch.randn(3, 4, generator=torch.Generator().manual_seed(5))
    sample = SampleInput(mean.clone().requires_grad_(), args=(torch.full((3, 4), 0.5),))
    calls = []

    def unseeded(m, s):  # every call draws anew: the target's values differ from the CPU's
        calls.append(1)
        return torch.normal(m, s)
    result = run_backward_case(unseeded, torch.float32, sample, CPU, "normal", timing=False)
    assert (result["status"], result["check_kind"]) == (PASS, "values"), result

    def reparameterised_on_target(m, s):
        calls.append(1)
        out = torch.normal(m, s)
        return out + (m - m.detach()) if len(calls) % 4 == 0 else out  # reference, truth, record, target
    calls.clear()
    result = run_backward_case(reparameterised_on_target, torch.float32, sample, CPU, "normal", timing=False)
    assert result["status"] == MISMATCH, result


class _RReLU(torch.autograd.Function):
    """Training rrelu whose backward draws slopes of its own instead of the forward's."""

    @staticmethod
    def forward(ctx, x, lower, upper):
        slope = torch.where(x < 0, torch.empty_like(x).uniform_(lower, upper), torch.ones_like(x))
        ctx.save_for_backward(x)
        ctx.bounds = (lower, upper)
        return x * slope

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.where(x < 0, torch.empty_like(x).uniform_(*ctx.bounds), torch.ones_like(x)), None, None


def test_an_rrelu_gradient_must_use_its_forwards_slopes(monkeypatch):
    import dataclasses
    from mpsprobe.engine import distributions
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(3))
    sample = SampleInput(x.clone().requires_grad_(), kwargs={"lower": 0.1, "upper": 0.3, "training": True})
    rrelu = torch.nn.functional.rrelu
    result = run_backward_case(rrelu, torch.float32, sample, CPU, "nn.functional.rrelu", timing=False)
    assert (result["status"], result["check_kind"]) == (PASS, "distribution"), result
    monkeypatch.setitem(distributions.RANDOM_OPS, "nn.functional.rrelu", dataclasses.replace(
        distributions.RANDOM_OPS["nn.functional.rrelu"], call=lambda i, a, k: _RReLU.apply(i, 0.1, 0.3)))
    result = run_backward_case(rrelu, torch.float32, sample, CPU, "nn.functional.rrelu", timing=False)
    assert (result["status"], result["check_kind"]) == (MISMATCH, "distribution"), result
    assert "the forward's own slope" in result["reason"]
