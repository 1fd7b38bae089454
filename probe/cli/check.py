"""`mpsprobe check`: will this model run on MPS? Answered from the best evidence, which it names."""
import sys

import click

from mpsprobe.cli import output
from mpsprobe.modelcheck.capture import OPTIMIZERS
from mpsprobe.vocabulary import FAIL_ON, FALLBACK

DTYPES = ("float32", "float16", "bfloat16", "float64")


@click.command()
@click.argument("model")
@click.option("--input", "input_shape", default=None,
              help="Input shape, like 1,3,224,224 (needed for torchvision:NAME; replaces a file's inputs).")
@click.option("--train", is_flag=True, help="Capture forward, backward and an optimizer step.")
@click.option("--optimizer", default="sgd", show_default=True,
              type=click.Choice(OPTIMIZERS), help="Optimizer for --train.")
@click.option("--dtype", default=None, type=click.Choice(DTYPES),
              help="Cast the model and its floating inputs first (default: as built).")
@click.option("--db", "db_path", default=None, type=click.Path(dir_okay=False),
              help="The probe database to answer from [default: mpsprobe.db, when there is one].")
@click.option("--torch", "torch_version", default=None, help="Answer for this torch version, like 2.5.")
@click.option("--macos", default=None, help="Answer for this macOS version, like 14.")
@click.option("--device", default="auto", show_default=True,
              help="Answer for this device (mps, cuda, …); with --run, the device to run on.")
@click.option("--run-id", default=None, help="Answer from this run (an id prefix).")
@click.option("--run", "measure", is_flag=True,
              help="Replay the model's calls on the target here and record them (needs the device).")
@click.option("--timing/--no-timing", default=True, show_default=True, help="Time calls with --run.")
@click.option("--timeout", default=60.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds the model may go without finishing an aten call (and each replayed call "
                   "may take) before it is killed.")
@click.option("--batch", "batches", default=None,
              help="With --run: also time one whole step per batch size, like 1,2,4,8,16,32,64, "
                   "on the CPU and the target (throughput and the crossover batch).")
@click.option("--strict-precision", is_flag=True,
              help="With --run: turn the device's reduced-precision modes (TF32, MPS fast math) off.")
@click.option("--backend", default=None, hidden=True,
              help="FILE.py[:factory] defining a custom target for --run (used by the test suite).")
@click.option("--fail-on", default=FALLBACK, show_default=True,
              type=click.Choice(list(FAIL_ON)),
              help="Exit 1 when an op is this bad or worse (unknown: also ops with no evidence; "
                   "declared: also ops only declared to work, not measured).")
@click.option("--compiled", is_flag=True,
              help="Answer for the model under torch.compile: from the device's measured compiled cases "
                   "(`run --passes compiled`), each op's eager answer beside; the exit status is the "
                   "compiled answer's (3 when no compiled run answers).")
@click.option("--export", "export_path", default=None, type=click.Path(dir_okay=False),
              help="Write the captured op list as JSON (for the site's check page).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check(model, input_shape, train, optimizer, dtype, db_path, torch_version, macos, device,
          run_id, measure, timing, timeout, batches, strict_precision, backend, fail_on, compiled, export_path,
          as_json):
    """Will MODEL run on MPS? Capture its aten ops on the CPU and answer from the evidence.

    MODEL is a .py file defining build() -> (model, example_inputs[, loss]),
    torchvision:NAME (with --input), or an op list written by --export.
    The model runs in a process of its own: if it crashes, exits or hangs
    (past --timeout without finishing an aten call), check says so in one
    line, naming the module it was in.

    Each answer rests on the best evidence there is, and says which: a
    measured MPS run (bare metal, then a virtual machine), else what PyTorch
    declares for MPS in that release (bundled with mpsprobe; --torch and
    --macos pick the release and the macOS), else nothing (?). A CPU or CUDA
    run never answers for MPS (ask for it with --device cpu or --run-id).
    --compiled answers for the model under torch.compile from measured
    compiled cases only (PyTorch declares nothing about compiled forms).

    \b
    Exit status:
      0  every op known to work at the --fail-on level (or --fail-on never)
      1  an op at or above --fail-on
      2  bad input, or a model that crashed, exited or hung
      3  nothing at or above --fail-on, but some op rests on no evidence (?)
    With --compiled, the compiled answers decide it, by the same rules.

    \b
    Examples:
        mpsprobe check my_model.py
        mpsprobe check torchvision:resnet50 --input 1,3,224,224
        mpsprobe check my_model.py --train --dtype float16 --torch 2.5 --macos 14 --json
        mpsprobe check my_model.py --run --device mps --db mine.db
        mpsprobe check benchmarks/models/resnet50.py --run --batch 1,2,4,8,16,32,64
        mpsprobe check my_model.py --compiled
    """
    import mpsprobe
    from mpsprobe.modelcheck.report import format_report
    report = mpsprobe.check_model(
        model, db=db_path, input_shape=input_shape, train=train, optimizer=optimizer,
        dtype=dtype, run=measure, device=device, backend=backend, timing=timing,
        torch=torch_version, macos=macos, run_id=run_id, export=export_path, batches=batches,
        strict_precision=strict_precision, timeout=timeout, compiled=compiled,
        say=lambda text: click.echo(text, err=True))
    if as_json:
        click.echo(output.as_json(report.to_json(fail_on)))
    else:
        click.echo("\n".join(format_report(report, fail_on)))
    sys.exit(report.exit_code(fail_on))
