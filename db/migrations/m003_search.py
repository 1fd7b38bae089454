"""Schema 2 -> 3: full-text search over results: op ids, aten ops, fallbacks and messages.

The index is kept by triggers, so every writer (a run, a merge) maintains it
and the read-only site only ever queries it. Datasette finds it by its
`content="results"` and offers `?_search=` on the results table.
"""

COLUMNS = ("op_id", "dtype", "status", "aten_op", "fallback_ops", "aten_ops", "message", "reason")


def migrate(db):
    cols = ", ".join(COLUMNS)
    new = ", ".join(f"new.{c}" for c in COLUMNS)
    old = ", ".join(f"old.{c}" for c in COLUMNS)
    # '_' is part of a word, so max_pool2d_with_indices stays one token;
    # '.' and ':' split, so "conv2d" finds nn.functional.conv2d and aten::conv2d.
    db.execute(f"""CREATE VIRTUAL TABLE results_fts USING fts5({cols},
        content="results", content_rowid="rowid", tokenize="unicode61 tokenchars '_'")""")
    db.execute(f"""CREATE TRIGGER results_fts_insert AFTER INSERT ON results BEGIN
        INSERT INTO results_fts (rowid, {cols}) VALUES (new.rowid, {new}); END""")
    db.execute(f"""CREATE TRIGGER results_fts_delete AFTER DELETE ON results BEGIN
        INSERT INTO results_fts (results_fts, rowid, {cols}) VALUES ('delete', old.rowid, {old}); END""")
    db.execute(f"""CREATE TRIGGER results_fts_update AFTER UPDATE ON results BEGIN
        INSERT INTO results_fts (results_fts, rowid, {cols}) VALUES ('delete', old.rowid, {old});
        INSERT INTO results_fts (rowid, {cols}) VALUES (new.rowid, {new}); END""")
    db.execute("INSERT INTO results_fts (results_fts) VALUES ('rebuild')")
