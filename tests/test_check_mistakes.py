"""`mpsprobe check`: each user mistake is one line and exit 2, found before the heavy work;
a TorchScript model is checked; `--run` says which calls it could not replay."""
import os

import pytest



@pytest.fixture
def store(tmp_path, small_store):
    return small_store(tmp_path / "probe.db", n=2)


def one_line_error(result, needle):
    """Exit 2 and one line saying what is wrong; before it at most the progress line
    `check` prints once it takes longer than 2 s (loading torch in the model's process)."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert all(line.startswith("check: ") for line in lines[:-1]), result.output
    assert needle in lines[-1], result.output


def model_file(tmp_path, body, name="model.py"):
    path = tmp_path / name
    path.write_text("import torch\n" + body)
    return path


def test_a_huge_input_is_refused_before_it_is_allocated(run_cli, store):
    model = str(__import__("pathlib").Path(__file__).parent / "models" / "convnet.py")
    one_line_error(run_cli("check", model, "--input", "100000,100000,100000", "--db", store),
                   "elements")


def test_train_without_parameters(run_cli, store, tmp_path):
    model = model_file(tmp_path, "def build():\n    return torch.nn.ReLU(), torch.randn(2, 3)\n")
    one_line_error(run_cli("check", model, "--train", "--db", store), "no trainable parameters")


def test_a_model_file_must_be_python(run_cli, store, tmp_path):
    model = model_file(tmp_path, "def build():\n    pass\n", name="model.txt")
    one_line_error(run_cli("check", model, "--db", store), ".py file")


def test_export_into_a_missing_directory_is_refused_before_capture(run_cli, store, tmp_path):
    marker = tmp_path / "built"
    model = model_file(tmp_path, f"def build():\n    open({str(marker)!r}, 'w').close()\n"
                                 "    return torch.nn.Linear(3, 2), torch.randn(2, 3)\n")
    one_line_error(run_cli("check", model, "--db", store, "--export", tmp_path / "no" / "x.json"),
                   "does not exist")
    assert not marker.exists()   # refused before the model was even loaded


def test_torchvision_failing_on_import(run_cli, store, tmp_path, monkeypatch):
    fake = tmp_path / "site" / "torchvision"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise RuntimeError('operator torchvision::nms does not exist')\n")
    # The model is loaded in a process of its own: it finds the broken torchvision on its path.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path / "site"),
                                                                   os.environ.get("PYTHONPATH")])))
    one_line_error(run_cli("check", "torchvision:resnet18", "--input", "1,3,8,8", "--db", store),
                   "torchvision could not be imported (RuntimeError")


def test_a_torchscript_model_is_checked(run_cli, store, tmp_path):
    model = model_file(tmp_path, "def build():\n    m = torch.nn.Sequential(torch.nn.Linear(4, 3), "
                                 "torch.nn.ReLU())\n    return torch.jit.script(m), torch.randn(2, 4)\n")
    result = run_cli("check", model, "--db", store)
    assert result.exit_code in (0, 1), result.output
    assert "aten::relu" in result.output and "aten::addmm" in result.output


SPARSE = """
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 2))
    def forward(self, x):
        return torch.sparse.mm(x.to_sparse(), self.w).relu()
def build():
    return Model(), torch.randn(2, 3)
"""


@pytest.mark.slow
def test_run_lists_the_calls_it_cannot_replay(run_cli, tmp_path):
    model = model_file(tmp_path, SPARSE)
    result = run_cli("check", model, "--run", "--device", "cpu", "--no-timing",
                     "--db", tmp_path / "replay.db")
    # The call not replayed rests on no evidence: not a yes (exit 3), not a failure.
    assert result.exit_code == 3, result.output
    skipped = [line for line in result.output.splitlines() if line.startswith("not replayed: ")]
    assert skipped and any("strided" in line for line in skipped), result.output
