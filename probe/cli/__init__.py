"""The `mpsprobe` command line: a thin layer over the Python API (mpsprobe.api).

Each subcommand lives in its own module in this package and is only imported
when used, so `mpsprobe --help` stays fast and no command pays for another's
imports (torch, Datasette). What the commands print is formatted in
cli/output.py. Any MpsprobeError a command raises (or an SQLite error from a
damaged file) becomes one line on stderr and exit status 2, here and only
here (MpsprobeGroup.invoke).
"""
import importlib
import sqlite3

import click

import mpsprobe
from mpsprobe.errors import MpsprobeError

COMMANDS = {
    "run": "mpsprobe.cli.run:run",
    "bench": "mpsprobe.cli.bench:bench",
    "envs": "mpsprobe.cli.envs:envs",
    "merge": "mpsprobe.cli.merge:merge",
    "migrate": "mpsprobe.cli.migrate:migrate",
    "serve": "mpsprobe.cli.serve:serve",
    "publish": "mpsprobe.cli.publish:publish",
    "check": "mpsprobe.cli.check:check",
    "declared": "mpsprobe.cli.declared:declared",
    "findings": "mpsprobe.cli.findings:findings",
    "ops": "mpsprobe.cli.ops:ops",
    "submit": "mpsprobe.cli.submit:submit",
    "verify": "mpsprobe.cli.verify:verify",
    "coverage": "mpsprobe.cli.coverage:coverage",
}


class UserError(MpsprobeError):
    """Bad input found by a command itself: one line, exit status 2, nothing written."""


class _OneLine(click.ClickException):
    exit_code = 2


class MpsprobeGroup(click.Group):
    """Loads commands lazily; turns every MpsprobeError into one line and exit 2."""

    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        module, _, attr = COMMANDS[name].partition(":")
        return getattr(importlib.import_module(module), attr)

    def parse_args(self, ctx, args):
        # The command line as typed, for the runs it makes to record (runs.command).
        ctx.meta["mpsprobe.argv"] = ["mpsprobe", *args]
        return super().parse_args(ctx, args)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except MpsprobeError as e:
            text = str(e).strip().splitlines()
            raise _OneLine(text[0] if text else type(e).__name__) from None
        except sqlite3.DatabaseError as e:
            # Damage the store's checks on opening cannot see (quick_check reads
            # structure, not every value) still ends in one line.
            raise _OneLine(f"the database could not be read: {e}") from None
        except UnicodeDecodeError as e:
            # SQLite's own message, or a value it returns, on a damaged file need not be UTF-8.
            raise _OneLine(f"could not decode text read from a file (is the database damaged?): {e}") from None


@click.group(cls=MpsprobeGroup)
@click.version_option(mpsprobe.__version__, prog_name="mpsprobe")
def cli():
    """Measure which PyTorch ops work on Apple's MPS backend (or any device),
    and keep the answers in SQLite.

    \b
    Example:
        mpsprobe run --ops 'add,nn.functional.conv2d' --dtypes float16,float32
    """
