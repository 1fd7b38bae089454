"""The `mpsprobe` command line: a thin layer over the Python API.

Each subcommand lives in its own module under mpsprobe.cli and is only
imported when used, so `mpsprobe --help` stays fast and no command pays for
another's imports (torch, Datasette).
"""
import importlib

import click

import mpsprobe

COMMANDS = {
    "run": "mpsprobe.cli.run:run",
    "envs": "mpsprobe.cli.envs:envs",
    "merge": "mpsprobe.cli.merge:merge",
    "migrate": "mpsprobe.cli.merge:migrate",
    "serve": "mpsprobe.cli.serve:serve",
    "publish": "mpsprobe.cli.serve:publish",
    "check": "mpsprobe.cli.check:check",
    "declared": "mpsprobe.cli.declared:declared",
    "findings": "mpsprobe.cli.declared:findings",
}


class UserError(click.ClickException):
    """Bad input: printed as one line, exit status 2, nothing written."""
    exit_code = 2


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        module, _, attr = COMMANDS[name].partition(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup)
@click.version_option(mpsprobe.__version__, prog_name="mpsprobe")
def cli():
    """Measure which PyTorch ops work on Apple's MPS backend (or any device),
    and keep the answers in SQLite.

    \b
    Example:
        mpsprobe run --ops 'add,nn.functional.conv2d' --dtypes float16,float32
    """
