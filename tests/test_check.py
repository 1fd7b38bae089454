"""`mpsprobe check`: the capture, the blame rules, the report, --run, bad input, the site page."""
import asyncio
import json
import re
import sqlite3
import urllib.parse
from pathlib import Path

import pytest
from click.testing import CliRunner

from mpsprobe.modelcheck import capture as capturing, load as models, report as check
from mpsprobe.cli import cli
from mpsprobe.db import schema
from mpsprobe.db.query import blame, runs

TESTS = Path(__file__).parent
MODELS = TESTS / "models"
FAKE_MPS = str(TESTS / "fake_mps.py")
SITE_PLUGINS = TESTS.parent / "site" / "plugins"

# The fake MPS device of these tests: the ConvNet's pooling backward has no
# kernel, relu falls back to the CPU, addmm gives wrong float32 numbers.
FAKE_CONFIG = json.dumps({
    "not_implemented": ["aten::max_pool2d_with_indices_backward"],
    "fallback": ["aten::relu"],
    "wrong": {"aten::addmm": "float32"},
    "abort": [], "hang": [],
})
# The OpInfo ops behind the ConvNet's forward, the pooling backward, and `t`
# and `view`, which clear the other ops of the failing linear cases.
PROBED = ("nn.functional.relu,nn.functional.conv2d,nn.functional.max_pool2d,"
          "max_pool2d_with_indices_backward,nn.functional.linear,nn.functional.cross_entropy,"
          "nn.functional.dropout,t,view")

# What the ConvNet dispatches in one training step (torch 2.13, CPU):
CONVNET_TRAIN_OPS = {
    # forward: conv2d and max_pool2d decompose to these; flatten is a view
    "aten::convolution", "aten::relu", "aten::max_pool2d_with_indices", "aten::view",
    # dropout in training: empty_like(x).bernoulli_(1 - p), noise.div_(1 - p), x * noise
    "aten::empty_like", "aten::bernoulli_.float", "aten::div_.Scalar", "aten::mul.Tensor",
    # linear: weight.t() and addmm; cross_entropy: log_softmax then nll_loss
    "aten::t", "aten::addmm", "aten::_log_softmax", "aten::nll_loss_forward",
    # backward: the seed gradient, each node's kernels (addmm's: mm, t, sum), and
    # AccumulateGrad detaching each parameter's first gradient
    "aten::ones_like", "aten::nll_loss_backward", "aten::_log_softmax_backward_data",
    "aten::mm", "aten::sum.dim_IntList", "aten::threshold_backward",
    "aten::max_pool2d_with_indices_backward", "aten::convolution_backward", "aten::detach",
    # SGD without momentum, one add_ per parameter (foreach is CUDA-only by default)
    "aten::add_.Tensor",
}
CONVNET_FORWARD_OPS = {"aten::convolution", "aten::relu", "aten::max_pool2d_with_indices",
                       "aten::view", "aten::t", "aten::addmm"}


def invoke(*args, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env, catch_exceptions=False)


def report_json(result):
    return json.loads(result.output[result.output.index("{"):])


def by_op(data):
    return {(o["aten_op"], o["dtype"]): o for o in data["ops"]}


@pytest.fixture(scope="session")
def probe_db(tmp_path_factory):
    """A real probe run of the ConvNet's OpInfo ops on the fake MPS backend, forward
    only (tests/test_passes.py answers backward kernels from backward cases)."""
    path = tmp_path_factory.mktemp("check") / "probe.db"
    result = invoke("run", "--db", path, "--backend", FAKE_MPS, "--ops", PROBED,
                    "--dtypes", "float32", "--samples", 2, "--timeout", 10, "--no-timing",
                    "--workers", 2, "--passes", "forward", env={"FAKE_MPS": FAKE_CONFIG})
    assert result.exit_code == 0, result.output
    return str(path)


@pytest.fixture(scope="session")
def convnet_train():
    return capturing.capture(models.load(str(MODELS / "convnet.py")), train=True)


@pytest.fixture(scope="session")
def convnet_report(probe_db):
    result = invoke("check", MODELS / "convnet.py", "--train", "--db", probe_db, "--json")
    return result.exit_code, report_json(result)


# ---------------------------------------------------------------- capture

def test_convnet_training_step_captures_exactly_these_ops(convnet_train):
    assert {u.aten_op for u in convnet_train.ops} == CONVNET_TRAIN_OPS
    assert {u.dtype for u in convnet_train.ops} == {"float32"}
    counts = {u.aten_op: u.count for u in convnet_train.ops}
    assert counts["aten::add_.Tensor"] == 4       # four parameters, one SGD update each
    assert counts["aten::mm"] == 2                 # fc's input and weight gradients


def test_convnet_forward_captures_exactly_these_ops():
    captured = capturing.capture(models.load(str(MODELS / "convnet.py")), train=False)
    assert {u.aten_op for u in captured.ops} == CONVNET_FORWARD_OPS
    assert captured.mode == "forward"


def test_ops_are_placed_in_their_modules(convnet_train):
    places = {u.aten_op: u.places for u in convnet_train.ops}
    assert places["aten::convolution"] == ["conv (Conv2d)"]            # the path and the layer's class
    assert places["aten::convolution_backward"] == ["conv (Conv2d)"]   # via the autograd node
    assert places["aten::max_pool2d_with_indices_backward"] == ["pool (MaxPool2d)"]
    assert places["aten::bernoulli_.float"] == ["dropout (Dropout)"]
    assert places["aten::threshold_backward"] == ["convnet"]           # F.relu in forward()
    assert places["aten::nll_loss_forward"] == ["loss"]
    assert places["aten::add_.Tensor"] == ["optimizer"]


@pytest.mark.parametrize("name, expected", [
    ("lstm.py", {"aten::sigmoid_", "aten::tanh", "aten::addmm", "aten::sigmoid_backward",
                 "aten::tanh_backward"}),
    ("transformer.py", {"aten::native_layer_norm", "aten::bmm", "aten::_safe_softmax",
                        "aten::native_layer_norm_backward", "aten::_softmax_backward_data"}),
])
def test_lstm_and_transformer_layer_capture(name, expected):
    captured = capturing.capture(models.load(str(MODELS / name)), train=True)
    names = {u.aten_op for u in captured.ops}
    assert expected <= names
    # The portable capture takes the generic paths, not the CPU's own kernels.
    assert not any("mkldnn" in n or n.endswith("_for_cpu") for n in names)


def test_float16_casts_model_and_inputs():
    loaded = models.cast(models.load(str(MODELS / "convnet.py")), __import__("torch").float16)
    captured = capturing.capture(loaded, train=False)
    assert captured.dtype == "float16"
    assert {u.dtype for u in captured.ops} == {"float16"}


# ---------------------------------------------------------------- the answers

@pytest.mark.slow
def test_report_classifies_each_op(convnet_report, probe_db):
    code, data = convnet_report
    ops = by_op(data)
    cls = {op: o["class"] for (op, _), o in ops.items()}
    assert cls["aten::max_pool2d_with_indices_backward"] == "unsupported"   # named by the error
    assert cls["aten::relu"] == "fallback"                                   # named by the warning
    # The linear cases dispatch view, t and addmm and fail as a whole; view and t
    # pass on their own, so the mismatch is pinned on addmm alone.
    assert cls["aten::addmm"] == "mismatch"
    assert cls["aten::t"] == "ok" and cls["aten::view"] == "ok"
    assert cls["aten::convolution"] == "ok"
    assert cls["aten::max_pool2d_with_indices"] == "ok"
    assert cls["aten::_log_softmax"] == "ok" and cls["aten::nll_loss_forward"] == "ok"
    # Dispatched only by the failing pooling-backward case, whose error names
    # another op: not blamed, not vouched for.
    assert cls["aten::ones_like"] == "unknown"
    # Backward kernels the forward-only OpInfo probe never runs: unknown, never supported.
    for op in ("aten::convolution_backward", "aten::threshold_backward",
               "aten::nll_loss_backward", "aten::add_.Tensor"):
        assert cls[op] == "unknown", op
    assert data["counts"]["unsupported"] == 1 and data["counts"]["fallback"] == 1
    assert data["distinct_ops"] == len(CONVNET_TRAIN_OPS)
    assert code == 1 and data["exit_code"] == 1
    assert data["run"]["device"] == "fake-mps"
    # Never "ok" without a passing case that dispatched the op, in this dtype (for an
    # in-place op answered from its out-of-place form, one that dispatched that form).
    conn = sqlite3.connect(probe_db)
    for (op, dtype), o in ops.items():
        if o["class"] == "ok":
            if o["note"].startswith("only the out-of-place op probed"):
                op = blame.out_of_place(op)
            n = conn.execute(
                "SELECT count(*) FROM results, json_each(results.aten_ops) AS je "
                "WHERE je.value = ? AND results.dtype = ? AND results.status IN ('pass', 'fallback')",
                [op, dtype]).fetchone()[0]
            assert n > 0, op


@pytest.mark.slow
def test_text_report_and_fail_on(probe_db):
    result = invoke("check", MODELS / "convnet.py", "--train", "--db", probe_db)
    assert result.exit_code == 1
    # The report, without the progress line check prints on stderr once it takes longer than 2 s.
    lines = [x for x in result.output.splitlines() if not x.startswith("check: ")]
    # Counts that say what they count: op names, and the (op, dtype) pairs each symbol counts.
    assert lines[0] == (f"convnet forward+backward, float32 — {len(CONVNET_TRAIN_OPS)} distinct aten ops, "
                        f"answered per (op, dtype): {len(report_json(invoke('check', MODELS / 'convnet.py', '--train', '--db', probe_db, '--json'))['ops'])}")
    assert "✗ 1 unsupported (aten::max_pool2d_with_indices_backward)" in result.output
    assert "⚠ 1 fall back to CPU (aten::relu)" in result.output
    failing = next(i for i, line in enumerate(lines) if line.startswith("✗ aten::max_pool2d_with_indices_backward"))
    assert lines[failing + 1].strip() == "in pool (MaxPool2d)"   # a backward op: no line of the user's code runs it
    # Forward only: relu falls back, addmm is wrong, nothing is unsupported.
    assert invoke("check", MODELS / "convnet.py", "--db", probe_db,
                  "--fail-on", "unsupported").exit_code == 0
    assert invoke("check", MODELS / "convnet.py", "--db", probe_db,
                  "--fail-on", "fallback").exit_code == 1
    assert invoke("check", MODELS / "convnet.py", "--db", probe_db, "--fail-on", "never").exit_code == 0


def test_unplaced_failures_leave_ops_unknown(tmp_path):
    """A failing case naming no op, with two unproven ops: both stay unknown."""
    db = schema.open_db(tmp_path / "x.db")
    db["runs"].insert({"id": "r1", "started": "2025-01-01", "device": "mps", "torch_version": "2.5.0"})
    db["ops"].insert({"id": "f", "name": "f"})
    db["cases"].insert({"id": "f|float32|0", "op_id": "f", "dtype": "float32", "sample_index": 0})
    db["results"].insert({"run_id": "r1", "case_id": "f|float32|0", "op_id": "f", "dtype": "float32",
                          "status": "unsupported", "aten_ops": '["aten::a", "aten::b"]'})
    found = blame.evidence(db.conn, "r1")
    assert blame.verdict(found["aten::a", "float32"])[0] == "unknown"
    assert blame.verdict(found["aten::b", "float32"])[0] == "unknown"
    # The same probe op passing with other inputs clears nothing ...
    db["cases"].insert({"id": "f|float32|1", "op_id": "f", "dtype": "float32", "sample_index": 1})
    db["results"].insert({"run_id": "r1", "case_id": "f|float32|1", "op_id": "f", "dtype": "float32",
                          "status": "pass", "aten_ops": '["aten::a"]'})
    found = blame.evidence(db.conn, "r1")
    assert blame.verdict(found["aten::b", "float32"])[0] == "unknown"
    # ... another probe op passing with aten::a pins the failure on aten::b.
    db["ops"].insert({"id": "g", "name": "g"})
    db["cases"].insert({"id": "g|float32|0", "op_id": "g", "dtype": "float32", "sample_index": 0})
    db["results"].insert({"run_id": "r1", "case_id": "g|float32|0", "op_id": "g", "dtype": "float32",
                          "status": "pass", "aten_ops": '["aten::a"]'})
    found = blame.evidence(db.conn, "r1")
    assert blame.verdict(found["aten::a", "float32"])[0] == "ok"
    assert blame.verdict(found["aten::b", "float32"])[:2] == ("unsupported", "unsupported")
    assert blame.verdict(found.get(("aten::c", "float32"))) == ("unknown", None, "never probed")


@pytest.mark.slow
def test_run_selection(probe_db):
    conn = sqlite3.connect(probe_db)
    assert runs.pick_run(conn)["device"] == "fake-mps"
    with pytest.raises(runs.RunNotFound, match="no run matches"):
        runs.pick_run(conn, torch="2.5")
    # Another device asked for by name: only its runs answer.
    result = invoke("check", MODELS / "convnet.py", "--db", probe_db, "--device", "fake-mps",
                    "--macos", "14")
    assert result.exit_code == 2 and "no run matches" in result.output
    # An MPS question no run matches: what PyTorch declares answers, and says so.
    result = invoke("check", MODELS / "convnet.py", "--db", probe_db, "--macos", "14")
    assert result.exit_code != 2, result.output
    assert "MPS: declared by PyTorch" in result.output and "for macOS 14;" in result.output
    assert f"no measured MPS run in {probe_db}" in result.output


@pytest.mark.slow
def test_export_round_trip(probe_db, tmp_path):
    exported = tmp_path / "ops.json"
    first = invoke("check", MODELS / "convnet.py", "--train", "--db", probe_db, "--json",
                   "--export", exported)
    again = invoke("check", exported, "--db", probe_db, "--json")
    assert again.exit_code == first.exit_code == 1
    assert by_op(report_json(again)).keys() == by_op(report_json(first)).keys()
    assert [o["class"] for o in report_json(again)["ops"]] == \
        [o["class"] for o in report_json(first)["ops"]]


# ---------------------------------------------------------------- --run

def test_run_replays_model_calls_and_records_them(tmp_path):
    path = tmp_path / "model.db"
    result = invoke("check", MODELS / "convnet.py", "--train", "--run", "--backend", FAKE_MPS,
                    "--no-timing", "--db", path, "--json", env={"FAKE_MPS": FAKE_CONFIG})
    assert result.exit_code == 1
    data = report_json(result)
    cls = {o["aten_op"]: o["class"] for o in data["ops"]}
    assert cls["aten::max_pool2d_with_indices_backward"] == "unsupported"
    assert cls["aten::relu"] == "fallback"
    assert cls["aten::addmm"] == "mismatch"
    # Measured now, not unknown: the backward kernels ran on the target.
    assert cls["aten::convolution_backward"] == "ok"
    assert cls["aten::bernoulli_.float"] == "ok"      # random: judged by its distribution, as bernoulli
    conn = sqlite3.connect(path)
    run = conn.execute("SELECT device, state, options FROM runs").fetchone()
    assert run[:2] == ("fake-mps", "complete") and json.loads(run[2])["model"] == "convnet"
    sources = {r[0] for r in conn.execute("SELECT DISTINCT source FROM ops")}
    assert sources == {"model"}
    ops = {r[0] for r in conn.execute("SELECT DISTINCT op_id FROM results")}
    assert ops == CONVNET_TRAIN_OPS
    sample = conn.execute("SELECT sample FROM cases WHERE op_id = 'aten::convolution'").fetchone()[0]
    assert sample.startswith("aten::convolution(float32[2,3,8,8], float32[8,3,3,3]")
    status = dict(conn.execute(
        "SELECT aten_op, status FROM aten_op_status WHERE aten_op IN "
        "('aten::relu', 'aten::max_pool2d_with_indices_backward')").fetchall())
    assert status == {"aten::relu": "fallback", "aten::max_pool2d_with_indices_backward": "unsupported"}


@pytest.mark.slow
def test_run_reports_the_whole_step_as_the_models_speed(tmp_path, monkeypatch):
    """The speed line is one whole step timed (synchronised, warmed up, median of several),
    not the replayed calls' sum; the calls stay as its breakdown, and the report says which.
    The step runs in a process of its own (modelcheck/isolated.py)."""
    from mpsprobe.modelcheck import isolated
    asked, real = [], isolated.whole_step

    def spy(spec, **options):
        asked.append((spec, options))
        return real(spec, **options)
    monkeypatch.setattr(isolated, "whole_step", spy)
    path = tmp_path / "speed.db"
    args = ("check", MODELS / "convnet.py", "--train", "--run", "--device", "cpu", "--db", path)
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    [(spec, options)] = asked
    assert spec.endswith("convnet.py") and options["device"] == "cpu" and options["train"]
    speed = report_json(result)["model_ms"]
    assert speed["method"] == "whole step"
    assert speed["cpu"] > 0 and speed["target"] > 0 and speed["reps"] >= 3
    assert speed["calls"]["calls_timed"] > 0 and speed["calls"]["target"] != speed["target"]
    text = invoke(*args).output
    line = next(x for x in text.splitlines() if x.strip().startswith("measured:"))
    assert "the whole step timed, synchronised, median of" in line
    assert re.search(r"≈ [\d.e+-]+ ms on cpu", line), line
    assert "per call (breakdown):" in text
    # a step that cannot be timed whole: the calls' sum, saying so
    monkeypatch.setattr(isolated, "whole_step", lambda *a, **k: {"note": "error on the target: boom"})
    text = invoke(*args).output
    line = next(x for x in text.splitlines() if x.strip().startswith("measured:"))
    assert "from the calls alone" in line and "the whole step was not timed: error on the target: boom" in line


def test_a_whole_step_that_cannot_be_placed_on_the_target_is_a_note(monkeypatch):
    from mpsprobe.api import _whole_step
    from mpsprobe.modelcheck import batches, load

    def cannot_place(*a, **k):
        raise RuntimeError("Cannot convert a MPS Tensor to float64 dtype\nmore")
    monkeypatch.setattr(batches, "step_time", cannot_place)
    whole = _whole_step(load.load(str(MODELS / "convnet.py")), "cpu", None, True, "sgd", False)
    assert whole == {"note": "RuntimeError: Cannot convert a MPS Tensor to float64 dtype"}


def erfinv_model(folder):
    """A model file whose erfinv call the fake backend is told to break; exp and relu work."""
    model = folder / "erfinv_model.py"
    model.write_text(
        "import torch\n"
        "class Model(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.exp(torch.erfinv(x * 0.5)) + torch.relu(x)\n"
        "def build():\n"
        "    return Model(), torch.rand(4, 3)\n")
    return model


@pytest.mark.slow
def test_run_survives_a_call_that_aborts_the_process(tmp_path):
    """--run replays in the sweep's isolated workers: an abort costs one call (crash)."""
    model = erfinv_model(tmp_path)
    path = tmp_path / "aborts.db"
    faults = json.dumps({"not_implemented": [], "fallback": [], "wrong": {},
                         "abort": ["aten::erfinv"], "hang": []})
    result = invoke("check", model, "--run", "--backend", FAKE_MPS, "--no-timing",
                    "--db", path, "--json", env={"FAKE_MPS": faults})
    assert result.exit_code == 1, result.output
    data = report_json(result)
    answers = {o["aten_op"]: (o["class"], o["status"]) for o in data["ops"]}
    assert answers["aten::erfinv"] == ("unsupported", "crash")
    assert answers["aten::exp"][0] == "ok" and answers["aten::relu"][0] == "ok"
    conn = sqlite3.connect(path)
    statuses = dict(conn.execute("SELECT op_id, status FROM results").fetchall())
    assert statuses["aten::erfinv"] == "crash" and statuses["aten::exp"] == "pass"
    run = conn.execute("SELECT state, source FROM runs").fetchone()
    assert run == ("complete", "model")


@pytest.mark.slow
def test_run_survives_a_call_that_hangs(tmp_path, monkeypatch):
    """A replayed call that hangs costs that call (timeout), as in a sweep; the calls
    after it are answered by a fresh worker."""
    import mpsprobe
    model = erfinv_model(tmp_path)
    monkeypatch.setenv("FAKE_MPS", json.dumps({"not_implemented": [], "fallback": [], "wrong": {},
                                               "abort": [], "hang": ["aten::erfinv"]}))
    path = tmp_path / "hangs.db"
    report = mpsprobe.check_model(str(model), db=path, run=True, backend=FAKE_MPS, timing=False,
                                  timeout=5)
    answers = {o["aten_op"]: (o["class"], o["status"]) for o in report.to_json()["ops"]}
    assert answers["aten::erfinv"] == ("unsupported", "timeout")
    assert answers["aten::exp"][0] == "ok" and answers["aten::relu"][0] == "ok"
    conn = sqlite3.connect(path)
    statuses = dict(conn.execute("SELECT op_id, status FROM results").fetchall())
    assert statuses["aten::erfinv"] == "timeout" and statuses["aten::exp"] == "pass"
    assert conn.execute("SELECT state FROM runs").fetchone() == ("complete",)


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("source, message", [
    ("x = 1\n", "defines no build() function"),
    ("def build():\n    raise ValueError('no weights here')\n", "build() raised ValueError: no weights here"),
    ("import torch\ndef build():\n    return torch.nn.Linear(3, 2), torch.randn(4, 5)\n",
     "the model raised during its forward pass on the CPU: RuntimeError"),
])
@pytest.mark.slow
def test_bad_model_files(probe_db, tmp_path, source, message):
    model = tmp_path / "bad.py"
    model.write_text(source)
    result = invoke("check", model, "--db", probe_db)
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.slow
def test_bad_sources_and_databases(probe_db, tmp_path):
    result = invoke("check", "torchvision:resnet5000", "--input", "1,3,32,32", "--db", probe_db)
    assert result.exit_code == 2
    assert "torchvision is not installed" in result.output or "no model named" in result.output
    assert "not found" in invoke("check", tmp_path / "nope.py", "--db", probe_db).output
    empty = tmp_path / "empty.db"
    schema.open_db(empty)
    result = invoke("check", MODELS / "convnet.py", "--db", empty, "--device", "cpu")
    assert result.exit_code == 2 and "no probe results" in result.output
    # An MPS question of an empty database: PyTorch's declarations answer, and say so.
    result = invoke("check", MODELS / "convnet.py", "--db", empty)
    assert result.exit_code == 0 and f"no measured MPS run in {empty}" in result.output
    result = invoke("check", MODELS / "convnet.py", "--db", tmp_path / "missing.db")
    assert result.exit_code == 2 and "does not exist" in result.output
    assert invoke("check", MODELS / "convnet.py", "--input", "a,b", "--db", probe_db).exit_code == 2


# ---------------------------------------------------------------- the site page

@pytest.mark.slow
def test_site_check_ops_page(probe_db):
    from datasette.app import Datasette

    async def fetch():
        ds = Datasette([probe_db], plugins_dir=str(SITE_PLUGINS))
        await ds.invoke_startup()
        blank = await ds.client.get("/-/check-ops")
        query = urllib.parse.urlencode({"ops": "aten::relu\naten::convolution\naten::mm"})
        answered = await ds.client.get("/-/check-ops?" + query)
        bad = await ds.client.get("/-/check-ops?" + urllib.parse.urlencode({"ops": '{"x": 1}'}))
        return blank, answered, bad
    blank, answered, bad = asyncio.run(fetch())
    assert blank.status_code == 200 and "<textarea" in blank.text
    assert answered.status_code == 200
    rows = answered.text.split("<tr>")
    assert any("aten::relu" in r and "fall back" in r.lower() for r in rows)
    assert any("aten::convolution" in r and "passes in" in r for r in rows)
    assert any("aten::mm" in r and "never probed" in r for r in rows)
    assert "expected {&#34;ops&#34;" in bad.text or "expected {" in bad.text
