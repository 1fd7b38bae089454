"""A case's aten ops are answered under the dtypes they ran in, as a model's calls
are filed: a float32 `fft.irfft2` case runs `aten::_fft_c2r` on complex64, so a
model's complex64 `_fft_c2r` is answered from it. A failure stays under the case's
dtype, and goes under the op's own only when the case ran the op in that one alone.
"""
import json
import shutil
import sqlite3

import pytest

from mpsprobe.db import schema
from mpsprobe.db.query import blame
from mpsprobe.modelcheck.capture import OpUse
from mpsprobe.modelcheck.matching import Evidence
from mpsprobe.vocabulary import DTYPE_UNSURE

MODEL = '''
import torch


class Inverse(torch.nn.Module):
    def forward(self, spectrum):
        return torch.fft.irfft2(spectrum)


def build():
    return Inverse(), (torch.randn(2, 4, 5, dtype=torch.complex64),)
'''


@pytest.fixture(scope="module")
def irfft2_db(tmp_path_factory, run_cli):
    """A CPU-target run of fft.irfft2 in float32: every case passes."""
    path = tmp_path_factory.mktemp("dtypes") / "probe.db"
    result = run_cli("run", "--db", path, "--device", "cpu", "--ops", "fft.irfft2",
                     "--dtypes", "float32", "--samples", 2, "--passes", "forward",
                     "--no-timing", "--workers", 1)
    assert result.exit_code == 0, result.output
    return path


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "inverse_fft.py"
    path.write_text(MODEL)
    return path


def edited(source, tmp_path, sql, params=()):
    """A copy of the probe database with `sql` applied to it."""
    path = tmp_path / "edited.db"
    shutil.copy(source, path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(sql, params)
    conn.close()
    return path


def answer(run_cli, model, db, op="aten::_fft_c2r", dtype="complex64"):
    result = run_cli("check", model, "--db", db, "--device", "cpu", "--json")   # a CPU run's answer
    data = json.loads(result.output[result.output.index("{"):])
    return {(o["aten_op"], o["dtype"]): o for o in data["ops"]}[op, dtype]


@pytest.mark.slow
def test_a_case_records_the_dtypes_its_ops_ran_in(irfft2_db, rows):
    recorded = rows(irfft2_db, "SELECT dtype, aten_ops, aten_dtypes FROM results")
    assert recorded
    for r in recorded:
        ran_in = json.loads(r["aten_dtypes"])
        assert r["dtype"] == "float32" and set(ran_in) == set(json.loads(r["aten_ops"]))
        assert ran_in["aten::_fft_c2r"] == ["complex64"]


@pytest.mark.slow
def test_a_complex64_inverse_fft_is_answered_from_float32_irfft2_cases(irfft2_db, model, run_cli, rows):
    cases = len(rows(irfft2_db, "SELECT * FROM results"))
    found = answer(run_cli, model, irfft2_db)
    assert found["class"] == "ok", found
    assert f"passes in {cases} probe case(s)" in found["note"]


@pytest.mark.slow
def test_a_failing_case_condemns_the_op_in_the_dtype_it_ran_in(irfft2_db, model, run_cli, tmp_path, rows):
    """One irfft2 case fails naming _fft_c2r, which it ran on complex64 alone: the
    model's complex64 call is condemned, and the case's float32 keeps the failure."""
    path = edited(irfft2_db, tmp_path, "UPDATE results SET status = 'unsupported', "
                  "aten_op = 'aten::_fft_c2r', message = 'no kernel' WHERE case_id = 'fft.irfft2|float32|0'")
    found = answer(run_cli, model, path)
    assert found["class"] == "unsupported" and "passes in 1 other case(s)" in found["note"], found
    run_id = rows(path, "SELECT id FROM runs")[0]["id"]
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    evidence = blame.evidence(conn, run_id)
    assert blame.verdict(evidence["aten::_fft_c2r", "float32"])[0] == "unsupported"
    assert blame.verdict(evidence["aten::_fft_c2r", "complex64"])[0] == "unsupported"


@pytest.mark.slow
def test_a_failure_of_an_op_that_ran_in_two_dtypes_stays_under_the_cases_dtype(irfft2_db, tmp_path, rows):
    """_to_copy ran in float32 and complex64 in the case: which call failed is not
    known, so the failure is filed under the case's dtype, as before, and the other
    case's complex64 pass does not make it work in complex64: it is unknown there."""
    path = edited(irfft2_db, tmp_path, "UPDATE results SET status = 'unsupported', "
                  "aten_op = 'aten::_to_copy' WHERE case_id = 'fft.irfft2|float32|0'")
    ran_in = json.loads(rows(path, "SELECT aten_dtypes FROM results WHERE case_id = 'fft.irfft2|float32|0'")
                        [0]["aten_dtypes"])
    assert ran_in["aten::_to_copy"] == ["complex64", "float32"]
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    evidence = blame.evidence(conn, rows(path, "SELECT id FROM runs")[0]["id"])
    assert evidence["aten::_to_copy", "float32"].blamed["unsupported"] == 1
    assert blame.verdict(evidence["aten::_to_copy", "float32"])[0] == "unsupported"
    complex64 = evidence["aten::_to_copy", "complex64"]
    assert not complex64.failures and complex64.good == 1
    klass, status, note = blame.verdict(complex64)
    assert klass == "unknown" and "which dtype failed is not known; passes in 1 other case(s)" in note
    match = Evidence(conn, rows(path, "SELECT id FROM runs")[0]["id"]).match(OpUse("aten::_to_copy", "complex64", 1))
    assert (match.klass, match.confidence) == ("unknown", DTYPE_UNSURE)


@pytest.mark.slow
def test_rows_without_aten_dtypes_answer_as_before(irfft2_db, model, run_cli, tmp_path, rows):
    """Results recorded before aten_dtypes count every op under the case's dtype."""
    path = edited(irfft2_db, tmp_path, "UPDATE results SET aten_dtypes = NULL")
    found = answer(run_cli, model, path)
    assert found["class"] == "unknown"
    assert found["note"] == "never probed in complex64 (probed in float32)"
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    evidence = blame.evidence(conn, rows(path, "SELECT id FROM runs")[0]["id"])
    assert blame.verdict(evidence["aten::_fft_c2r", "float32"])[0] == "ok"
    assert ("aten::_fft_c2r", "complex64") not in evidence


def _case(db, op, index, status, aten_ops, aten_dtypes=None, aten_op=None):
    db["cases"].insert({"id": f"{op}|float32|{index}", "op_id": op, "dtype": "float32", "sample_index": index},
                       ignore=True)
    db["results"].insert({"run_id": "r1", "case_id": f"{op}|float32|{index}", "op_id": op, "dtype": "float32",
                          "status": status, "aten_op": aten_op, "aten_ops": json.dumps(aten_ops),
                          "aten_dtypes": json.dumps(aten_dtypes) if aten_dtypes else None})


def test_a_failure_naming_nobody_is_pinned_in_the_dtype_its_op_ran_in(tmp_path):
    """A float32 case fails naming no op; another probe op vouches for its float32
    add, so the failure is pinned on _fft_c2r, which it ran on complex64 alone."""
    db = schema.open_db(tmp_path / "x.db")
    db["runs"].insert({"id": "r1", "started": "2025-01-01", "device": "mps", "torch_version": "2.5.0"})
    for op in ("irfft2", "add", "irfftn"):
        db["ops"].insert({"id": op, "name": op})
    _case(db, "irfft2", 0, "unsupported", ["aten::_fft_c2r", "aten::add.Tensor"],
          {"aten::_fft_c2r": ["complex64"], "aten::add.Tensor": ["float32"]})
    _case(db, "add", 0, "pass", ["aten::add.Tensor"], {"aten::add.Tensor": ["float32"]})
    found = blame.evidence(db.conn, "r1")
    assert blame.verdict(found["aten::add.Tensor", "float32"])[0] == "ok"
    for dtype in ("float32", "complex64"):
        assert blame.verdict(found["aten::_fft_c2r", dtype])[:2] == ("unsupported", "unsupported")
    # A passing complex64 _fft_c2r of another probe op clears it: the failure depends on the inputs.
    _case(db, "irfftn", 0, "pass", ["aten::_fft_c2r"], {"aten::_fft_c2r": ["complex64"]})
    found = blame.evidence(db.conn, "r1")
    assert blame.verdict(found["aten::_fft_c2r", "complex64"])[0] == "ok"
    assert found["aten::_fft_c2r", "complex64"].input_specific["unsupported"] == 1


def test_a_failure_pinned_on_an_op_that_ran_in_two_dtypes_leaves_its_other_dtype_unknown(tmp_path):
    """A float32 case converting to float64 fails naming no op; add is vouched for, so
    the failure is pinned on _to_copy, in float32. Another op's float64 _to_copy
    passing does not make it work in float64: the failing call may have been that one."""
    db = schema.open_db(tmp_path / "x.db")
    db["runs"].insert({"id": "r1", "started": "2025-01-01", "device": "mps", "torch_version": "2.5.0"})
    for op in ("double_add", "add", "double"):
        db["ops"].insert({"id": op, "name": op})
    _case(db, "double_add", 0, "mismatch", ["aten::_to_copy", "aten::add.Tensor"],
          {"aten::_to_copy": ["float32", "float64"], "aten::add.Tensor": ["float32"]})
    _case(db, "add", 0, "pass", ["aten::add.Tensor"], {"aten::add.Tensor": ["float32"]})
    _case(db, "double", 0, "pass", ["aten::_to_copy"], {"aten::_to_copy": ["float64"]})
    found = blame.evidence(db.conn, "r1")
    assert blame.verdict(found["aten::_to_copy", "float32"])[:2] == ("mismatch", "mismatch")
    assert found["aten::_to_copy", "float64"].good == 1
    assert blame.verdict(found["aten::_to_copy", "float64"])[0] == "unknown"
