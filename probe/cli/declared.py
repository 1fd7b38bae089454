"""`mpsprobe declared`: record what PyTorch declares about MPS (and CUDA), beside what we measure."""
import click

from mpsprobe.cli import output


@click.command()
@click.option("--db", "db_path", default="mpsprobe.db", show_default=True,
              type=click.Path(dir_okay=False), help="SQLite database to record into.")
@click.option("--wheel", "wheels", multiple=True, type=click.Path(dir_okay=False),
              help="A torch wheel file (any platform) to read instead of the installed torch; repeatable.")
@click.option("--installed/--no-installed", default=None,
              help="Read the installed torch (default: yes, unless --wheel or --common-mps is given).")
@click.option("--common-mps", "common_mps_file", type=click.Path(dir_okay=False, exists=True),
              help="A loose common_mps.py (or an old test/test_mps.py) to read; needs --torch-version.")
@click.option("--torch-version", default=None, help="The torch version --common-mps belongs to.")
@click.option("--opinfo-cuda", is_flag=True,
              help="Also record OpInfo's CUDA dtype declarations (device 'cuda'), from the installed torch.")
@click.option("--macos", default=26.0, show_default=True, type=float,
              help="The macOS version whose gated expectations apply.")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable summary.")
def declared(db_path, wheels, installed, common_mps_file, torch_version, opinfo_cuda, macos, as_json):
    """Record what PyTorch declares about MPS (and CUDA), without the device.

    Reads, from the installed torch or from wheel files (any platform, never
    installed): the MPS kernels of native_functions.yaml and the MPS test
    expectations of common_mps.py, and records one predicted status per
    (OpInfo op, dtype) in the `declared` table, keyed by torch version. Files
    are parsed as data; nothing of the test suite runs. A source that cannot
    be read is reported and recorded as failed; the others are still read.

    \b
    Examples:
        mpsprobe declared --db mps.db
        mpsprobe declared --db mps.db --wheel torch-2.10.0-cp311-none-macosx_11_0_arm64.whl
        mpsprobe declared --db cuda.db --opinfo-cuda
    """
    import mpsprobe
    from mpsprobe.ops.declared.reading import DeclaredError
    failed = None
    try:
        summary = mpsprobe.record_declared(db_path, wheels=wheels, installed=installed,
                                           common_mps=common_mps_file, torch_version=torch_version,
                                           opinfo_cuda=opinfo_cuda, macos=macos)
    except DeclaredError as e:   # every source failed: say which, then fail
        summary, failed = e.summary, e
    if as_json:
        click.echo(output.as_json({"db": db_path, "readings": summary}))
    else:
        click.echo("\n".join(output.declared_summary(summary, db_path)))
    if failed:
        raise failed
