"""Speed ladders and model batch sweeps: the `speed`, `speed_crossovers`,
`model_speed` and `model_crossovers` tables.

- `speed`: one row per (run, op, dtype, pass, rung) of an op's speed ladder
  (mpsprobe.engine.ladder.LadderRow's fields): CPU and target medians with
  their interquartile spread, speedup (cpu_ms / target_ms: above 1 the target
  wins), achieved GB/s and GFLOP/s, the target's peak memory, and a note on
  why a rung stopped the climb;
- `speed_crossovers`: per (run, op, dtype, pass), the crossover read from the
  ladder when it was recorded: `crossover` is the size (or batch, `by`) from
  which the target beats the CPU at every larger measured rung; `always` = 1
  when it wins from the first rung; both null when it never wins;
- `model_speed`: one row per (run, model, mode, dtype, batch) of a whole-model
  step (mode: inference, or training = forward, backward and an optimizer
  step) timed on the CPU (cpu_threads of them) and the target;
- `model_crossovers`: the crossover batch of each model sweep, same rules.

The pass column is `pass_name` (as in LadderRow). Every table is keyed and
refers to its run, so `mpsprobe merge` carries it like everything else.
"""

SPEED = {
    "run_id": str, "op": str, "dtype": str, "pass_name": str, "rung": str,
    "family": str, "shape": str, "size": int, "batch": int, "target": str, "cpu_threads": int,
    "cpu_ms": float, "cpu_spread": float, "target_ms": float, "target_spread": float,
    "speedup": float, "gbps": float, "gflops": float, "peak_bytes": int, "reps": int,
    "note": str, "reason": str,
}
SPEED_KEY = ("run_id", "op", "dtype", "pass_name", "rung")

SPEED_CROSSOVERS = {
    "run_id": str, "op": str, "dtype": str, "pass_name": str, "family": str,
    "by": str,              # size | batch: what the ladder climbs
    "crossover": int,       # the first size/batch from which the target always wins; null: never or always
    "always": int,          # 1: the target wins from the first measured rung
    "best_speedup": float, "best_at": int,
    "largest": int,         # the largest size/batch measured on both sides
    "rungs": int,           # rungs measured on both sides
}
SPEED_CROSSOVERS_KEY = ("run_id", "op", "dtype", "pass_name")

MODEL_SPEED = {
    "run_id": str, "model": str, "mode": str, "dtype": str, "batch": int,
    "cpu_threads": int, "cpu_ms": float, "cpu_spread": float,
    "target_ms": float, "target_spread": float, "speedup": float,
    "cpu_per_s": float, "target_per_s": float,   # samples per second: batch / step time
    "reps": int, "note": str,
}
MODEL_SPEED_KEY = ("run_id", "model", "mode", "dtype", "batch")

MODEL_CROSSOVERS = {
    "run_id": str, "model": str, "mode": str, "dtype": str,
    "crossover_batch": int, "always": int, "best_speedup": float, "best_at": int,
    "largest": int, "batches": int,
}
MODEL_CROSSOVERS_KEY = ("run_id", "model", "mode", "dtype")


def migrate(db):
    runs = [("run_id", "runs", "id")]
    db["speed"].create(SPEED, pk=SPEED_KEY, foreign_keys=runs)
    db["speed"].create_index(["op", "dtype", "pass_name"])
    db["speed_crossovers"].create(SPEED_CROSSOVERS, pk=SPEED_CROSSOVERS_KEY, foreign_keys=runs)
    db["model_speed"].create(MODEL_SPEED, pk=MODEL_SPEED_KEY, foreign_keys=runs)
    db["model_crossovers"].create(MODEL_CROSSOVERS, pk=MODEL_CROSSOVERS_KEY, foreign_keys=runs)
