"""Questions about speed, answered from the ladders and model sweeps (db/migrations/m006_speed.py).

Every function takes an sqlite3 connection and returns plain dicts, for the
CLI, the check report and the site alike. Databases without the speed tables
answer with empty lists.
"""
from mpsprobe.vocabulary import COMPILED, PASS, PASS_COLUMN
from . import present, rows
from .runs import machine_kind_sql

# What a speed figure was measured on, down to what makes it unlike bare metal's
# (site.common.run_label's words): a virtual machine's GPU is never shown as a Mac's.
RUN_FIELDS = ("r.device, r.device_name, r.torch_version, r.os_name, r.os_version, r.chip, r.started, "
              f"r.virtualized, r.translated, r.backend, r.device_env, {machine_kind_sql('r')} AS machine_kind")

# Ladders whose target never beats the CPU, even at the largest rung measured (the
# canned query "Slowest ops against the CPU" once ladders exist; :device may be '').
SQL_SLOWER_THAN_CPU = f"""
SELECT c.op, c.dtype, c.pass_name, c.family, round(c.best_speedup, 3) AS best_speedup,
       c.by || ' ' || c.best_at AS best_at, c.largest, c.run_id, {RUN_FIELDS}
FROM speed_crossovers c JOIN runs r ON r.id = c.run_id
WHERE c.rungs > 0 AND c.always = 0 AND c.crossover IS NULL AND r.device NOT LIKE 'cpu%'
  AND (:device = '' OR r.device = :device)
ORDER BY c.best_speedup"""


def has_speed(conn):
    return "speed" in present(conn)


def has_ladders(conn):
    """True when some run recorded a ladder with both sides timed."""
    return has_speed(conn) and conn.execute(
        "SELECT 1 FROM speed_crossovers WHERE rungs > 0 LIMIT 1").fetchone() is not None


# A ladder timed with the CPU as its target has no target: it stays out of every
# speed claim and chart (it would show the noise between two CPU timings as a speedup).
HAS_TARGET = "r.device NOT LIKE 'cpu%'"


def speed_curve(conn, op, dtype=None, pass_name=None, run_id=None):
    """The ladder rows of `op`, smallest rung first, per run (newest run first), with the
    run's facts and the ladder's crossover (crossover, always, by); runs whose target
    is the CPU are left out."""
    if not has_speed(conn):
        return []
    return rows(conn, f"""
SELECT s.*, c.crossover, c.always, c.by, {RUN_FIELDS}
FROM speed s JOIN runs r ON r.id = s.run_id
LEFT JOIN speed_crossovers c ON c.run_id = s.run_id AND c.op = s.op AND c.dtype = s.dtype
  AND c.pass_name = s.pass_name
WHERE s.op = ? AND (? IS NULL OR s.dtype = ?) AND (? IS NULL OR s.pass_name = ?)
  AND (? IS NULL OR s.run_id = ?) AND {HAS_TARGET}
ORDER BY r.started DESC, s.run_id, s.dtype, s.pass_name, s.size, s.batch""",
                [op, dtype, dtype, pass_name, pass_name, run_id, run_id])


def crossovers(conn, run_id=None, op=None):
    """speed_crossovers rows (of one run, or every run, newest first) with the run's facts
    and the CPU threads it timed with; runs whose target is the CPU are left out."""
    if not has_speed(conn):
        return []
    return rows(conn, f"""
SELECT c.*, t.cpu_threads, {RUN_FIELDS} FROM speed_crossovers c JOIN runs r ON r.id = c.run_id
LEFT JOIN (SELECT run_id, max(cpu_threads) AS cpu_threads FROM speed GROUP BY run_id) t
  ON t.run_id = c.run_id
WHERE (? IS NULL OR c.run_id = ?) AND (? IS NULL OR c.op = ?) AND {HAS_TARGET}
ORDER BY r.started DESC, c.run_id, c.family, c.op, c.dtype, c.pass_name""",
                [run_id, run_id, op, op])


def slower_than_cpu(conn, device=""):
    """Ladders whose target never beats the CPU: the op, its best speedup and where.
    (Per-case timing on OpInfo's tiny samples is launch-bound: it says nearly
    everything is slower, so it is not used here.)"""
    if not has_speed(conn):
        return []
    return rows(conn, SQL_SLOWER_THAN_CPU, {"device": device or ""})


def model_speed(conn, model=None, run_id=None):
    """model_speed rows with their sweep's crossover (crossover_batch, always) and the run's facts."""
    if not has_speed(conn):
        return []
    return rows(conn, f"""
SELECT m.*, x.crossover_batch, x.always, {RUN_FIELDS}
FROM model_speed m JOIN runs r ON r.id = m.run_id
LEFT JOIN model_crossovers x ON x.run_id = m.run_id AND x.model = m.model AND x.mode = m.mode
  AND x.dtype = m.dtype
WHERE (? IS NULL OR m.model = ?) AND (? IS NULL OR m.run_id = ?)
ORDER BY r.started DESC, m.run_id, m.model, m.mode, m.dtype, m.batch""", [model, model, run_id, run_id])


def model_sweeps(conn, model=None, run_id=None):
    """model_speed() grouped as sweeps: [{run_id, model, mode, dtype, …, crossover_batch, rows: […]}]."""
    sweeps = {}
    for r in model_speed(conn, model, run_id):
        key = (r["run_id"], r["model"], r["mode"], r["dtype"])
        if key not in sweeps:
            sweeps[key] = dict({k: v for k, v in r.items() if k not in ("batch",)}, rows=[])
        sweeps[key]["rows"].append(r)
    return list(sweeps.values())


def has_compiled_speeds(conn):
    """True when the results table has the compiled pass's timing columns (schema 13)."""
    return "compiled_speedup" in {r[1] for r in conn.execute("PRAGMA table_info(results)")}


def compiled_speeds(conn, op_id=None, limit=500):
    """Compiled against eager on the same target, per passing compiled case (newest run
    first): compile_ms (the first call, compiling included), eager_ms, target_ms (the
    compiled call), compiled_speedup (eager over compiled) and its interval, with the
    run's facts. Cases not timed have no speedup and are left out."""
    if not has_compiled_speeds(conn):
        return []
    return rows(conn, f"""
SELECT res.op_id, res.dtype, res.run_id, res.compile_ms, res.eager_ms, res.target_ms,
       res.compiled_speedup, res.compiled_speedup_lo, res.compiled_speedup_hi, {RUN_FIELDS}
FROM results res JOIN runs r ON r.id = res.run_id
WHERE res.{PASS_COLUMN} = ? AND res.status = ? AND res.compiled_speedup IS NOT NULL
  AND (? IS NULL OR res.op_id = ?)
ORDER BY r.started DESC, res.run_id, res.op_id, res.dtype LIMIT ?""",
                [COMPILED, PASS, op_id, op_id, limit])
