"""Server-side time of the matrix page for a full sweep (~700 ops x 13 dtypes).

Without a path, synthesises a realistic DB: the real probe runs a few ops on
the fake MPS backend, then its result rows are replicated over every op name
in the catalogue and 13 dtypes (statuses, messages and timings as recorded).
With a path, times that DB instead.

    python benchmarks/bench_site.py              # synthesise, then time
    python benchmarks/bench_site.py mpsprobe.db  # time an existing DB
"""
import asyncio
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
          "float32", "float64", "complex32", "complex64", "complex128")
SEED_OPS = "add,exp,histc,erfinv,bitwise_and,mul,sum"


def catalogue_op_names():
    """Every OpInfo name[.variant], as the probe files them."""
    from torch.testing._internal.common_methods_invocations import op_db
    return sorted({f"{o.name}.{o.variant_test_name}" if o.variant_test_name else o.name
                   for o in op_db})


def synthesise(path):
    seed = Path(path).with_suffix(".seed.db")
    env = dict(os.environ, FAKE_MPS=json.dumps({"hang": []}))
    subprocess.run([sys.executable, "-m", "mpsprobe", "run", "--db", str(seed), "--backend",
                    str(ROOT / "tests" / "fake_mps.py"), "--ops", SEED_OPS, "--dtypes",
                    "float16,float32,int32", "--samples", "3", "--timeout", "5", "--no-timing"],
                   check=True, env=env)
    src = sqlite3.connect(seed)
    conn = sqlite3.connect(path)
    src.backup(conn)
    src.close()
    conn.execute("PRAGMA journal_mode = DELETE")
    run_id = conn.execute("SELECT id FROM runs").fetchone()[0]
    cols = [r[1] for r in conn.execute("PRAGMA table_info(results)")]
    template = [dict(zip(cols, r)) for r in conn.execute("SELECT * FROM results")]
    rng = random.Random(0)
    ops = catalogue_op_names()
    # Most of a real sweep passes; the failures are the recorded fake-MPS rows.
    passing = [r for r in template if r["status"] == "pass"]
    with conn:
        conn.execute("DELETE FROM results")
        conn.execute("DELETE FROM cases")
        conn.execute("DELETE FROM pairs_done")
        conn.executemany("INSERT OR IGNORE INTO ops (id, name, source) VALUES (?, ?, 'opinfo')",
                         [(o, o.split(".")[0]) for o in ops])
        for op in ops:
            for dtype in DTYPES:
                pool = passing if rng.random() < 0.8 else template
                for index in range(3):
                    row = dict(rng.choice(pool), run_id=run_id, op_id=op, dtype=dtype,
                               case_id=f"{op}|{dtype}|{index}")
                    conn.execute(f"INSERT INTO results ({', '.join(cols)}) VALUES "
                                 f"({', '.join('?' * len(cols))})", [row[c] for c in cols])
                    conn.execute("INSERT INTO cases (id, op_id, dtype, sample_index, sample) "
                                 "VALUES (?, ?, ?, ?, 'f32[8]')", [row["case_id"], op, dtype, index])
    conn.execute("VACUUM")
    conn.close()
    seed.unlink()
    for suffix in ("-wal", "-shm"):
        Path(str(seed) + suffix).unlink(missing_ok=True)
    return len(ops)


async def time_matrix(db_path, repeats=5):
    from mpsprobe.site import make_datasette

    ds = make_datasette(db_path)
    await ds.invoke_startup()
    run = sqlite3.connect(db_path).execute(
        "SELECT id FROM runs ORDER BY started DESC LIMIT 1").fetchone()[0]
    walls, cpus = [], []
    for _ in range(repeats + 1):
        start, start_cpu = time.perf_counter(), time.process_time()
        response = await ds.client.get(f"/-/matrix?run={run}")
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - start_cpu)  # all threads: SQL runs in a pool
        assert response.status_code == 200, response.text[:500]
    cells = response.text.count("<td class=\"st-")

    def median(xs):
        return sorted(xs)[len(xs) // 2]
    return (walls[0], cpus[0]), (median(walls[1:]), median(cpus[1:])), cells, len(response.content)


def main():
    if len(sys.argv) > 1:
        path = sys.argv[1]
    else:
        path = os.path.join(tempfile.mkdtemp(prefix="bench-site-"), "sweep.db")
        t = time.perf_counter()
        n_ops = synthesise(path)
        print(f"synthesised {n_ops} ops x {len(DTYPES)} dtypes x 3 samples into {path} "
              f"in {time.perf_counter() - t:.1f} s")
    n = sqlite3.connect(path).execute("SELECT count(*) FROM results").fetchone()[0]
    cold, warm, cells, size = asyncio.run(time_matrix(path))
    print(f"results rows: {n}; matrix cells: {cells}; page size: {size / 1e6:.2f} MB")
    print(f"matrix page, server side: cold {cold[0] * 1000:.0f} ms wall / {cold[1] * 1000:.0f} ms CPU; "
          f"warm (median of 5) {warm[0] * 1000:.0f} ms wall / {warm[1] * 1000:.0f} ms CPU "
          f"(load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
