"""`mpsprobe run`: sweep the op catalogue on a device into SQLite."""
import sys

import click

from mpsprobe.cli import output
from mpsprobe.vocabulary import EAGER_PASSES, PASSES, STATUSES

LOG_EVERY_S = 10   # without a terminal, a progress line at most this often


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
                   "of memory and time each other's work; at most 4 on CUDA, whose processes take turns on "
                   "the GPU. More are allowed.)")
@click.option("--timeout", default=60.0, show_default=True, type=float, help="Seconds one case may take.")
@click.option("--mps-fallback/--no-mps-fallback", default=False, show_default=True,
              help="Set PYTORCH_ENABLE_MPS_FALLBACK=1 in workers: unimplemented ops fall back instead of failing.")
@click.option("--torch", "torch_spec", default="current", show_default=True,
              help="Which torch to probe: current, a version (2.5.1), a pip requirement, nightly, "
                   "or a path to a Python that has torch. Versions get a cached virtual "
                   "environment (see `mpsprobe envs list`).")
@click.option("--passes", default=",".join(EAGER_PASSES), show_default=True,
              help="Which passes of each op: forward, backward (gradients), inplace (op_), "
                   "out (out=), compiled (the forward through torch.compile; not by default), "
                   "comma-separated.")
@click.option("--compiled-samples", default=1, show_default=True, type=int,
              help="Samples per (op, dtype) of the compiled pass (at most --samples): each compiles anew.")
@click.option("--compile-timeout", default=60.0, show_default=True, type=float,
              help="Seconds one compiled case may take, compiling included; past it the case is a "
                   "timeout and its worker is replaced.")
@click.option("--layouts", is_flag=True,
              help="Also run each forward sample with its input transposed, strided, expanded "
                   "(stride 0), channels_last (4-D) and at a storage offset: one case per layout, "
                   "named in the results' layout column.")
@click.option("--large", is_flag=True,
              help="Run the large cases instead (matmul, bmm, cat, fill, index_select, index, sum, max "
                   "past 2^31 elements and 4 GB; --ops picks among them), each refused up front in one "
                   "line where the device's free memory cannot hold it.")
@click.option("--shard", default=None, help="Run only slice I of N, like 2/4 (for splitting a sweep).")
@click.option("--resume", is_flag=True, help="Continue the newest unfinished run in the DB.")
@click.option("--fresh", is_flag=True, help="Start a new run even if a matching one exists.")
@click.option("--strict-precision", is_flag=True,
              help="Turn the target's reduced-precision modes (TF32, MPS fast math) off. By default "
                   "they stay on, and a kernel that ran in one is judged against that mode's error.")
@click.option("--runner-label", default=None,
              help="Which fleet machine this is (a CI runner label such as macos-m2-15), kept with the "
                   "run; default: MPSPROBE_RUNNER_LABEL, else the runner's name under GitHub Actions.")
@click.option("--backend", default=None, hidden=True,
              help="FILE.py[:factory] defining a custom target (used by the test suite).")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable summary.")
def run(db_path, device, ops, dtypes, samples, timing, workers, timeout, mps_fallback,
        torch_spec, passes, compiled_samples, compile_timeout, layouts, large, shard, resume, fresh,
        strict_precision, runner_label, backend, as_json):
    """Probe every OpInfo op on a device and record the results.

    Each case (op, dtype, sample) runs on the CPU and on the target in an
    isolated worker; support, CPU fallback, numerical error and timing go into
    the database. Re-running the same command continues an interrupted run.

    \b
    Examples:
        mpsprobe run
        mpsprobe run --ops 'add,nn.functional.conv2d' --dtypes float16,float32 --samples 3
        mpsprobe run --device cuda --no-timing --db cuda.db
        mpsprobe run --ops nn.functional.gelu --passes forward,backward
        mpsprobe run --ops nn.functional.softplus --layouts
        mpsprobe run --ops 'add,softmax' --dtypes float32 --passes forward,compiled
        mpsprobe run --device cuda --large --ops matmul,cat --db large.db
        mpsprobe run --torch 2.5.1 --ops add --db history.db
        mpsprobe run --shard 1/4 --runner-label macos-m2-15 --db shard-1.db
    """
    import shlex
    import time
    # The first line names the target and what will run, before any heavy import.
    click.echo(output.plan_line(device, ops or ("large.*" if large else ""), dtypes,
                                1 if large else samples, db_path, shard, torch_spec, backend), err=True)
    import mpsprobe
    counts = dict.fromkeys(STATUSES, 0)
    began = time.monotonic()
    bar = started = None
    progress = {"pairs": 0, "total_pairs": 0, "cases": 0}
    left = {}   # (op, dtype) -> cases the bar still expects from that pair

    def on_start(run, todo):
        nonlocal bar, started
        from mpsprobe.ops.catalogue import planned_cases
        started = run
        click.echo(output.target(run.env), err=True)
        if run.resumed:
            click.echo(f"resuming run {run.id}: {run.pairs - len(todo)} of {run.pairs} "
                       "(op, dtype) pairs already done", err=True)
        # The bar counts cases against the plan: `samples` per pass each pair has, less
        # those recorded before; a pair that gives fewer (fewer samples) is set right at its end.
        for pair in todo:
            left[pair["op"], pair["dtype"]] = max(0, planned_cases(pair, samples, compiled_samples) - len(pair["done"]))
        progress["total_pairs"] = len(todo)
        if not sys.stderr.isatty():
            return    # a log, not a terminal: a line now and then (on_pair), no bar
        bar = click.progressbar(length=sum(left.values()), label="cases", file=sys.stderr,
                                show_pos=True, show_eta=True,
                                item_show_func=lambda _: output.bar_line(progress, counts))
        bar.__enter__()

    def on_case(pair, index, result):
        counts[result["status"]] += 1
        progress["cases"] += 1
        key = pair["op"], pair["dtype"]
        if left.get(key, 0) > 0:   # a case beyond the plan (a crash charged apart) moves no bar
            left[key] -= 1
            if bar is not None:
                bar.update(1)

    last_line = time.monotonic()

    def on_pair(pair, n):
        nonlocal last_line
        progress["pairs"] += 1
        short = left.pop((pair["op"], pair["dtype"]), 0)
        if bar is not None:
            # Set the bar right when the pair gave fewer cases than planned; else
            # redraw it, so the pairs beside it count this one.
            if short:
                bar.update(short)
            else:
                bar.render_progress()
        elif time.monotonic() - last_line >= LOG_EVERY_S or progress["pairs"] == progress["total_pairs"]:
            last_line = time.monotonic()
            click.echo(f"{progress['cases']} cases, {output.bar_line(progress, counts)}", err=True)
    try:
        samples = 1 if large else samples   # a large case is one case per pair
        run = mpsprobe.probe(ops, dtypes, device, samples, db_path, timing=timing, workers=workers,
                             timeout=timeout, mps_fallback=mps_fallback, shard=shard, passes=passes,
                             torch=torch_spec, backend=backend, resume=resume, fresh=fresh,
                             strict_precision=strict_precision, runner_label=runner_label, layouts=layouts,
                             compiled_samples=compiled_samples, compile_timeout=compile_timeout,
                             large=large,
                             command=shlex.join(click.get_current_context().meta.get("mpsprobe.argv") or []) or None,
                             on_start=on_start, on_case=on_case, on_pair=on_pair,
                             say=lambda text: click.echo(text, err=True))
    except KeyboardInterrupt:
        which = f" {started.id}" if started else ""
        click.echo(f"\ninterrupted; re-run the same command to resume run{which}", err=True)
        sys.exit(130)
    finally:
        if bar is not None:
            output.clear_bar(bar)
    elapsed = time.monotonic() - began
    if as_json:
        click.echo(output.as_json(dict(run.to_json(), elapsed_s=round(elapsed, 1))))
    else:
        click.echo("\n".join(output.run_summary(run, elapsed)))
    if run.state == "incomplete":
        sys.exit(1)   # recorded, but not every planned case: not a finished answer
