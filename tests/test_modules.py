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
