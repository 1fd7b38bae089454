"""Server-side time and size of the site's pages (matrix, op page, compare, grid) on 20 full runs, against their budgets.

Builds the database from one real full run (a DB written by `mpsprobe run`
over the whole catalogue): the run is copied 20 times as 20 torch versions,
each copy perturbed (older versions turn more passing cases into fallback,
unsupported or mismatch), then the matrix page (newest run) and an op page
are fetched through Datasette's own client.

Cold: the first request in a fresh process (Datasette just started, SQLite's
page cache empty; the OS file cache is not dropped). Warm: the median of the
next five requests in that process.

    mpsprobe run --device cpu --samples 3 --no-timing --db full.db     # one full run
    python benchmarks/bench_site_20runs.py full.db                       # build 20 runs, time
    python benchmarks/bench_site_20runs.py --built runs20.db             # time an existing one
"""
import argparse
import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402

VERSIONS = [f"2.{minor}.{patch}" for minor in range(2, 12) for patch in (0, 1)]  # 20 versions
WORSE = ("fallback", "unsupported", "mismatch")


def build(source, path, runs=20):
    """`path` gets the source's schema and runs-many perturbed copies of its newest full run."""
    from mpsprobe.db import schema
    from mpsprobe.engine.environment import version_key
    src = sqlite3.connect(source)
    conn = sqlite3.connect(path)
    src.backup(conn)          # schema, ops, cases and the source run itself
    src.close()
    conn.execute("PRAGMA journal_mode = DELETE")
    original = conn.execute("SELECT * FROM runs ORDER BY cases_total DESC LIMIT 1")
    names = [d[0] for d in original.description]
    original = dict(zip(names, original.fetchone()))
    result_cols = [r[1] for r in conn.execute("PRAGMA table_info(results)")]
    other_cols = [c for c in result_cols if c not in ("run_id", "status")]
    with conn:
        conn.execute("DELETE FROM results WHERE run_id != ?", [original["id"]])
        conn.execute("DELETE FROM runs WHERE id != ?", [original["id"]])
        for k, version in enumerate(VERSIONS[:runs - 1]):
            run_id = uuid.uuid4().hex
            row = dict(original, id=run_id, run_key=run_id, torch_version=version,
                       torch_version_key=version_key(version), device="mps", os_name="macOS",
                       os_version="15.3", started=f"2025-{1 + k // 2:02d}-{1 + k % 2 * 14:02d}T00:00:00")
            conn.execute(f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                         list(row.values()))
            # Older versions are worse: pct of the passing cases get a worse status.
            pct = (runs - 1 - k) * 2
            conn.execute(
                f"INSERT INTO results (run_id, status, {', '.join(other_cols)}) "
                f"SELECT ?, CASE WHEN status = 'pass' AND abs(random()) % 100 < ? "
                f"THEN json_extract(?, '$[' || (abs(random()) % 3) || ']') ELSE status END, "
                f"{', '.join(other_cols)} FROM results WHERE run_id = ?",
                [run_id, pct, json.dumps(WORSE), original["id"]])
            conn.execute("INSERT INTO pairs_done SELECT ?, op_id, dtype, n_cases FROM pairs_done "
                         "WHERE run_id = ?", [run_id, original["id"]])
        # The measured run becomes the newest, MPS-labelled one.
        conn.execute("UPDATE runs SET device = 'mps', os_name = 'macOS', torch_version = '2.12.0', "
                     "torch_version_key = ?, started = '2026-01-01T00:00:00' WHERE id = ?",
                     [version_key("2.12.0"), original["id"]])
    conn.execute("VACUUM")
    conn.close()
    schema.inspect(path)  # still a valid mpsprobe database
    return original["id"]


# (page, URL, warm ms budget, KiB transferred budget): issue 15's budgets.
PAGES = (("matrix", "/-/matrix", 150, 150), ("op page", "/-/op/{op}", 150, 150),
         ("compare", "/-/compare", 500, 150), ("grid", "/-/grid", None, None))


def time_pages(path, op):
    """Runs in a fresh process: cold and warm server-side times of each page, and
    the bytes a browser receives (gzip) beside the page's own size."""
    from mpsprobe.site import make_datasette

    async def go():
        ds = make_datasette(path)
        await ds.invoke_startup()
        figures = {}
        for name, url, _, _ in PAGES:
            url = url.format(op=op)
            walls = []
            for _ in range(6):
                start = time.perf_counter()
                response = await ds.client.get(url, headers={"accept-encoding": "gzip"})
                walls.append(time.perf_counter() - start)
                assert response.status_code == 200, (url, response.text[:300])
            figures[name] = {"cold_ms": walls[0] * 1000, "warm_ms": sorted(walls[1:])[2] * 1000,
                             "bytes": len(response.content),
                             "sent": response.num_bytes_downloaded}
        return figures
    print(json.dumps(asyncio.run(go())))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", nargs="?", help="a DB holding one full run")
    parser.add_argument("--built", help="time this already-built 20-run DB instead")
    parser.add_argument("--op", default="add", help="the op page to time")
    parser.add_argument("--keep", help="save the built DB here")
    parser.add_argument("--time-one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.time_one:
        return time_pages(args.time_one, args.op)
    print(_common.machine_line())
    path = args.built
    if not path:
        if not args.source:
            parser.error("give a DB with one full run, or --built")
        path = args.keep or os.path.join(tempfile.mkdtemp(prefix="bench-site20-"), "runs20.db")
        started = time.perf_counter()
        build(args.source, path)
        print(f"built {path} in {time.perf_counter() - started:.0f} s")
    conn = sqlite3.connect(path)
    n_runs, n_results = conn.execute(
        "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM results)").fetchone()
    conn.close()
    print(f"{n_runs} runs, {n_results} result rows, {os.path.getsize(path) / 2**20:.0f} MiB")
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--time-one", path,
                           "--op", args.op], stdout=subprocess.PIPE, text=True, check=True)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    print("| page | cold ms | warm ms (median of 5) | budget ms | page KiB | sent KiB (gzip) "
          "| budget KiB | met |\n|---|---|---|---|---|---|---|---|")
    for name, _, ms_budget, kib_budget in PAGES:
        f = figures[name]
        met = ((ms_budget is None or f["warm_ms"] <= ms_budget)
               and (kib_budget is None or f["sent"] / 1024 <= kib_budget))
        print(f"| {name} | {f['cold_ms']:.0f} | {f['warm_ms']:.0f} | {ms_budget or '—'} "
              f"| {f['bytes'] / 1024:.0f} | {f['sent'] / 1024:.0f} | {kib_budget or '—'} "
              f"| {'yes' if met else 'NO'} |")


if __name__ == "__main__":
    main()
