"""`mpsprobe bench`: op speed ladders on the CPU and a device, recorded as a run."""
import sys

import click

from mpsprobe.cli import output
from mpsprobe.speed import BENCH_PASSES, DTYPES


class Progress:
    """Ops done / total and the current op on stderr: a bar on a terminal, else a line per op."""

    def __init__(self):
        self.bar = None

    def __call__(self, index, total, record):
        if not sys.stderr.isatty():
            click.echo(f"[{index + 1}/{total}] {record.name}", err=True)
            return
        if self.bar is None:
            self.bar = click.progressbar(length=total, label="bench", file=sys.stderr, show_pos=True,
                                         item_show_func=lambda name: name)
            self.bar.__enter__()
        self.bar.update(index - self.bar.pos, record.name)

    def close(self):
        if self.bar is not None:
            self.bar.update(self.bar.length - self.bar.pos, "done")
            self.bar.__exit__(None, None, None)


@click.command()
@click.option("--ops", default=None, help="Comma-separated ladder names (default: all 55).")
@click.option("--families", default=None,
              help="Comma-separated families: elementwise, reduction, matmul, fft, conv, norm, pool, "
                   "linear, attention, embedding, rnn, resample.")
@click.option("--device", default="auto", show_default=True, help="Target: auto, mps, cuda, cuda:1, cpu.")
@click.option("--dtype", default="float32", show_default=True,
              type=click.Choice(DTYPES))
@click.option("--passes", default=",".join(BENCH_PASSES), show_default=True, help="forward, backward or both.")
@click.option("--max-size", default=None, help="Largest size-ladder rung, in elements (like 1e6).")
@click.option("--max-batch", default=None, help="Largest batch of the layer ladders (1, 8, 32, 128).")
@click.option("--reps", default=10, show_default=True, type=int, help="Timed repetitions per rung.")
@click.option("--rung-budget", default=2.0, show_default=True, type=float,
              help="Seconds one pass's repetitions may take at one rung on one side.")
@click.option("--op-budget", default=30.0, show_default=True, type=float,
              help="Seconds one op's whole ladder may take.")
@click.option("--db", "db_path", default="mpsprobe.db", show_default=True,
              type=click.Path(dir_okay=False), help="SQLite database to record into.")
@click.option("--json", "as_json", is_flag=True, help="Print the run, its crossovers and rows as JSON.")
def bench(ops, families, device, dtype, passes, max_size, max_batch, reps, rung_budget, op_budget,
          db_path, as_json):
    """Time ops over a ladder of sizes on the CPU and the target; find where the target wins.

    Elementwise ops and reductions climb from 1e2 to 1e8 elements; matmul and
    FFT by size; conv, norm, attention, linear, embedding and RNN layers at
    the shapes of ResNet-50, BERT-base, ViT-B/16 and an LSTM language model
    over batches 1, 8, 32, 128. Each rung: forward (and backward) on the CPU,
    all its threads, and on the target, median of --reps after warm-up. The
    crossover is the size or batch from which the target always wins.

    \b
    Example:
        mpsprobe bench --ops add,matmul --max-size 1e4 --device cpu
        mpsprobe bench --device mps --op-budget 8 --db speed.db
    """
    import mpsprobe

    progress = Progress()
    try:
        result = mpsprobe.bench(ops, families, device=device, dtype=dtype, passes=passes, max_size=max_size,
                                max_batch=max_batch, db=db_path, reps=reps, rung_budget_s=rung_budget,
                                op_budget_s=op_budget, on_op=progress)
    finally:
        progress.close()
    if as_json:
        click.echo(output.as_json(result.to_json()))
    else:
        click.echo("\n".join(output.bench_summary(result)))
