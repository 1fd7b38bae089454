"""`mpsprobe declared`: record what PyTorch declares about MPS (and CUDA), beside what we measure."""
import sys
import time

import click

from mpsprobe.cli import UserError, output


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
@click.option("--versions", "versions", default=None, metavar="RANGE",
              help="Download and record these releases' macOS arm64 wheels: 2.0..2.13 (each "
                   "minor's latest patch), 2.8.0, or a comma-separated list.")
@click.option("--cache-dir", default=None, envvar="MPSPROBE_WHEEL_CACHE",
              type=click.Path(file_okay=False),
              help="Where --versions keeps downloaded wheels [default: ~/.cache/mpsprobe/wheels; "
                   "env MPSPROBE_WHEEL_CACHE].")
@click.option("--bundle", "bundle_path", default=None, type=click.Path(dir_okay=False),
              help="Write the knowledge base file (what check answers from on a fresh install) "
                   "for these releases instead of recording into --db.")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable summary.")
def declared(db_path, wheels, installed, common_mps_file, torch_version, opinfo_cuda, macos,
             versions, cache_dir, bundle_path, as_json):
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
        mpsprobe declared --db history.db --versions 2.0..2.13
        mpsprobe declared --versions 2.0..2.15 --bundle db/knowledge/mps.json.gz

    With --versions, each release's wheel is downloaded once (pip, ~70 MB) and
    cached; a release that cannot be downloaded or read is reported on its
    line and the others are still recorded (exit 0 when at least one is).

    With --bundle, the releases (--versions, --wheel or the installed torch)
    are written as the knowledge base file instead, for a macOS new enough
    for every gate (the gates are kept in the file); --db is not touched.
    """
    import mpsprobe
    from mpsprobe.ops.declared.reading import DeclaredError
    if bundle_path is not None:
        if common_mps_file or torch_version or opinfo_cuda:
            raise UserError("--bundle reads wheels or the installed torch: leave out "
                            "--common-mps, --torch-version and --opinfo-cuda")
        return _bundle(bundle_path, versions, wheels, installed, cache_dir, as_json)
    if versions is not None:
        if wheels or common_mps_file or torch_version or installed or opinfo_cuda:
            raise UserError("--versions reads downloaded wheels only: leave out --wheel, "
                            "--common-mps, --torch-version, --installed and --opinfo-cuda")
        return _history(db_path, versions, cache_dir, macos, as_json)
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


def _history(db_path, versions, cache_dir, macos, as_json):
    import mpsprobe
    from mpsprobe.ops.declared import history
    from mpsprobe.ops.declared.reading import DeclaredError
    n = len(history.parse_range(versions))       # a malformed range fails here, before any work
    started, failed = time.monotonic(), None
    with click.progressbar(length=n, label="torch releases", file=sys.stderr,
                           item_show_func=lambda item: item and f"{item['asked']} done") as bar:
        try:
            results = mpsprobe.record_declared_history(
                db_path, versions, cache_dir, macos=macos,
                on_version=lambda item: bar.update(1, item))
        except DeclaredError as e:
            results, failed = e.summary, e
    if as_json:
        click.echo(output.as_json({"db": db_path, "releases": results}))
    else:
        click.echo("\n".join(output.declared_history(results, db_path,
                                                      time.monotonic() - started)))
    if failed:
        raise failed


def _bundle(path, versions, wheels, installed, cache_dir, as_json):
    import mpsprobe
    from mpsprobe.ops.declared import history
    from mpsprobe.ops.declared.reading import DeclaredError
    if versions is not None:
        history.parse_range(versions)            # a malformed range fails before any work
    started, failed = time.monotonic(), None
    try:
        results = mpsprobe.build_knowledge(path, versions=versions, wheels=wheels,
                                           installed=installed, cache_dir=cache_dir)
    except DeclaredError as e:
        results, failed = e.summary, e
    seconds = time.monotonic() - started
    if as_json:
        click.echo(output.as_json({"bundle": path, "releases": results,
                                   "seconds": round(seconds, 1)}))
    else:
        for r in results:
            said = (f"torch {r['torch_version']}: {r['kernels']} aten functions, {r['rows']} "
                    f"declared rows" + (f" (could not read: {', '.join(r['failed_sources'])})"
                                        if r["failed_sources"] else "")
                    if r["ok"] else f"FAILED: {r['why']}")
            click.echo(f"{r['asked']:<10} {said}  [{r['seconds']} s]")
        if not failed:
            import os
            click.echo(f"wrote {path}: {sum(r['ok'] for r in results)} releases, "
                       f"{os.path.getsize(path) / 1e6:.2f} MB, {seconds:.0f} s")
    if failed:
        raise failed
