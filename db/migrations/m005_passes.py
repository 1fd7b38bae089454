"""Schema 4 -> 5: what passes, precision modes, real Macs and model replays need.

On `results` (and `cases`):
- `pass`: forward | backward | inplace | out (mpsprobe.vocabulary.PASSES),
  default forward. It is part of a case's identity: the case id of a
  non-forward pass ends in "|<pass>" ("add|float32|0|backward"), so forward
  ids, and every result recorded before, are unchanged;
- `reason_kind`: why a status is what it is (mpsprobe.vocabulary.REASON_KINDS);
- `min_macos`: the macOS version a refusal or fallback names;
- `precision_mode`: the reduced-precision mode a case ran in, if any;
- `stderr_tail`: the last lines a crashed worker wrote;
- `notes`: JSON of anything else a judge wants to keep.

On `runs`:
- `precision_modes`: JSON list of the precision modes the run used;
- `device_env`: JSON of the PYTORCH_MPS_* and PYTORCH_ENABLE_MPS_FALLBACK
  settings the workers ran with (backfilled from the mps_fallback option);
- `translated`: 1 under Rosetta (an x86 Python on Apple silicon);
- `source`: what the run probed: 'opinfo' (a sweep) or 'model' (a model's
  replayed calls, `check --run`), backfilled from the run's options.
"""
from mpsprobe.vocabulary import FORWARD, PASS_COLUMN

RESULT_COLUMNS = {PASS_COLUMN: f"TEXT NOT NULL DEFAULT '{FORWARD}'", "reason_kind": "TEXT",
                  "min_macos": "TEXT", "precision_mode": "TEXT", "stderr_tail": "TEXT",
                  "notes": "TEXT"}
CASE_COLUMNS = {PASS_COLUMN: f"TEXT NOT NULL DEFAULT '{FORWARD}'"}
RUN_COLUMNS = {"precision_modes": "TEXT", "device_env": "TEXT", "translated": "INTEGER",
               "source": "TEXT"}


def _add(db, table, columns):
    have = set(db[table].columns_dict)
    for name, kind in columns.items():
        if name not in have:
            db.execute(f'ALTER TABLE {table} ADD COLUMN "{name}" {kind}')


def migrate(db):
    _add(db, "results", RESULT_COLUMNS)
    _add(db, "cases", CASE_COLUMNS)
    _add(db, "runs", RUN_COLUMNS)
    db.execute("UPDATE runs SET source = CASE WHEN json_extract(options, '$.source') = 'model' "
               "THEN 'model' ELSE 'opinfo' END WHERE source IS NULL")
    db.execute("""UPDATE runs SET device_env = CASE
                    WHEN json_extract(options, '$.mps_fallback') THEN '{"PYTORCH_ENABLE_MPS_FALLBACK": "1"}'
                    ELSE '{}' END
                  WHERE device_env IS NULL AND json_extract(options, '$.mps_fallback') IS NOT NULL""")
    db.execute(f"CREATE INDEX IF NOT EXISTS idx_results_op_dtype_pass ON results (op_id, dtype, {PASS_COLUMN})")
