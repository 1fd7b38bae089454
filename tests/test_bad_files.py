"""Bad database files: a clear one-line error, no traceback, and the file left as it was.

Extends test_cli_errors.py (not SQLite, someone else's SQLite, missing
directory) to truncated databases, a newer schema met by every command that
reads a database, and read-only files and directories. Tests run as root in
CI, and root ignores permission bits: the read-only cases run the CLI in a
child process without the capabilities that let root do so.
"""
import ctypes
import hashlib
import os
import sqlite3
import subprocess
import sys

import pytest

from mpsprobe.db import schema
from mpsprobe.db.writer import RunWriter

PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2


def small_db(path):
    """An up-to-date mpsprobe DB with one run and a few results, checkpointed to one file."""
    db = schema.open_db(path)
    writer = RunWriter.start(db, "key", {"torch_version": "2.11.0", "device": "cpu",
                                         "hostname": "elsewhere"}, {}, "0.1.0", 1)
    for i in range(40):
        pair = {"op": f"op{i}", "dtype": "float32"}
        writer.record(pair, 0, "f32[3]", {"status": "pass", "message": "x" * 500})
        writer.pair_done(pair, 1)
    writer.finish("complete", 1.0)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.execute("PRAGMA journal_mode = DELETE")
    db.conn.close()
    return path


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sidecars(path):
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name + "-"))


def assert_clean_error(exit_code, output, needle):
    assert exit_code == 2, output
    assert "Traceback" not in output, output
    errors = [l for l in output.splitlines() if l.startswith("Error: ")]
    assert len(errors) == 1 and needle in errors[0], output


RUN = ["run", "--device", "cpu", "--ops", "add", "--samples", "1", "--no-timing"]


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.99])
def test_truncated_database_is_refused_untouched(tmp_path, keep, run_cli):
    whole = small_db(tmp_path / "whole.db").read_bytes()
    assert len(whole) > 8 * 4096  # truncation has pages to lose
    cut = tmp_path / "cut.db"
    cut.write_bytes(whole[: int(len(whole) * keep)])
    before = digest(cut)
    for args in (RUN + ["--db", cut], ["serve", cut], ["migrate", cut]):
        result = run_cli(*args)
        assert_clean_error(result.exit_code, result.output, str(cut))
        assert digest(cut) == before
    assert sidecars(cut) == []


def test_newer_schema_is_refused_by_every_command_that_reads_it(tmp_path, run_cli):
    path = small_db(tmp_path / "future.db")
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE mpsprobe_meta SET value = ? WHERE key = 'schema_version'",
                     [str(schema.SCHEMA_VERSION + 1)])
    conn.close()
    before = digest(path)
    other = small_db(tmp_path / "other.db")
    model = os.path.join(os.path.dirname(__file__), "models", "convnet.py")
    for args in (RUN + ["--db", path], RUN + ["--db", path, "--resume"], ["serve", path],
                 ["merge", other, "-o", path], ["merge", path, "-o", other],
                 ["check", model, "--db", path]):
        result = run_cli(*args)
        assert result.exit_code != 0, (args, result.output)
        assert "Traceback" not in result.output, (args, result.output)
        assert f"schema version {schema.SCHEMA_VERSION + 1}" in result.output, (args, result.output)
        assert digest(path) == before, args


# ------------------------------------------------------------ permissions (even as root)

def _drop_root_override():
    """In the child: lose the capabilities that let root ignore permission bits."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and os.geteuid() == 0:
            os._exit(97)  # cannot drop it: the test is skipped


def mpsprobe_unprivileged(*args, cwd):
    done = subprocess.run([sys.executable, "-m", "mpsprobe", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          preexec_fn=_drop_root_override if os.geteuid() == 0 else None)
    if done.returncode == 97:
        pytest.skip("cannot drop CAP_DAC_OVERRIDE here")
    return done


def test_read_only_database_file_is_refused_untouched(tmp_path):
    path = small_db(tmp_path / "ro.db")
    path.chmod(0o444)
    before = digest(path)
    done = mpsprobe_unprivileged(*RUN, "--db", path, cwd=tmp_path)
    assert_clean_error(done.returncode, done.stderr, "ro.db is not writable")
    assert digest(path) == before and sidecars(path) == []


def test_database_in_a_read_only_directory_is_refused_untouched(tmp_path):
    folder = tmp_path / "shelf"
    folder.mkdir()
    path = small_db(folder / "kept.db")
    folder.chmod(0o555)
    try:
        before = digest(path)
        done = mpsprobe_unprivileged(*RUN, "--db", path, cwd=tmp_path)
        assert_clean_error(done.returncode, done.stderr, "directory")
        assert digest(path) == before and sidecars(path) == []
        # A new database cannot be created there either.
        done = mpsprobe_unprivileged(*RUN, "--db", folder / "new.db", cwd=tmp_path)
        assert_clean_error(done.returncode, done.stderr, "not writable")
        assert sorted(p.name for p in folder.iterdir()) == ["kept.db"]
    finally:
        folder.chmod(0o755)


SERVE_ONE_PAGE = """
import asyncio, sys
from mpsprobe.site import check_database, make_datasette
check_database(sys.argv[1])
ds = make_datasette(sys.argv[1])
async def page():
    await ds.invoke_startup()
    return (await ds.client.get("/-/matrix")).status_code
print(asyncio.run(page()))
"""


@pytest.mark.slow
def test_a_finished_run_is_read_by_every_command_from_a_read_only_directory(tmp_path, run_cli):
    """What a sweep leaves is one file that read-only media can serve, merge, check and migrate."""
    folder = tmp_path / "shelf"
    folder.mkdir()
    path = folder / "done.db"
    assert run_cli(*RUN, "--passes", "forward", "--workers", "1", "--db", path).exit_code == 0
    assert sorted(p.name for p in folder.iterdir()) == ["done.db"]
    model = os.path.join(os.path.dirname(__file__), "models", "convnet.py")
    folder.chmod(0o555)
    try:
        before = digest(path)
        for args in (["migrate", path], ["merge", path, "-o", tmp_path / "all.db"],
                     ["check", model, "--db", path], ["ops", "add", "--db", path],
                     ["findings", "--db", path, "--against", "cuda"]):
            done = mpsprobe_unprivileged(*args, cwd=tmp_path)
            assert "readonly" not in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
            if args[0] == "findings":   # it reads the run, then wants declarations
                assert done.returncode == 2 and "declarations" in done.stderr, done.stderr
            else:
                assert done.returncode in (0, 1), (args, done.stderr)
        served = subprocess.run([sys.executable, "-c", SERVE_ONE_PAGE, str(path)], cwd=tmp_path,
                                capture_output=True, text=True, timeout=120,
                                preexec_fn=_drop_root_override if os.geteuid() == 0 else None)
        assert served.stdout.split()[-1:] == ["200"], served.stderr[-2000:]
        assert digest(path) == before and sorted(p.name for p in folder.iterdir()) == ["done.db"]
    finally:
        folder.chmod(0o755)


def test_schema_text_that_does_not_decode_is_one_line_everywhere(tmp_path, run_cli):
    """A flipped byte inside sqlite_master's text (found by the damaged-database fuzz):
    the site's check, the Python API and the CLI all refuse it in one line, untouched."""
    import mpsprobe
    from mpsprobe.errors import MpsprobeError
    from mpsprobe.site import check_database
    path = tmp_path / "bad.db"
    schema.open_db(str(path)).conn.close()
    conn = sqlite3.connect(path)
    name = conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' LIMIT 1").fetchone()[0]
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_master SET name = CAST(X'BA' AS TEXT) || name WHERE name = ?", [name])
    conn.commit()
    conn.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    for read in (check_database, lambda p: mpsprobe.open_db(p, readonly=True)):
        with pytest.raises(MpsprobeError) as refused:
            read(str(path))
        assert len(str(refused.value).splitlines()) == 1 and "does not decode" in str(refused.value)
    result = run_cli("findings", "--db", str(path))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
