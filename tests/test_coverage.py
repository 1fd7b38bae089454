"""`mpsprobe coverage`: MPS kernels counted against what recorded cases dispatched."""
import json

import pytest

import mpsprobe
from mpsprobe.ops import coverage
from mpsprobe.ops.declared.wheel import TorchFiles

YAML = """
- func: add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
  structured_delegate: add.out
- func: add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)
  dispatch:
    CPU, CUDA, MPS: add_out
- func: _mps_convolution(Tensor self, Tensor weight) -> Tensor
  dispatch:
    MPS: _mps_convolution
- func: mps_convolution_backward(Tensor self, Tensor grad_output) -> Tensor
  dispatch:
    MPS: mps_convolution_backward
- func: _fused_adam_(Tensor(a!)[] self) -> ()
  dispatch:
    CPU: _fused_adam_kernel_cpu_
    MPS: _fused_adam_kernel_mps_
- func: cos(Tensor self) -> Tensor
  dispatch:
    CPU: cos
"""
LU = """
import torch
mps_lib = torch.library.Library("aten", "IMPL", "MPS")
mps_lib.impl("aten::linalg_lu_solve.out", f)
"""


def _kernels():
    return coverage.mps_kernels(TorchFiles("9.9", "test", native_functions=YAML,
                                           python={"torch/_refs/linalg/__init__.py": LU}))


def test_kernels_are_own_mps_keys_and_python_registrations():
    names = [k.function for k in _kernels()]
    # add.Tensor has no key of its own (its delegate's); cos has no MPS kernel.
    assert names == ["add.out", "_mps_convolution", "mps_convolution_backward", "_fused_adam_",
                     "linalg_lu_solve.out"]


def test_a_structured_delegate_reaches_its_kernel_and_each_source_is_named():
    dispatched = {("aten::add.Tensor", "forward"): {"opinfo": {"add"}},
                  ("aten::_fused_adam_", "forward"): {"module": {"module.adam_fused"}}}
    kernels = {k.function: k for k in coverage.measure(_kernels(), dispatched)}
    assert kernels["add.out"].reached and kernels["add.out"].via == "structured delegate of add.Tensor"
    assert kernels["_fused_adam_"].reached_by == {"module": {"module.adam_fused"}}
    assert kernels["_fused_adam_"].via == "recorded"
    left = kernels["linalg_lu_solve.out"]
    assert not left.reached and left.reason.startswith("no case dispatched it")


def test_an_mps_only_dispatch_is_reached_through_its_public_call_in_the_right_pass():
    # The CPU's convolution recorded in a forward case reaches _mps_convolution on MPS, not its backward.
    dispatched = {("aten::convolution", "forward"): {"opinfo": {"nn.functional.conv2d"}}}
    kernels = {k.function: k for k in coverage.measure(_kernels(), dispatched)}
    assert kernels["_mps_convolution"].reached
    assert "MPS-only dispatch" in kernels["_mps_convolution"].via
    assert "Convolution.cpp" in kernels["_mps_convolution"].via
    backward = kernels["mps_convolution_backward"]
    assert not backward.reached and "MPS-only dispatch" in backward.reason and "backward pass" in backward.reason


def test_on_mps_only_what_mps_recorded_counts():
    dispatched = {("aten::convolution", "forward"): {"opinfo": {"nn.functional.conv2d"}}}
    kernels = {k.function: k for k in coverage.measure(_kernels(), dispatched, on_mps=True)}
    assert not kernels["_mps_convolution"].reached


def test_without_a_database_nothing_is_reached_and_the_evidence_says_so():
    report = mpsprobe.coverage()
    assert report["reached"] == 0 and report["runs"] == []
    assert report["evidence"].startswith("none")
    assert {f["reason"] for f in report["functions"]} == {"not measured: no run read"}
    assert report["yaml_kernels"] >= 500      # torch 2.13: 533 functions with their own MPS key


def test_a_cpu_run_reaches_kernels_and_says_its_evidence_is_not_mps(cpu_db):
    report = mpsprobe.coverage(cpu_db)
    functions = {f["function"]: f for f in report["functions"]}
    assert functions["add.out"]["reached"] and functions["add.out"]["sources"] == ["opinfo"]
    assert functions["_mps_convolution"]["reached"]
    assert not functions["_lstm_mps"]["reached"] and functions["_lstm_mps"]["reason"]
    assert "not MPS" in report["evidence"] and report["runs"][0]["device"] == "cpu"
    assert report["reached"] == sum(1 for f in report["functions"] if f["reached"])
    assert all(f["reason"] for f in report["functions"] if not f["reached"])


def test_cli_prints_figures_and_json(run_cli, cpu_db):
    result = run_cli("coverage", "--db", cpu_db, "--limit", "2")
    assert result.exit_code == 0, result.output
    assert "MPS kernels" in result.output and "evidence: aten ops the runs' cases dispatched on cpu" in result.output
    assert "_lstm_mps" in result.output and "RNN.cpp" in result.output
    data = json.loads(run_cli("coverage", "--db", cpu_db, "--json").output)
    assert data["reached"] > 0 and data["by_source"]["opinfo"] == data["reached"]


@pytest.mark.parametrize("args, says", [
    (["--db", "no/such.db"], "no such database"),
    (["--run", "ffff"], "has no runs ffff"),
])
def test_cli_refuses_in_one_line(run_cli, cpu_db, args, says):
    if "--run" in args:
        args = ["--db", cpu_db] + args
    result = run_cli("coverage", *args)
    assert result.exit_code == 2 and says in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_a_dispatch_the_cpu_never_makes_is_reached_by_the_cases_of_the_op_that_makes_it():
    # The CPU runs nn.LSTM through its own kernel; the LSTM probe's cases stand for _lstm_mps.
    yaml = YAML + """
- func: _lstm_mps(Tensor input) -> Tensor
  dispatch:
    MPS: _lstm_mps
- func: lstm_mps_backward(Tensor grad_y) -> Tensor
  dispatch:
    MPS: lstm_mps_backward
"""
    kernels = coverage.mps_kernels(TorchFiles("9.9", "test", native_functions=yaml))
    dispatched = {("aten::mkldnn_rnn_layer", "forward"): {"module": {"module.nn.LSTM"}},
                  ("aten::add.Tensor", "backward"): {"opinfo": {"add"}}}
    found = {k.function: k for k in coverage.measure(kernels, dispatched,
                                                     probes={"lstm_mps_backward": "module.nn.LSTM"})}
    assert found["_lstm_mps"].reached_by == {"module": {"module.nn.LSTM"}}
    assert "RNN.cpp" in found["_lstm_mps"].via
    assert not found["lstm_mps_backward"].reached     # no backward case of the LSTM probe
    assert "module.nn.LSTM is written to reach it" in found["lstm_mps_backward"].reason
