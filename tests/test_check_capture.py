"""`check`'s capture for the device asked, its readable rows, and its one-line refusals."""
import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import mpsprobe
from mpsprobe.cli import cli
from mpsprobe.modelcheck import capture as capturing, load as models, report as reporting
from mpsprobe.modelcheck.load import torchvision_install


class Attention(torch.nn.Module):
    """MultiheadAttention in eval mode: the CPU's fast path (_native_multi_head_attention,
    the CPU's flash kernel) takes it unless the capture is for another device."""

    def __init__(self):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(16, 2, batch_first=True)
        self.conv = torch.nn.Conv1d(16, 16, 3, padding=1)
        self.lstm = torch.nn.LSTM(16, 16, batch_first=True)

    def forward(self, x):
        y, _ = self.attn(x, x, x, need_weights=False)
        y = self.conv(y.mT).mT
        return self.lstm(y)[0]


@pytest.fixture(scope="module")
def cpu_db(tmp_path_factory):
    """A database whose only run is a CPU run (what a Linux user has)."""
    path = tmp_path_factory.mktemp("cpu") / "cpu.db"
    result = CliRunner().invoke(cli, ["run", "--ops", "add", "--device", "cpu", "--samples", "1", "--no-timing",
                                      "--dtypes", "float32", "--passes", "forward", "--db", str(path)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return str(path)


CPU_ONLY = ("aten::_native_multi_head_attention", "aten::_scaled_dot_product_flash_attention_for_cpu",
            "aten::mkldnn_rnn_layer")


def test_the_capture_is_for_the_device_asked_not_the_answering_runs(cpu_db):
    """Answered from a CPU run, `check` still lists what a non-CPU device runs; the
    CPU's own kernels only when the CPU is asked for."""
    model, x = Attention().eval(), torch.randn(2, 5, 16)
    ops = {a.aten_op: a for a in mpsprobe.check_model(model, x, db=cpu_db).ops}
    assert not set(CPU_ONLY) & set(ops)
    assert {"aten::addmm", "aten::bmm"} <= set(ops)    # the generic path
    # what the Mac runs in their place, each saying it was mapped, not traced
    assert "aten::_mps_convolution" in ops["aten::convolution"].use.on_mps
    assert "aten::_scaled_dot_product_attention_math_for_mps" in ops
    assert "aten::_lstm_mps" in ops and "mapped from the CPU's trace" in ops["aten::_lstm_mps"].use.on_mps
    # Nothing probed that kernel and a CPU run never answers for MPS: PyTorch's declarations do.
    assert ops["aten::_lstm_mps"].klass == "declared" and "declared" in ops["aten::_lstm_mps"].source
    on_cpu = {a.aten_op for a in mpsprobe.check_model(model, x, db=cpu_db, device="cpu").ops}
    assert "aten::_native_multi_head_attention" in on_cpu and "aten::_lstm_mps" not in on_cpu


def test_a_trace_for_another_gpu_names_no_mps_kernel():
    """--device cuda: the generic paths, but no MPS kernel mapped into them."""
    loaded = models.LoadedModel("attention", Attention().eval(), torch.randn(2, 5, 16))
    uses = capturing.capture(loaded, portable=True, for_mps=False).ops
    assert not any(u.on_mps for u in uses) and not any("mps" in u.aten_op for u in uses)
    assert not {u.aten_op for u in uses} & set(CPU_ONLY)


def test_a_cpu_only_kernel_in_an_op_list_says_what_a_mac_runs(cpu_db, tmp_path):
    ops = tmp_path / "ops.json"
    ops.write_text(json.dumps({"ops": ["aten::_native_multi_head_attention", "aten::add.Tensor"]}))
    report = mpsprobe.check_model(str(ops), db=cpu_db)
    notes = {a.aten_op: a.use.on_mps for a in report.ops}
    assert "a CPU-only kernel" in notes["aten::_native_multi_head_attention"]
    assert notes["aten::add.Tensor"] is None


class Blocks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


def test_rows_name_modules_with_their_class_and_strip_the_compile_wrapper():
    loaded = models.LoadedModel("blocks", torch.compile(Blocks()), torch.randn(1, 3, 6, 6))
    places = {u.aten_op: u.places for u in capturing.capture(loaded).ops}
    assert places["aten::convolution"] == ["features.0 (Conv2d)"]
    assert places["aten::relu"] == ["features.1 (ReLU)"]
    assert places["aten::addmm"] == ["head (Linear)"]
    assert places["aten::mean.dim"] == ["blocks"]
    assert not any("_orig_mod" in p for ps in places.values() for p in ps)


def test_working_allocations_share_one_line_and_a_failing_one_keeps_its_row():
    def answer(op, dtype, klass, count=1):
        return reporting.OpAnswer(capturing.OpUse(op, dtype, count), klass, None, "note", [])
    answers = [answer("aten::empty.memory_format", "uint8", "ok", 53),
               answer("aten::empty_strided", "float32", "unchecked"),
               answer("aten::empty.memory_format", "float64", "unsupported"),
               answer("aten::add.Tensor", "float32", "ok")]
    ops = capturing.ModelOps("m", "forward", "float32", [a.use for a in answers])
    report = reporting.Report(ops, {"id": "0" * 32, "device": "mps", "torch_version": "2.13"}, answers)
    lines = reporting.format_report(report)
    rows = [x for x in lines if x.startswith(("✓", "~", "✗"))]
    assert any("allocation only" in x and "aten::empty.memory_format uint8 ×53" in x
               and "aten::empty_strided float32 ×1" in x for x in rows)
    assert any(x.startswith("✗ aten::empty.memory_format") and "float64" in x for x in rows)
    assert sum("aten::add.Tensor" in x for x in rows) == 1
    assert len(rows) == 3


@pytest.mark.parametrize("torch_version, system, expected", [
    ("2.13.0+cpu", "Linux", "pip install torchvision==0.28.0 --index-url https://download.pytorch.org/whl/cpu"),
    ("2.5.1+cu124", "Linux", "pip install torchvision==0.20.1 --index-url https://download.pytorch.org/whl/cu124"),
    ("2.13.0", "Darwin", "pip install torchvision==0.28.0"),
    ("2.5.1", "Linux", "pip install torchvision==0.20.1"),
])
def test_torchvision_advice_matches_the_installed_torch_and_platform(torch_version, system, expected):
    assert torchvision_install(torch_version, system) == expected


@pytest.mark.parametrize("entry, message", [
    ({"aten_op": "aten::add.Tensor", "count": "many"}, "ops[0].count (aten::add.Tensor): expected a positive integer"),
    ({"aten_op": "aten::add.Tensor", "places": "conv"}, "ops[0].places (aten::add.Tensor): expected a list of strings"),
    ({"aten_op": "aten::add.Tensor", "dtype": 32}, "ops[0].dtype (aten::add.Tensor): expected a string"),
    ({"op": "add"}, "ops[0]: expected an object with an aten_op string"),
])
def test_a_malformed_op_list_names_the_field_and_the_type(cpu_db, tmp_path, entry, message):
    ops = tmp_path / "ops.json"
    ops.write_text(json.dumps({"ops": [entry]}))
    result = CliRunner().invoke(cli, ["check", str(ops), "--db", cpu_db])
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1, result.output


def test_a_progress_line_only_once_the_answer_is_late():
    from mpsprobe.modelcheck.progress import Progress
    said = []
    quick = Progress(said.append, after=60)
    quick.step("tracing")
    quick.done()
    assert said == []                         # answered before the delay: silent
    late = Progress(said.append, after=0.01)
    late.step("loading torch and tracing m.py on the CPU")
    late._timer.join()                        # the delay has passed
    late.step("answering 3 (op, dtype) pairs")
    late.done()
    assert [x.split(" … ")[0] for x in said] == ["check: loading torch and tracing m.py on the CPU",
                                                 "check: answering 3 (op, dtype) pairs"]
