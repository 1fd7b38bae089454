"""Questions about speed, answered from the ladders and model sweeps (db/migrations/m006_speed.py).

Every function takes an sqlite3 connection and returns plain dicts, for the
CLI, the check report and the site alike. Databases without the speed tables
(older schema, opened read-only) answer with empty lists.
"""

RUN_FIELDS = "r.device, r.device_name, r.torch_version, r.os_name, r.os_version, r.chip, r.started"


def _rows(conn, sql, params=()):
    cursor = conn.execute(sql, params)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def has_speed(conn):
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'speed'").fetchone() is not None


def has_ladders(conn):
    """True when some run recorded ladder rows with both sides timed."""
    return has_speed(conn) and conn.execute(
        "SELECT 1 FROM speed WHERE speedup IS NOT NULL LIMIT 1").fetchone() is not None


def speed_curve(conn, op, dtype=None, pass_name=None, run_id=None):
    """The ladder rows of `op`, smallest rung first, per run (newest run first), with the run's facts."""
    if not has_speed(conn):
        return []
    return _rows(conn, f"""
SELECT s.*, {RUN_FIELDS} FROM speed s JOIN runs r ON r.id = s.run_id
WHERE s.op = ? AND (? IS NULL OR s.dtype = ?) AND (? IS NULL OR s.pass_name = ?)
  AND (? IS NULL OR s.run_id = ?)
ORDER BY r.started DESC, s.run_id, s.dtype, s.pass_name, s.size, s.batch""",
                 [op, dtype, dtype, pass_name, pass_name, run_id, run_id])


def crossovers(conn, run_id=None, op=None):
    """speed_crossovers rows (of one run, or every run, newest first) with the run's facts."""
    if not has_speed(conn):
        return []
    return _rows(conn, f"""
SELECT c.*, {RUN_FIELDS} FROM speed_crossovers c JOIN runs r ON r.id = c.run_id
WHERE (? IS NULL OR c.run_id = ?) AND (? IS NULL OR c.op = ?)
ORDER BY r.started DESC, c.run_id, c.family, c.op, c.dtype, c.pass_name""",
                 [run_id, run_id, op, op])


def slower_than_cpu(conn, device=None):
    """Ladders whose target never beats the CPU, even at the largest rung measured:
    the op, its best speedup and where. (Per-case timing on OpInfo's tiny samples
    is launch-bound: it says nearly everything is slower, so it is not used here.)"""
    if not has_speed(conn):
        return []
    return _rows(conn, f"""
SELECT c.op, c.dtype, c.pass_name, c.family, c.best_speedup, c.best_at, c.by, c.largest, c.run_id,
       {RUN_FIELDS}
FROM speed_crossovers c JOIN runs r ON r.id = c.run_id
WHERE c.rungs > 0 AND c.always = 0 AND c.crossover IS NULL AND r.device NOT LIKE 'cpu%'
  AND (? IS NULL OR r.device = ?)
ORDER BY c.best_speedup""", [device, device])


def model_sweeps(conn, model=None, run_id=None):
    """model_speed rows, grouped as sweeps: [{model, mode, dtype, run…, crossover…, rows: […]}]."""
    if not has_speed(conn):
        return []
    rows = _rows(conn, f"""
SELECT m.*, {RUN_FIELDS} FROM model_speed m JOIN runs r ON r.id = m.run_id
WHERE (? IS NULL OR m.model = ?) AND (? IS NULL OR m.run_id = ?)
ORDER BY r.started DESC, m.run_id, m.model, m.mode, m.dtype, m.batch""", [model, model, run_id, run_id])
    cross = {(c["run_id"], c["model"], c["mode"], c["dtype"]): c
             for c in _rows(conn, "SELECT * FROM model_crossovers")}
    sweeps = {}
    for r in rows:
        key = (r["run_id"], r["model"], r["mode"], r["dtype"])
        if key not in sweeps:
            sweeps[key] = dict({k: r[k] for k in ("run_id", "model", "mode", "dtype", "cpu_threads",
                                                  "device", "device_name", "torch_version", "os_name",
                                                  "os_version", "chip", "started")},
                               crossover=cross.get(key), rows=[])
        sweeps[key]["rows"].append(r)
    return list(sweeps.values())
