"""`mpsprobe ops [PATTERN]`: list and search the op catalogue's names."""
import click

from mpsprobe.cli import UserError, output


@click.command()
@click.argument("pattern", required=False, default="")
@click.option("--db", "db_path", default=None, type=click.Path(dir_okay=False),
              help="Also show each op's status on MPS: from this database's MPS run, else "
                   "from what PyTorch declares (read only).")
@click.option("--run", "run_id", default=None,
              help="With --db: the statuses of this run instead (an id prefix; any device, labelled).")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
def ops(pattern, db_path, run_id, as_json):
    """List op names: OpInfo name, variant, aten name and dtypes.

    PATTERN is a substring of the op id or its aten name (conv), or a glob
    (nn.functional.*). With --db, each op's worst status over its dtypes on
    MPS, from the best evidence: the database's MPS run (bare metal, then a
    virtual machine, then a test backend, labelled), else what PyTorch declares
    for MPS in the installed torch's release; a CPU or CUDA run never answers.
    The names are what `run --ops` takes. The catalogue is read from OpInfo
    once per torch build and cached.

    \b
    Examples:
        mpsprobe ops conv
        mpsprobe ops 'linalg.*' --db mps.db
        mpsprobe ops argmax --db mine.db --run 3f2a
    """
    import sys
    import mpsprobe
    from mpsprobe.ops import catalogue
    data = catalogue.current(say=lambda text: click.echo(text, err=True))
    found = catalogue.search(data, pattern)
    run = statuses = None
    if run_id and not db_path:
        raise UserError("--run picks a run of a database: give --db too")
    if db_path:
        run, statuses = mpsprobe.op_statuses(db_path, run_id)
    if as_json:
        click.echo(output.as_json([dict(r, status=(statuses or {}).get(r["op"])) for r in found]))
        return
    if not found:
        hint = catalogue.suggest(pattern, {r["op"] for r in data["ops"]})
        click.echo(f"no op matches {pattern!r}" + (f"; did you mean {', '.join(hint)}?" if hint else ""),
                   err=True)
        sys.exit(1)
    click.echo("\n".join(output.ops_table(found, statuses, run)))
