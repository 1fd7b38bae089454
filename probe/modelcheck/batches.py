"""Model batch sweeps: one whole model step, timed per batch size on the CPU and the target.

`mpsprobe check MODEL --run --batch 1,2,4,8` times, for each batch size, one
step of the model (inference: forward under no_grad in eval mode; with
--train: forward, backward and an optimizer step in train mode) on the CPU
(every thread torch uses; the count is recorded) and on the target:

* the example inputs grow to the batch along their first dimension (rows
  repeated in turn; tensors without dimensions are kept), built once on the
  CPU and copied, so both sides compute on the same values;
* each side gets its own copy of the model and optimizer;
* `warmup` untimed steps, then `reps` synchronised ones (device events where
  the device has them), keeping the median and interquartile range;
* training differentiates the output's sum, not the model file's loss: a
  loss may hold tensors of the example's batch size on the CPU, and the
  backward through the model is the same work either way;
* a batch whose warm-up projects past `budget_s` on a side, or that runs out
  of memory, ends the sweep there (noted in the last row).

`step_time` times one step the same way at the example's own inputs: `check
--run` reports it as the model's speed (the replayed calls, each synchronised
on its own, are the breakdown).

Throughput is samples per second (batch / step time); the crossover batch is
read with the engine's ladder rule (the first batch from which the target
wins at every larger one).
"""
import copy
import time

import torch
from torch.utils._pytree import tree_map

from mpsprobe.engine import ladder
from mpsprobe.modelcheck import load as models

INFERENCE, TRAINING = "inference", "training"
OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}


def parse_batches(text):
    """"1,2,4" -> (1, 2, 4): positive, distinct, ascending."""
    try:
        batches = tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise models.ModelError(f"--batch takes sizes like 1,2,4,8 (got {text!r})") from None
    if not batches or any(b < 1 for b in batches):
        raise models.ModelError(f"--batch takes positive sizes like 1,2,4,8 (got {text!r})")
    return tuple(sorted(set(batches)))


def expand(inputs, batch):
    """The example inputs with their first dimension grown (or cut) to `batch`."""
    def grow(x):
        if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.shape[0] == 0:
            return x
        index = torch.arange(batch) % x.shape[0]
        return x[index].contiguous()
    return tree_map(grow, inputs)


def _to(inputs, device):
    return tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, inputs)


def _step(model, inputs, train, optimizer):
    if not train:
        def forward():
            with torch.no_grad():
                models.call(model, inputs)
        return forward

    def train_step():
        optimizer.zero_grad(set_to_none=True)
        models.default_loss(models.call(model, inputs)).backward()
        optimizer.step()
    return train_step


def _prepare(loaded, device, train, optimizer):
    model = copy.deepcopy(loaded.model).to(device)
    model.train(train)
    return model, OPTIMIZERS[optimizer](model.parameters(), lr=1e-4) if train else None


def _time_sides(sides, inputs, train, row, reps, warmup, budget_s):
    """Time one step on each (Side, (model, optimizer)) of `sides` into `row` (cpu_ms,
    target_ms, spreads, per-second rates, reps); returns False where a side errs, runs out
    of memory or projects past `budget_s` (row["note"] says which)."""
    for name, (side, (model, opt)) in zip(("cpu", "target"), sides):
        try:
            m = ladder.measure(_step(model, _to(inputs, side.device), train, opt), side.timer,
                               reps=reps, warmup=warmup, budget_s=budget_s)
        except Exception as exc:    # noqa: BLE001
            oom = ladder.is_oom(exc)
            row["note"] = f"out of memory on the {name}" if oom else f"error on the {name}: {ladder._first_line(exc)}"
            side.release()
            return False
        if m.over_budget:
            row["note"] = f"over the budget on the {name}: one step takes ~{m.estimate_ms:.1f} ms x {reps} reps"
            return False
        row[f"{name}_ms"], row[f"{name}_spread"] = m.median, m.spread
        if row.get("batch"):
            row[f"{name}_per_s"] = row["batch"] / m.median * 1e3 if m.median else None
        row["reps"], row["warmup"] = len(m.times), warmup
    if row.get("cpu_ms") and row.get("target_ms"):
        row["speedup"] = row["cpu_ms"] / row["target_ms"]
    return True


def _sides(loaded, target, train, optimizer):
    return [(ladder.Side("cpu"), _prepare(loaded, "cpu", train, optimizer)),
            (ladder.Side(target), _prepare(loaded, target, train, optimizer))]


def _dtype(loaded):
    return next((str(p.dtype).replace("torch.", "") for p in loaded.model.parameters()), "float32")


def sweep(loaded, target, batches, *, train=False, optimizer="sgd", reps=5, warmup=2, budget_s=10.0):
    """model_speed rows (dicts) for `loaded` (a LoadedModel) at each batch size on `target`."""
    mode = TRAINING if train else INFERENCE
    threads, dtype = torch.get_num_threads(), _dtype(loaded)
    sides = _sides(loaded, target, train, optimizer)
    rows = []
    for batch in batches:
        row = {"model": loaded.name, "mode": mode, "dtype": dtype, "batch": batch,
               "cpu_threads": threads, "note": ""}
        go_on = _time_sides(sides, expand(loaded.inputs, batch), train, row, reps, warmup, budget_s)
        if not go_on:
            row["note"] += "; the sweep stops here"
        if sides[1][0].device.type == "cpu":
            row["note"] = "; ".join(n for n in (row["note"], ladder.CPU_TARGET_NOTE) if n)
        rows.append(row)
        if not go_on:
            break
    return rows


def step_time(loaded, target, *, train=False, optimizer="sgd", reps=5, warmup=2, budget_s=120.0):
    """One whole step of `loaded` at its own inputs (the size `check` captured), timed on
    the CPU and `target` like a sweep's row: synchronised, after `warmup` untimed steps,
    the median of `reps`. A dict: cpu_ms, target_ms, spreads, speedup, reps, warmup,
    cpu_threads, and note (why a side has no time)."""
    row = {"model": loaded.name, "mode": TRAINING if train else INFERENCE, "dtype": _dtype(loaded),
           "cpu_threads": torch.get_num_threads(), "note": ""}
    _time_sides(_sides(loaded, target, train, optimizer), loaded.inputs, train, row, reps, warmup, budget_s)
    return row


def crossover_row(rows, target):
    """model_crossovers' row for one sweep's rows (one model, mode and dtype)."""
    if not rows:
        return None
    as_ladder = [ladder.LadderRow(r["model"], "model", r["dtype"], r["mode"], "", f"b{r['batch']}",
                                  r["batch"], r["batch"], str(target), r["cpu_threads"],
                                  speedup=r.get("speedup")) for r in rows]
    s = ladder.crossover_summary(as_ladder)
    return {"model": rows[0]["model"], "mode": rows[0]["mode"], "dtype": rows[0]["dtype"],
            "crossover_batch": s["crossover"], "always": s["always"], "best_speedup": s["best_speedup"],
            "best_at": s["best_at"], "largest": s["largest"], "batches": s["rungs"]}


def record(db, run_id, rows, target):
    """Store a sweep's rows and its crossover in `db` under `run_id`; returns the crossover row."""
    from mpsprobe.db import writer as store
    cross = crossover_row(rows, target)
    store.record_model_sweep(db, run_id, rows, [cross] if cross else [])
    return cross


def sweep_and_record(loaded, sizes, device, backend, db, run_id, *, train=False, optimizer="sgd",
                     say=print):
    """`check --run --batch`: sweep `loaded` over `sizes` on the CPU and `device` (in this
    process) and record the sweep under the replay's run `run_id`; returns
    {"rows": [...], "crossover": {...}, "device": name}."""
    from mpsprobe.engine import devices
    from mpsprobe.errors import MpsprobeError
    try:
        target = devices.resolve(device, backend)
    except devices.DeviceError as e:
        raise MpsprobeError(str(e)) from None
    say(f"timing one {TRAINING if train else INFERENCE} step at batch sizes {', '.join(map(str, sizes))} "
        f"on the CPU ({torch.get_num_threads()} threads) and {target.name}")
    rows = sweep(loaded, target.torch_device, sizes, train=train, optimizer=optimizer)
    return {"rows": rows, "crossover": record(db, run_id, rows, target.torch_device), "device": target.name}


def _ms(value):
    return f"{value:.3g}" if value is not None else "—"


def format_sweep(sweep):
    """The report's lines for sweep_and_record()'s result: one per batch, then the crossover."""
    rows, cross, device = sweep["rows"], sweep["crossover"], sweep["device"]
    if not rows:
        return []
    r0 = rows[0]
    on_cpu = str(device).split(":")[0] == "cpu"
    lines = [f"  batch sweep ({r0['mode']}, {r0['dtype']}; CPU: {r0['cpu_threads']} threads; target: {device}; "
             f"median of {r0.get('reps') or '?'} steps):",
             f"    {'batch':>6} {'cpu ms':>9} {'target ms':>10} {'speedup':>8} {'cpu /s':>9} {'target /s':>10}"]
    for r in rows:
        speed = f"{r['speedup']:.2f}x" if r.get("speedup") else "—"
        note = r.get("note", "").replace(ladder.CPU_TARGET_NOTE, "").strip("; ")
        lines.append(f"    {r['batch']:>6} {_ms(r.get('cpu_ms')):>9} {_ms(r.get('target_ms')):>10} {speed:>8} "
                     f"{_ms(r.get('cpu_per_s')):>9} {_ms(r.get('target_per_s')):>10}" + (f"  ({note})" if note else ""))
    if on_cpu:
        text = "none: " + ladder.CPU_TARGET_NOTE
    elif cross and cross["always"]:
        text = "the target wins at every batch size measured"
    elif cross and cross["crossover_batch"] is not None:
        text = f"the target wins from batch {cross['crossover_batch']}"
    else:
        text = "the target does not win at any batch size measured"
    lines.append(f"    crossover: {text}")
    return lines


def sweep_batches(model, example_inputs=None, batches=(1, 2, 4, 8, 16, 32, 64), device="auto",
                  db="mpsprobe.db", *, train=False, optimizer="sgd", reps=5, warmup=2, budget_s=10.0,
                  name=None):
    """Sweep `model` (an nn.Module with `example_inputs`, or a MODEL spec like check's) over
    `batches` on the CPU and `device`, record it as a run (source 'model') and return
    (run_id, rows, crossover)."""
    from mpsprobe.errors import MpsprobeError
    from mpsprobe.speed import _open, _target, start_run
    try:
        if isinstance(model, str):
            loaded = models.load(model)
        else:
            loaded = models.LoadedModel(name or type(model).__name__, model, example_inputs)
        batches = parse_batches(",".join(map(str, batches)) if not isinstance(batches, str) else batches)
    except models.ModelError as e:
        raise MpsprobeError(str(e)) from None
    if optimizer not in OPTIMIZERS:
        raise MpsprobeError(f"optimizer {optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
    target = _target(device)
    store = _open(db)
    writer = start_run(store, target, {"source": "model", "model": loaded.name, "batches": list(batches),
                                       "train": train, "optimizer": optimizer})
    started, state = time.monotonic(), "interrupted"
    try:
        rows = sweep(loaded, target.torch_device, batches, train=train, optimizer=optimizer, reps=reps,
                     warmup=warmup, budget_s=budget_s)
        cross = record(store, writer.run_id, rows, target.torch_device)
        state = "complete"
    finally:
        writer.finish(state, time.monotonic() - started)
        writer.close()
    return writer.run_id, rows, cross
