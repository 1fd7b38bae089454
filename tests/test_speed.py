"""Speed ladders and model batch sweeps end to end: bench and check --batch through the CLI,
the store (crossovers, merge), the charts and the site's pages.

This machine has only a CPU, so recorded ladders here are CPU against CPU (no
crossover by design); crossovers against a faster target are checked on rows
whose times are given, through the same summary and writer the bench uses.
"""
import asyncio
import json
import re
import sqlite3
import time
from pathlib import Path

import pytest
import torch

from mpsprobe.db import merge as merging, schema, writer as store
from mpsprobe.db.query import speed as speed_q
from mpsprobe.engine import devices
from mpsprobe.engine.ladder import LadderRow, crossover_summaries
from mpsprobe.modelcheck import batches
from mpsprobe.site import make_datasette
from mpsprobe.site.charts import svg_chart
from mpsprobe.claims import CLAIMS
from mpsprobe.speed import start_run
from mpsprobe.vocabulary import BACKWARD, FORWARD, PASS_COLUMN

ROOT = Path(__file__).resolve().parent.parent
CONVNET = str(ROOT / "tests" / "models" / "convnet.py")


@pytest.fixture(scope="module")
def bench_db(tmp_path_factory, run_cli):
    """One bench through the CLI (two tiny ladders, both passes), then a batch sweep into it."""
    path = tmp_path_factory.mktemp("bench") / "speed.db"
    result = run_cli("bench", "--ops", "add,sum", "--max-size", "1e3", "--reps", 3, "--device", "cpu",
                     "--db", path, "--json")
    assert result.exit_code == 0, result.output
    swept = run_cli("check", CONVNET, "--run", "--device", "cpu", "--batch", "1,2", "--no-timing",
                    "--fail-on", "never", "--db", path)
    assert swept.exit_code == 0, swept.output
    return str(path), json.loads(result.output[result.output.index("{"):]), swept.output


def test_bench_records_a_run_its_rows_and_crossovers(bench_db, rows):
    path, out, _ = bench_db
    [run] = rows(path, "SELECT * FROM runs WHERE id = ?", [out["run_id"]])
    assert run["state"] == "complete" and run["source"] == json.loads(run["options"])["source"] == "bench"
    assert run["device"] == "cpu" and run["torch_version"] == torch.__version__
    stored = rows(path, "SELECT * FROM speed WHERE run_id = ? ORDER BY op, pass_name, size", [out["run_id"]])
    # add and sum at 100, 300 and 1000 elements, forward and backward: 12 rungs, all timed.
    assert len(stored) == len(out["rows"]) == 12
    assert {(r["op"], r["pass_name"]) for r in stored} == {(o, p) for o in ("add", "sum")
                                                         for p in (FORWARD, BACKWARD)}
    assert sorted({r["size"] for r in stored}) == [100, 300, 1000]
    assert all(r["cpu_ms"] > 0 and r["target_ms"] > 0 and r["reps"] == 3 for r in stored)
    assert all(r["cpu_threads"] == torch.get_num_threads() for r in stored)
    cross = rows(path, "SELECT * FROM speed_crossovers WHERE run_id = ?", [out["run_id"]])
    assert len(cross) == 4 and all(c["rungs"] == 3 and c["largest"] == 1000 for c in cross)
    # The CPU against itself: no target, so no crossover, and no speed claim read from it.
    assert all(c["crossover"] is None and c["always"] == 0 and c["no_target"] == 1 for c in cross)
    assert speed_q.crossovers(sqlite3.connect(path), run_id=out["run_id"]) == []
    assert speed_q.speed_curve(sqlite3.connect(path), "add") == []
    assert [c["op"] for c in out["crossovers"]] == ["add", "add", "sum", "sum"]
    # 3 repetitions cannot bound a median at 97.5%: every figure says so rather than claim.
    assert all(r["cpu_reps"] == 3 and r["speedup_lo"] is None for r in stored)


def test_bench_on_the_cpu_against_itself_claims_no_speedup(tmp_path, run_cli):
    # It reported "best speedup 1.98x": the noise between two CPU timings.
    result = run_cli("bench", "--ops", "add", "--passes", "forward", "--max-size", "1e3", "--reps", 10,
                     "--device", "cpu", "--db", tmp_path / "s.db")
    assert result.exit_code == 0, result.output
    lines = [x for x in result.output.splitlines() if x.startswith("add ")]
    assert lines and all("no target (the CPU against itself)" in x and x.rstrip().endswith("—") for x in lines)
    assert not re.search(r"\d\.\d\dx", result.output)


def test_a_speedup_is_claimed_only_where_its_interval_excludes_one():
    from mpsprobe.speed import speedup_text
    ladder = {"best_speedup": 1.3, "no_target": 0}
    assert speedup_text(dict(ladder, best_speedup_lo=1.1, best_speedup_hi=1.5)) == "1.30x (1.10-1.50)"
    assert speedup_text(dict(ladder, best_speedup_lo=0.9, best_speedup_hi=1.7)).startswith("no clear difference")
    assert speedup_text(dict(ladder, best_speedup_lo=None, best_speedup_hi=None)) == "— (no interval)"
    assert speedup_text(dict(ladder, no_target=1, best_speedup_lo=1.1, best_speedup_hi=1.5)) == "—"


def test_bench_summary_table_and_progress(tmp_path, run_cli):
    result = run_cli("bench", "--ops", "relu", "--passes", "forward", "--max-size", "300", "--reps", 2,
                     "--device", "cpu", "--db", tmp_path / "s.db")
    assert result.exit_code == 0, result.output
    assert "[1/1] relu" in result.output
    header, line = [x for x in result.output.splitlines() if x.startswith(("op ", "relu "))]
    assert header.split() == ["op", PASS_COLUMN, "crossover", "best", "speedup"]
    assert line.split()[:2] == ["relu", FORWARD] and "no target" in line
    assert "recorded as run" in result.output


@pytest.mark.parametrize("args, words", [
    (("--ops", "add,nosuchop"), "no speed ladder for nosuchop"),
    (("--families", "nosuchfamily"), "no ladder family nosuchfamily"),
    (("--max-size", "lots"), "takes a number"),
    (("--passes", "sideways"), "passes are"),
    (("--ops", "add", "--device", "nosuchdevice"), "unknown device"),
])
def test_bench_bad_input_is_one_line_and_writes_nothing(tmp_path, args, words, run_cli):
    db = tmp_path / "s.db"
    result = run_cli("bench", *args, "--db", db)
    assert result.exit_code == 2 and words in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not db.exists()


def _ladder(target, speedups, op="matmul", pass_name=FORWARD, batch=False):
    sizes = [100, 1000, 10000, 100000]
    return [LadderRow(op, "matmul", "float32", pass_name, f"{n}", f"n={n}", n, n if batch else None, target, 8,
                      cpu_ms=1.0, target_ms=1.0 / s, speedup=s, speedup_lo=s * 0.95, speedup_hi=s * 1.05)
            for n, s in zip(sizes, speedups)]


def test_crossover_is_stored_and_read_back(tmp_path):
    db = schema.open_db(tmp_path / "x.db")
    writer = start_run(db, devices.Target("cpu"), {"source": "bench"})
    rows_ = (_ladder("cuda:0", [0.5, 0.8, 1.2, 1.5]) + _ladder("cuda:0", [0.2, 0.3, 0.4, 0.6], pass_name=BACKWARD)
             + _ladder("cuda:0", [2, 3, 4, 5], op="conv", batch=True))
    assert store.record_ladder(db, writer.run_id, rows_, crossover_summaries(rows_)) == (12, 3)
    db.execute("UPDATE runs SET device = 'cuda:0' WHERE id = ?", [writer.run_id])
    db.conn.commit()
    got = {(c["op"], c["pass_name"]): c for c in speed_q.crossovers(db.conn)}
    assert got["matmul", FORWARD]["crossover"] == 10000 and got["matmul", FORWARD]["by"] == "size"
    assert got["matmul", BACKWARD]["crossover"] is None and got["matmul", BACKWARD]["always"] == 0
    assert got["conv", FORWARD]["always"] == 1 and got["conv", FORWARD]["by"] == "batch"
    assert got["matmul", FORWARD]["best_speedup"] == 1.5 and got["matmul", FORWARD]["best_at"] == 100000
    # Only the ladder the target never wins is "slower than the CPU".
    assert [(r["op"], r["pass_name"]) for r in speed_q.slower_than_cpu(db.conn)] == [("matmul", BACKWARD)]
    curve = speed_q.speed_curve(db.conn, "matmul", pass_name=FORWARD)
    assert [r["size"] for r in curve] == [100, 1000, 10000, 100000]


def test_check_batch_sweep_records_model_speed(bench_db, rows):
    path, _, output = bench_db
    stored = rows(path, "SELECT * FROM model_speed ORDER BY batch")
    assert [(r["model"], r["mode"], r["batch"]) for r in stored] == [("convnet", "inference", 1),
                                                                     ("convnet", "inference", 2)]
    assert all(r["cpu_ms"] > 0 and r["target_ms"] > 0 and r["reps"] == 5 for r in stored)
    assert all(abs(r["cpu_per_s"] - r["batch"] * 1e3 / r["cpu_ms"]) < 1e-6 for r in stored)
    [cross] = rows(path, "SELECT * FROM model_crossovers")
    assert cross["batches"] == 2 and cross["run_id"] == stored[0]["run_id"]
    assert "batch sweep (inference, float32" in output and "crossover: none" in output
    [sweep] = speed_q.model_sweeps(sqlite3.connect(path))
    assert [r["batch"] for r in sweep["rows"]] == [1, 2]


@pytest.mark.parametrize("args, words", [
    (("--batch", "1,2"), "needs --run"),
    (("--run", "--batch", "0,2"), "positive sizes"),
    (("--run", "--batch", "one"), "takes sizes"),
])
def test_check_batch_bad_input(tmp_path, args, words, run_cli):
    result = run_cli("check", CONVNET, *args, "--device", "cpu", "--db", tmp_path / "m.db")
    assert result.exit_code == 2 and words in result.output


def test_training_sweep_and_expanded_inputs(tmp_path, rows):
    tokens = torch.tensor([[3, 4], [5, 6]])
    grown = batches.expand((tokens, torch.randn(2, 3), torch.tensor(1.0)), 5)
    assert grown[0].tolist() == [[3, 4], [5, 6], [3, 4], [5, 6], [3, 4]]
    assert grown[1].shape == (5, 3) and grown[2].dim() == 0
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    before = [p.clone() for p in model.parameters()]
    run_id, swept, cross = batches.sweep_batches(model, torch.randn(1, 3), batches=(1, 4), device="cpu",
                                                 db=tmp_path / "t.db", train=True, reps=2, warmup=1)
    assert [(r["mode"], r["batch"]) for r in swept] == [("training", 1), ("training", 4)]
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # copies were trained
    assert rows(tmp_path / "t.db", "SELECT count(*) AS n FROM model_speed WHERE run_id = ?", [run_id])[0]["n"] == 2


def test_merge_carries_speed_rows(bench_db, tmp_path, rows):
    path, out, _ = bench_db
    merged = tmp_path / "merged.db"
    [report] = merging.merge([path], merged)
    assert report.rows_added["speed"] == 12 and report.rows_added["speed_crossovers"] == 4
    assert report.rows_added["model_speed"] == 2 and report.rows_added["model_crossovers"] == 1
    for table in ("speed", "speed_crossovers", "model_speed", "model_crossovers"):
        assert rows(merged, f"SELECT * FROM {table} ORDER BY 1, 2, 3, 4, 5") == \
            rows(path, f"SELECT * FROM {table} ORDER BY 1, 2, 3, 4, 5")
    [again] = merging.merge([path], merged)
    assert again.rows_added["speed"] == 0 and again.rows_added["model_speed"] == 0


def _points(svg, css_class="mp-series"):
    return [[tuple(map(float, p.split(","))) for p in m.split()]
            for m in re.findall(rf'<polyline class="{css_class}" points="([^"]+)"', svg)]


def test_svg_chart_draws_log_axes_two_lines_and_the_crossover():
    chart = svg_chart
    svg = chart([("CPU", "#000", [(100, 1.0), (1000, 10.0), (10000, 100.0)]),
                 ("mps <b>", "#00f", [(100, 10.0), (1000, 10.0), (10000, None)])],
                x_label="elements", y_label="ms", marker=1000, marker_label="crossover", width=400, height=200)
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    cpu, target = _points(svg)
    assert len(cpu) == 3 and len(target) == 2            # a missing time is left out
    # log x: 100 -> 1000 -> 10000 are equally spaced; log y: 1 -> 10 -> 100 too.
    assert cpu[1][0] - cpu[0][0] == pytest.approx(cpu[2][0] - cpu[1][0])
    assert cpu[0][1] - cpu[1][1] == pytest.approx(cpu[1][1] - cpu[2][1])
    assert target[0][1] == pytest.approx(target[1][1]) == pytest.approx(cpu[1][1])
    marker_x = float(re.search(r'class="mp-crossover" x1="([\d.]+)"', svg).group(1))
    assert marker_x == pytest.approx(cpu[1][0])
    assert "mps &lt;b&gt;" in svg and "<b>" not in svg
    assert chart([("CPU", "#000", [(100, None)])], x_label="x", y_label="y") == ""


def test_chart_ticks_read_as_plain_numbers_between_a_hundredth_and_ten_thousand():
    from mpsprobe.site.charts import _label
    assert [_label(v) for v in (0.05, 2.5, 8, 2540.3, 6630, 1e5, 1e8)] == \
        ["0.05", "2.5", "8", "2540", "6630", "1e5", "1e8"]


def _get(path, *pages):
    ds = make_datasette(path)

    async def fetch():
        return [await ds.client.get(p) for p in pages]
    return asyncio.run(fetch())


@pytest.fixture(scope="module")
def target_bench_db(bench_db, tmp_path_factory):
    """bench_db with its runs standing for a GPU's (a CPU target is kept out of the pages)."""
    import shutil
    path = tmp_path_factory.mktemp("target") / "speed.db"
    shutil.copy(bench_db[0], path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE runs SET device = 'cuda:0'")
    conn.close()
    return (str(path), *bench_db[1:])


def test_a_cpu_target_s_ladders_stay_off_the_pages(bench_db):
    path, _, _ = bench_db
    op, speed = _get(path, "/-/op/add", "/-/speed.json")
    assert "<svg" not in op.text   # (the op has no other result here: its page is not found)
    assert speed.json()["crossovers"] == []


def test_site_op_page_speed_page_and_slowest_query(target_bench_db):
    path, _, _ = target_bench_db
    name = Path(path).stem
    op, ladder_only, speed_page, claims, slowest = _get(
        path, "/-/op/add", "/-/op/sum", "/-/speed", "/-/claims", f"/{name}/slowest_vs_cpu?device=")
    assert op.status_code == 200 and "Speed against size" in op.text
    # One chart per pass, each a CPU and a target line over the three rungs.
    assert op.text.count("<svg") == 2
    assert all(len(line) == 3 for line in _points(op.text))
    assert ladder_only.status_code == 200 and ladder_only.text.count("<svg") == 2
    assert speed_page.status_code == 200 and 'href="/-/op/add"' in speed_page.text
    assert "convnet inference, float32" in speed_page.text and speed_page.text.count("<svg") == 1
    assert claims.status_code == 200 and "BatchNorm3d" in claims.text and "to be measured" in claims.text
    assert slowest.status_code == 200 and "Op ladders (mpsprobe bench)" in slowest.text


def test_speed_and_claims_pages_have_json(target_bench_db, rows):
    path, _, _ = target_bench_db
    speed, claims = (r.json() for r in _get(path, "/-/speed.json", "/-/claims.json"))
    shown = {(c["op"], c["dtype"], c["pass_name"]) for run in speed["crossovers"] for c in run["rows"]}
    assert shown == {(r["op"], r["dtype"], r["pass_name"])
                     for r in rows(path, "SELECT op, dtype, pass_name FROM speed_crossovers")}
    assert [m["model"] for m in speed["models"]] == ["convnet"] and speed["models"][0]["rows"]
    assert [c["claim"] for c in claims["claims"]] == [c["claim"] for c in CLAIMS]


def test_readme_claims_table_names_every_claim_command():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## The guides' claims"):]
    for claim in CLAIMS:
        for command in claim["command"].split("; "):
            assert command.replace("DEVICE", "cuda") in section or command in section, command


def test_a_virtual_machine_s_speed_is_never_shown_as_bare_metal(bench_db, tmp_path):
    """GitHub's macOS runners are VMs whose GPU is not a Mac's: every speed figure says so."""
    import shutil
    from types import SimpleNamespace
    from mpsprobe.modelcheck.report import speed_of
    path = tmp_path / "vm.db"
    shutil.copy(bench_db[0], path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE runs SET os_name = 'macOS', os_version = '14.7', virtualized = 1, device = 'mps'")
    conn.commit()
    speed, op = _get(str(path), "/-/speed.json", "/-/op/add")
    speed = speed.json()
    wheres = [run["where"] for run in speed["crossovers"]] + [m["where"] for m in speed["models"]]
    assert wheres and all("virtual machine" in w for w in wheres)
    assert op.text.count("virtual machine") >= 2  # each ladder chart of add names its machine
    conn.row_factory = sqlite3.Row
    assert {r["machine_kind"] for r in speed_q.crossovers(conn)} == {"virtual machine"}
    model = SimpleNamespace(model="convnet", mode="forward", dtype="float32")
    assert speed_of(conn, model)["device"] == "mps (virtual machine)"
    conn.execute("UPDATE runs SET virtualized = 0")
    assert speed_of(conn, model)["device"] == "mps"
    conn.close()


def test_a_cases_timing_stops_at_its_budget_and_keeps_its_spread():
    """A case's timing repeats a cheap call up to MAX_REPS times and a slow one once the
    budget is spent (never less than once); the median and interquartile spread are the times'."""
    from mpsprobe.engine.timing import BUDGET_S, MAX_REPS, repeated_ms, summarize
    calls = []
    assert len(repeated_ms(lambda: calls.append(1), lambda: None)) == MAX_REPS == len(calls)
    slow = repeated_ms(lambda: time.sleep(BUDGET_S * 1.2), lambda: None)
    assert len(slow) == 1 and slow[0] >= BUDGET_S * 1000
    assert summarize([4.0, 1.0, 3.0, 2.0, 5.0]) == (3.0, 2.0) and summarize([7.0]) == (7.0, 0.0)
