"""`mpsprobe run`: sweep the op catalogue on a device into SQLite."""
import json
import sys

import click

from mpsprobe.cli import UserError
from mpsprobe.vocabulary import STATUSES
from mpsprobe.engine.sweep import Sweep, SweepError, SweepOptions, parse_shard


def _split(text):
    return [x.strip() for x in (text or "").replace("\n", ",").split(",") if x.strip()]


def _describe_target(env):
    where = f"{env['device']} ({env['device_name']})"
    if env.get("backend"):
        return f"target: {where}, test backend {env['backend']}: NOT a real device measurement"
    if env["device"].startswith("mps"):
        return f"target: {where} on macOS {env.get('os_version')}, {env.get('chip')}"
    return (f"target: {where} on {env.get('os_name')}: this is not an MPS measurement; "
            f"results are filed under device {env['device']!r}")


def _counts_line(counts):
    return "  ".join(f"{s} {counts[s]}" for s in STATUSES if counts.get(s))


@click.command()
@click.option("--db", "db_path", default="mpsprobe.db", show_default=True,
              type=click.Path(dir_okay=False), help="SQLite database to record into.")
@click.option("--device", default="auto", show_default=True,
              help="Target device: auto (mps, else cuda, else cpu), mps, cuda, cuda:1, cpu.")
@click.option("--ops", "ops", default="", help="Comma-separated op names or globs (default: all).")
@click.option("--dtypes", default="", help="Comma-separated dtypes (default: all the op supports on CPU).")
@click.option("--samples", default=3, show_default=True, type=int, help="Sample inputs per (op, dtype).")
@click.option("--timing/--no-timing", default=True, show_default=True, help="Time reference and target.")
@click.option("--workers", default=0, type=int,
              help="Worker processes (default: one per CPU core; one on MPS, since a Mac has one GPU and "
                   "each worker holds its own Metal memory there: parallel workers would run each other out "
                   "of memory and time each other's work. More are allowed.)")
@click.option("--timeout", default=60.0, show_default=True, type=float, help="Seconds one case may take.")
@click.option("--mps-fallback/--no-mps-fallback", default=False, show_default=True,
              help="Set PYTORCH_ENABLE_MPS_FALLBACK=1 in workers: unimplemented ops fall back instead of failing.")
@click.option("--torch", "torch_spec", default="current", show_default=True,
              help="Which torch to probe: current, a version (2.5.1), a pip requirement, nightly, "
                   "or a path to a Python that has torch. Versions get a cached virtual "
                   "environment (see `mpsprobe envs list`).")
@click.option("--shard", default=None, help="Run only slice I of N, like 2/4 (for splitting a sweep).")
@click.option("--resume", is_flag=True, help="Continue the newest unfinished run in the DB.")
@click.option("--fresh", is_flag=True, help="Start a new run even if a matching one exists.")
@click.option("--backend", default=None, hidden=True,
              help="FILE.py[:factory] defining a custom target (used by the test suite).")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable summary.")
def run(db_path, device, ops, dtypes, samples, timing, workers, timeout, mps_fallback,
        torch_spec, shard, resume, fresh, backend, as_json):
    """Probe every OpInfo op on a device and record the results.

    Each case (op, dtype, sample) runs on the CPU and on the target in an
    isolated worker; support, CPU fallback, numerical error and timing go into
    the database. Re-running the same command continues an interrupted run.

    \b
    Examples:
        mpsprobe run
        mpsprobe run --ops 'add,nn.functional.conv2d' --dtypes float16,float32 --samples 3
        mpsprobe run --device cuda --no-timing --db cuda.db
        mpsprobe run --torch 2.5.1 --ops add --db history.db
    """
    if resume and fresh:
        raise UserError("--resume and --fresh contradict each other")
    from mpsprobe.envs import EnvError, ensure
    try:
        python = ensure(torch_spec, say=lambda text: click.echo(text, err=True))
    except EnvError as e:
        raise UserError(str(e)) from None
    try:
        options = SweepOptions(
            db_path=db_path, device=device, backend=backend, ops=_split(ops),
            dtypes=_split(dtypes), samples=samples, timing=timing, workers=workers,
            timeout=timeout, mps_fallback=mps_fallback,
            shard=parse_shard(shard) if shard else None, python=python,
            resume=resume, fresh=fresh)
        sweep = Sweep(options)
        env, pairs = sweep.prepare()
        click.echo(_describe_target(env), err=True)
        todo = sweep.open()
    except SweepError as e:
        raise UserError(str(e)) from None
    if sweep.resumed:
        click.echo(f"resuming run {sweep.writer.run_id}: {len(pairs) - len(todo)} of "
                   f"{len(pairs)} (op, dtype) pairs already done", err=True)
    counts = dict.fromkeys(STATUSES, 0)

    def show(_):
        return _counts_line(counts)

    with click.progressbar(length=len(todo), label=f"{len(todo)} pairs", file=sys.stderr,
                           show_pos=True, show_eta=True, item_show_func=show) as bar:
        def on_case(pair, index, result):
            counts[result["status"]] += 1

        def on_pair(pair, n):
            bar.update(1)
        try:
            state, total, all_counts = sweep.run(todo, on_case, on_pair)
        except KeyboardInterrupt:
            click.echo(f"\ninterrupted; re-run the same command to resume run "
                       f"{sweep.writer.run_id}", err=True)
            sys.exit(130)
    run_row = sweep.writer.run
    summary = {"run_id": run_row["id"], "db": db_path, "state": state, "cases": total,
               "pairs": len(pairs), "counts": all_counts, "device": env["device"],
               "device_name": env["device_name"], "torch": env["torch_version"],
               "os": f"{env.get('os_name')} {env.get('os_version') or ''}".strip()}
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo(f"run {summary['run_id']}: {total} cases in {len(pairs)} (op, dtype) pairs, "
               f"torch {summary['torch']}, {summary['device']} ({summary['device_name']})")
    width = max(len(s) for s in STATUSES)
    for status in STATUSES:
        if all_counts.get(status):
            click.echo(f"  {status:<{width}}  {all_counts[status]:>7}")
    click.echo(f"recorded in {db_path}")
