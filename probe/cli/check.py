"""`mpsprobe check`: will this model run on the target? Answered from the database."""
import json
import sys

import click

from mpsprobe.cli import UserError

DTYPES = ("float32", "float16", "bfloat16", "float64")


def _open(db_path, write):
    from mpsprobe.db import schema
    try:
        return schema.open_db(db_path, readonly=not write)
    except schema.DatabaseError as e:
        raise UserError(str(e)) from None


def _load_ops(spec, input_shape, dtype, train, optimizer, portable, recorder):
    """ModelOps for MODEL: an exported op list (.json) or a model to capture."""
    import torch
    from mpsprobe.modelcheck import load as models, report as check
    if spec.endswith(".json"):
        if recorder is not None:
            raise UserError("--run needs a model to replay, not an op list")
        try:
            with open(spec) as f:
                return check.ops_from_json(json.load(f))
        except (OSError, ValueError, check.CheckError) as e:
            raise UserError(f"{spec}: {e}") from None
    try:
        loaded = models.load(spec, models.parse_shape(input_shape) if input_shape else None)
        if dtype:
            models.cast(loaded, getattr(torch, dtype))
        return check.capture(loaded, train=train, optimizer=optimizer, portable=portable,
                             on_call=recorder)
    except (models.ModelError, check.CheckError) as e:
        raise UserError(str(e)) from None


@click.command()
@click.argument("model")
@click.option("--input", "input_shape", default=None,
              help="Input shape, like 1,3,224,224 (needed for torchvision:NAME; replaces a file's inputs).")
@click.option("--train", is_flag=True, help="Capture forward, backward and an optimizer step.")
@click.option("--optimizer", default="sgd", show_default=True,
              type=click.Choice(["sgd", "adam", "adamw"]), help="Optimizer for --train.")
@click.option("--dtype", default=None, type=click.Choice(DTYPES),
              help="Cast the model and its floating inputs first (default: as built).")
@click.option("--db", "db_path", default="mpsprobe.db", show_default=True,
              type=click.Path(dir_okay=False), help="The probe database to answer from.")
@click.option("--torch", "torch_version", default=None, help="Answer for this torch version, like 2.5.")
@click.option("--macos", default=None, help="Answer for this macOS version, like 14.")
@click.option("--device", default="auto", show_default=True,
              help="Answer for this device (mps, cuda, …); with --run, the device to run on.")
@click.option("--run-id", default=None, help="Answer from this run (an id prefix).")
@click.option("--run", "measure", is_flag=True,
              help="Replay the model's calls on the target here and record them (needs the device).")
@click.option("--timing/--no-timing", default=True, show_default=True, help="Time calls with --run.")
@click.option("--backend", default=None, hidden=True,
              help="FILE.py[:factory] defining a custom target for --run (used by the test suite).")
@click.option("--fail-on", default="fallback", show_default=True,
              type=click.Choice(["unknown", "fallback", "mismatch", "unsupported", "never"]),
              help="Exit 1 when an op is this bad or worse (unknown: also never-probed ops).")
@click.option("--export", "export_path", default=None, type=click.Path(dir_okay=False),
              help="Write the captured op list as JSON (for the site's check page).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check(model, input_shape, train, optimizer, dtype, db_path, torch_version, macos, device,
          run_id, measure, timing, backend, fail_on, export_path, as_json):
    """Will MODEL run on MPS? Capture its aten ops on the CPU and answer from the database.

    MODEL is a .py file defining build() -> (model, example_inputs[, loss]),
    torchvision:NAME (with --input), or an op list written by --export.
    Exit status: 0 nothing at or above --fail-on, 1 something is, 2 bad input.

    \b
    Examples:
        mpsprobe check my_model.py
        mpsprobe check torchvision:resnet50 --input 1,3,224,224
        mpsprobe check my_model.py --train --dtype float16 --torch 2.5 --macos 14 --json
        mpsprobe check my_model.py --run --device mps --db mine.db
    """
    from mpsprobe.modelcheck import report as checking
    from mpsprobe.db.query import blame as lookup

    if measure and (torch_version or macos or run_id):
        raise UserError("--run measures this machine: --torch, --macos and --run-id do not apply")
    db = _open(db_path, write=measure)
    conn = db.conn

    if measure:
        from mpsprobe.engine import devices
        from mpsprobe.modelcheck import replay
        try:
            target = devices.resolve(device, backend)
        except devices.DeviceError as e:
            raise UserError(str(e)) from None
        recorder = replay.CallRecorder()
        portable = target.torch_device.type != "cpu" or target.backend is not None
        model_ops = _load_ops(model, input_shape, dtype, train, optimizer, portable, recorder)
        calls = recorder.list()
        click.echo(f"replaying {len(calls)} distinct calls of {model_ops.distinct} aten ops on "
                   f"{target.name} ({target.device_name})", err=True)
        writer, results = replay.replay(db, calls, target, model_ops.model, timing=timing)
        run = next(r for r in lookup.runs(conn) if r["id"] == writer.run_id)
        totals = replay.model_time(results)
    else:
        try:
            run = lookup.choose_run(conn, run_id=run_id, torch=torch_version, macos=macos,
                                    device=device)
        except lookup.LookupError_ as e:
            raise UserError(str(e)) from None
        portable = run["device"] != "cpu"
        model_ops = _load_ops(model, input_shape, dtype, train, optimizer, portable, None)
        totals = None

    if export_path:
        with open(export_path, "w") as f:
            json.dump(model_ops.to_json(), f, indent=2)
    report = checking.answer(conn, model_ops, run)
    if as_json:
        data = report.to_json(fail_on)
        if totals:
            data["model_ms"] = {"cpu": totals[0], "target": totals[1], "calls_timed": totals[2]}
        click.echo(json.dumps(data, indent=2))
    else:
        lines = checking.format_report(report, fail_on)
        if totals:
            lines.insert(3, f"  measured: one {model_ops.mode} ≈ {totals[1]:.3g} ms of kernels on "
                            f"{run['device']} vs {totals[0]:.3g} ms on the CPU "
                            f"({totals[2]} distinct calls timed)")
        if measure:
            lines.append(f"recorded as run {run['id']} in {db_path}")
        click.echo("\n".join(lines))
    sys.exit(report.exit_code(fail_on))
