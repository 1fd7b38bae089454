"""`mpsprobe declared` and `mpsprobe findings`: what PyTorch declares, beside what we measure."""
import json
from collections import Counter

import click

from mpsprobe.cli import UserError
from mpsprobe.vocabulary import STATUSES


def _open(db_path, readonly=False):
    from mpsprobe.db import declared as declared_db, schema
    try:
        db = schema.open_db(db_path, readonly=readonly)
    except schema.DatabaseError as e:
        raise UserError(str(e)) from None
    if not readonly:
        declared_db.ensure(db)
    return db


def _status_line(rows):
    counts = Counter(r["status"] for r in rows)
    return "  ".join(f"{s} {counts[s]}" for s in STATUSES if counts.get(s))


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
    from mpsprobe.db import declared as declared_db
    from mpsprobe.ops.declared import predict as decl, wheel
    from mpsprobe.ops.opinfo import CatalogueError, load_op_db

    if common_mps_file and not torch_version:
        raise UserError("--common-mps needs --torch-version (the version the file belongs to)")
    if installed is None:
        installed = not wheels and not common_mps_file
    sources = []
    try:
        if installed:
            sources.append(wheel.installed())
        sources += [wheel.from_wheel(w) for w in wheels]
    except wheel.WheelError as e:
        raise UserError(str(e)) from None
    if common_mps_file:
        with open(common_mps_file, encoding="utf-8") as f:
            sources.append(wheel.TorchFiles(torch_version, common_mps_file, common_mps=f.read()))
    if not sources and not opinfo_cuda:
        raise UserError("nothing to read: give --wheel, --common-mps, --installed or --opinfo-cuda")

    db = _open(db_path)
    try:
        opinfos = load_op_db()
    except CatalogueError as e:
        raise UserError(str(e)) from None
    import torch
    installed_version = wheel.installed().torch_version if (installed or opinfo_cuda) else None

    readings = []
    for files in sources:
        mps_dtypes = decl.opinfo_dtypes(opinfos, "mps") if files.origin == "installed" else None
        found = decl.read_mps(files, opinfos, macos, mps_dtypes)
        if files.origin == common_mps_file:      # a loose file: no yaml was asked for
            found = [r for r in found if r.source != "native_functions.yaml"]
        readings += found
    if opinfo_cuda:
        readings.append(decl.Reading(installed_version, "cuda", "OpInfo dtypesIfCUDA", "installed",
                                     {"declared": decl.cuda_rows(installed_version, opinfos)}))

    summary = []
    for r in readings:
        options = {"macos": macos, "cuda_available": torch.cuda.is_available()} \
            if r.device == "cuda" or r.source == "common_mps.py" else {}
        if r.error:
            declared_db.record_failure(db, r.torch_version, r.device, r.source, r.origin, r.error)
        else:
            declared_db.record(db, r.torch_version, r.device, r.source, r.origin, r.tables, options)
        item = {"torch_version": r.torch_version, "device": r.device, "source": r.source,
                "origin": r.origin, "ok": not r.error, "error": r.error, "rows": r.n_rows,
                "unknown_conditions": getattr(r, "unknown", [])}
        if "declared" in r.tables:
            item["statuses"] = dict(Counter(x["status"] for x in r.tables["declared"]))
            item["ops"] = len({x["op_id"] for x in r.tables["declared"]})
        summary.append(item)
    if as_json:
        click.echo(json.dumps({"db": db_path, "readings": summary}, indent=2))
    else:
        for item, r in zip(summary, readings):
            head = f"torch {item['torch_version']}  {item['device']:<4}  {item['source']:<21}"
            if item["error"]:
                click.echo(f"{head}  FAILED: {item['error']}")
                continue
            click.echo(f"{head}  {item['rows']} rows  ({item['origin']})")
            if "declared" in r.tables:
                click.echo(f"    {item['ops']} ops: {_status_line(r.tables['declared'])}")
            for text in item["unknown_conditions"]:
                click.echo(f"    could not decide: {text}")
        click.echo(f"recorded in {db_path}")
    if not any(item["ok"] for item in summary):
        raise UserError("no source could be read")


def _print_findings(report, limit):
    from mpsprobe.db.query.findings import KINDS
    run, dec = report["run"], report["declared"]
    click.echo(f"run {run['id'][:12]} ({run['device']}, torch {run['torch_version']}) vs "
               f"declared {dec['device']} for torch {dec['torch_version']} ({dec['pairs']} pairs)")
    if dec["device"] == "cuda":       # OpInfo's dtype table: the probe checks itself against it
        upstream = {"stale_xfail": "OpInfo under-declares, or the probe misses a failure",
                    "undeclared_failure": "OpInfo over-declares, or the probe fails wrongly"}
    else:
        upstream = {"stale_xfail": "stale expectation: worth a PR upstream",
                    "undeclared_failure": "undeclared bug: worth an issue upstream",
                    "composite_passes": "composite: decomposes into supported ops"}
    for kind, title in KINDS.items():
        found = [f for f in report["findings"] if f["kind"] == kind]
        if kind == "composite_passes" and dec["device"] != "mps":
            continue
        click.echo(f"\n{title} ({upstream[kind]}): {len(found)}")
        for f in found[:limit]:
            click.echo(f"  {f['op_id']} {f['dtype']}: {f['explanation']}")
        if len(found) > limit:
            click.echo(f"  … {len(found) - limit} more (--limit, or --json for all)")
    a = report["agreement"]
    decided = a["agree"] + a["disagree"]
    rate = f"{a['rate']:.1%}" if a["rate"] is not None else "n/a"
    click.echo(f"\nagreement with the declaration: {rate} ({a['agree']} of {decided} pairs; "
               f"{a['undetermined']} undetermined, {a['undeclared']} measured pairs not declared)")
    for d in a["disagreements"][:limit]:
        click.echo(f"  {d['op_id']} {d['dtype']}: {d['explanation']}")
    if len(a["disagreements"]) > limit:
        click.echo(f"  … {len(a['disagreements']) - limit} more")


@click.command()
@click.option("--db", "db_path", default="mpsprobe.db", show_default=True,
              type=click.Path(dir_okay=False), help="SQLite database to read.")
@click.option("--run", "run_id", default=None, help="Run id or prefix (default: the newest run).")
@click.option("--against", type=click.Choice(["mps", "cuda"]), default=None,
              help="Declaration to compare with (default: the run's device).")
@click.option("--limit", default=20, show_default=True, type=int, help="Lines shown per kind.")
@click.option("--json", "as_json", is_flag=True, help="Print the full report as JSON.")
def findings(db_path, run_id, against, limit, as_json):
    """Compare a run with what PyTorch declares for its device.

    Lists stale expected failures (declared failing, yet passing), undeclared
    failures (declared to work, yet failing), ops without an MPS kernel that
    pass natively, and the rate at which measured support agrees with the
    declaration. Record declarations first with `mpsprobe declared`.

    \b
    Examples:
        mpsprobe findings --db mps.db
        mpsprobe findings --db cuda.db --run 3f2a --json
    """
    from mpsprobe.db.query.findings import FindingsError, compare
    db = _open(db_path, readonly=True)
    try:
        report = compare(db, run_id, against)
    except FindingsError as e:
        raise UserError(str(e)) from None
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        _print_findings(report, limit)
