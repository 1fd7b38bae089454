"""Schema 12 -> 13: what a `compiled` case (the op through torch.compile) adds to a result.

- `compile_ms`: the first call's wall time on the target, compiling included;
- `eager_ms`: the eager op's time on the target, at the input the compiled form was timed at;
- `compiled_speedup`: eager_ms over the compiled call's time (target_ms), with its interval
  (`compiled_speedup_lo`..`compiled_speedup_hi`); a speed claim rests only on an interval
  that excludes 1.

Null for every other pass, and for compiled cases that did not pass.
"""

COMPILED_COLUMNS = ("compile_ms", "eager_ms", "compiled_speedup", "compiled_speedup_lo",
                    "compiled_speedup_hi")


def migrate(db):
    have = db["results"].columns_dict
    for name in COMPILED_COLUMNS:
        if name not in have:
            db.execute(f'ALTER TABLE results ADD COLUMN "{name}" FLOAT')
