"""Every command says how to use it: `--help` answers, with an example."""
import re

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


def test_every_command_is_listed():
    assert {path[0] for path in ALL if path} == set(COMMANDS)


@pytest.mark.parametrize("path", ALL, ids=lambda p: " ".join(p) or "mpsprobe")
def test_help_has_an_example(run_cli, path):
    result = run_cli(*path, "--help")
    assert result.exit_code == 0, result.output
    assert re.search(r"^\s+Examples?:\n\s+mpsprobe ", result.output, re.M), result.output
