"""Schema 1 -> 2: a sortable torch version key and more machine facts on runs.

(Migration 2 also created the history and sweep views; they now live in
db/views.py with every other view.)
"""
from mpsprobe.versions import version_key

# Facts added to `runs` (describe() fills them for new runs).
NEW_RUN_COLUMNS = ("torch_version_key", "hw_model", "cuda_version", "gpu_driver")


def backfill_version_keys(db):
    """Fill runs.torch_version_key where a writer (or an older mpsprobe) left it empty."""
    rows = db.execute("SELECT id, torch_version FROM runs WHERE torch_version_key IS NULL "
                      "AND torch_version IS NOT NULL").fetchall()
    for run_id, version in rows:
        db.execute("UPDATE runs SET torch_version_key = ? WHERE id = ?",
                   [version_key(version), run_id])
    return len(rows)


def migrate(db):
    have = set(db["runs"].columns_dict)
    for column in NEW_RUN_COLUMNS:
        if column not in have:
            db.execute(f"ALTER TABLE runs ADD COLUMN {column} TEXT")
    db.execute("CREATE INDEX IF NOT EXISTS idx_runs_torch_version_key ON runs (torch_version_key)")
    backfill_version_keys(db)
