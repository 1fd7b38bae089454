"""Figures for merge and the history views on synthetic databases.

Builds K databases of one run each (a different torch version per run), with
OPS ops x 4 dtypes x 3 samples, merges them, merges again (idempotence), and
times the op_history / op_firsts views over the result.

    python benchmarks/merge_history.py [--ops 600] [--versions 6]
"""
import argparse
import os
import tempfile
import time
import uuid

from mpsprobe.db import schema
from mpsprobe.db.merge import merge
from mpsprobe.vocabulary import STATUSES

DTYPES = ("float16", "float32", "bfloat16", "int64")


def build(path, torch_version, ops, seed):
    db = schema.open_db(path)
    run_id = uuid.uuid4().hex
    with db.conn:
        db["runs"].insert({"id": run_id, "run_key": run_id, "state": "complete",
                           "started": "2025-01-01T00:00:00", "torch_version": torch_version,
                           "os_name": "macOS", "os_version": "15.3", "device": "mps",
                           "options": "{}"})
        db.conn.executemany("INSERT OR IGNORE INTO ops (id, name) VALUES (?, ?)",
                            [(f"op{i}", f"op{i}") for i in range(ops)])
        cases, results = [], []
        for i in range(ops):
            for d in DTYPES:
                for s in range(3):
                    case = f"op{i}|{d}|{s}"
                    cases.append((case, f"op{i}", d, s))
                    status = STATUSES[(i * 7 + s + seed) % len(STATUSES)]
                    results.append((run_id, case, f"op{i}", d, status))
        db.conn.executemany("INSERT OR IGNORE INTO cases (id, op_id, dtype, sample_index) "
                            "VALUES (?, ?, ?, ?)", cases)
        db.conn.executemany("INSERT INTO results (run_id, case_id, op_id, dtype, status) "
                            "VALUES (?, ?, ?, ?, ?)", results)
    db.conn.close()
    return len(results)


def timed(label, fn):
    start = time.perf_counter()
    value = fn()
    print(f"{label:<44} {time.perf_counter() - start:7.2f} s")
    return value


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=600)
    parser.add_argument("--versions", type=int, default=6)
    args = parser.parse_args()
    where = tempfile.mkdtemp(prefix="mpsprobe-bench-")
    sources, total = [], 0
    for k in range(args.versions):
        path = os.path.join(where, f"v{k}.db")
        total += build(path, f"2.{k + 5}.0", args.ops, k)
        sources.append(path)
    print(f"{args.versions} databases, {total} results in all")
    out = os.path.join(where, "all.db")
    timed(f"merge {args.versions} databases", lambda: merge(sources, out))
    timed("merge them again (adds nothing)", lambda: merge(sources, out))
    db = schema.open_db(out, readonly=True)
    n = timed("SELECT count(*) FROM op_history",
              lambda: db.execute("SELECT count(*) FROM op_history").fetchone()[0])
    m = timed("SELECT count(*) FROM op_firsts",
              lambda: db.execute("SELECT count(*) FROM op_firsts").fetchone()[0])
    timed("SELECT * FROM op_firsts (every row)", lambda: db.execute(
        "SELECT * FROM op_firsts").fetchall())
    timed("op_firsts, first 100 rows (a table page)", lambda: db.execute(
        "SELECT * FROM op_firsts LIMIT 100").fetchall())
    timed("op_firsts for one op (an op's page)", lambda: db.execute(
        "SELECT * FROM op_firsts WHERE op_id = 'op7'").fetchall())
    timed("op_history for one op (an op's page)", lambda: db.execute(
        "SELECT * FROM op_history WHERE op_id = 'op7'").fetchall())
    print(f"op_history rows {n}, op_firsts rows {m}; files in {where}")


if __name__ == "__main__":
    main()
