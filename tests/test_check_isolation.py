"""`check` runs the user's model in a process of its own: a segfault, an abort, an exit or a
hang in its forward pass, its training step or at import is one line naming what happened
and where, exit 2, and nothing left running."""

import pytest
from click.testing import CliRunner

from mpsprobe.cli import cli
from processes import gone_soon

pytestmark = pytest.mark.slow   # model processes that crash and hang

MODEL = """
import ctypes, os, sys, time
import torch

class Inner(torch.nn.Module):
    def forward(self, x):
        {fault}
        return x

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.boom = Inner()

    def forward(self, x):
        return self.boom(torch.relu(self.lin(x)))

def build():
    return Model(), torch.randn(2, 3)
"""

FAULTS = {
    "segfault": ("ctypes.string_at(0)", "was killed by SIGSEGV"),
    "abort": ("os.abort()", "was killed by SIGABRT"),
    "exit": ("sys.exit(3)", "exited with status 3"),
    "hang": ("open(os.environ['SLEEPER_PID'], 'w').write(str(os.getpid())); time.sleep(600)",
             "made no progress for 10 s"),
}


def _model(folder, fault):
    path = folder / f"{fault}_model.py"
    path.write_text(MODEL.format(fault=FAULTS[fault][0]))
    return path


def _check(*args, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env, catch_exceptions=False)


@pytest.fixture(scope="module")
def store(tmp_path_factory, small_store):
    return small_store(tmp_path_factory.mktemp("iso") / "answers.db")


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_model_that_dies_in_its_forward_pass_is_one_line(fault, tmp_path, store):
    pid_file = tmp_path / "pid"
    result = _check("check", _model(tmp_path, fault), "--db", store, "--timeout", 10,
                    env={"SLEEPER_PID": str(pid_file)})
    assert result.exit_code == 2, result.output
    lines = [x for x in result.output.splitlines() if x.strip()]
    error = lines[-1]
    assert error.startswith("Error: the model ") and FAULTS[fault][1] in error, result.output
    assert "during its forward pass, in boom (Inner), after" in error and "aten calls" in error
    assert "Traceback" not in result.output
    if fault == "hang":   # killed, not left running
        assert gone_soon([int(pid_file.read_text())])


def test_a_model_that_dies_at_import_says_so(tmp_path, store):
    path = tmp_path / "dies_at_import.py"
    path.write_text("import ctypes\nctypes.string_at(0)\n")
    result = _check("check", path, "--db", store)
    assert result.exit_code == 2
    assert "was killed by SIGSEGV while its file was imported" in result.output, result.output


def test_a_training_step_that_exits_under_run_is_one_line(tmp_path):
    path = tmp_path / "exits.py"
    path.write_text(MODEL.format(fault="if torch.is_grad_enabled(): sys.exit(3)"))
    result = _check("check", path, "--run", "--train", "--device", "cpu", "--no-timing",
                    "--db", tmp_path / "run.db")
    assert result.exit_code == 2, result.output
    assert "exited with status 3 during its training step, in boom (Inner)" in result.output


def test_a_model_that_raises_keeps_its_own_line(tmp_path, store):
    path = tmp_path / "raises.py"
    path.write_text(MODEL.format(fault="raise ValueError('bad shape in my model')"))
    result = _check("check", path, "--db", store)
    assert result.exit_code == 2
    assert "the model raised during its forward pass on the CPU: ValueError: bad shape in my model" \
        in result.output

