"""The first minutes of a new user: run says what it will do first, op names can be
found, and every message reads right."""
import json
import re

import pytest


def test_run_says_what_it_will_do_before_loading_then_summarises_with_the_time(tmp_path, run_cli):
    db = tmp_path / "first.db"
    result = run_cli("run", "--db", db, "--device", "cpu", "--ops", "add", "--dtypes", "float32",
                     "--samples", 1, "--workers", 1, "--no-timing")
    assert result.exit_code == 0, result.output
    lines = [l for l in result.output.splitlines() if l.strip()]
    # The order a user sees: what will run, the catalogue stage, the target, the bar, the summary.
    assert lines[0].startswith("mpsprobe run: device cpu; ops add; dtypes float32; 1 sample per")
    assert str(db) in lines[0]
    assert lines[1].startswith(("loading the op catalogue", "planned from the cached op catalogue"))
    assert lines[2].startswith("target: cpu")
    summary = next(i for i, l in enumerate(lines) if l.startswith("run "))
    assert summary > 2 and re.search(r"pairs in \d+(\.\d)? s", lines[summary])
    assert lines[-1] == f"recorded in {db}"


@pytest.mark.slow
def test_run_json_summary_carries_the_elapsed_time(tmp_path, run_cli, summary):
    result = run_cli("run", "--db", tmp_path / "j.db", "--device", "cpu", "--ops", "add",
                     "--dtypes", "float32", "--samples", 1, "--workers", 1, "--no-timing", "--json")
    assert result.exit_code == 0, result.output
    assert summary(result)["elapsed_s"] >= 0


def test_the_bar_counts_cases_with_pairs_beside_it():
    from mpsprobe.cli import output
    line = output.bar_line({"pairs": 3, "total_pairs": 10}, {"pass": 7, "fallback": 1})
    assert line == "3/10 pairs  pass 7  fallback 1"
    assert output.elapsed_text(75) == "1 min 15 s" and output.elapsed_text(4.25) == "4.2 s"


def test_ops_lists_the_convolutions(run_cli):
    result = run_cli("ops", "conv")
    assert result.exit_code == 0, result.output
    # (a first line says the catalogue is loading when no cache holds it yet)
    names = [l.split()[0] for l in result.output.splitlines()[:-1] if not l.startswith("loading")]
    assert {"nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.conv3d"} <= set(names)
    assert all("conv" in n for n in names)
    listing = run_cli("ops", "nn.functional.conv2d", "--json").output
    rows = json.loads(listing[listing.index("["):])
    assert rows[0]["aten_name"] == "conv2d" and "float32" in rows[0]["dtypes"]


def test_ops_answers_for_mps_and_shows_a_cpu_run_only_when_asked(run_cli, cpu_db, rows):
    from mpsprobe.db.query import knowledge
    from mpsprobe.vocabulary import worst
    # A CPU-only database: the MPS statuses are what PyTorch declares, and say so.
    result = run_cli("ops", "argmax", "--db", cpu_db)
    assert result.exit_code == 0, result.output
    declared = worst(knowledge.op_statuses(knowledge.load(), "2.13.0")["argmax"])
    assert re.search(rf"{declared}\s+argmax", result.output)
    assert "statuses: declared by PyTorch 2.13.0 for MPS (no measured MPS run" in result.output
    # The CPU run, asked for by id, labelled as what it is.
    run = rows(cpu_db, "SELECT id FROM runs")[0]["id"]
    status = rows(cpu_db, "SELECT status FROM op_dtype_status WHERE op_id = 'argmax'")[0]["status"]
    result = run_cli("ops", "argmax", "--db", cpu_db, "--run", run[:8])
    assert re.search(rf"{status}\s+argmax", result.output)
    assert "measured on another device)" in result.output.splitlines()[-1]


@pytest.mark.slow
def test_unknown_names_suggest_the_full_op_name(run_cli, tmp_path):
    from mpsprobe.ops.opinfo import suggest
    keys = {"nn.functional.conv2d", "cov", "conj", "nn.functional.conv1d", "add"}
    assert suggest("conv2d", keys)[0] == "nn.functional.conv2d"
    assert "nn.functional.conv2d" in suggest("conv2dd", keys)
    result = run_cli("run", "--db", tmp_path / "x.db", "--device", "cpu", "--ops", "conv2d")
    assert result.exit_code == 2 and "did you mean nn.functional.conv2d" in result.output
    result = run_cli("ops", "conv2dd")
    assert result.exit_code == 1 and "did you mean nn.functional.conv2d" in result.output


def test_read_commands_never_speak_of_creating(run_cli, tmp_path):
    result = run_cli("findings", "--db", tmp_path / "nowhere" / "x.db")
    assert result.exit_code == 2 and "cannot read" in result.output and "create" not in result.output
    text = tmp_path / "text.db"
    text.write_text("hello")
    result = run_cli("merge", text, "-o", tmp_path / "out.db")
    assert result.exit_code == 2 and f"cannot merge: {text} is not an SQLite database" in result.output


def _on_a_terminal(args, timeout=300):
    """Run `python -X importtime -m mpsprobe ARGS` with stdout and stderr on a
    pseudo-terminal; returns everything it wrote, in the order it wrote it."""
    import os
    import pty
    import select
    import subprocess
    import sys
    import time
    master, slave = pty.openpty()
    env = dict(os.environ, COLUMNS="120", LINES="40", TERM="xterm")
    child = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "mpsprobe", *map(str, args)],
                             stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out, deadline = bytearray(), time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 1.0)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:          # the child closed the terminal: it is done
                    break
                if not chunk:
                    break
                out += chunk
            elif child.poll() is not None:
                break
    finally:
        os.close(master)
        child.kill() if child.poll() is None else None
        child.wait()
    assert child.returncode == 0, out.decode(errors="replace")[-3000:]
    return out.decode(errors="replace")


@pytest.mark.slow
def test_on_a_terminal_the_plan_comes_before_torch_loads_and_the_bar_is_cleared(tmp_path):
    """The order a user sees on a terminal: the plan line and the catalogue stage
    before this process imports torch, if it ever does (-X importtime reports each
    import as it ends, in the same stream; the catalogue loads in a worker), then
    the target, a bar counting cases, wiped, and the summary on the wiped line."""
    db = tmp_path / "tty.db"
    text = _on_a_terminal(["run", "--db", db, "--device", "cpu", "--ops", "add", "--dtypes", "float32",
                           "--samples", 1, "--workers", 1, "--no-timing", "--passes", "forward"])
    assert text.count("import time:") > 100          # the imports are there to be ordered
    torch_imports = [m.start() for m in re.finditer(r"^import time:[^\n]*\|\s*torch\b", text, re.M)]
    plan = text.index("mpsprobe run: device cpu; ops add")
    stage = re.search("loading the op catalogue|planned from the cached op catalogue", text).start()
    target = text.index("target: cpu", stage)
    assert plan < stage < target and all(stage < t for t in torch_imports)
    bar = text.index("cases", target)
    assert re.match(r"cases\s+\[[^\]]*\]\s+0/1\s+0/1 pairs", text[bar:]), text[bar:bar + 200]
    wipe = "\r\x1b[2K"
    cleared = text.rindex(wipe)
    assert bar < cleared and text[cleared + len(wipe):].startswith("run ")
    last_drawn = text[text.rindex("cases", 0, cleared):cleared]
    assert re.match(r"cases\s+\[#+\]\s+1/1\s+1/1 pairs  pass 1", last_drawn), last_drawn
    assert re.match(r"run \w+: 1 cases in 1 \(op, dtype\) pairs in \d+(\.\d)? s", text[cleared + len(wipe):])


def test_the_bar_counts_cases_against_the_planned_total(tmp_path):
    # add in float32 has four passes: 2 samples x 4 passes = 8 cases (the bar said 2).
    text = _on_a_terminal(["run", "--db", tmp_path / "bar.db", "--device", "cpu", "--ops", "add",
                           "--dtypes", "float32", "--samples", 2, "--workers", 1, "--no-timing"])
    positions = [(int(a), int(b)) for a, b in re.findall(r"\] +(\d+)/(\d+)", text)]
    assert positions, text
    assert {total for _, total in positions} == {8}
    assert positions[-1][0] == 8 and all(done <= total for done, total in positions)
