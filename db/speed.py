"""Writing speed ladders and model batch sweeps: the one place they enter the store.

Rows arrive as dicts (or dataclasses: mpsprobe.engine.ladder.LadderRow) with
the columns of db/migrations/m006_speed.py; unknown keys are dropped. Each call
commits, so a killed bench keeps every op it finished. Re-recording a key
replaces the row (a resumed or repeated op in the same run).
"""
import dataclasses

from .migrations.m006_speed import MODEL_CROSSOVERS, MODEL_SPEED, SPEED, SPEED_CROSSOVERS


def _as_dict(row):
    return dataclasses.asdict(row) if dataclasses.is_dataclass(row) else dict(row)


def _insert(db, table, columns, run_id, rows):
    rows = [dict({k: v for k, v in _as_dict(r).items() if k in columns}, run_id=run_id) for r in rows]
    if not rows:
        return 0
    names = list(columns)
    sql = (f'INSERT OR REPLACE INTO "{table}" ({", ".join(names)}) '
           f'VALUES ({", ".join("?" for _ in names)})')
    with db.conn:
        db.conn.executemany(sql, [[r.get(c) for c in names] for r in rows])
    return len(rows)


def record_ladder(db, run_id, rows, crossovers=()):
    """One op's ladder rows and their crossovers (dicts with speed_crossovers' columns)."""
    return _insert(db, "speed", SPEED, run_id, rows), \
        _insert(db, "speed_crossovers", SPEED_CROSSOVERS, run_id, crossovers)


def record_model_sweep(db, run_id, rows, crossovers=()):
    """One model sweep's rows (model_speed's columns) and its crossover."""
    return _insert(db, "model_speed", MODEL_SPEED, run_id, rows), \
        _insert(db, "model_crossovers", MODEL_CROSSOVERS, run_id, crossovers)
