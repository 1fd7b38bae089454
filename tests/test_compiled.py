"""The compiled pass: each op's forward through torch.compile, judged as the eager one.

The fake MPS backend's compiler lacks cos's lowering (a fallback kernel in the generated
code), generates a wrong kernel for sin and cannot lower tan: a sweep through the CLI must
record them as the compiled form's fallback, a mismatch and a failed compile, while the
eager forward of each passes. Inductor's real C++ code generation compiles the rest.
"""
import json
import os
from types import SimpleNamespace

import pytest
import torch
from torch.testing._internal.opinfo.core import SampleInput

from mpsprobe.engine import compiled
from mpsprobe.engine.compiled import run_compiled_case
from mpsprobe.engine.devices import Target
from mpsprobe.engine.plan import PlanError, SweepOptions
from mpsprobe.ops import catalogue, opinfo
from mpsprobe.vocabulary import (COMPILED, ERROR, FALLBACK, FORWARD, MISMATCH, PASS, PASS_COLUMN, SKIP,
                                 TIMEOUT)

WRAPPER = '''
    def call(self, args):
        arg0_1, = args
        # Topologically Sorted Source Nodes: [sort], Original ATen: [aten.sort]
        buf0 = torch.ops.aten.sort.stable(arg0_1, stable=False, dim=1, descending=False)
        buf1 = buf0[0]
        assert_size_stride(buf1, (5, 5), (5, 1), 'torch.ops.aten.sort.default')
        buf2 = torch.ops.inductor._reinterpret_tensor(buf1, (25,), (1,), 0)
        buf3 = torch.ops.aten.cumsum.default(buf2, 0)
        buf5 = torch.ops.aten.permute.default(buf3, [1, 0])
        extern_kernels.mm(buf3, buf3, out=buf4)
        cpp_fused_sin_0(buf4)
        return (buf4, )
'''


def test_fallback_kernels_are_read_from_the_generated_calls_not_its_comments():
    kernels, extern = compiled.fallback_kernels([WRAPPER])
    assert kernels == ["aten::sort.stable", "aten::cumsum"]   # the permute is a view: no kernel ran
    assert extern == ["extern_kernels.mm"]   # a library kernel by design: not a fallback
    assert compiled.fallback_kernels(["# buf0 = torch.ops.aten.sin.default(x)"]) == ([], [])


def test_graph_breaks_name_the_op_they_stop_at_else_their_reason():
    reasons = ["Dynamic shape operator\n  Explanation: Operator `aten.nonzero.default`'s output shape",
               "Unsupported Tensor.item() call with capture_scalar_outputs=False\n  Explanation: ..."]
    assert compiled.graph_breaks(reasons) == [
        "aten::nonzero", "graph break: Unsupported Tensor.item() call with capture_scalar_outputs=False"]


def test_a_wrapped_compile_error_keeps_the_compilers_own_family_and_line():
    from torch._dynamo.exc import BackendCompilerFailed
    inner = NotImplementedError("no lowering for aten.tan\nmore")
    error_type, message = compiled.compile_error(BackendCompilerFailed(lambda: None, inner, None))
    assert error_type == "BackendCompilerFailed(NotImplementedError)"
    assert message == "NotImplementedError: no lowering for aten.tan"


def test_the_caches_go_under_mpsprobes_root_per_torch_version_unless_set(tmp_path, monkeypatch):
    monkeypatch.setenv("MPSPROBE_CACHE", str(tmp_path))
    env = compiled.cache_env("2.13.0", environ={})
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor" / "torch-2.13.0")
    assert env["TRITON_CACHE_DIR"].startswith(env["TORCHINDUCTOR_CACHE_DIR"])
    assert env["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
    kept = compiled.cache_env("2.13.0", environ={"TORCHINDUCTOR_CACHE_DIR": "/mine"})
    assert "TORCHINDUCTOR_CACHE_DIR" not in kept


def test_the_compiled_pass_plans_one_sample_and_no_random_op():
    pair = {"passes": [FORWARD, COMPILED]}
    assert catalogue.planned_cases(pair, 3) == 4
    assert catalogue.planned_cases(pair, 3, compiled_samples=2) == 5
    assert catalogue.planned_cases(pair, 1, compiled_samples=5) == 2
    def entry(name):
        return SimpleNamespace(name=name, variant_test_name="", op=getattr(torch, name))
    assert opinfo.passes(entry("sin"), torch.float32, (FORWARD, COMPILED)) == [FORWARD, COMPILED]
    assert opinfo.passes(entry("bernoulli"), torch.float32, (FORWARD, COMPILED)) == [FORWARD]


def test_compiled_options_are_checked_and_part_of_the_runs_identity():
    with pytest.raises(PlanError, match="--compile-timeout"):
        SweepOptions(compile_timeout=0).check()
    with pytest.raises(PlanError, match="--compiled-samples"):
        SweepOptions(compiled_samples=0).check()
    assert SweepOptions(passes=(FORWARD, COMPILED)).key_fields()["compiled_samples"] == 1
    assert "compiled_samples" not in SweepOptions().key_fields()


@pytest.mark.slow
def test_a_real_inductor_compile_of_a_small_op_passes_with_its_times():
    sample = SampleInput(torch.randn(4, 5), args=(torch.randn(4, 5),))
    result = run_compiled_case(torch.atan2, torch.float32, sample, Target("cpu"), "atan2")
    assert result["status"] == PASS, result
    assert result["aten_ops"] == ["aten::atan2"], result   # the eager op's own
    assert result["compile_ms"] > 0 and result["notes"]["compiled"]["graphs"] == 1, result
    # No ladder for atan2: timed at the sample, with the ratio's interval around the ratio.
    assert result["notes"]["compiled_timed_at"] == "the sample", result
    assert result["compiled_speedup"] == pytest.approx(result["eager_ms"] / result["target_ms"])
    assert result["compiled_speedup_lo"] <= result["compiled_speedup"] <= result["compiled_speedup_hi"], result


def test_a_random_sample_is_not_judged_through_the_compiler():
    sample = SampleInput(torch.full((4, 4), 0.5))
    result = run_compiled_case(torch.bernoulli, torch.float32, sample, Target("cpu"), "bernoulli")
    assert result["status"] == SKIP and "random" in result["reason"]


class _FaultyCompiler(Target):
    """The CPU, with Inductor given fake_mps's compiler faults for the ops named."""

    def __init__(self, device, **faults):
        super().__init__(device)
        self.faults = dict(dict(compiled_no_lowering=[], compiled_wrong=[], compiled_broken=[]), **faults)

    def compiler(self):
        import fake_mps
        target = fake_mps.make_target()
        target.config = dict(target.config, **self.faults)
        return target.compiler()


def test_a_missing_lowering_is_the_compiled_forms_fallback_even_on_a_ci_runner(monkeypatch):
    # Inductor raises on an implicit fallback when CI is set: a GitHub runner must not turn it into an error.
    monkeypatch.setenv("CI", "true")
    target = _FaultyCompiler("cpu", compiled_no_lowering=["aten::cos"])
    result = run_compiled_case(torch.cos, torch.float32, SampleInput(torch.randn(3)), target, "cos", timing=False)
    assert result["status"] == FALLBACK and result["fallback_ops"] == ["aten::cos"], result
    assert result["reason_kind"] == "compiled_fallback"
    assert os.environ["CI"] == "true"   # put back after the compile


def test_a_compile_error_is_recorded_as_compile_failed_never_as_a_pass():
    result = run_compiled_case(torch.tan, torch.float32, SampleInput(torch.randn(3)), _FaultyCompiler("cpu", compiled_broken=["aten::tan"]), "tan")
    assert result["status"] == ERROR and result["reason_kind"] == "compile_failed", result
    assert "LoweringException" in result["error_type"]   # Inductor's own family, inside its wrapper
    assert "cannot lower" in result["message"]
    assert result["aten_ops"] == ["aten::tan"]
    assert result.get("compile_ms") is None


@pytest.fixture(scope="module")
def compiled_db(tmp_path_factory, run_cli, fake_mps):
    path = tmp_path_factory.mktemp("compiled") / "fake.db"
    result = run_cli("run", "--db", path, "--backend", fake_mps, "--ops", "sin,cos,tan,add",
                     "--dtypes", "float32", "--samples", 2, "--passes", "forward,compiled",
                     # Every compile here is cold (the fake compiler keeps no cache): on a loaded
                     # 2-core machine one can pass the default budget, which has its own test.
                     "--compile-timeout", 600, "--workers", 2, "--json")
    assert result.exit_code == 0, result.output
    return str(path)


def _compiled(rows, db):
    found = rows(db, f"SELECT * FROM results WHERE {PASS_COLUMN} = ?", (COMPILED,))
    return {r["op_id"]: r for r in found}


@pytest.mark.slow
def test_the_fake_compilers_faults_are_caught_end_to_end(compiled_db, rows):
    found = _compiled(rows, compiled_db)
    assert set(found) == {"sin", "cos", "tan", "add"}   # one compiled case per pair
    assert found["sin"]["status"] == MISMATCH and found["sin"]["reason_kind"] == "values"
    assert found["cos"]["status"] == FALLBACK and found["cos"]["reason_kind"] == "compiled_fallback"
    assert json.loads(found["cos"]["fallback_ops"]) == ["aten::cos"]
    assert found["tan"]["status"] == ERROR and found["tan"]["reason_kind"] == "compile_failed"
    assert found["add"]["status"] == PASS and found["add"]["compile_ms"] > 0
    timed_at = json.loads(found["add"]["notes"])["compiled_timed_at"]
    if found["add"]["compiled_speedup"] is None:   # its calls did not fit the timing budget: said so
        assert timed_at.startswith("not timed: ") and found["add"]["eager_ms"] is None
    else:
        assert found["add"]["compiled_speedup"] == pytest.approx(found["add"]["eager_ms"] / found["add"]["target_ms"])
    # The eager forward of each is right: the faults are the compiled form's alone.
    forward = rows(compiled_db, f"SELECT op_id, status, aten_ops FROM results WHERE {PASS_COLUMN} = ?", (FORWARD,))
    assert {r["status"] for r in forward} == {PASS} and {r["op_id"] for r in forward} == set(found)
    # A compiled case files the eager op's aten ops, so a model's ops match it.
    eager_ops = {r["op_id"]: r["aten_ops"] for r in forward}
    assert all(found[op]["aten_ops"] == eager_ops[op] for op in found)


@pytest.mark.slow
def test_the_run_records_the_compiled_options(compiled_db, rows):
    options = json.loads(rows(compiled_db, "SELECT options FROM runs")[0]["options"])
    assert options["passes"] == [FORWARD, COMPILED]
    assert options["compiled_samples"] == 1 and options["compile_timeout"] == 600.0


@pytest.mark.slow
def test_a_compile_past_its_budget_is_a_timeout_and_the_rest_still_runs(tmp_path, run_cli, rows):
    path = tmp_path / "budget.db"
    result = run_cli("run", "--db", path, "--device", "cpu", "--ops", "sin", "--dtypes", "float32",
                     "--samples", 1, "--passes", "forward,compiled", "--compile-timeout", 0.05,
                     "--workers", 1, "--no-timing")
    assert result.exit_code == 0, result.output
    found = {r[PASS_COLUMN]: r for r in rows(path, "SELECT * FROM results")}
    assert found[COMPILED]["status"] == TIMEOUT
    assert "compile budget" in found[COMPILED]["reason"]
    assert found[FORWARD]["status"] == PASS


@pytest.mark.slow
def test_a_bundle_and_a_merge_carry_the_compiled_columns(compiled_db, tmp_path, run_cli, rows):
    bundle_path, merged = tmp_path / "compiled.bundle.json", tmp_path / "merged.db"
    assert run_cli("submit", "--db", compiled_db, "-o", bundle_path).exit_code == 0
    assert run_cli("verify", bundle_path).exit_code == 0
    result = run_cli("merge", bundle_path, "-o", merged)
    assert result.exit_code == 0, result.output
    columns = "op_id, status, compile_ms, eager_ms, compiled_speedup, compiled_speedup_lo, compiled_speedup_hi"
    sql = f"SELECT {columns} FROM results WHERE {PASS_COLUMN} = '{COMPILED}' ORDER BY op_id"
    assert rows(merged, sql) == rows(compiled_db, sql)
    assert any(r["compiled_speedup"] for r in rows(merged, sql))


def test_a_break_on_a_skipped_function_names_it():
    reason = ("Attempted to call function marked as skipped\n  Explanation: ...\n\n  Developer debug context: "
              "module: torch.random, qualname: manual_seed, skip reason: <missing reason>")
    assert compiled.graph_breaks([reason]) == [
        "graph break: Attempted to call function marked as skipped (torch.random.manual_seed)"]


def test_only_opinfo_ops_have_a_compiled_pass():
    """A module probe compiles its own set-up, a generated record one written-into overload:
    neither is what a user compiles, so neither is judged compiled."""
    from mpsprobe.ops import generated, modules
    assert opinfo.passes(generated.probes()[0], torch.float32, (FORWARD, COMPILED)) == [FORWARD]
    assert opinfo.passes(modules.probes()[0], torch.float32, (FORWARD, COMPILED)) == [FORWARD]
