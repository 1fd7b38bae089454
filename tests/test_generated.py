"""Generated samples (ops/generated.py): schema-made calls of MPS kernels nothing else reaches,
ordinary cases of source 'generated'."""
import sys
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import mpsprobe
from mpsprobe.engine.devices import Target
from mpsprobe.engine.execute import run_case
from mpsprobe.engine.variants import out_form, run_variant_case
from mpsprobe.ops import coverage, generated, opinfo
from mpsprobe.ops.declared.wheel import TorchFiles

sys.path.insert(0, str(Path(__file__).parent))
from wrong_backend import _MOVES, WrongTarget  # noqa: E402

RECORDS = {p.name: p for p in generated.probes()}


def _case(probe, dtype, target):
    """The probe's one case: in its out= pass where that is what reaches its function."""
    sample = opinfo.samples(probe, dtype, 1)[0]
    if probe.supports_out:
        return run_variant_case(out_form(probe.op), "out", dtype, sample, target, probe.judge_as or probe.name,
                                timing=False)
    return run_case(probe.op, dtype, sample, target, op_key=probe.judge_as or probe.name, timing=False)


def test_every_record_of_the_table_is_a_probe_named_after_its_aten_function():
    assert len(RECORDS) == len(generated.GENERATED) + 3     # the table, then three fused optimizer steps
    for name, probe in RECORDS.items():
        assert name == generated.PREFIX + probe.reaches[0] and probe.source == "generated" and probe.dtypes


@pytest.mark.slow
def test_every_record_builds_a_valid_cpu_call_that_passes_against_the_cpu_and_records_its_function():
    # One sample each, in its first dtype, CPU against CPU (about 6 s).
    cpu = Target("cpu")
    for name, probe in RECORDS.items():
        result = _case(probe, probe.dtypes[0], cpu)
        assert result["status"] == "pass", (name, result.get("reason"), result.get("message"))
        function = probe.reaches[0]
        recorded = f"aten::{function}" in result["aten_ops"]
        # The CPU decomposes max_pool2d: coverage counts it through the MPS-only dispatch table.
        assert recorded or function in coverage.MPS_ONLY_DISPATCH, (name, result["aten_ops"])


class _ZeroedWrites(TorchDispatchMode):
    """Kernels that compute, then zero every floating tensor they were given to write (out=,
    in-place self, a helper's buffers, an optimizer's parameters); copies are left alone."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if func._schema.name.startswith(_MOVES):   # moving the sample to the target
            return result
        given = dict(zip((a.name for a in func._schema.arguments), args), **kwargs)
        for arg in func._schema.arguments:
            if arg.alias_info is not None and arg.alias_info.is_write and arg.name in given:
                value = given[arg.name]
                for t in value if isinstance(value, (list, tuple)) else [value]:
                    if isinstance(t, torch.Tensor) and t.is_floating_point():
                        t.zero_()
        return result


class _WritesZeros(Target):
    def __init__(self):
        super().__init__("cpu")

    def context(self):
        return _ZeroedWrites()


@pytest.mark.parametrize("name", ["generated.reflection_pad2d_backward", "generated.nll_loss2d_forward",
                                  "generated._logcumsumexp"])
def test_a_target_answering_zeros_is_a_mismatch(name):
    probe = RECORDS[name]
    assert _case(probe, probe.dtypes[0], WrongTarget("zeros"))["status"] == "mismatch"


@pytest.mark.parametrize("name", ["generated.hardswish.out", "generated.masked_fill_.Tensor",
                                  "generated.reflection_pad2d_backward.grad_input", "generated._cummax_helper",
                                  "generated._fused_adam_.tensor_lr", "generated._batch_norm_with_update.out"])
def test_a_kernel_writing_zeros_into_its_out_or_in_place_arguments_is_a_mismatch(name):
    probe = RECORDS[name]
    assert _case(probe, probe.dtypes[0], _WritesZeros())["status"] == "mismatch"


class _OddResizes(TorchDispatchMode):
    """Kernels that resize an empty out= tensor otherwise than the CPU: a 2-D answer lands
    transposed, any other is left empty (the answer is computed into a scratch tensor)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        outs = [a.name for a in generated._outs(func._schema)] if func._schema.returns else []
        empty = [n for n in outs if isinstance(kwargs.get(n), torch.Tensor) and kwargs[n].numel() == 0]
        if func._schema.name.startswith(_MOVES) or not empty:
            return func(*args, **kwargs)
        scratch = dict(kwargs, **{n: torch.empty(0, dtype=kwargs[n].dtype) for n in empty})
        func(*args, **scratch)
        for n in empty:
            if scratch[n].dim() == 2:
                kwargs[n].resize_(scratch[n].shape[::-1]).copy_(scratch[n].t())
        written = tuple(kwargs[n] if n in kwargs else scratch[n] for n in outs)
        return written if len(written) > 1 else written[0]


class _ResizesOddly(Target):
    def __init__(self):
        super().__init__("cpu")

    def context(self):
        return _OddResizes()


OUT_RECORDS = [n for n, p in RECORDS.items() if not p.supports_out and not p.reaches[0].startswith("_fused")
               and any(a.kwarg_only for a in generated._outs(generated._overload(p.reaches[0])._schema))]


def test_the_odd_resizing_target_does_change_what_an_empty_out_receives():
    out = torch.empty(0)
    with _OddResizes():
        torch.ops.aten.nonzero_static.out(torch.ones(3, 4), size=8, out=out.long())
        torch.ops.aten.hardtanh.out(torch.ones(3, 4, 5), out=out)
    assert out.shape == (0,)
    two_d = torch.empty(0)
    with _OddResizes():
        torch.ops.aten.hardtanh.out(torch.ones(3, 4), out=two_d)
    assert two_d.shape == (4, 3)


@pytest.mark.parametrize("name", OUT_RECORDS)
def test_how_a_target_resizes_an_empty_out_changes_no_verdict(name):
    # Out= tensors are made as the functional form returns them, so a kernel's resizing of an
    # empty one never comes into play: a target resizing otherwise than the CPU judges the same.
    probe = RECORDS[name]
    for dtype in probe.dtypes:
        assert _case(probe, dtype, _ResizesOddly())["status"] == _case(probe, dtype, Target("cpu"))["status"] == "pass"


def test_out_tensors_take_the_shape_and_dtype_the_functional_form_returns():
    for name, functional in (("generated.nonzero_static.out", torch.ops.aten.nonzero_static.default),
                             ("generated.binary_cross_entropy_backward.grad_input",
                              torch.ops.aten.binary_cross_entropy_backward.default)):
        probe = RECORDS[name]
        for dtype in probe.dtypes:
            sample = opinfo.samples(probe, dtype, 1)[0]
            given = [v for k, v in sample.kwargs.items() if k in ("out", "grad_input")][0]
            expected = functional(sample.input, *sample.args,
                                  **{k: v for k, v in sample.kwargs.items() if k not in ("out", "grad_input")})
            assert (given.shape, given.dtype) == (expected.shape, expected.dtype), (name, dtype)
    # A factory's out= tensor is in the case's dtype (eye's functional form would give float32).
    sample = opinfo.samples(RECORDS["generated.eye.m_out"], torch.int64, 1)[0]
    assert (sample.kwargs["out"].shape, sample.kwargs["out"].dtype) == ((3, 4), torch.int64)


def test_what_a_kernel_writes_without_returning_is_the_calls_output():
    # _cummax_helper and _fused_adam_ return nothing: their written arguments are what is compared.
    probe = RECORDS["generated._cummax_helper"]
    sample = opinfo.samples(probe, torch.float32, 1)[0]
    values, indices = probe.op(sample.input, *sample.args, **sample.kwargs)
    expected = torch.cummax(sample.input, dim=1)
    assert torch.equal(values, expected.values) and torch.equal(indices, expected.indices)
    probe = RECORDS["generated._fused_adam_.tensor_lr"]
    sample = opinfo.samples(probe, torch.float32, 1)[0]
    params, states = probe.op(sample.input, *sample.args, **sample.kwargs)
    assert all(not torch.equal(after, before) for after, before in zip(params, sample.input))
    assert all(not torch.equal(after, before) for group, old in zip(states, sample.args[1])
               for after, before in zip(group, old))


def test_random_records_are_judged_by_the_distribution_of_their_draws():
    for name in ("generated.native_dropout", "generated.normal.Tensor_float", "generated.normal.float_Tensor",
                 "generated.normal.Tensor_float_out", "generated.normal.float_Tensor_out"):
        result = _case(RECORDS[name], torch.float32, Target("cpu"))
        assert (result["status"], result["check_kind"]) == ("pass", "distribution"), (name, result)
        assert f"aten::{RECORDS[name].reaches[0]}" in result["aten_ops"]


def test_generated_records_run_in_a_default_sweep_large_cases_only_by_name():
    catalogue = opinfo.with_module_probes([])
    default = opinfo.list_pairs(None, ["float32"], catalogue)
    assert {p["source"] for p in default} == {"generated", "module"}   # no `large`: --large only
    assert {p["op"] for p in default if p["source"] == "generated"} == {
        n for n, p in RECORDS.items() if torch.float32 in p.dtypes}
    assert not [p for p in default if p["op"].startswith("large.")]
    assert {p["dtype"] for p in opinfo.list_pairs(["generated.__lshift__.Scalar"], None, catalogue)} == {
        "int64", "int32", "uint8"}


def test_the_catalogue_and_coverage_count_generated_records_under_their_source():
    rows = {r["op"]: r for r in opinfo.describe(generated.probes())["ops"]}
    assert rows["generated.__lshift__.Scalar"]["source"] == "generated"
    passes = rows["generated.__lshift__.Scalar"]["passes"]["int64"]
    assert "forward" in passes and not {"backward", "inplace", "out"} & set(passes)   # calls of one overload
    yaml = """
- func: __lshift__.Scalar(Tensor self, Scalar other) -> Tensor
  dispatch:
    CPU, MPS: __lshift__
- func: __ilshift__.Scalar(Tensor(a!) self, Scalar other) -> Tensor(a!)
  dispatch:
    CPU, MPS: __ilshift__
- func: random_(Tensor(a!) self) -> Tensor(a!)
  dispatch:
    CPU, MPS: random_
"""
    kernels = coverage.mps_kernels(TorchFiles("9.9", "test", native_functions=yaml))
    dispatched = {("aten::__lshift__.Scalar", "forward"): {"generated": {"generated.__lshift__.Scalar"}}}
    found = {k.function: k for k in coverage.measure(kernels, dispatched)}
    assert found["__lshift__.Scalar"].reached_by == {"generated": {"generated.__lshift__.Scalar"}}
    assert found["__ilshift__.Scalar"].reason == "an in-place kernel: no case dispatched it"
    assert "no sample is generated: a random kernel" in found["random_"].reason
    assert coverage.summary(list(found.values()), "test")["by_source"]["generated"] == 1


@pytest.mark.slow
def test_a_generated_case_is_counted_under_source_generated(run_cli, tmp_path, rows):
    db = tmp_path / "generated.db"
    result = run_cli("run", "--db", db, "--device", "cpu", "--ops", "generated.all.out,generated.max_pool2d",
                     "--dtypes", "float32", "--samples", 1, "--no-timing")
    assert result.exit_code == 0, result.output
    assert {r["source"] for r in rows(db, "SELECT source FROM ops")} == {"generated"}
    report = mpsprobe.coverage(str(db))
    functions = {f["function"]: f for f in report["functions"]}
    assert functions["all.out"]["sources"] == ["generated"] and functions["all.out"]["via"] == "recorded"
    assert functions["all.out"]["ops"] == {"generated": ["generated.all.out"]}
    # max_pool2d: the CPU records max_pool2d_with_indices; the record's call reaches MPS's own kernel.
    assert functions["max_pool2d"]["sources"] == ["generated"]
    assert functions["max_pool2d"]["via"].startswith("MPS-only dispatch")
    assert report["by_source"]["generated"] == report["reached"]
    left = functions["__lshift__.Tensor"]
    assert not left["reached"] and "in-place" not in left["reason"]
    assert "generated.__lshift__.Tensor is written to reach it" in left["reason"]
    assert "no sample is generated" in functions["random_.from"]["reason"]


class _Float32Statistics(TorchDispatchMode):
    """A CUDA-like batch norm: float32 saved statistics for a reduced-precision input (what
    PyTorch's own decomposition returns off the CPU), optionally with their values off."""

    def __init__(self, shift=0.0):
        super().__init__()
        self.shift = shift

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func is torch.ops.aten._native_batch_norm_legit.no_stats:
            output, mean, invstd = result
            return output, mean.float() + self.shift, invstd.float()
        return result


class _Float32StatisticsTarget(Target):
    def __init__(self, shift=0.0):
        super().__init__("cpu")
        self.shift = shift

    def context(self):
        return _Float32Statistics(self.shift)


def test_a_generated_records_auxiliary_outputs_are_its_aten_functions():
    # Saved statistics are batch norm's auxiliary outputs (engine/auxiliary.py), their dtype each
    # backend's own: float32 statistics for a bfloat16 input pass, the difference noted.
    probe = RECORDS["generated._native_batch_norm_legit.no_stats"]
    result = _case(probe, torch.bfloat16, _Float32StatisticsTarget())
    assert result["status"] == "pass", result
    assert "dtype differs" in str(result) and "save_mean (auxiliary)" in str(result)
    wrong = _case(probe, torch.bfloat16, _Float32StatisticsTarget(shift=1.0))
    assert "save_mean (auxiliary): values differ" in str(wrong) and "promise broken" in str(wrong)
