"""The bundled knowledge base, and check's evidence ranks: measured on MPS (bare
metal) > measured in a virtual machine > declared by PyTorch (+ macOS rules) > unknown;
a test backend answers for itself, labelled; a CPU run never answers an MPS question."""
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from mpsprobe.db.query import knowledge
from mpsprobe.engine import messages
from mpsprobe.ops.declared import bundle, rules

FAKE_MPS = str(Path(__file__).parent / "fake_mps.py")

WEAK = '''import torch


class Weak(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.ones(4, dtype=torch.float64))

    def forward(self, x):
        y = x.double() * self.scale
        return torch.linalg.eigh(y @ y.T).eigenvalues.float()


def build():
    return Weak(), torch.randn(4, 4)
'''

# add is probed below; heaviside has no MPS kernel in 2.13; the bfloat16 cast needs macOS 14.
STEP = '''import torch


class Step(torch.nn.Module):
    def forward(self, x):
        return torch.heaviside(x, x) + x.to(torch.bfloat16).float()


def build():
    return Step(), torch.randn(8)
'''


def model(tmp_path, text, name):
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return path


def report(run_cli, *args):
    result = run_cli("check", *map(str, args), "--json")
    return result.exit_code, json.loads(result.output[result.output.index("{"):])


def report_lines(run_cli, *args):
    """check's report as lines, without the progress line it prints on stderr past 2 s."""
    return [x for x in run_cli(*map(str, args)).output.splitlines() if not x.startswith("check: ")]


def by_op(data):
    return {(o["aten_op"], o["dtype"]): o for o in data["ops"]}


# ---------------------------------------------------------------- the file itself

def test_the_shipped_file_is_what_the_command_builds_for_the_installed_release(run_cli, tmp_path,
                                                                                monkeypatch):
    shipped = knowledge.load()
    installed = bundle.release_of(__import__("torch").__version__)
    if installed != shipped["built_with"]["opinfo_torch"]:
        pytest.skip(f"the bundle was built with torch {shipped['built_with']['opinfo_torch']}'s "
                    f"OpInfo list; this is torch {installed}")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "kb.json.gz"
    result = run_cli("declared", "--installed", "--bundle", str(out))
    assert result.exit_code == 0, result.output
    assert not os.path.exists("mpsprobe.db")              # --bundle records nothing
    built = bundle.loads(out.read_bytes())
    assert list(built["releases"]) == [installed]
    # The wheel's declaration files are the installed torch's: the same entry, byte for byte.
    assert built["releases"][installed] == shipped["releases"][installed]
    assert {k: v for k, v in built.items() if k != "releases"} == \
        {k: v for k, v in shipped.items() if k != "releases"}
    assert bundle.dumps(built) == out.read_bytes()        # no timestamp: the same data, the same bytes


def test_the_shipped_file_covers_2_0_to_the_newest_release_within_its_budget():
    assert os.path.getsize(knowledge.DEFAULT) <= bundle.SIZE_BUDGET
    have = knowledge.releases(knowledge.load())
    assert have[0] == "2.0.1" and "2.13.0" in have and len(have) >= 14
    kb = knowledge.load()
    for release in have:             # every release's yaml was read; common_mps.py from 2.8 on
        assert knowledge.read_ok(kb, release, "native_functions.yaml"), release
        assert knowledge.read_ok(kb, release, "common_mps.py") == \
            (rules.version_tuple(release) >= (2, 8)), release


def test_each_rule_is_a_family_of_the_message_catalogue():
    for rule in (*rules.RULES, rules.GENERIC_FALLBACK):
        family, _ = messages.match_family(rule["example"])
        assert family is not None and family.name == rule["family"], rule["name"]
        if "status" in rule:
            assert family.status == rule["status"], rule["name"]


def test_rules_and_releases():
    assert rules.applying("aten::mm", "float64", None)["name"] == "no_float64"
    assert rules.applying("aten::mm", "bfloat16", None) is None          # a new enough macOS
    assert rules.applying("aten::mm", "bfloat16", "13.6")["name"] == "bfloat16_needs_macos_14"
    assert rules.applying("aten::pow.Tensor_Scalar", "int64", "13.1")["min_macos"] == "13.2"
    assert rules.applying("aten::pow.Tensor_Scalar", "int64", "13.2") is None
    kb = knowledge.load()
    assert knowledge.release_for(kb, "2.5") == "2.5.1"
    assert knowledge.release_for(kb, None, "2.13.0+cpu") == "2.13.0"
    assert knowledge.release_for(kb, None, "9.0.0") == knowledge.releases(kb)[-1]
    with pytest.raises(knowledge.KnowledgeError, match="has no torch 1.9"):
        knowledge.release_for(kb, "1.9")
    assert knowledge.kernel("2.13.0", "aten::add.Tensor") == "mps"
    assert knowledge.kernel("2.13.0", "aten::heaviside") == "none"
    assert knowledge.kernel("2.5.1", "aten::_fused_rms_norm") is None


# ---------------------------------------------------------------- declared: no database at all

def test_a_fresh_install_names_the_float64_ops_with_their_lines_and_the_fix(run_cli, tmp_path,
                                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)              # no mpsprobe.db here
    weak = model(tmp_path, WEAK, "weak_ops")
    code, data = report(run_cli, weak)
    assert code == 1 and data["answered_from"]["rank"] == knowledge.DECLARED
    found = by_op(data)
    for op in ("aten::_linalg_eigh", "aten::mm", "aten::mul.Tensor", "aten::_to_copy"):
        answer = found[op, "float64"]
        assert answer["class"] == "unsupported" and answer["lines"], op
        assert "cast to float32 before .to('mps')" in answer["note"], op
        assert answer["source"].startswith("declared by PyTorch 2.13.0"), op
        assert any("Cast to float32" in s["text"] for s in answer["suggestions"]), op
    lines = report_lines(run_cli, "check", str(weak))
    text = "\n".join(lines)
    assert lines[1] == ("MPS: declared by PyTorch 2.13.0 for macOS ≥ 14.0; no measured "
                        "MPS run (no database: mpsprobe.db does not exist)")
    assert "weak_ops.py:11" in text


def test_an_op_without_an_mps_kernel_is_refused_from_the_declaration(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, data = report(run_cli, model(tmp_path, STEP, "step"))
    heaviside = by_op(data)["aten::heaviside", "float32"]
    assert (heaviside["class"], heaviside["note"]) == ("unsupported", "no MPS kernel (declared)")
    assert any("PYTORCH_ENABLE_MPS_FALLBACK" in s["text"] for s in heaviside["suggestions"])
    assert by_op(data)["aten::add.Tensor", "float32"]["class"] == "declared"
    assert by_op(data)["aten::_to_copy", "bfloat16"]["class"] == "declared"   # macOS ≥ 14 assumed
    assert code == 1


def test_torch_and_macos_pick_the_release_and_the_macos_rules(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, data = report(run_cli, model(tmp_path, STEP, "step"), "--torch", "2.5", "--macos", "13")
    assert data["answered_from"]["declared_release"] == "2.5.1"
    assert data["answered_from"]["declared_macos"] == "13"
    cast = by_op(data)["aten::_to_copy", "bfloat16"]
    assert cast["class"] == "unsupported" and "bfloat16 tensors need macOS 14" in cast["note"]
    assert cast["source"] == "declared by PyTorch 2.5.1 for macOS 13"
    # torch 2.13's MPS backend needs macOS 14: on 13 nothing runs at all.
    code, data = report(run_cli, model(tmp_path, STEP, "step"), "--macos", "13")
    assert {o["class"] for o in data["ops"]} == {"unsupported"}
    assert "MPS backend needs macOS 14.0 or newer" in data["ops"][0]["note"]


def test_no_evidence_is_not_a_yes(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ops = tmp_path / "ops.json"
    ops.write_text(json.dumps({"ops": ["aten::add.Tensor", "aten::_fused_rms_norm"]}))
    code, data = report(run_cli, ops, "--torch", "2.5")
    unknown = by_op(data)["aten::_fused_rms_norm", "float32"]
    assert unknown["class"] == "unknown" and unknown["source"] == knowledge.NO_EVIDENCE
    assert "not in torch 2.5.1's native_functions.yaml" in unknown["note"]
    assert code == 3
    assert run_cli("check", str(ops), "--torch", "2.5", "--fail-on", "unknown").exit_code == 1
    assert run_cli("check", str(ops), "--torch", "2.5", "--fail-on", "never").exit_code == 0
    # Known at the declared level: 0; asked for measured answers only, declared is not enough.
    ops.write_text(json.dumps({"ops": ["aten::add.Tensor"]}))
    assert run_cli("check", str(ops)).exit_code == 0
    assert run_cli("check", str(ops), "--fail-on", "declared").exit_code == 1


# ---------------------------------------------------------------- measured runs

@pytest.fixture(scope="module")
def fake_db(tmp_path_factory, run_cli):
    """One fake-MPS run of add in float32 (a test backend)."""
    path = tmp_path_factory.mktemp("knowledge") / "fake.db"
    result = run_cli("run", "--db", str(path), "--backend", FAKE_MPS, "--ops", "add",
                     "--dtypes", "float32", "--samples", 1, "--passes", "forward",
                     "--no-timing", "--workers", 1, env={"FAKE_MPS": "{}"})
    assert result.exit_code == 0, result.output
    return path


def filed_as(source, tmp_path, name, **columns):
    """A copy of `source` whose run is filed with these columns (what a Mac's run records)."""
    path = tmp_path / f"{name}.db"
    shutil.copy(source, path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE runs SET " + ", ".join(f"{k} = ?" for k in columns), list(columns.values()))
    return path


MAC = {"device": "mps", "backend": None, "device_name": "Apple M2", "os_name": "macOS",
       "os_version": "15.1", "virtualized": 0}


def test_a_test_backend_answers_for_itself_labelled(run_cli, fake_db, tmp_path):
    code, data = report(run_cli, model(tmp_path, STEP, "step"), "--db", fake_db)
    assert data["answered_from"]["rank"] == knowledge.TEST_BACKEND
    assert data["answered_from"]["declared_release"] is None           # no declarations mixed in
    assert by_op(data)["aten::add.Tensor", "float32"]["class"] == "ok"
    assert by_op(data)["aten::heaviside", "float32"]["class"] == "unknown"
    text = run_cli("check", str(model(tmp_path, STEP, "step")), "--db", str(fake_db)).output
    assert "(a test backend: NOT a real device measurement)" in text


def test_a_bare_metal_run_answers_and_its_gaps_are_declared(run_cli, fake_db, tmp_path):
    mac = filed_as(fake_db, tmp_path, "mac", **MAC)
    code, data = report(run_cli, model(tmp_path, STEP, "step"), "--db", mac)
    assert data["answered_from"]["rank"] == knowledge.MEASURED
    add = by_op(data)["aten::add.Tensor", "float32"]
    assert add["class"] == "ok" and add["source"].startswith(knowledge.MEASURED)
    heaviside = by_op(data)["aten::heaviside", "float32"]
    assert heaviside["class"] == "unsupported"
    assert heaviside["source"] == "declared by PyTorch 2.13.0 for macOS 15.1"  # the run's macOS
    lines = report_lines(run_cli, "check", str(model(tmp_path, STEP, "step")), "--db", str(mac))
    assert lines[1].startswith("MPS: measured on MPS (bare metal): answers from run ")
    assert "[declared by PyTorch 2.13.0 for macOS 15.1]" in "\n".join(lines)


def test_bare_metal_outranks_a_virtual_machine(run_cli, fake_db, tmp_path):
    vm = filed_as(fake_db, tmp_path, "vm", **dict(MAC, virtualized=1))
    code, data = report(run_cli, model(tmp_path, STEP, "step"), "--db", vm)
    assert data["answered_from"]["rank"] == knowledge.MEASURED_VM
    # A second run in the same database, filed as bare metal, an older one: it answers.
    result = run_cli("run", "--db", str(vm), "--backend", FAKE_MPS, "--ops", "add", "--dtypes",
                     "float32", "--samples", 1, "--passes", "forward", "--no-timing",
                     "--workers", 1, "--fresh", env={"FAKE_MPS": "{}"})
    assert result.exit_code == 0, result.output
    with sqlite3.connect(vm) as conn:
        newest = conn.execute("SELECT id FROM runs ORDER BY started DESC LIMIT 1").fetchone()[0]
        conn.execute("UPDATE runs SET " + ", ".join(f"{k} = ?" for k in MAC) + " WHERE id = ?",
                     [*MAC.values(), newest])
    code, data = report(run_cli, model(tmp_path, STEP, "step"), "--db", vm)
    assert (data["answered_from"]["rank"], data["answered_from"]["run_id"]) == \
        (knowledge.MEASURED, newest)


def test_a_cpu_run_never_answers_an_mps_question(run_cli, fake_db, tmp_path):
    cpu = filed_as(fake_db, tmp_path, "cpu", device="cpu", backend=None, device_name="CPU")
    code, data = report(run_cli, model(tmp_path, STEP, "step"), "--db", cpu)
    assert data["answered_from"]["rank"] == knowledge.DECLARED
    assert by_op(data)["aten::add.Tensor", "float32"]["class"] == "declared"   # not the CPU's ✓
    lines = report_lines(run_cli, "check", str(model(tmp_path, STEP, "step")), "--db", str(cpu))
    assert f"no measured MPS run in {cpu}" in lines[1]
    assert lines[2].startswith("  beside it, not MPS evidence: 1 other run(s) (cpu, torch ")
    # Asked for by name, the CPU run answers, labelled as what it is.
    code, data = report(run_cli, model(tmp_path, STEP, "step"), "--db", cpu, "--device", "cpu")
    add = by_op(data)["aten::add.Tensor", "float32"]
    assert add["class"] == "ok" and add["source"].startswith("measured on cpu, not MPS")


def test_the_check_ops_page_answers_a_cpu_only_database_from_the_declarations(fake_db, tmp_path):
    import asyncio
    from datasette.app import Datasette
    cpu = filed_as(fake_db, tmp_path, "cpu_site", device="cpu", backend=None, device_name="CPU")
    plugins = Path(__file__).parent.parent / "site" / "plugins"
    ds = Datasette(files=[str(cpu)], plugins_dir=str(plugins))
    page = asyncio.run(ds.client.get("/-/check-ops?ops=aten::add.Tensor%0Aaten::heaviside"))
    assert page.status_code == 200, page.text
    assert "Answered from what PyTorch declares: declared by PyTorch 2.13.0" in page.text
    row = next(r for r in page.text.split("<tbody>")[1].split("<tr>") if "aten::heaviside" in r)
    assert "no MPS kernel (declared)" in row and "passes in" not in page.text


def test_bad_macos_and_releases_are_one_line(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    step = str(model(tmp_path, STEP, "step"))
    for args, said in ((["--macos", "sonoma"], "--macos sonoma: not a macOS version"),
                       (["--torch", "3.9"], "the knowledge base has no torch 3.9")):
        result = run_cli("check", step, *args)
        assert result.exit_code == 2 and said in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1


def test_a_run_older_than_every_release_leaves_its_gaps_unknown(run_cli, fake_db, tmp_path):
    old = filed_as(fake_db, tmp_path, "old", **dict(MAC, torch_version="1.13.1",
                                                    torch_version_key="0001.0013.0001.9"))
    code, data = report(run_cli, model(tmp_path, STEP, "step"), "--db", old)
    assert data["answered_from"]["rank"] == knowledge.MEASURED
    assert data["answered_from"]["declared_release"] is None
    assert by_op(data)["aten::heaviside", "float32"]["class"] == "unknown" and code == 3
