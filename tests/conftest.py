"""Every shared fixture of the suite, and only here: the CLI runner, SQL reads,
runs of the real probe over tiny op subsets (made once per session), databases
as older mpsprobe versions wrote them, and the site's database."""
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from mpsprobe.cli import cli

TESTS = Path(__file__).parent
DATA = TESTS / "data"

# One op for each way the fake MPS backend fails, plus ops that work.
FAKE_OPS = "histc,linalg.svd,exp,erfinv,lgamma,add,empty_like"
FAKE_DTYPES = "float16,float32,float64,int32"


def _run_cli(*args, env=None):
    """Invoke `mpsprobe` in-process; returns click's Result."""
    return CliRunner().invoke(cli, [str(a) for a in args], env=env, catch_exceptions=False)


def _rows(db_path, sql, params=()):
    conn = sqlite3.connect(db_path)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql, params)]
    finally:
        conn.close()


# ---------------------------------------------------------------- helpers as fixtures

@pytest.fixture(autouse=True)
def check_stays_quiet(monkeypatch):
    """`check` says its step on stderr once an answer takes over 2 s, which a loaded machine
    reaches at random; the tests read its report, so the line waits an hour here
    (tests/test_check_capture.py tests the line itself, with its own delays)."""
    from mpsprobe.modelcheck import progress
    monkeypatch.setattr(progress, "AFTER_S", 3600.0)


@pytest.fixture(scope="session")
def run_cli():
    """run_cli(*args, env=None): `mpsprobe ARGS` in-process, click's Result."""
    return _run_cli


@pytest.fixture(scope="session")
def rows():
    """rows(db_path, sql, params=()): a query's rows as dicts."""
    return _rows


@pytest.fixture(scope="session")
def results_count():
    """results_count(db_path): rows in results, or 0 while the database is not
    created yet (a sweep starting)."""
    def count(db_path):
        try:
            conn = sqlite3.connect(db_path, timeout=5)
            try:
                return conn.execute("SELECT count(*) FROM results").fetchone()[0]
            finally:
                conn.close()
        except sqlite3.OperationalError:
            return 0
    return count


@pytest.fixture(scope="session")
def summary():
    """summary(result): the --json summary printed at the end of `mpsprobe run`."""
    def parse(result):
        text = result.stdout if hasattr(result, "stdout") else result.output
        return json.loads(text[text.index("{"):])
    return parse


@pytest.fixture(scope="session")
def fake_mps():
    """The fake-MPS test backend's file, for `--backend`."""
    return str(TESTS / "fake_mps.py")


@pytest.fixture
def one_cpu_thread():
    """torch's intra-op threads pinned to one for the test, then restored. How the CPU's
    threads split a float32 sum decides its rounding: a test that rests on the size of the
    CPU's own error needs the same split on every machine and after any other test."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---------------------------------------------------------------- probe runs

@pytest.fixture(scope="session")
def fake_mps_db(tmp_path_factory, fake_mps):
    """A run over the fake MPS backend: every status, via the real pipeline."""
    path = tmp_path_factory.mktemp("fake") / "fake.db"
    result = _run_cli("run", "--db", path, "--backend", fake_mps, "--ops", FAKE_OPS,
                      "--dtypes", FAKE_DTYPES, "--samples", 2, "--timeout", 3,
                      "--workers", 2, "--passes", "forward", "--json")
    assert result.exit_code == 0, result.output
    return str(path)


@pytest.fixture(scope="session")
def cpu_db(tmp_path_factory):
    """A run on the CPU target over a few well-behaved ops, with timing."""
    path = tmp_path_factory.mktemp("cpu") / "cpu.db"
    result = _run_cli("run", "--db", path, "--device", "cpu",
                      "--ops", "add,mul,nn.functional.conv2d,sum,empty_like,argmax",
                      "--dtypes", "float32,float16,int64", "--samples", 2, "--json")
    assert result.exit_code == 0, result.output
    return str(path)


# Binary ops: OpInfo gives them several samples, so a fault on the first leaves
# others in the same pair that must still run. The unary ones below
# (test_pool_faults.py) check causes, leftovers and forged replies.
FAULTY_FAULTS = {
    "aten::mul.Tensor": "segfault", "aten::sub.Tensor": "oom", "aten::add.Tensor": "exit",
    "aten::div.Tensor": "oom_raise", "aten::maximum": "garbage",
    "aten::abs": "sysexit", "aten::sin": "close_reply", "aten::cos": "forge",
    "aten::floor": "spawn", "aten::ceil": "fork_segfault", "aten::exp": "keyboard",
    "aten::tan": "base", "aten::neg": "close_stdin"}
FAULTY_OPS = "mul,sub,add,div.no_rounding_mode,maximum,minimum,abs,sin,cos,floor,ceil,exp,tan,neg"


@pytest.fixture(scope="session")
def faulty_sweep(tmp_path_factory):
    """A sweep over the faulty test backend (tests/faulty_backend.py), each fault
    firing on the first case that reaches it: {"db", "ops" (the ops swept), "once"
    (its marker folder), "result"}."""
    folder = tmp_path_factory.mktemp("faulty")
    once = folder / "once"
    once.mkdir()
    db = folder / "faulty.db"
    result = _run_cli("run", "--db", db, "--backend", TESTS / "faulty_backend.py",
                      "--ops", FAULTY_OPS, "--dtypes", "float32", "--samples", 2, "--no-timing",
                      "--workers", 2, "--timeout", 30, "--passes", "forward", "--json",
                      env={"FAULTY": json.dumps(dict(FAULTY_FAULTS, once_dir=str(once)))})
    assert result.exit_code == 0, result.output
    return {"db": str(db), "ops": FAULTY_OPS.split(","), "once": once, "result": result}


@pytest.fixture(scope="session")
def faulty_db(faulty_sweep):
    """The faulty sweep's database path."""
    return faulty_sweep["db"]


# ---------------------------------------------------------------- older databases

@pytest.fixture(scope="session")
def history_runs():
    """{run_id: (torch_version, os_version, {(op, dtype): status})}: four torch versions."""
    return {
        # "2.10.0" < "2.9.0" as strings: the views must compare versions as versions.
        "r-old": ("2.8.0", "14.5", {("atan2", "float16"): "unsupported", ("add", "float32"): "pass"}),
        "r-mid": ("2.9.0", "15.1", {("atan2", "float16"): "pass", ("add", "float32"): "pass"}),
        "r-new": ("2.10.0", "15.2", {("atan2", "float16"): "pass", ("add", "float32"): "mismatch"}),
        "r-newest": ("2.10.1", "15.3", {("atan2", "float16"): "pass", ("add", "float32"): "pass"}),
    }


@pytest.fixture(scope="session")
def v1_db():
    """v1_db(path, runs): a database with schema 1 exactly as mpsprobe shipped it
    (tests/data/schema1.db, written by that version's own code), emptied and
    filled with `runs` ({run_id: (torch_version, os_version, {(op, dtype): status})})."""
    def make(path, runs):
        shutil.copy(DATA / "schema1.db", path)
        conn = sqlite3.connect(path)
        with conn:
            for table in ("results", "pairs_done", "cases", "ops", "runs"):
                conn.execute(f"DELETE FROM {table}")
            for run_id, (torch_version, os_version, statuses) in runs.items():
                conn.execute("INSERT INTO runs (id, run_key, state, started, torch_version, "
                             "os_name, os_version, device, device_name, options) VALUES "
                             "(?, ?, 'complete', ?, ?, 'macOS', ?, 'mps', 'Apple MPS', '{}')",
                             [run_id, run_id, f"2025-01-0{len(run_id) % 9 + 1}T00:00:00",
                              torch_version, os_version])
                for (op, dtype), status in statuses.items():
                    conn.execute("INSERT OR IGNORE INTO ops (id, name) VALUES (?, ?)", [op, op])
                    case = f"{op}|{dtype}|0"
                    conn.execute("INSERT OR IGNORE INTO cases (id, op_id, dtype, sample_index) "
                                 "VALUES (?, ?, ?, 0)", [case, op, dtype])
                    conn.execute("INSERT INTO results (run_id, case_id, op_id, dtype, status) "
                                 "VALUES (?, ?, ?, ?, ?)", [run_id, case, op, dtype, status])
        conn.close()
        return str(path)
    return make


@pytest.fixture(scope="session")
def old_databases():
    """The folder of databases older mpsprobe versions wrote (schema1.db, schema2.db)."""
    return DATA


# ---------------------------------------------------------------- the site's database

OLD_TORCH, OLD_OS = "2.4.0", "14.2"
# The older fake run: exp wrong in every dtype, add falls back, histc works.
OLD_FAULTS = {"wrong": {"aten::exp": "float32"}, "fallback": ["aten::add.Tensor"],
              "not_implemented": [], "abort": [], "hang": []}


@pytest.fixture(scope="session")
def site_old_run():
    """(torch version, macOS version) of the site database's older fake-MPS run."""
    return OLD_TORCH, OLD_OS


@pytest.fixture(scope="session")
def site_db(tmp_path_factory, fake_mps, fake_mps_db, cpu_db):
    """The site's database: three real runs. The session's fake-MPS run (every
    failure mode), the session's CPU run (timings), and one more fake-MPS run with
    other faults, relabelled as an older torch on an older macOS so the op
    history has two versions."""
    from mpsprobe.versions import version_key
    folder = tmp_path_factory.mktemp("site")
    old_db, path = folder / "old.db", folder / "probe.db"
    result = _run_cli("run", "--db", old_db, "--backend", fake_mps, "--ops", "add,exp,histc",
                      "--dtypes", "float16,float32", "--samples", 2, "--no-timing",
                      "--workers", 2, "--json", env={"FAKE_MPS": json.dumps(OLD_FAULTS)})
    assert result.exit_code == 0, result.output
    old_run = json.loads(result.output[result.output.index("{"):])["run_id"]
    source = sqlite3.connect(fake_mps_db)  # the backup API sees what is still in the WAL
    conn = sqlite3.connect(path)
    source.backup(conn)
    source.close()
    conn.execute("PRAGMA journal_mode = DELETE")  # one self-contained file, as served
    with conn:
        # The other runs come in as they were recorded, with results, cases and ops.
        for other in (old_db, cpu_db):
            conn.execute("ATTACH DATABASE ? AS other", [str(other)])
            for table in ("runs", "ops", "cases", "results", "pairs_done"):
                conn.execute(f"INSERT OR IGNORE INTO {table} SELECT * FROM other.{table}")
            conn.commit()
            conn.execute("DETACH DATABASE other")
        # Relabelled as bare-metal Macs (this machine may be a VM: a macOS VM's runs are kept apart).
        conn.execute("UPDATE runs SET torch_version = ?, torch_version_key = ?, os_name = 'macOS',"
                     " os_version = ?, virtualized = 0 WHERE id = ?",
                     [OLD_TORCH, version_key(OLD_TORCH), OLD_OS, old_run])
        conn.execute("UPDATE runs SET os_name = 'macOS', os_version = '14.4', virtualized = 0 "
                     "WHERE device = 'fake-mps' AND id != ?", [old_run])
    conn.close()
    return str(path)


# ---------------------------------------------------------------- small stores

@pytest.fixture(scope="session")
def small_store():
    """small_store(path, n=40): an up-to-date mpsprobe DB with one complete run of
    n results, written by the real writer and closed as a run closes it."""
    def make(path, n=40):
        import os
        from mpsprobe.db import schema
        from mpsprobe.db.writer import RunWriter
        db = schema.open_db(path)
        writer = RunWriter.start(db, "key", {"torch_version": "2.11.0", "device": "cpu",
                                             "hostname": "elsewhere"}, {}, "0.1.0", os.getpid())
        for i in range(n):
            pair = {"op": f"op{i}", "dtype": "float32"}
            writer.record(pair, 0, "f32[3]", {"status": "pass", "message": "x" * 500})
            writer.pair_done(pair, 1)
        writer.finish("complete", 1.0)
        writer.close()
        return Path(path)
    return make


# A string no page may ever show as markup.
HOSTILE = "<script>alert(1)</script>"




@pytest.fixture(scope="session")
def extra_db(site_db, tmp_path_factory):
    """The site's database plus what the walk must survive: an op with variants,
    hostile strings in an op id, a message and a declared status, declared rows
    for the newest fake-MPS run's release and for a release never measured, and
    a small speed ladder of `exp` (mpsprobe bench on the CPU) for its op page's curve."""
    path = tmp_path_factory.mktemp("extra") / "extra.db"
    shutil.copy(site_db, path)
    result = _run_cli("bench", "--device", "cpu", "--ops", "exp", "--max-size", "1e4", "--reps", 2,
                      "--passes", "forward", "--db", path)
    assert result.exit_code == 0, result.output
    with sqlite3.connect(path) as conn:   # a CPU target's ladder is kept out of charts: stand it for a GPU's
        conn.execute("UPDATE runs SET device = 'cuda:0' WHERE source = 'bench'")
    conn.close()
    fake = _rows(site_db, "SELECT * FROM runs WHERE device = 'fake-mps' ORDER BY torch_version_key DESC")[0]
    release = fake["torch_version"].split("+")[0]
    conn = sqlite3.connect(path)
    with conn:
        for variant in ("nn.functional.interpolate.bilinear", "nn.functional.interpolate.nearest"):
            conn.execute("INSERT INTO ops (id, name) VALUES (?, 'nn.functional.interpolate')", [variant])
        conn.execute("INSERT INTO ops (id, name) VALUES (?, ?)", [HOSTILE, HOSTILE])
        conn.execute("INSERT INTO cases (id, op_id, dtype, sample_index, sample) VALUES (?, ?, 'float32', 0, ?)",
                     [HOSTILE + "|float32|0", HOSTILE, HOSTILE])
        conn.execute("INSERT INTO results (run_id, case_id, op_id, dtype, status, message) "
                     "VALUES (?, ?, ?, 'float32', 'error', ?)",
                     [fake["id"], HOSTILE + "|float32|0", HOSTILE, HOSTILE])
        conn.execute("UPDATE results SET message = ? WHERE rowid = (SELECT min(rowid) FROM results "
                     "WHERE op_id = 'histc' AND message IS NOT NULL)", [HOSTILE + " histc failed"])
        # Declared against what the fake backend does: add works, histc has no kernel.
        declared = [(release, "add", "float16", "unsupported"), (release, "histc", "float32", "pass"),
                    (release, "exp", "float32", HOSTILE), ("2.0.0", "add", "float32", "unsupported"),
                    ("2.0.0", "zeta_only_declared", "float32", "pass")]
        conn.executemany("INSERT INTO declared (torch_version, device, op_id, dtype, status, source, note) "
                         "VALUES (?, 'mps', ?, ?, ?, 'test', NULL)", declared)
    conn.close()
    return str(path)
