"""`mpsprobe check --compiled`: the model's ops through torch.compile, answered from measured
compiled cases only, each beside its eager answer; a CPU compiled run never answers for MPS,
and without a compiled MPS run the answer is unknown, said in words, exit 3."""
import json

import pytest

from compiled_db import ATEN, COMPILE_ERROR, build

MODEL_OPS = [*ATEN.values(), "aten::tanh"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """(the store with MPS compiled cases, the one whose MPS sweep compiled nothing, an op list)."""
    folder = tmp_path_factory.mktemp("compiled")
    ops = folder / "ops.json"
    ops.write_text(json.dumps({"model": "m", "mode": "forward", "dtype": "float32", "ops": MODEL_OPS}))
    build(folder / "with.db")
    build(folder / "without.db", mps_compiled=False)
    return folder / "with.db", folder / "without.db", ops


def check(run_cli, ops, db, *args):
    result = run_cli("check", ops, "--db", db, "--compiled", *args)
    return result.exit_code, result.output


def compiled_json(run_cli, ops, db, *args):
    code, text = check(run_cli, ops, db, "--json", *args)
    data = json.loads(text[text.index("{"):])
    return code, data, {o["aten_op"]: o for o in data["compiled"]["ops"]}


def line_of(text, op):
    """The compiled section's line for `op` (the eager section comes first)."""
    compiled = text[text.index("compiled (torch.compile)"):]
    return next(line for line in compiled.splitlines() if f" {op} " in line)


def test_each_compiled_verdict_with_the_eager_answer_beside(run_cli, stores):
    db, _, ops = stores
    code, text = check(run_cli, ops, db)
    assert code == 1, text
    assert "measured on MPS (bare metal): answers from the compiled cases of run" in text
    sort = line_of(text, "aten::sort.default")
    assert sort.startswith("✗") and "compiling it fails" in sort and "[eager: ✓ passes" in sort
    assert COMPILE_ERROR in text and "torch.compiler.disable" in text
    assert line_of(text, "aten::cumsum.default").startswith("≠")
    mul = line_of(text, "aten::mul.Tensor")
    assert "left to eager by the compiler" in mul and "CPU" not in mul
    assert "left to eager on mps: aten::mul.Tensor" in text
    assert line_of(text, "aten::add.Tensor").startswith("✓")
    # Never compiled: unknown, not declared (PyTorch declares nothing about compiled forms).
    assert line_of(text, "aten::relu").startswith("?")
    assert line_of(text, "aten::tanh").startswith("?") and "[eager: ○" in line_of(text, "aten::tanh")
    assert "at or above --fail-on fallback when compiled" in text.splitlines()[-1]


def test_compiled_cases_do_not_change_the_eager_answer(run_cli, stores):
    """A compiled fallback or failure is the compiled form's: the eager op still works."""
    db, _, ops = stores
    result = run_cli("check", ops, "--db", db, "--json")
    data = json.loads(result.output[result.output.index("{"):])
    eager = {o["aten_op"]: o for o in data["ops"]}
    for op in ("aten::mul.Tensor", "aten::sort.default", "aten::cumsum.default"):
        assert eager[op]["class"] == "ok", eager[op]
    assert "compiled" not in data


def test_json_and_exit_codes_follow_the_fail_on_level(run_cli, stores):
    db, _, ops = stores
    code, data, found = compiled_json(run_cli, ops, db)
    assert code == 1 and data["exit_code"] == 1 and data["compiled"]["exit_code"] == 1
    assert found["aten::sort.default"]["class"] == "unsupported"
    assert found["aten::mul.Tensor"]["class"] == "fallback"
    assert found["aten::mul.Tensor"]["fallback_ops"] == ["aten::mul.Tensor"]
    assert found["aten::mul.Tensor"]["eager"]["class"] == "ok"
    assert data["compiled"]["rank"] == "measured on MPS (bare metal)"
    assert data["compiled"]["counts"]["unknown"] == 2          # relu and tanh
    # Nothing fails at --fail-on never; unknowns keep the exit from 0 at any other level.
    assert check(run_cli, ops, db, "--fail-on", "never")[0] == 0


def test_only_working_compiled_ops_still_exit_3_for_the_unknown_ones(run_cli, stores, tmp_path):
    db, _, _ = stores
    ops = tmp_path / "ops.json"
    ops.write_text(json.dumps(["aten::add.Tensor", "aten::exp", "aten::relu"]))
    code, text = check(run_cli, ops, db)
    assert code == 3, text
    assert "1 (op, dtype) pair(s) rest on no compiled evidence" in text
    ops.write_text(json.dumps(["aten::add.Tensor", "aten::exp"]))
    assert check(run_cli, ops, db)[0] == 0


def test_no_compiled_mps_run_is_no_evidence_and_the_cpu_run_only_beside(run_cli, stores):
    _, db, ops = stores
    code, text = check(run_cli, ops, db)
    assert code == 3, text
    assert "no evidence: no measured compiled run on MPS" in text
    assert "PyTorch declares nothing about compiled forms" in text
    assert "beside it, not MPS evidence: 1 compiled run(s) (cpu" in text
    section = text[text.index("compiled (torch.compile)"):]
    assert "compiling it fails" not in section            # the CPU run's relu is not an MPS answer
    code, data, found = compiled_json(run_cli, ops, db)
    assert code == 3 and all(o["class"] == "unknown" for o in found.values())
    assert data["compiled"]["run_id"] is None and data["compiled"]["rank"] == "no evidence"


def test_the_cpu_question_is_answered_by_the_cpu_compiled_run(run_cli, stores):
    _, db, ops = stores
    code, data, found = compiled_json(run_cli, ops, db, "--device", "cpu")
    assert code == 1
    assert found["aten::relu"]["class"] == "unsupported" and found["aten::add.Tensor"]["class"] == "ok"
    assert data["compiled"]["question"] == "cpu" and data["compiled"]["beside"] == []
    code, text = check(run_cli, ops, db, "--device", "cpu")
    assert "compiled (torch.compile) on cpu: measured on cpu, not MPS" in text


def test_a_run_without_compiled_cases_asked_by_id_says_so(run_cli, stores, rows):
    _, db, ops = stores
    mps = rows(db, "SELECT id FROM runs WHERE device = 'mps'")[0]["id"]
    code, text = check(run_cli, ops, db, "--run-id", mps[:8])
    assert code == 3 and f"run {mps[:12]} has no compiled cases" in text


def test_compiled_does_not_apply_with_run(run_cli, stores):
    _, db, ops = stores
    result = run_cli("check", ops, "--db", db, "--compiled", "--run")
    assert result.exit_code == 2 and "--compiled" in result.output
    assert "Traceback" not in result.output


def test_bare_metal_answers_before_a_virtual_machine(run_cli, tmp_path):
    ops = tmp_path / "ops.json"
    ops.write_text(json.dumps(["aten::add.Tensor", "aten::mul.Tensor"]))
    build(tmp_path / "both.db", vm_compiled=True)
    code, data, found = compiled_json(run_cli, ops, tmp_path / "both.db")
    assert data["compiled"]["rank"] == "measured on MPS (bare metal)"
    assert found["aten::mul.Tensor"]["class"] == "fallback"
    # Only the virtual machine compiled: it answers, and says what it is.
    build(tmp_path / "vm.db", mps_compiled=False, vm_compiled=True)
    code, data, found = compiled_json(run_cli, ops, tmp_path / "vm.db")
    assert data["compiled"]["rank"] == "measured on MPS in a virtual machine"
    assert found["aten::mul.Tensor"]["class"] == "unsupported" and code == 1
