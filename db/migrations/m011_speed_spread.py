"""Schema 10 -> 11: every timed speed figure keeps its noise.

- `speed`: cpu_reps beside the target's reps, an interval for each side's median
  (cpu_lo..cpu_hi, target_lo..target_hi: order statistics at 97.5%, see
  mpsprobe.engine.ladder.median_interval) and the speedup's interval
  (speedup_lo..speedup_hi, >= 95%). A rung counts as a win only where that
  interval lies above 1;
- `speed_crossovers`: the best speedup's interval, and `no_target` = 1 for a
  ladder whose target is the CPU itself (no speed claim is read from it).

Null for rows recorded before: they carry no interval, so no claim rests on them.
"""

SPEED_SPREAD = {"cpu_reps": int, "cpu_lo": float, "cpu_hi": float, "target_lo": float,
                "target_hi": float, "speedup_lo": float, "speedup_hi": float}
CROSSOVER_SPREAD = {"best_speedup_lo": float, "best_speedup_hi": float, "no_target": int}
_SQL_TYPES = {int: "INTEGER", float: "FLOAT"}


def migrate(db):
    for table, columns in (("speed", SPEED_SPREAD), ("speed_crossovers", CROSSOVER_SPREAD)):
        have = db[table].columns_dict
        for name, kind in columns.items():
            if name not in have:
                db.execute(f'ALTER TABLE "{table}" ADD COLUMN "{name}" {_SQL_TYPES[kind]}')
