"""The speed API: op speed ladders (`bench`) recorded as a run.

    import mpsprobe
    result = mpsprobe.bench(ops=["add", "matmul"], device="cpu", max_size=1e4, db="x.db")
    result.crossovers          # [{"op": "add", "pass_name": "forward", "crossover": …}, …]
    result.rows                # LadderRow per (op, pass, rung)

A bench is a run like `mpsprobe run`'s (the same machine facts in `runs`,
options {"source": "bench", …}); its rows go to the `speed` table and each
ladder's crossover to `speed_crossovers`, op by op as they finish. Every
mistake (an unknown op or family, a bad dtype, pass or cap, an unavailable
device, an unusable database) raises MpsprobeError before anything is written.
"""
import json
import os
import time
import zlib
from dataclasses import dataclass, field

from mpsprobe.errors import MpsprobeError
from mpsprobe.vocabulary import BACKWARD, FORWARD

SOURCE = "bench"
DTYPES = ("float32", "float16", "bfloat16", "float64")
BENCH_PASSES = (FORWARD, BACKWARD)


def _names(value):
    if value is None:
        return []
    if isinstance(value, str):
        return [x.strip() for x in value.split(",") if x.strip()]
    return [str(x) for x in value]


def parse_count(value, what):
    """A positive whole number from 100, "1e4", 1e4 or "10000"; None stays None."""
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise MpsprobeError(f"{what} takes a number like 1e6 (got {value!r})") from None
    if number != number or number < 1 or number != int(number):
        raise MpsprobeError(f"{what} takes a positive whole number like 1e6 (got {value!r})")
    return int(number)


def select_records(ops=None, families=None):
    """The ladder records for `ops` (names) and/or `families`; all 55 by default."""
    from mpsprobe.ops import ladders
    ops, families = _names(ops), _names(families)
    unknown = [n for n in ops if n not in ladders.BY_NAME]
    if unknown:
        raise MpsprobeError(f"no speed ladder for {', '.join(unknown)} "
                            f"(known: {', '.join(ladders.BY_NAME)})")
    bad = [f for f in families if f not in ladders.FAMILIES]
    if bad:
        raise MpsprobeError(f"no ladder family {', '.join(bad)} (known: {', '.join(ladders.FAMILIES)})")
    records = ladders.select(ops or None, families or None)
    if not records:
        raise MpsprobeError("no speed ladder matches both --ops and --families")
    return records


@dataclass
class Bench:
    """One recorded bench: its run id and database, the rows and each ladder's crossover."""
    run_id: str
    db_path: str
    env: dict
    rows: list = field(default_factory=list)
    crossovers: list = field(default_factory=list)
    state: str = "running"
    wall_s: float = 0.0

    def summary(self):
        """(op, pass, crossover text, best speedup text) per ladder, in the order they ran."""
        return [(c["op"], c["pass_name"], crossover_text(c), speedup_text(c)) for c in self.crossovers]

    def to_json(self):
        from dataclasses import asdict
        return {"run_id": self.run_id, "db": self.db_path, "state": self.state,
                "device": self.env.get("device"), "device_name": self.env.get("device_name"),
                "torch": self.env.get("torch_version"), "cpu_threads": self.env.get("cpu_threads"),
                "wall_s": round(self.wall_s, 3), "crossovers": self.crossovers,
                "rows": [asdict(r) for r in self.rows]}


NO_TARGET = "no target (the CPU against itself)"


def crossover_text(c):
    """How a crossover reads: "from size 30000", "always", "never shown faster" (no rung's
    speedup interval lies above 1), "not measured", or no target."""
    if c.get("no_target"):
        return NO_TARGET
    if not c.get("rungs"):
        return "not measured"
    if c.get("always"):
        return "always"
    if c.get("crossover") is None:
        return "never shown faster"
    return f"from {c['by']} {c['crossover']:g}"


def speedup_text(c):
    """The best speedup, claimed only where its interval excludes 1: "2.10x (1.85-2.40)",
    "no clear difference (0.91-1.20)", "—" (no target), or "— (no interval)" (too few
    repetitions for one, or recorded before intervals were)."""
    if c.get("no_target"):
        return "—"
    return interval_text(c.get("best_speedup"), c.get("best_speedup_lo"), c.get("best_speedup_hi"))


def interval_text(speedup, lo, hi):
    """A speedup with its interval, claimed only where the interval excludes 1."""
    if speedup is None:
        return "—"
    if lo is None or hi is None:
        return "— (no interval)"
    if lo > 1 or hi < 1:
        return f"{speedup:.2f}x ({lo:.2f}-{hi:.2f})"
    return f"no clear difference ({lo:.2f}-{hi:.2f})"


COMPILED_WINS, COMPILED_LOSES, NO_CLEAR_DIFFERENCE = "compiled faster", "compiled slower", "no clear difference"


def compiled_verdict(row):
    """How a compiled case's speed compares with eager's on the same target
    (compiled_speedup = eager_ms / compiled ms): faster or slower only where the
    interval excludes 1; None where it was not timed."""
    speedup, lo, hi = row.get("compiled_speedup"), row.get("compiled_speedup_lo"), row.get("compiled_speedup_hi")
    if speedup is None:
        return None
    if lo is not None and lo > 1:
        return COMPILED_WINS
    if hi is not None and hi < 1:
        return COMPILED_LOSES
    return NO_CLEAR_DIFFERENCE


def compiled_text(row):
    """"compiled faster: 1.80x (1.50-2.10)", "no clear difference (0.90-1.07)", "— (not timed)"."""
    verdict = compiled_verdict(row)
    if verdict is None:
        return "— (not timed)"
    said = interval_text(row["compiled_speedup"], row.get("compiled_speedup_lo"), row.get("compiled_speedup_hi"))
    return f"{verdict}: {said}" if verdict != NO_CLEAR_DIFFERENCE else said


def _open(db_path):
    from mpsprobe.db import schema
    try:
        return schema.open_db(str(db_path))
    except schema.DatabaseError as e:
        raise MpsprobeError(str(e)) from None


def _target(device):
    from mpsprobe.engine import devices
    try:
        return devices.resolve(device)
    except devices.DeviceError as e:
        raise MpsprobeError(str(e)) from None


def start_run(db, target, options):
    """A new run in `db` for `target` with this machine's facts; returns its RunWriter."""
    import torch

    import mpsprobe
    from mpsprobe.db.writer import RunWriter
    from mpsprobe.engine import environment
    env = environment.describe(target)
    key = f"{options['source']}:" + hex(zlib.crc32(json.dumps(options, sort_keys=True).encode()))
    writer = RunWriter.start(db, key, dict(env, source=options["source"]), options, mpsprobe.__version__,
                             os.getpid())
    writer.run["cpu_threads"] = torch.get_num_threads()
    return writer


def bench(ops=None, families=None, device="auto", dtype="float32", passes=BENCH_PASSES,
          max_size=None, max_batch=None, db="mpsprobe.db", *, reps=10, warmup=2,
          rung_budget_s=2.0, op_budget_s=30.0, seed=0, on_op=None, on_row=None):
    """Run the speed ladders of `ops`/`families` (default: all 55) on the CPU and `device`,
    record them as a run in `db`, and return a Bench.

    max_size caps size ladders (elements), max_batch caps layer ladders;
    rung_budget_s bounds one pass's repetitions at one rung on one side,
    op_budget_s one op's whole ladder (see mpsprobe.engine.ladder).
    on_op(index, total, record) is called before each op, on_row(row) after
    each row.
    """
    from mpsprobe.db import writer as store_writer
    from mpsprobe.engine import ladder
    records = select_records(ops, families)
    if dtype not in DTYPES:
        raise MpsprobeError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    passes = tuple(_names(passes))
    if not passes or any(p not in BENCH_PASSES for p in passes):
        raise MpsprobeError(f"passes are {' and '.join(BENCH_PASSES)} (got {', '.join(passes) or 'none'})")
    max_size, max_batch = parse_count(max_size, "max_size"), parse_count(max_batch, "max_batch")
    for name, value in (("reps", reps), ("rung_budget_s", rung_budget_s), ("op_budget_s", op_budget_s)):
        if not value or value <= 0:
            raise MpsprobeError(f"{name} must be positive (got {value!r})")
    target = _target(device)
    store = _open(db)
    options = {"source": SOURCE, "ops": [r.name for r in records], "dtype": dtype, "passes": list(passes),
               "max_size": max_size, "max_batch": max_batch, "reps": reps, "warmup": warmup,
               "rung_budget_s": rung_budget_s, "op_budget_s": op_budget_s, "seed": seed}
    writer = start_run(store, target, options)
    result = Bench(writer.run_id, str(db), dict(writer.run))
    started = time.monotonic()
    try:
        for index, record in enumerate(records):
            if on_op:
                on_op(index, len(records), record)
            rows = ladder.run_ladder(record, str(target.torch_device), dtype=dtype, passes=passes, reps=reps,
                                     warmup=warmup, rung_budget_s=rung_budget_s, op_budget_s=op_budget_s,
                                     max_size=max_size, max_batch=max_batch, seed=seed)
            summaries = [s for s in ladder.crossover_summaries(rows) if s]
            store_writer.record_ladder(store, writer.run_id, rows, summaries)
            result.rows += rows
            result.crossovers += summaries
            for row in rows:
                if on_row:
                    on_row(row)
        result.state = "complete"
    finally:
        result.wall_s = time.monotonic() - started
        writer.finish("complete" if result.state == "complete" else "interrupted", result.wall_s)
        writer.close()
    return result
