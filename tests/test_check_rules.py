"""`check --run` judges replayed calls by the sweep's own rules (engine/rulebook.py):
eigen, singular and QR vectors in canonical form, random draws by their distribution.

The targets are tests/wrong_backend.py's: "phase" returns the other correct answer
(real vectors flipped in sign, complex ones rotated in phase), "redraw" other
equally valid random draws, "zeros" wrong answers the rules must still catch.
"""
import json
import sqlite3
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from mpsprobe.cli import cli
from mpsprobe.engine import rulebook
from mpsprobe.engine.execute import run_case
from mpsprobe.vocabulary import PASS

TESTS = Path(__file__).parent
WRONG = str(TESTS / "wrong_backend.py")

# One model file per family: each calls the decomposition on a real (float32) and a
# complex (complex64) matrix, so signs flip in the one and phases rotate in the other.
FAMILIES = {
    "eigh": "torch.linalg.eigh(a)",
    "svd": "torch.linalg.svd(a, full_matrices=False)",
    "qr": "torch.linalg.qr(a)",
}
MODEL = """\
import torch
class Model(torch.nn.Module):
    def forward(self, x, z):
        total = 0
        for m in (x @ x.mT + torch.eye(5), z @ z.mH + torch.eye(5)):
            for part in {call}:
                total = total + part.abs().sum()
        return total
def build():
    g = torch.Generator().manual_seed(0)
    return Model(), (torch.randn(2, 5, 5, generator=g), torch.randn(5, 5, dtype=torch.complex64, generator=g))
"""
ATEN = {"eigh": "aten::_linalg_eigh", "svd": "aten::_linalg_svd", "qr": "aten::linalg_qr"}


def model_file(folder, family):
    path = folder / f"{family}_model.py"
    path.write_text(MODEL.format(call=FAMILIES[family].replace("(a", "(m")))
    return path


def check_run(model, db, kind):
    result = CliRunner().invoke(cli, ["check", str(model), "--run", "--backend", WRONG, "--no-timing",
                                      "--db", str(db), "--json"],
                                env={"WRONG": kind}, catch_exceptions=False)
    return result, json.loads(result.output[result.output.index("{"):])


def replayed(db, op):
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT dtype, status, check_kind, reason FROM results WHERE op_id = ? "
                            "ORDER BY dtype", (op,)).fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_other_correct_answer_is_no_mismatch(tmp_path, family):
    """A target whose vectors differ from the CPU's only in sign or phase is correct:
    every replayed call passes, judged by values (canonical form), not skipped."""
    db = tmp_path / "phase.db"
    result, data = check_run(model_file(tmp_path, family), db, "phase")
    assert result.exit_code == 0, result.output
    assert data["counts"]["mismatch"] == 0
    rows = replayed(db, ATEN[family])
    assert [(dtype, status, kind) for dtype, status, kind, _ in rows] == [
        ("complex64", PASS, "values"), ("float32", PASS, "values")]


def test_wrong_vectors_are_still_wrong(tmp_path):
    """The canonical form accepts another sign or phase, never a wrong answer."""
    db = tmp_path / "zeros.db"
    result, data = check_run(model_file(tmp_path, "eigh"), db, "zeros")
    assert result.exit_code == 1
    answers = {(o["aten_op"], o["dtype"]): o["class"] for o in data["ops"]}
    assert answers[("aten::_linalg_eigh", "float32")] == "mismatch"
    assert {status for _, status, _, _ in replayed(db, "aten::_linalg_eigh")} == {"mismatch"}


def test_a_replayed_draw_is_judged_by_its_distribution(tmp_path):
    """Dropout in training replays its draws (bernoulli_): judged like the sweep's
    bernoulli, by distribution, so other valid draws pass where values would differ."""
    model = tmp_path / "dropout_model.py"
    model.write_text("import torch\n"
                     "def build():\n"
                     "    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.3)), "
                     "torch.randn(16, 64)\n")
    db = tmp_path / "redraw.db"
    result = CliRunner().invoke(cli, ["check", str(model), "--train", "--run", "--backend", WRONG,
                                      "--no-timing", "--db", str(db), "--json"],
                                env={"WRONG": "redraw"}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = replayed(db, "aten::bernoulli_.float")
    assert rows and all(status == PASS and kind == "distribution" for _, status, kind, _ in rows), rows


@pytest.mark.parametrize("aten, entry", [
    ("aten::_linalg_eigh", "linalg.eigh"), ("aten::_linalg_svd", "linalg.svd"),
    ("aten::linalg_qr", "linalg.qr"), ("aten::sort.stable", "sort"), ("aten::sort", "sort"),
    ("aten::max.dim", "max.reduction_with_dim"), ("aten::bernoulli_.float", "bernoulli"),
    ("aten::max", "aten::max"), ("aten::add.Tensor", "aten::add.Tensor"), ("linalg.eigh", "linalg.eigh"),
])
def test_one_rule_found_by_either_name(aten, entry):
    assert rulebook.rule_key(aten) == entry


def test_a_replayed_sort_with_ties_is_judged_by_the_values_its_indices_point_at():
    """aten::sort's indices under ties: any tied index is right (the sweep's rule for sort).
    The target here returns another valid order of the tied indices."""
    x = torch.tensor([[3., 1., 3., 2., 1.]])
    expected = torch.sort(x, dim=-1)

    class OtherTies(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten.sort.default:
                return out[0], torch.tensor([[4, 1, 3, 2, 0]])   # ties 1 and 3 swapped in place
            return out

    from mpsprobe.engine.devices import Target

    class Ties(Target):
        def context(self):
            return OtherTies()
    anchor = torch.empty(0, dtype=torch.bool)
    sample = type("S", (), {"input": anchor, "args": (x, -1), "kwargs": {}})()
    op = (lambda anchor, *a, **k: torch.ops.aten.sort.default(*a, **k))
    assert torch.equal(expected.values, x[0, torch.tensor([4, 1, 3, 2, 0])].unsqueeze(0))
    result = run_case(op, torch.float32, sample, Ties("cpu"), timing=False, op_key="aten::sort")
    assert result["status"] == PASS, result
    plain = run_case(op, torch.float32, sample, Ties("cpu"), timing=False, op_key="aten::unknown_op")
    assert plain["status"] != PASS


def test_a_randomized_algorithms_gradient_is_not_judged_against_the_cpus_draw():
    """svd_lowrank's gradient is unique in exact arithmetic, but its rounding error is the
    random projection's: a correct target drawing its own projection errs beyond the
    CPU's error with the CPU's draw (here 1.13x the floors), so it is no unique answer."""
    import wrong_backend
    from torch.testing._internal.opinfo.core import SampleInput
    from mpsprobe.engine.backward import run_backward_case

    def op(a, b):
        torch.manual_seed(42)   # as OpInfo's wrapper_set_seed: the CPU's draw is fixed
        return torch.svd_lowrank(a @ b.mT, q=2)
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(3, 2, dtype=torch.complex64, generator=g) for _ in range(2))
    wrong_backend._REDRAWS[0] = 60    # the target's draws: seeds of their own
    result = run_backward_case(op, torch.complex64, SampleInput(a.requires_grad_(), args=(b.requires_grad_(),)),
                               wrong_backend.WrongTarget("redraw"), "svd_lowrank", timing=False)
    assert (result["status"], result["reason_kind"]) == ("skip", "no_unique_answer"), result["reason"]
    assert "random projection" in result["reason"]


def test_a_replayed_index_put_that_writes_one_place_twice_leaves_that_place_out():
    """aten::index_put without accumulation, two values for one position: which write wins
    is unspecified (the sweep's rule for index_put), so the target's other choice passes;
    the positions written once are still compared."""
    from mpsprobe.engine.devices import Target
    x, index, values = torch.zeros(4), (torch.tensor([1, 1, 2]),), torch.tensor([5., 7., 9.])

    class FirstWriteWins(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten.index_put.default:
                out = out.clone()
                out[1] = 5.0     # the CPU keeps the last write (7)
            return out

    class Other(Target):
        def context(self):
            return FirstWriteWins()
    anchor = torch.empty(0, dtype=torch.bool)
    sample = type("S", (), {"input": anchor, "args": (x, index, values), "kwargs": {}})()
    op = (lambda anchor, *a, **k: torch.ops.aten.index_put.default(*a, **k))
    assert torch.ops.aten.index_put.default(x, index, values)[1] == 7.0
    assert run_case(op, torch.float32, sample, Other("cpu"), timing=False, op_key="aten::index_put")["status"] == PASS
    assert run_case(op, torch.float32, sample, Other("cpu"), timing=False,
                    op_key="aten::unknown_op")["status"] != PASS


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_a_sweeps_qr_in_another_sign_or_phase_passes_and_a_wrong_one_does_not(dtype, mode):
    """linalg.qr in the sweep: Q's columns and R's rows turned together (R's diagonal of
    another sign or phase) is the same factorisation; zeros are not."""
    import wrong_backend
    from torch.testing._internal.opinfo.core import SampleInput
    a = torch.randn(3, 5, 4, dtype=dtype, generator=torch.Generator().manual_seed(2))
    sample = SampleInput(a, kwargs={"mode": mode})
    turned = run_case(torch.linalg.qr, dtype, sample, wrong_backend.WrongTarget("phase"), timing=False,
                      op_key="linalg.qr")
    assert (turned["status"], turned["check_kind"]) == (PASS, "values"), turned["reason"]
    zeros = run_case(torch.linalg.qr, dtype, sample, wrong_backend.WrongTarget("zeros"), timing=False,
                     op_key="linalg.qr")
    assert zeros["status"] == "mismatch"
