"""Module-level probes (ops/modules.py): ordinary cases of source 'module', through the same engine."""
import json
import sys
from pathlib import Path

import pytest
import torch

from mpsprobe.engine.execute import run_case
from mpsprobe.ops import modules, opinfo

sys.path.insert(0, str(Path(__file__).parent))
from wrong_backend import WrongTarget  # noqa: E402

PROBES = {p.name: p for p in modules.probes()}


@pytest.fixture(scope="module")
def module_sweep(tmp_path_factory, run_cli):
    """A CPU-against-CPU sweep of every module probe, forward and backward, one sample each."""
    path = tmp_path_factory.mktemp("modules") / "modules.db"
    result = run_cli("run", "--db", path, "--device", "cpu", "--ops", "module.*", "--samples", 1,
                     "--passes", "forward,backward", "--no-timing", "--json")
    assert result.exit_code == 0, result.output
    return str(path), json.loads(result.output[result.output.index("{"):])


def test_cpu_against_cpu_every_module_probe_runs_without_mismatch_or_error(module_sweep, rows):
    path, summary = module_sweep
    assert summary["state"] == "complete"
    statuses = {r["status"] for r in rows(path, "SELECT status FROM results")}
    assert statuses <= {"pass", "skip"} and "pass" in statuses
    recorded = {r["op_id"] for r in rows(path, "SELECT DISTINCT op_id FROM results")}
    assert recorded == set(PROBES)
    assert {r["source"] for r in rows(path, "SELECT source FROM ops")} == {"module"}


def test_module_probes_dispatch_the_kernels_they_are_written_for(module_sweep, rows):
    path, _ = module_sweep
    dispatched = {}
    for r in rows(path, "SELECT op_id, aten_ops FROM results WHERE aten_ops IS NOT NULL"):
        dispatched.setdefault(r["op_id"], set()).update(json.loads(r["aten_ops"]))
    for name, kernel in [("module.optim.adam.fused", "aten::_fused_adam_"),
                         ("module.optim.adamw.fused", "aten::_fused_adamw_"),
                         ("module.optim.sgd.fused", "aten::_fused_sgd_"),
                         ("module.nn.Dropout.train", "aten::bernoulli_.float"),
                         ("module.amp.grad_scaler", "aten::_amp_update_scale_"),
                         ("module.amp.grad_scaler", "aten::_amp_foreach_non_finite_check_and_unscale_"),
                         ("module.nn.EmbeddingBag.train", "aten::_embedding_bag"),
                         ("module.nn.utils.weight_norm", "aten::_weight_norm_interface"),
                         ("module.quant.int8_weight_linear", "aten::_weight_int8pack_mm"),
                         ("module.quant.int4_weight_linear", "aten::_weight_int4pack_mm_for_cpu")]:
        assert kernel in dispatched[name], (name, dispatched[name])
    assert any(op.startswith("aten::_foreach_") for op in dispatched["module.optim.adam.foreach"])


def test_dropout_in_training_is_judged_by_its_distribution(module_sweep, rows):
    path, _ = module_sweep
    found = rows(path, "SELECT status, check_kind FROM results WHERE op_id = 'module.nn.Dropout.train'")
    assert found and all(r["check_kind"] == "distribution" and r["status"] == "pass" for r in found)


def test_module_probes_are_selected_by_ops_and_listed(run_cli):
    assert {p["op"] for p in opinfo.list_pairs(["module.optim.*"], ["float32"],
                                               opinfo.with_module_probes([]))} == {
        n for n in PROBES if n.startswith("module.optim.")}
    pairs = opinfo.list_pairs(["module.nn.LSTM"], None, opinfo.with_module_probes([]))
    assert {p["source"] for p in pairs} == {"module"} and {p["dtype"] for p in pairs} == {"float16", "float32"}


@pytest.mark.parametrize("name", ["module.nn.LSTM", "module.amp.grad_scaler", "module.nn.RMSNorm",
                                  "module.quant.int4_weight_linear", "module.optim.adamw.foreach"])
def test_a_target_answering_zeros_is_a_mismatch(name):
    probe = PROBES[name]
    sample = opinfo.samples(probe, torch.float32, 1)[0]
    result = run_case(probe.op, torch.float32, sample, WrongTarget("zeros"), op_key=probe.name, timing=False)
    assert result["status"] == "mismatch", result


def test_a_dropout_that_never_drops_is_a_mismatch():
    probe = PROBES["module.nn.Dropout.train"]
    sample = opinfo.samples(probe, torch.float32, 1)[0]

    class NeverDrops:   # a target whose bernoulli_ keeps every unit
        def __init__(self):
            self.inner = WrongTarget("redraw")
            self.torch_device = self.inner.torch_device

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def context(self):
            return _Keep()

    from torch.utils._python_dispatch import TorchDispatchMode

    class _Keep(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.bernoulli_.float:
                return args[0].fill_(1)
            return func(*args, **(kwargs or {}))
    result = run_case(probe.op, torch.float32, sample, NeverDrops(), op_key=probe.judge_as, timing=False)
    assert result["status"] == "mismatch" and result["check_kind"] == "distribution", result


# --- judged right on a GPU: derived error bounds and dtype refusals ----------------------------

def _judged(name, dtype, kind, index=0, with_modes=True):
    probe = PROBES[name]
    sample = opinfo.samples(probe, dtype, index + 1)[index]
    target = WrongTarget(kind)
    return run_case(probe.op, dtype, sample, target, op_key=probe.name, timing=False,
                    modes=target.precision_modes() if with_modes else None, error_bound=probe.error_bound)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_a_recurrent_layer_in_tf32_passes_within_tf32_and_coarser_is_a_mismatch(kind):
    # cuDNN's RNNs run float32 in TF32 by default: the target reports it, and rounds as it would.
    for index in (0, 1):   # one layer; two layers, bidirectional
        result = _judged(f"module.nn.{kind}", torch.float32, "tf32", index)
        assert (result["status"], result["reason_kind"], result["precision_mode"]) == (
            "pass", "reduced_precision", "tf32_cudnn_rnn"), result["reason"]
        wrong = _judged(f"module.nn.{kind}", torch.float32, "tf32_wrong", index)   # 4 bits, not 10
        assert (wrong["status"], wrong["reason_kind"]) == ("mismatch", "reduced_precision"), wrong["reason"]
        assert "TF32" in wrong["reason"]
    # Judged against full precision, the same TF32 answers are a mismatch: the bound is what passes them.
    probe = PROBES[f"module.nn.{kind}"]
    plain = run_case(probe.op, torch.float32, opinfo.samples(probe, torch.float32, 1)[0], WrongTarget("tf32"),
                     op_key=probe.name, timing=False)
    assert plain["status"] == "mismatch"


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_the_recurrent_bound_reruns_the_layer_exactly(kind):
    from torch.utils._pytree import tree_flatten, tree_map
    from mpsprobe.ops.module_bounds import recurrent_bounds
    probe = PROBES[f"module.nn.{kind}"]
    for sample in opinfo.samples(probe, torch.float32, 2):
        args = (sample.input, sample.args, sample.kwargs)
        mode, finals = recurrent_bounds(kind, args, torch.float32, None)
        assert mode.name == "fp32_any_order"
        wide = tree_map(lambda t: t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t,
                        (sample.input, sample.args))
        exact = tree_flatten(probe.op(wide[0], *wide[1], **sample.kwargs))[0]
        for bounded, value in zip(finals, exact):
            assert torch.allclose(bounded.value, value, rtol=0, atol=1e-12)
            # float32's own answer lies within the bound of full precision
            assert (bounded.error > 0).all()
        cpu = tree_flatten(probe.op(sample.input, *sample.args, **sample.kwargs))[0]
        assert all(((c.double() - b.value).abs() <= b.error).all() for c, b in zip(cpu, finals))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_int4_summed_in_another_order_passes_and_coarse_weights_do_not(dtype):
    name = "module.quant.int4_weight_linear"
    for index in (0, 1):
        result = _judged(name, dtype, "int4_order", index)
        assert (result["status"], result["reason_kind"]) == ("pass", "summation_order"), result["reason"]
        assert result["precision_mode"] == {torch.bfloat16: "bf16_dequantized",
                                            torch.float16: "fp16_dequantized"}[dtype]
        probe = PROBES[name]
        plain = run_case(probe.op, dtype, opinfo.samples(probe, dtype, index + 1)[index], WrongTarget("int4_order"),
                         op_key=name, timing=False)
        assert plain["status"] == "mismatch"   # without the bound: one rounding apart is beyond the floors
        wrong = _judged(name, dtype, "int4_coarse", index)
        assert wrong["status"] == "mismatch", wrong["reason"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_int4_refused_outside_bfloat16_with_cudas_text_is_unsupported_dtype(dtype):
    result = _judged("module.quant.int4_weight_linear", dtype, "int4_bf16_only")
    assert (result["status"], result["reason_kind"]) == ("unsupported", "dtype"), result
    assert result["aten_op"] == "aten::_weight_int4pack_mm"
    assert _judged("module.quant.int4_weight_linear", torch.bfloat16, "int4_bf16_only")["status"] == "pass"


class _OverlappingDraws:
    """A target whose dropout masks overlap across calls as a vectorised GPU kernel's do when
    its generator's offset advances by 4 values per thread while each thread draws 8: each
    call's elements 8t..8t+3 repeat the previous call's 8t+4..8t+7."""
    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode
        last = {}

        class Overlap(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if func is torch.ops.aten.bernoulli_.float:
                    lanes = out.view(-1, 8)
                    if "mask" in last:
                        lanes[:, :4] = last["mask"][:, 4:]
                    last["mask"] = lanes.clone()
                return out
        self.inner = WrongTarget("redraw")
        self.torch_device = self.inner.torch_device
        self.context = Overlap

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_dropout_is_judged_soundly_both_ways(dtype):
    # The probe's own sample (4,096 values a call): the CPU's 16-bit dropout passes, and masks
    # that repeat half of the previous call's draws fail the repetition test (the H200's figure:
    # statistic 0.12 against 0.015).
    probe = PROBES["module.nn.Dropout.train"]
    sample = opinfo.samples(probe, dtype, 1)[0]
    assert sample.kwargs["p"] == 0.5
    fine = run_case(probe.op, dtype, sample, WrongTarget("redraw"), op_key=probe.judge_as, timing=False)
    assert (fine["status"], fine["check_kind"]) == ("pass", "distribution"), fine["reason"]
    overlapping = run_case(probe.op, dtype, sample, _OverlappingDraws(), op_key=probe.judge_as, timing=False)
    assert (overlapping["status"], overlapping["check_kind"]) == ("mismatch", "distribution")
    assert "repetition" in overlapping["reason"]


def test_a_default_sweep_includes_every_module_probe():
    from mpsprobe.ops import catalogue
    data = catalogue.current()
    default = {p["op"] for p in catalogue.pairs(data)}
    assert set(PROBES) <= default
    assert any(not op.startswith("module.") for op in default)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["transformer.py", "gru_classifier.py"])
def test_check_train_answers_dropouts_bernoulli_from_the_module_probe(tmp_path, run_cli, model):
    # The default sweep's dropout probe, alone, keeps this quick: what it records answers
    # the training step's aten::bernoulli_.float (no `?`, never probed).
    path = tmp_path / "sweep.db"
    swept = run_cli("run", "--db", path, "--device", "cpu", "--ops", "module.nn.Dropout.train", "--samples", 1,
                    "--passes", "forward", "--no-timing")
    assert swept.exit_code == 0, swept.output
    checked = run_cli("check", Path(__file__).parent / "models" / model, "--train", "--db", path,
                      "--device", "cpu", "--json")
    report = json.loads(checked.output[checked.output.index("{"):])
    found = [op for op in report["ops"] if op["aten_op"] == "aten::bernoulli_.float"]
    assert found and all((op["class"], op["status"]) == ("ok", "pass") for op in found), found
