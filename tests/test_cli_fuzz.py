"""Fuzzing the command line: whatever the arguments, never a traceback.

Hypothesis draws argument lists from real option names, near-misses and
hostile values. Every example ends with `--db` pointing at a file that is not
SQLite (the last --db wins in click), so no example can start a sweep: each
one is refused by the parser, by early validation, or by the database check.
`--torch` is left out: any version but "current" builds a virtual environment.
No value holds a NUL byte: a real command line cannot carry one.
"""
import string

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings, strategies as st

from mpsprobe.cli import COMMANDS, cli

RUN_OPTIONS = ["--db", "--device", "--ops", "--dtypes", "--samples", "--timing", "--no-timing",
               "--workers", "--timeout", "--mps-fallback", "--no-mps-fallback", "--shard",
               "--resume", "--fresh", "--json", "--help", "--backend",
               # near-misses and junk
               "--sample", "--op", "-x", "--", "-", "--samples=", "--shard=1/0", "--workers=-3",
               "--timeout=nan", "--timeout=-1", "--device=", "--dtypes=,,,"]
VALUES = st.one_of(
    st.sampled_from(["", " ", "0", "-1", "1/0", "0/0", "3/2", "2/4", "1e309", "nan", "inf",
                     "cuda:99", "mps", "cpu", "gpu", "float33", "float16,,", "add,*,", "*",
                     "../../etc/passwd", "nonexistent/dir/x.db", "\x01\x7f", "é∂ƒ", "a" * 300,
                     "--ops", "--db", "9" * 40]),
    st.text(alphabet=string.printable + "é∂ƒ\u202e", max_size=20),
    st.integers(min_value=-2**70, max_value=2**70).map(str),
)
TOKENS = st.one_of(st.sampled_from(RUN_OPTIONS), VALUES)


def _invoke(args, guard):
    result = CliRunner().invoke(cli, args + ["--db", str(guard)], catch_exceptions=True)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args, repr(result.exception), result.output[-1000:])
    assert "Traceback" not in result.output, (args, result.output[-1000:])
    return result


def _guard(tmp_path_factory):
    path = tmp_path_factory.getbasetemp() / "not-a-database.db"
    if not path.exists():
        path.write_text("this is not SQLite\n")
    return path


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(TOKENS, max_size=8))
def test_run_never_tracebacks(tmp_path_factory, args):
    guard = _guard(tmp_path_factory)
    result = _invoke(["run"] + args, guard)
    if result.exit_code not in (0,):  # 0: --help
        assert result.exit_code == 2, (args, result.exit_code, result.output[-500:])
    assert guard.read_text() == "this is not SQLite\n"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(VALUES, max_size=4), name=st.text(alphabet=string.ascii_letters + "-_", min_size=1, max_size=12))
def test_unknown_commands_never_traceback(tmp_path_factory, name, args):
    if name in COMMANDS:
        return
    result = CliRunner().invoke(cli, [name] + args, catch_exceptions=True)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2 and "Traceback" not in result.output


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(st.one_of(st.sampled_from(["--port", "--time-limit", "--host", "-p", "--live",
                                                 "--json", "-o", "--output", "--help"]), VALUES),
                     max_size=6),
       command=st.sampled_from(["serve", "merge", "migrate"]))
def test_database_commands_never_traceback(tmp_path_factory, command, args):
    # The guard file is passed positionally as well: it is never a usable database,
    # so serve cannot start a server and merge/migrate cannot write.
    guard = _guard(tmp_path_factory)
    result = CliRunner().invoke(cli, [command, str(guard)] + args + ["-o", str(guard)]
                                if command == "merge" else [command, str(guard)] + args,
                                catch_exceptions=True)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args, repr(result.exception), result.output[-1000:])
    assert "Traceback" not in result.output
    assert guard.read_text() == "this is not SQLite\n"
