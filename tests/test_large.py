"""`run --large` (ops/large.py), rehearsed at a small size: no test here allocates a large tensor."""
import sys
from pathlib import Path

import pytest
import torch

from mpsprobe.engine.devices import Target
from mpsprobe.ops import catalogue, large

sys.path.insert(0, str(Path(__file__).parent))
from wrong_backend import WrongTarget  # noqa: E402

SMALL = 100_003   # odd, so cat's halves and the matmul's rows are uneven


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setenv("MPSPROBE_LARGE_ELEMENTS", str(SMALL))
    return SMALL


def test_the_default_size_is_past_2_31_elements_and_4_gb(monkeypatch):
    monkeypatch.delenv("MPSPROBE_LARGE_ELEMENTS", raising=False)
    assert large.elements() > 2 ** 31
    for case in large.CASES:
        assert case.bytes_needed() > 4 * 2 ** 30 * large.MARGIN * 0.9, case.name
    assert {c.name for c in large.CASES} == {f"large.{op}" for op in (
        "fill", "cat", "index_select", "index", "sum", "max", "matmul", "bmm")}


@pytest.mark.parametrize("case", large.CASES, ids=lambda c: c.name)
def test_each_case_meets_its_exact_answer_and_the_cpu_at_a_small_size(case, small):
    result = large.run_case(case, Target("cpu"), compare_on_cpu=True)
    assert (result["status"], result["check_kind"]) == ("pass", "values"), result["reason"]
    assert result["notes"]["verdict"] == [f"exact answer at {small} elements (0.00 GB)", "equal to the CPU's"]


# fill_ writes in place, where the zeros target's answer is not what the call returns.
@pytest.mark.parametrize("case", [c for c in large.CASES if c.name != "large.fill"], ids=lambda c: c.name)
def test_a_target_answering_zeros_is_a_mismatch(case, small):
    result = large.run_case(case, WrongTarget("zeros"), compare_on_cpu=False)
    assert (result["status"], result["reason_kind"]) == ("mismatch", "values"), result


def test_a_wrong_element_past_the_boundary_is_found_and_named(small, monkeypatch):
    monkeypatch.setattr(large, "CHUNK", 1000)   # several chunks, the wrong element in a late one
    case = large.by_name("large.cat")
    wrong = large.LargeCase(case.name, case.op, 4, 2, case.build,
                            lambda a, b: torch.cat([a, b]).index_fill_(0, torch.tensor([SMALL - 5]), 7.0),
                            case.expected)
    result = large.run_case(wrong, Target("cpu"), compare_on_cpu=False)
    assert result["status"] == "mismatch" and f"element {SMALL - 5} (flat) is 7.0, expected 2.0" in result["reason"]


def test_refusal_is_one_line_from_the_estimate_and_the_free_memory(monkeypatch):
    monkeypatch.delenv("MPSPROBE_LARGE_ELEMENTS", raising=False)
    case = large.by_name("large.cat")
    need = case.bytes_needed()
    assert large.refusal(case, "cuda", need) is None
    line = large.refusal(case, "cuda", need - 1)
    assert line == f"large.cat: needs {need / 1e9:.1f} GB on cuda, which has {(need - 1) / 1e9:.1f} GB free: not run"
    assert "\n" not in line
    assert large.free_bytes("cpu") == large.host_free_bytes() > 0


def test_large_cases_run_only_when_asked_for():
    data = catalogue.current()
    assert not any(p["op"].startswith("large.") for p in catalogue.pairs(data))
    assert {p["op"] for p in catalogue.pairs(data, large.wanted(["matmul", "large.cat"]))} == {
        "large.matmul", "large.cat"}
    assert {p["passes"] == ["forward"] for p in catalogue.pairs(data, large.wanted([]))} == {True}


@pytest.mark.slow
def test_run_large_refuses_what_does_not_fit_and_records_the_rest(tmp_path, run_cli, rows, monkeypatch, small):
    # Free memory for the cases that hold one large tensor, not for cat's two.
    free = large.by_name("large.matmul").bytes_needed()
    monkeypatch.setattr(large, "target_free_bytes", lambda device, python=None: free)
    path = tmp_path / "large.db"
    result = run_cli("run", "--db", path, "--device", "cpu", "--large", "--ops", "cat,fill,matmul",
                     "--no-timing", env={"MPSPROBE_LARGE_ELEMENTS": str(small)})
    assert result.exit_code == 0, result.output
    refused = [line for line in result.output.splitlines() if line.startswith("large.cat: needs")]
    assert len(refused) == 1 and refused[0].endswith("GB free: not run")
    found = {r["op_id"]: r["status"] for r in rows(path, "SELECT op_id, status FROM results")}
    assert found == {"large.fill": "pass", "large.matmul": "pass"}
