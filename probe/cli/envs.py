"""`mpsprobe envs`: the cached torch environments that `run --torch` builds."""
import json

import click

from mpsprobe.cli import UserError


def _size(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


@click.group()
def envs():
    """See and clean the torch environments cached by `mpsprobe run --torch`.

    They live under the user cache directory (set MPSPROBE_CACHE to move it).

    \b
    Examples:
        mpsprobe envs list
        mpsprobe envs rm torch-2.5.1-py3.11
        mpsprobe envs rm --all
    """


@envs.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable list.")
def list_command(as_json):
    """List cached environments: torch version, Python, size, state.

    \b
    Example:
        mpsprobe envs list
    """
    from mpsprobe.envs import envs_dir, list_envs
    found = list_envs()
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    if not found:
        click.echo(f"no cached environments in {envs_dir()}")
        return
    width = max(len(e["name"]) for e in found)
    for e in found:
        click.echo(f"{e['name']:<{width}}  torch {e['torch_version'] or '?':<16} "
                   f"python {e['python'] or '?':<8} {_size(e['size_bytes']):>10}  {e['state']}")
    click.echo(f"in {envs_dir()}")


@envs.command("rm")
@click.argument("names", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Remove every cached environment.")
def rm_command(names, everything):
    """Remove cached environments by name (see `mpsprobe envs list`).

    \b
    Example:
        mpsprobe envs rm torch-2.5.1-py3.11
    """
    from mpsprobe.envs import EnvError, remove_envs
    if not names and not everything:
        raise UserError("name the environments to remove, or pass --all")
    try:
        removed = remove_envs(names, everything)
    except EnvError as e:
        raise UserError(str(e)) from None
    for name in removed:
        click.echo(f"removed {name}")
