"""Reduced-precision modes and auxiliary outputs in the verdict (a TF32 test target)."""
import sys
from pathlib import Path

import pytest
import torch
from torch.testing._internal.opinfo.core import SampleInput

from mpsprobe.engine.execute import run_case
from mpsprobe.vocabulary import MISMATCH, PASS, REASON_KINDS

sys.path.insert(0, str(Path(__file__).parent))
from wrong_backend import WrongTarget  # noqa: E402

REDUCED = dict(zip(REASON_KINDS, REASON_KINDS))["reduced_precision"]
F = torch.nn.functional


def _cases():
    g = torch.Generator().manual_seed(5)

    def r(*shape):
        return torch.randn(*shape, generator=g)
    return [
        ("nn.functional.conv2d", F.conv2d, SampleInput(r(2, 16, 12, 12), args=(r(8, 16, 3, 3), r(8)))),
        ("mm", torch.mm, SampleInput(r(64, 256), args=(r(256, 32),))),
        ("nn.functional.linear", F.linear, SampleInput(r(8, 128), args=(r(16, 128), r(16)))),
        ("addmm", torch.addmm, SampleInput(r(4, 6), args=(r(4, 96), r(96, 6)), kwargs={"beta": 0.5, "alpha": -1.5})),
    ]


def _run(kind, key, op, sample):
    target = WrongTarget(kind)
    return run_case(op, torch.float32, sample, target, timing=False, op_key=key,
                    modes=target.precision_modes())


@pytest.mark.parametrize("key,op,sample", _cases(), ids=[c[0] for c in _cases()])
def test_tf32_kernels_pass_as_reduced_precision(key, op, sample):
    result = _run("tf32", key, op, sample)
    assert (result["status"], result["reason_kind"]) == (PASS, REDUCED), result["reason"]
    assert result["precision_mode"] in ("tf32_cudnn", "tf32_matmul")
    # the same target's answers are wrong in float32's own terms
    plain = run_case(op, torch.float32, sample, WrongTarget("tf32"), timing=False, op_key=key)
    assert plain["status"] == MISMATCH


@pytest.mark.parametrize("key,op,sample", _cases(), ids=[c[0] for c in _cases()])
def test_a_target_wrong_beyond_tf32_is_still_a_mismatch_naming_the_mode(key, op, sample):
    result = _run("tf32_wrong", key, op, sample)
    assert (result["status"], result["reason_kind"]) == (MISMATCH, REDUCED), result["reason"]
    assert "TF32" in result["reason"]


def test_eval_batch_norm_with_saved_statistics_passes_with_a_note():
    x = torch.randn(4, 3, 5)
    mean, var = torch.zeros(3), torch.ones(3)
    sample = SampleInput(x, args=(torch.ones(3), torch.zeros(3), mean, var, False, 0.1, 1e-5))
    result = _run("tf32", "native_batch_norm", torch.native_batch_norm, sample)
    assert result["status"] == PASS, result["reason"]
    assert any("save_mean (auxiliary)" in note and "one side only" in note for note in result["notes"]["verdict"])


def test_ops_outside_the_modes_reach_are_judged_as_usual():
    x = torch.randn(32)
    result = _run("tf32", "sin", torch.sin, SampleInput(x))
    assert (result["status"], result["reason_kind"]) == (PASS, None)


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.slow
def test_the_run_records_its_precision_modes_and_strict_turns_them_off(tmp_path, strict, run_cli, rows):
    db = tmp_path / "tf32.db"
    backend = str(Path(__file__).parent / "wrong_backend.py")
    result = run_cli("run", "--db", db, "--backend", backend, "--ops", "mm,addmm", "--dtypes", "float32",
                     "--samples", 1, "--no-timing", "--workers", 1, "--passes", "forward",
                     *(["--strict-precision"] if strict else []), env={"WRONG": "tf32"})
    assert result.exit_code == 0, result.output
    [run] = rows(db, "SELECT precision_modes FROM runs")
    cases = rows(db, "SELECT status, reason_kind, precision_mode FROM results")
    assert {c["status"] for c in cases} == {PASS}
    if strict:
        assert run["precision_modes"] == "[]" and "precision: full" in result.output
        assert {(c["reason_kind"], c["precision_mode"]) for c in cases} == {(None, None)}
    else:
        assert "tf32_matmul" in run["precision_modes"] and "reduced-precision modes on" in result.output
        assert {(c["reason_kind"], c["precision_mode"]) for c in cases} == {(REDUCED, "tf32_matmul")}
