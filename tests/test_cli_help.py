"""Every command says how to use it: `--help` answers, with examples that parse."""
import re
import shlex

import click
import pytest

from mpsprobe.cli import COMMANDS, cli


def _commands(group, prefix=()):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        yield prefix + (name,)
        if isinstance(command, click.Group):
            yield from _commands(command, prefix + (name,))


ALL = [()] + list(_commands(cli))


def parse_example(line):
    """Parse an example command line against the command it names, as click would
    before running it: an unknown option, a missing value or a bad choice raises."""
    args = shlex.split(line)[1:]
    command, name = cli, "mpsprobe"
    while isinstance(command, click.Group) and args and not args[0].startswith("-"):
        command, name, args = command.get_command(click.Context(command), args[0]), args[0], args[1:]
        assert command is not None, f"no command {name!r} in: {line}"
    command.make_context(name, args)


def test_every_command_is_listed():
    assert {path[0] for path in ALL if path} == set(COMMANDS)


@pytest.mark.parametrize("path", ALL, ids=lambda p: " ".join(p) or "mpsprobe")
def test_help_has_an_example_that_parses(run_cli, path):
    result = run_cli(*path, "--help")
    assert result.exit_code == 0, result.output
    block = re.search(r"^\s+Examples?:\n((?:\s+mpsprobe .*\n)+)", result.output, re.M)
    assert block, result.output
    for line in block.group(1).strip().splitlines():
        parse_example(line.strip())


def test_a_wrong_example_would_be_seen():
    with pytest.raises(click.NoSuchOption):
        parse_example("mpsprobe run --opps add")
    with pytest.raises(click.BadParameter):
        parse_example("mpsprobe check m.py --fail-on sometimes")


def readme_commands():
    """Every `mpsprobe …` command the README shows in its bash blocks or after a
    console prompt (a synopsis with [optional] parts aside)."""
    from pathlib import Path
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    found = []
    for kind, block in re.findall(r"```(bash|console)\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = line.strip()
            if kind == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            line = re.sub(r"^\.venv/bin/", "", line.split(" #")[0]).strip()
            if line.startswith("mpsprobe ") and "[" not in line:
                found.append(line)
    return found


def test_the_readmes_commands_parse():
    commands = readme_commands()
    assert len(commands) > 10 and any(c.startswith("mpsprobe ops ") for c in commands)
    for line in commands:
        parse_example(line)


def test_ci_runs_the_readmes_test_command():
    """`.ci/run` runs exactly the full-suite command the README gives a new user."""
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text(encoding="utf-8")
    given = {re.sub(r"^\.venv/bin/", "", c).strip() for c in re.findall(r"# tests instead: (.*)", readme)}
    ci = [line.strip() for line in (root / ".ci" / "run").read_text(encoding="utf-8").splitlines()
          if "-m pytest" in line and not line.lstrip().startswith("#")]
    assert len(given) == 1 and ci == list(given), (given, ci)
