"""End to end on the CPU: the real probe over a small op subset, checked in the DB."""
import json

import pytest

from mpsprobe.vocabulary import FORWARD, PASS_COLUMN


def test_every_case_has_exactly_one_result(cpu_db, rows):
    cases = rows(cpu_db, "SELECT id FROM cases")
    results = rows(cpu_db, "SELECT case_id FROM results")
    assert sorted(c["id"] for c in cases) == sorted(r["case_id"] for r in results)
    done = rows(cpu_db, "SELECT sum(n_cases) AS n FROM pairs_done")[0]["n"]
    assert done == len(results)


def test_cpu_against_itself_passes_or_skips_nondeterministic(cpu_db, rows):
    statuses = rows(cpu_db, "SELECT op_id, status, check_kind FROM results")
    for r in statuses:
        if r["op_id"] == "empty_like":
            assert (r["status"], r["check_kind"]) == ("skip", "shape")
        else:
            assert (r["status"], r["check_kind"]) == ("pass", "values"), r


def test_run_records_where_it_was_measured(cpu_db, rows):
    import platform
    import torch
    run = rows(cpu_db, "SELECT * FROM runs")[0]
    assert run["state"] == "complete"
    assert run["device"] == "cpu" and run["device_name"] == "CPU"
    assert run["torch_version"] == torch.__version__
    assert run["torch_git"] == torch.version.git_version
    assert run["python"] == platform.python_version()
    assert run["machine"] == platform.machine()
    assert run["os_name"] and run["started"] and run["finished"]
    assert json.loads(run["options"])["samples"] == 2
    counts = json.loads(run["counts"])
    assert sum(counts.values()) == run["cases_total"] == len(rows(cpu_db, "SELECT * FROM results"))


def test_cases_record_aten_ops_sample_and_timing(cpu_db, rows):
    conv = rows(cpu_db, "SELECT r.*, c.sample FROM results r JOIN cases c ON c.id = r.case_id "
                        "WHERE r.op_id = 'nn.functional.conv2d' AND r.dtype = 'float32' "
                        f"AND r.{PASS_COLUMN} = ?", [FORWARD])
    assert conv
    for r in conv:
        assert "aten::convolution" in json.loads(r["aten_ops"])
        assert r["sample"].startswith("f32[")
        assert r["tol_atol"] == 1e-5 and r["max_abs_err"] is not None
    # One passing case of the pair's pass is timed (the first), on both sides.
    timed = [r for r in conv if r["target_ms"] is not None]
    assert len(timed) == 1 and timed[0]["ref_ms"] > 0 and timed[0]["speedup"] > 0


def test_rollup_view_takes_the_worst(cpu_db, rows):
    rolled = rows(cpu_db, "SELECT * FROM op_dtype_status WHERE op_id = 'add'")
    assert {r["dtype"] for r in rolled} == {"float16", "float32", "int64"}
    assert all(r["status"] == "pass" and r["n_pass"] == r["n_cases"] for r in rolled)
    aten = rows(cpu_db, "SELECT * FROM aten_op_status WHERE aten_op = 'aten::add.Tensor'")
    assert aten and all(r["status"] == "pass" for r in aten)


@pytest.mark.slow
def test_rerunning_the_same_command_adds_nothing(cpu_db, rows, run_cli, summary):
    before = rows(cpu_db, "SELECT count(*) AS n FROM results")[0]["n"]
    result = run_cli("run", "--db", cpu_db, "--device", "cpu",
                     "--ops", "add,mul,nn.functional.conv2d,sum,empty_like,argmax",
                     "--dtypes", "float32,float16,int64", "--samples", 2, "--json")
    assert result.exit_code == 0
    assert summary(result)["cases"] == before
    assert rows(cpu_db, "SELECT count(*) AS n FROM results")[0]["n"] == before
    assert len(rows(cpu_db, "SELECT * FROM runs")) == 1


@pytest.mark.slow
def test_without_a_terminal_progress_is_a_line_not_a_bar(run_cli, tmp_path):
    import re
    result = run_cli("run", "--db", tmp_path / "log.db", "--device", "cpu", "--ops", "add,mul",
                     "--dtypes", "float32", "--samples", 1, "--passes", "forward")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "cases" not in lines     # click's bar, when not on a terminal, printed only its label
    assert any(re.fullmatch(r"2 cases, 2/2 pairs  pass 2", line) for line in lines), result.output
