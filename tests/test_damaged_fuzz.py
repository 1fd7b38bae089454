"""Fuzzing damaged databases: whatever the damage, every command succeeds or says one line.

Hypothesis damages a copy of a small, real database (truncates it, zeroes a
range, flips bytes, alters meta rows, drops tables or columns) and runs
every command that opens a database on it. Each must succeed or exit 2 with
one `Error:` line and no traceback, and none may hang (an alarm per command).
`run` gets a stand-in pool (no workers: the store is what is under test);
`serve` is its check and one page of the site.
"""
import asyncio
import contextlib
import gc
import os
import shutil
import signal
import sqlite3

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings, strategies as st

from mpsprobe.cli import cli

pytestmark = pytest.mark.slow  # every command on twenty damaged databases

COMMAND_LIMIT_S = 20
TABLES = ["runs", "ops", "cases", "results", "pairs_done", "mpsprobe_meta", "results_fts",
          "declared", "declared_sources"]
COLUMNS = [("runs", "counts"), ("runs", "state"), ("runs", "torch_version_key"),
           ("results", "status"), ("results", "aten_ops"), ("cases", "sample_index"),
           ("ops", "name"), ("pairs_done", "n_cases")]
META_VALUES = st.one_of(st.sampled_from(["three", "", "-1", "0", "1", "4", "99", "5.0", " 5"]),
                        st.integers(-3, 99), st.none())


class StandInPool:
    """What a sweep's Pool answers, without a worker: a CPU, no pairs to run."""
    ENV = {"device": "cpu", "device_name": "CPU", "torch_version": "2.13.0", "os_name": "Linux",
           "hostname": "fuzz"}

    def __init__(self, config=None, size=1, env=None, **kwargs):
        self.size, self.env = size, env
        self.unfinished = []   # no pair left unfinished: there were none to run

    def request(self, message, budget=None):
        return {"env": dict(self.ENV)} if message["cmd"] == "describe" else {"pairs": []}

    def start(self):
        pass

    def run(self, *args, **kwargs):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def _sql(path, statement, params=()):
    conn = sqlite3.connect(path)
    try:
        with conn:
            conn.execute(statement, params)
    except (sqlite3.Error, UnicodeDecodeError):
        # Damage that SQLite itself refuses to make is no damage (on a flipped byte
        # its error message itself may not decode).
        pass
    finally:
        conn.close()


def _damage(path, kind, a, b, value):
    size = path.stat().st_size
    if kind == "truncate":
        with open(path, "r+b") as f:
            f.truncate(int(size * a))
    elif kind in ("zero", "flip"):
        start = int(size * a)
        length = max(1, int(b * (16384 if kind == "zero" else 64)))
        with open(path, "r+b") as f:
            f.seek(start)
            old = f.read(length)
            f.seek(start)
            f.write(b"\0" * len(old) if kind == "zero" else bytes(x ^ 0xFF for x in old))
    elif kind == "meta":
        key = ["schema_version", "app", "views"][int(a * 3) % 3]
        if b < 0.2:
            _sql(path, "DELETE FROM mpsprobe_meta WHERE key = ?", [key])
        else:
            _sql(path, "UPDATE mpsprobe_meta SET value = ? WHERE key = ?", [value, key])
    elif kind == "drop_table":
        _sql(path, f"DROP TABLE {TABLES[int(a * len(TABLES)) % len(TABLES)]}")
    elif kind == "drop_column":
        table, column = COLUMNS[int(a * len(COLUMNS)) % len(COLUMNS)]
        _sql(path, f"ALTER TABLE {table} DROP COLUMN {column}")


DAMAGE = st.lists(st.tuples(
    st.sampled_from(["truncate", "zero", "flip", "meta", "drop_table", "drop_column"]),
    st.floats(0, 1), st.floats(0, 1), META_VALUES), min_size=1, max_size=3)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory, small_store):
    from mpsprobe.ops import opinfo
    opinfo.load_op_db()   # for `ops`: torch's test utilities register Hypothesis profiles on import
    folder = tmp_path_factory.mktemp("pristine")
    db = small_store(folder / "base.db", n=60)
    ops = folder / "ops.json"
    model = str(__import__("pathlib").Path(__file__).parent / "models" / "convnet.py")
    result = CliRunner().invoke(cli, ["check", model, "--db", str(db), "--export", str(ops)])
    assert result.exit_code in (0, 1), result.output
    return db, ops


def _alarm(signum, frame):
    raise TimeoutError("a command hung")


@contextlib.contextmanager
def time_limit(seconds):
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _serve(path):
    """`serve` up to its first page: the database check, then the matrix."""
    from mpsprobe.errors import MpsprobeError
    from mpsprobe.site import check_database, make_datasette
    try:
        check_database(str(path))
    except MpsprobeError as e:
        assert len(str(e).splitlines()) == 1
        return
    ds = make_datasette(str(path))

    async def page():
        await ds.invoke_startup()
        return await ds.client.get("/-/matrix")
    response = asyncio.run(page())
    assert response.status_code < 500, response.text[:500]


def _assert_one_line_or_success(args, result, ok=(0,)):
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args, repr(result.exception))
    assert "Traceback" not in result.output, (args, result.output[-2000:])
    if result.exit_code not in ok:
        errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
        assert result.exit_code == 2 and len(errors) == 1, (args, result.output[-2000:])


# Hypothesis's own defaults, not the profile torch's test utilities load on import. The
# suite draws the same 20 damaged databases on every run (a failure is reproducible, never
# the luck of a draw); MPSPROBE_FUZZ=N explores N fresh random ones.
EXPLORE = int(os.environ.get("MPSPROBE_FUZZ", "0") or 0)


@settings(parent=settings.get_profile("default"), max_examples=EXPLORE or 20, derandomize=not EXPLORE,
          deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(damage=DAMAGE)
def test_every_command_on_a_damaged_database_succeeds_or_says_one_line(
        pristine, tmp_path_factory, monkeypatch, damage):
    import mpsprobe.engine.sweep as sweep
    monkeypatch.setattr(sweep, "Pool", StandInPool)
    base, ops = pristine
    folder = tmp_path_factory.mktemp("fuzz")
    path = folder / "bad.db"
    shutil.copy(base, path)
    for kind, a, b, value in damage:
        _damage(path, kind, a, b, None if value is None else str(value))
    other = folder / "other.db"
    shutil.copy(base, other)
    commands = [
        (["run", "--db", path, "--device", "cpu", "--ops", "abs", "--samples", "1"], (0,)),
        (["findings", "--db", path], (0,)),
        (["ops", "abs", "--db", path], (0,)),
        (["check", ops, "--db", path], (0, 1)),
        (["migrate", path], (0,)),
        (["merge", path, "-o", folder / "new.db"], (0,)),
        (["merge", other, "-o", path], (0,)),
    ]
    for args, ok in commands:
        args = [str(a) for a in args]
        with time_limit(COMMAND_LIMIT_S):
            result = CliRunner().invoke(cli, args, catch_exceptions=True)
        _assert_one_line_or_success(args, result, ok)
        # A command's process ends when it does; here, drop its traceback's frames so a
        # cursor they hold (a read lock, in rollback-journal mode) goes with them.
        del result
        gc.collect()
    with time_limit(COMMAND_LIMIT_S):
        _serve(path)
