"""Declared vs measured: the three finding kinds, and the agreement rate."""
import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from mpsprobe.cli import cli

FAKE_MPS = str(Path(__file__).parent / "fake_mps.py")

# exp is declared to work in float32, but the fake device gets it wrong;
# heaviside is declared unimplemented, yet the fake device (the CPU) runs it;
# kron has no MPS kernel (CompositeImplicitAutograd), yet runs natively.
FAKE_CONFIG = {"not_implemented": [], "fallback": [], "abort": [], "hang": [],
               "wrong": {"aten::exp": "float32"}, "refuse_float64": True}


def invoke(*args, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env, catch_exceptions=False)


@pytest.fixture(scope="module")
def fake_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("findings") / "fake.db"
    result = invoke("run", "--db", db, "--backend", FAKE_MPS, "--ops", "exp,heaviside,kron",
                    "--dtypes", "float32", "--samples", 2, "--timeout", 20, "--no-timing",
                    "--workers", 1, env={"FAKE_MPS": json.dumps(FAKE_CONFIG)})
    assert result.exit_code == 0, result.output
    result = invoke("declared", "--db", db)
    assert result.exit_code == 0, result.output
    return db


@pytest.fixture(scope="module")
def cpu_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("findings") / "cpu.db"
    result = invoke("run", "--db", db, "--device", "cpu", "--ops", "dot",
                    "--dtypes", "float32,int32", "--samples", 1, "--no-timing", "--workers", 1)
    assert result.exit_code == 0, result.output
    result = invoke("declared", "--db", db, "--opinfo-cuda")
    assert result.exit_code == 0, result.output
    return db


@pytest.mark.slow
def test_three_kinds_against_a_fake_mps_run(fake_db):
    result = invoke("findings", "--db", fake_db, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    kinds = {(f["kind"], f["op_id"], f["dtype"]) for f in report["findings"]}
    assert kinds == {("undeclared_failure", "exp", "float32"),
                     ("stale_xfail", "heaviside", "float32"),
                     ("composite_passes", "kron", "float32")}
    by_kind = {f["kind"]: f for f in report["findings"]}
    assert by_kind["undeclared_failure"]["measured"] == "mismatch"
    assert by_kind["stale_xfail"]["source"] == "UNIMPLEMENTED_XFAILLIST"
    assert "aten::kron has no MPS kernel (implicit)" in by_kind["composite_passes"]["explanation"]
    # heaviside: declared unsupported, measured pass: the only support disagreement.
    agreement = report["agreement"]
    assert [(d["op_id"], d["dtype"]) for d in agreement["disagreements"]] == [("heaviside", "float32")]
    assert agreement["agree"] == 2 and agreement["rate"] == pytest.approx(2 / 3)


@pytest.mark.slow
def test_text_report_has_one_line_per_finding(fake_db):
    result = invoke("findings", "--db", fake_db)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(l.startswith("  heaviside float32: declared unsupported by UNIMPLEMENTED_XFAILLIST")
               for l in lines)
    assert any(l.startswith("  exp float32: declared to work") and "mismatch" in l for l in lines)
    assert "agreement with the declaration: 66.7%" in result.output


def test_cuda_declaration_agreement_on_a_cuda_run(cpu_db, tmp_path):
    """The comparison with OpInfo's CUDA table, on the CPU run's rows filed as a CUDA run's
    (no GPU here: only the arithmetic of the agreement is checked, not CUDA)."""
    from torch.testing._internal.common_methods_invocations import op_db
    import shutil
    import torch
    dot = next(o for o in op_db if o.name == "dot")
    cuda = dot.supported_dtypes("cuda")
    as_cuda = tmp_path / "as_cuda.db"
    shutil.copy(cpu_db, as_cuda)
    with sqlite3.connect(as_cuda) as conn:
        conn.execute("UPDATE runs SET device = 'cuda'")
    result = invoke("findings", "--db", as_cuda, "--json")
    assert result.exit_code == 0, result.output
    agreement = json.loads(result.output)["agreement"]
    conn = sqlite3.connect(cpu_db)
    measured = dict(conn.execute("SELECT dtype, status FROM op_dtype_status WHERE op_id = 'dot'"))
    expected_agree = sum((status == "pass") == (getattr(torch, dtype) in cuda)
                         for dtype, status in measured.items())
    assert agreement["agree"] == expected_agree
    assert agreement["agree"] + agreement["disagree"] == len(measured)
    assert {d["dtype"] for d in agreement["disagreements"]} == {
        dt for dt, st in measured.items() if (st == "pass") != (getattr(torch, dt) in cuda)}


def test_a_cpu_run_is_compared_with_no_device(cpu_db):
    """Like with like: a CPU run is no evidence about MPS or CUDA, whatever is asked."""
    for against in ("mps", "cuda"):
        result = invoke("findings", "--db", cpu_db, "--against", against)
        assert result.exit_code == 2, result.output
        assert f"measured on cpu: it is no evidence about {against.upper()}" in result.output
        assert len(result.output.strip().splitlines()) == 1


def test_the_site_lists_nothing_against_mps_for_a_cpu_run(cpu_db):
    import asyncio
    from datasette.app import Datasette
    plugins = Path(__file__).parent.parent / "site" / "plugins"
    ds = Datasette(files=[str(cpu_db)], plugins_dir=str(plugins))
    for query in ("", "?against=mps"):
        page = asyncio.run(ds.client.get(f"/-/findings{query}"))
        assert page.status_code == 200, page.text
        assert "Declared failing, yet passes" not in page.text and "<table" not in page.text
        assert "measured on cpu" in page.text and "--" not in page.text.split("mp-empty")[1][:400]


def test_mps_declarations_come_from_the_knowledge_base_when_none_are_recorded(tmp_path):
    db = tmp_path / "fake_only.db"
    result = invoke("run", "--db", db, "--backend", FAKE_MPS, "--ops", "heaviside",
                    "--dtypes", "float32", "--samples", 1, "--timeout", 20, "--no-timing",
                    "--workers", 1, "--passes", "forward", env={"FAKE_MPS": json.dumps(FAKE_CONFIG)})
    assert result.exit_code == 0, result.output
    report = json.loads(invoke("findings", "--db", db, "--json").output)
    assert report["declared"]["from"] == "bundled knowledge base"
    assert report["declared"]["torch_version"] == "2.13.0"
    # heaviside has no MPS kernel in 2.13 (common_mps: UNIMPLEMENTED), yet the fake device runs it.
    assert [(f["op_id"], f["kind"]) for f in report["findings"]] == [("heaviside", "stale_xfail")]


def test_errors_are_one_line(cpu_db, tmp_path):
    result = invoke("findings", "--db", cpu_db)            # a CPU run declares nothing
    assert result.exit_code == 2 and "declares nothing" in result.output
    result = invoke("findings", "--db", cpu_db, "--run", "nope")
    assert result.exit_code == 2 and "no run 'nope'" in result.output
    empty = tmp_path / "e.db"
    assert invoke("declared", "--db", empty, "--no-installed").exit_code == 2
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_site_page_shows_the_same_findings(fake_db):
    import asyncio
    import re
    from datasette.app import Datasette
    plugins = Path(__file__).parent.parent / "site" / "plugins"
    ds = Datasette(files=[str(fake_db)], plugins_dir=str(plugins))
    page = asyncio.run(ds.client.get("/-/findings"))
    assert page.status_code == 200, page.text
    report = json.loads(invoke("findings", "--db", fake_db, "--json").output)
    for title, kind in (("Declared failing, yet passes", "stale_xfail"),
                        ("Declared fine, yet fails", "undeclared_failure"),
                        ("No MPS kernel, yet passes natively", "composite_passes")):
        shown = re.search(rf"<h2>{title} \((\d+)\)</h2>", page.text)
        assert shown and int(shown.group(1)) == report["counts"][kind], title
    assert f"<strong>{report['agreement']['rate']:.1%}</strong>" in page.text
    assert ">heaviside<" in page.text and ">kron<" in page.text
