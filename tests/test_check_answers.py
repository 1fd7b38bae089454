"""`mpsprobe check` answers a porter can act on: the names the model dispatches, the
variant it runs, the line of its code, what to do instead, how sure a `?` is.

One probe run over the fake MPS backend set to refuse float64 (as MPS does, while
inputs move) and 5-D convolutions (in MPS's words for macOS below 13.2); four
models of the kinds a porter brings (tests/models): ResNet-like, embedding + GRU,
a ViT block, and a 3-D convolution + FFT + grid_sample model with a float64 buffer.
"""
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
import torch

from mpsprobe.db import schema
from mpsprobe.db.query import runs
from mpsprobe.modelcheck import capture as capturing, load as models, replay
from mpsprobe.modelcheck.capture import OpUse
from mpsprobe.modelcheck.matching import Evidence
from mpsprobe.vocabulary import NEVER_PROBED, OTHER_DTYPES, RELATED_ONLY

TESTS = Path(__file__).parent
MODELS = TESTS / "models"
FAKE_MPS = str(TESTS / "fake_mps.py")
CONV3D_TEXT = "Conv3D is only supported on MPS for MacOS_13_2 or newer"   # Convolution.mm
FAKE_CONFIG = json.dumps({"refuse_rank": {"aten::convolution": [5, CONV3D_TEXT]},
                          "abort": [], "hang": []})
PROBED = ("nn.functional.conv2d,nn.functional.conv3d,add,mul,sum,fft.rfft2,fft.irfft2,"
          "nn.functional.grid_sample,linalg.eigh")
FOUR = ("resnet_like.py", "gru_classifier.py", "vit_block.py", "volume_fft.py")
FAILING = ("unsupported", "mismatch", "fallback")


def report(run_cli, *args):
    result = run_cli("check", *args, "--json")
    text = result.output
    return result.exit_code, json.loads(text[text.index("{"):])


def answers(data):
    return {(o["aten_op"], o["dtype"]): o for o in data["ops"]}


@pytest.fixture(scope="module")
def probe_db(tmp_path_factory, run_cli):
    path = tmp_path_factory.mktemp("answers") / "probe.db"
    result = run_cli("run", "--db", path, "--backend", FAKE_MPS, "--ops", PROBED,
                     "--dtypes", "float32,float64", "--samples", 1, "--passes", "forward",
                     "--no-timing", "--workers", 1, env={"FAKE_MPS": FAKE_CONFIG})
    assert result.exit_code == 0, result.output
    return str(path)


@pytest.fixture(scope="module")
def checked(probe_db, run_cli):
    """{model file: (exit code, report JSON)} for the four models."""
    return {name: report(run_cli, MODELS / name, "--db", probe_db) for name in FOUR}


# ---------------------------------------------------------------- blame by the op dispatched

@pytest.mark.slow
def test_cases_refused_at_transfer_record_the_ops_the_cpu_dispatched(probe_db, rows):
    refused = rows(probe_db, "SELECT op_id, aten_ops, reason FROM results WHERE dtype = 'float64'")
    assert refused and all(r["reason"].startswith("inputs cannot be moved") for r in refused)
    names = {r["op_id"]: json.loads(r["aten_ops"]) for r in refused}
    # Overload names, as a model dispatches them: not the OpInfo's aten_name.
    assert names["add"] == ["aten::add.Tensor"]
    assert "aten::_linalg_eigh" in names["linalg.eigh"]
    assert "aten::_fft_r2c" in names["fft.rfft2"]


@pytest.mark.slow
def test_a_float64_buffer_is_refused_under_the_names_the_model_dispatches(checked):
    code, data = checked["volume_fft.py"]
    found = answers(data)
    for op in ("aten::mul.Tensor", "aten::_to_copy", "aten::sum.dim_IntList"):
        assert found[op, "float64"]["class"] == "unsupported", found[op, "float64"]
    # mul.Tensor and _to_copy were dispatched by refused cases; sum.dim_IntList never was,
    # but the run refuses float64 tensors outright.
    assert "refused while moving their inputs" in found["aten::mul.Tensor", "float64"]["note"]
    assert "refuses float64 tensors" in found["aten::sum.dim_IntList", "float64"]["note"]
    assert code == 1 and data["exit_code"] == 1


def test_a_conversion_is_filed_under_the_dtype_it_makes():
    class Doubles(torch.nn.Module):
        def forward(self, x):
            return x.double().sum()
    captured = capturing.capture(models.LoadedModel("doubles", Doubles(), torch.randn(3)))
    filed = {(u.aten_op, u.dtype) for u in captured.ops}
    assert {("aten::_to_copy", "float32"), ("aten::_to_copy", "float64")} <= filed


# ---------------------------------------------------------------- the variant the model runs

@pytest.mark.parametrize("name", ["resnet_like.py", "vit_block.py"])
@pytest.mark.slow
def test_2d_convolutions_are_not_blamed_for_a_5d_failure(checked, name):
    code, data = checked[name]
    conv = answers(data)["aten::convolution", "float32"]
    assert conv["class"] == "ok" and conv["variants"] == ["4-D transposed=False"]
    assert "fails only with inputs the model does not use (5-D" in conv["note"]
    # Nothing fails; the ops the run never probed keep it from a yes (exit 3), not from 0 to 1.
    assert (code, data["counts"]["unsupported"]) == (3, 0) and data["counts"]["unknown"]


@pytest.mark.slow
def test_the_5d_convolution_is_blamed_with_its_macos_version(checked):
    conv = answers(checked["volume_fft.py"][1])["aten::convolution", "float32"]
    assert conv["class"] == "unsupported" and conv["message"] == CONV3D_TEXT
    assert any("Upgrade macOS to 13.2" in s["text"] for s in conv["suggestions"])


@pytest.mark.slow
def test_the_macos_advice_says_which_macos_answered_and_which_one_asks(probe_db, run_cli, tmp_path, monkeypatch):
    """'Conv3D needs macOS 13.2; you have 12.7': the refusal was measured on one macOS, the Mac asking
    may run another, and a newer one than the kernel needs is told to measure, not to upgrade."""
    from mpsprobe.modelcheck import report as reporting
    mac = tmp_path / "mac.db"
    shutil.copy(probe_db, mac)
    conn = sqlite3.connect(mac)
    conn.execute("UPDATE runs SET os_name = 'macOS', os_version = '13.1'")
    conn.commit()
    conn.close()

    def advice(have):
        monkeypatch.setattr(reporting, "this_macos", lambda: have)
        conv = answers(report(run_cli, MODELS / "volume_fft.py", "--db", mac)[1])["aten::convolution", "float32"]
        return [s["text"] for s in conv["suggestions"]]
    assert "Upgrade macOS to 13.2 (measured on macOS 13.1): the MPS kernel needs it." in advice(None)
    assert "Upgrade macOS to 13.2 (you have 12.7): the MPS kernel needs it." in advice("12.7")
    newer = advice("15.1")
    assert not any(text.startswith("Upgrade macOS") for text in newer)
    assert any(text.startswith("This kernel needs macOS 13.2 and you have 15.1: the refusal was measured on "
                               "macOS 13.1; measure on this Mac") for text in newer)


@pytest.mark.slow
def test_evidence_from_other_shapes_is_said(checked):
    r2c = answers(checked["volume_fft.py"][1])["aten::_fft_r2c", "float32"]
    assert r2c["class"] == "ok"
    assert "evidence only from other shapes (probed: 3-D" in r2c["note"]
    assert "the model's: 5-D" in r2c["note"]


def test_variants_that_disagree_leave_an_unprobed_one_unknown(tmp_path):
    """2-D passes, 5-D fails: a 3-D use is neither."""
    db = schema.open_db(tmp_path / "x.db")
    db["runs"].insert({"id": "r1", "started": "2025-01-01", "device": "mps", "torch_version": "2.5.0"})
    for op, variant, status in (("conv2d", "4-D", "pass"), ("conv3d", "5-D", "unsupported")):
        db["ops"].insert({"id": op, "name": op})
        db["cases"].insert({"id": f"{op}|float32|0", "op_id": op, "dtype": "float32", "sample_index": 0})
        db["results"].insert({"run_id": "r1", "case_id": f"{op}|float32|0", "op_id": op,
                              "dtype": "float32", "status": status, "aten_op":
                              "aten::convolution" if status != "pass" else None,
                              "aten_ops": '["aten::convolution"]',
                              "aten_variants": json.dumps({"aten::convolution": [variant]})})
    evidence = Evidence(db.conn, "r1")

    def klass(variant):
        return evidence.match(OpUse("aten::convolution", "float32", 1, variants=[variant])).klass
    assert klass("4-D") == "ok" and klass("5-D") == "unsupported"
    assert klass("3-D") == "unknown"
    assert "depends on the shape" in evidence.match(
        OpUse("aten::convolution", "float32", 1, variants=["3-D"])).note


# ---------------------------------------------------------------- --run

@pytest.mark.filterwarnings("ignore::UserWarning")    # beta APIs among the in-place ops
@pytest.mark.slow
def test_in_place_float64_calls_replayed_on_the_cpu_match_the_cpu():
    """Every OpInfo in-place op in float64, replayed as `check --run` replays a call:
    the reference never reads what the call wrote, so the CPU matches itself."""
    from mpsprobe.engine.aten import AtenCapture
    from mpsprobe.engine.devices import Target
    from mpsprobe.ops.opinfo import load_op_db
    target, replayed, wrong = Target("cpu"), set(), []
    for info in load_op_db():
        if info.inplace_variant is None or torch.float64 not in info.supported_dtypes("cpu"):
            continue
        try:
            sample = next(iter(info.sample_inputs("cpu", torch.float64)))
            recorder = replay.CallRecorder()
            with AtenCapture(on_call=recorder):
                info.inplace_variant(sample.input.clone(), *sample.args, **sample.kwargs)
        except Exception:
            continue      # a sample the in-place variant refuses (a dtype it cannot write)
        for call in recorder.list():
            if call.dtype == "float64" and call.name.split("::")[1].split(".")[0].endswith("_"):
                replayed.add(call.name)
                result = replay.run_call(call, target, timing=False)
                if result["status"] not in ("pass", "skip"):
                    wrong.append((call.name, result["status"], result.get("reason")))
    assert len(replayed) > 50 and "aten::mul_.Tensor" in replayed
    assert wrong == []


@pytest.mark.slow
def test_run_of_in_place_float64_ops_on_the_cpu(run_cli, tmp_path):
    model = tmp_path / "scales.py"
    model.write_text(
        "import torch\n"
        "class Scales(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.register_buffer('scale', torch.linspace(1, 2, 4, dtype=torch.float64))\n"
        "    def forward(self, x):\n"
        "        y = x.double()\n"
        "        y.mul_(self.scale)\n"
        "        y.add_(1.0).div_(3.0)\n"
        "        return y.float()\n"
        "def build():\n"
        "    return Scales(), torch.randn(3, 4)\n")
    code, data = report(run_cli, model, "--run", "--device", "cpu", "--no-timing",
                        "--db", tmp_path / "cpu.db")
    found = answers(data)
    assert found["aten::mul_.Tensor", "float64"]["class"] == "ok"
    assert {o["class"] for o in data["ops"]} == {"ok"} and code == 0


@pytest.mark.slow
def test_the_default_answer_is_never_a_replay(probe_db, run_cli, tmp_path):
    path = tmp_path / "both.db"
    shutil.copy(probe_db, path)
    measured = report(run_cli, MODELS / "resnet_like.py", "--run", "--backend", FAKE_MPS,
                      "--no-timing", "--db", path)[1]["run"]["id"]
    conn = sqlite3.connect(path)
    sweep = conn.execute("SELECT id FROM runs WHERE source = 'opinfo'").fetchone()[0]
    assert runs.pick_run(conn)["id"] == sweep
    assert report(run_cli, MODELS / "gru_classifier.py", "--db", path)[1]["run"]["id"] == sweep
    assert report(run_cli, MODELS / "gru_classifier.py", "--db", path,
                  "--run-id", measured[:12])[1]["run"]["id"] == measured


# ---------------------------------------------------------------- where in the user's code

def test_places_are_split_by_dtype_and_lines_are_the_users(tmp_path):
    model = tmp_path / "mixed.py"
    model.write_text(
        "import torch\n"
        "class Single(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x + 1\n"
        "class Double(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x.double() + 1\n"
        "class Mixed(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.single, self.wide = Single(), Double()\n"
        "    def forward(self, x):\n"
        "        y = torch.tanh(x)\n"
        "        return self.single(y), self.wide(y)\n"
        "def build():\n"
        "    return Mixed(), torch.randn(2)\n")
    captured = {(u.aten_op, u.dtype): u for u in capturing.capture(models.load(str(model))).ops}
    assert captured["aten::add.Tensor", "float32"].places == ["single (Single)"]
    assert captured["aten::add.Tensor", "float64"].places == ["wide (Double)"]
    # Inline code in forward: the model's own place, and its line.
    assert captured["aten::tanh", "float32"].places == ["mixed"]
    assert [line.rsplit(":", 1)[1] for line in captured["aten::tanh", "float32"].lines] == ["13"]
    assert captured["aten::add.Tensor", "float64"].lines[0].endswith("mixed.py:7")


@pytest.mark.slow
def test_every_failing_op_has_its_line_and_a_suggestion(checked):
    failing = [(name, o) for name, (_, data) in checked.items() for o in data["ops"]
               if o["class"] in FAILING]
    assert {o["aten_op"] for _, o in failing} >= {"aten::convolution", "aten::mul.Tensor",
                                                   "aten::_to_copy", "aten::sum.dim_IntList"}
    for name, o in failing:
        assert o["lines"] and all(Path(line.rsplit(":", 1)[0]).resolve() == (MODELS / name).resolve()
                                  for line in o["lines"]), o
        assert o["suggestions"] and all(s["source"].startswith("https://") for s in o["suggestions"])


@pytest.mark.slow
def test_text_report_shows_lines_and_suggestions(probe_db, run_cli):
    result = run_cli("check", MODELS / "volume_fft.py", "--db", probe_db)
    lines = result.output.splitlines()
    conv = next(i for i, line in enumerate(lines) if line.startswith("✗ aten::convolution"))
    place, _, line = lines[conv + 1].strip().partition("   at ")
    assert place == "in conv (Conv3d)" and line.endswith("volume_fft.py:16")   # the 3-D convolution's line
    assert any(line.strip().startswith("→ Upgrade macOS to 13.2") for line in lines[conv:conv + 5])
    assert result.exit_code == 1


@pytest.mark.slow
def test_the_summary_names_each_op_once(probe_db, run_cli, tmp_path):
    listed = tmp_path / "ops.json"
    listed.write_text(json.dumps({"ops": [{"aten_op": "aten::foo", "dtype": "float32"},
                                          {"aten_op": "aten::foo", "dtype": "float16"}]}))
    result = run_cli("check", listed, "--db", probe_db)
    assert "? 2 never probed (aten::foo)" in result.output


# ---------------------------------------------------------------- --dtype float16

@pytest.mark.slow
def test_float16_widens_what_the_cpu_cannot_run_and_keeps_float64(probe_db, run_cli):
    code, data = report(run_cli, MODELS / "volume_fft.py", "--db", probe_db, "--dtype", "float16")
    found = answers(data)
    assert found["aten::_fft_r2c", "float16"]["cpu_widened"] is True      # no CPU float16 FFT
    assert found["aten::convolution", "float16"]["cpu_widened"] is False
    assert data["kept_float64"] == ["buffer scale"]
    assert found["aten::mul.Tensor", "float64"]["class"] == "unsupported"
    assert code == 1
    text = run_cli("check", MODELS / "volume_fft.py", "--db", probe_db, "--dtype", "float16").output
    assert "the CPU has no float16 kernel for it" in text


# ---------------------------------------------------------------- how sure a `?` is

@pytest.mark.slow
def test_unknowns_say_how_much_is_known(checked, probe_db, run_cli, tmp_path):
    found = answers(checked["volume_fft.py"][1])
    assert found["aten::grid_sampler_3d", "float32"]["confidence"] == NEVER_PROBED
    # irfft2's float32 cases ran _fft_c2r on complex64: the model's complex64 call is answered.
    assert found["aten::_fft_c2r", "complex64"]["class"] == "ok"
    listed = tmp_path / "ops.json"
    listed.write_text(json.dumps({"ops": [{"aten_op": "aten::add_.Scalar", "dtype": "float32"},
                                          {"aten_op": "aten::add.Tensor", "dtype": "int64"}]}))
    listed_answers = answers(report(run_cli, listed, "--db", probe_db)[1])
    related = listed_answers["aten::add_.Scalar", "float32"]
    elsewhere = listed_answers["aten::add.Tensor", "int64"]
    assert related["class"] == "unknown" and related["confidence"] == RELATED_ONLY
    assert "aten::add.Tensor" in related["note"]
    assert elsewhere["class"] == "unknown" and elsewhere["confidence"] == OTHER_DTYPES
    assert elsewhere["note"] == "never probed in int64 (probed in float32, float64)"


def test_a_refusal_naming_another_dtype_condemns_nothing(tmp_path):
    """A float32 case refused for a float64 side input says nothing of float32 kernels."""
    db = schema.open_db(tmp_path / "x.db")
    db["runs"].insert({"id": "r1", "started": "2025-01-01", "device": "mps", "torch_version": "2.5.0"})
    db["ops"].insert({"id": "f", "name": "f"})
    for dtype, named in (("float32", "float64"), ("float64", "float64")):
        db["cases"].insert({"id": f"f|{dtype}|0", "op_id": "f", "dtype": dtype, "sample_index": 0})
        db["results"].insert({"run_id": "r1", "case_id": f"f|{dtype}|0", "op_id": "f", "dtype": dtype,
                              "status": "unsupported", "reason_kind": "dtype",
                              "reason": "inputs cannot be moved to the target: float64 is refused",
                              "notes": json.dumps({"named_dtype": named}),
                              "aten_ops": '["aten::a", "aten::b"]'})
    evidence = Evidence(db.conn, "r1")
    assert evidence.match(OpUse("aten::a", "float64", 1)).klass == "unsupported"
    assert evidence.match(OpUse("aten::c", "float64", 1)).klass == "unsupported"   # float64 refused
    assert evidence.match(OpUse("aten::a", "float32", 1)).klass == "unknown"
    assert "float32" not in evidence.refused


@pytest.mark.slow
def test_a_recorded_batch_sweep_gives_the_speed_line(probe_db, run_cli, tmp_path):
    path = tmp_path / "speed.db"
    shutil.copy(probe_db, path)
    swept = report(run_cli, MODELS / "resnet_like.py", "--run", "--backend", FAKE_MPS, "--no-timing",
                   "--batch", "1,2", "--db", path)[1]
    speed = report(run_cli, MODELS / "resnet_like.py", "--db", path)[1]["speed"]
    assert speed["run_id"] == swept["run"]["id"] and speed["device"] == "fake-mps"
    assert speed["batches"] == [1, 2] and speed["best_batch"] in (1, 2)
    text = run_cli("check", MODELS / "resnet_like.py", "--db", path).output
    assert any(line.startswith("  speed: fake-mps beats the CPU ") for line in text.splitlines())
    # Another model, or the training step, has no sweep: no line.
    assert "speed" not in report(run_cli, MODELS / "resnet_like.py", "--train", "--db", path)[1]
