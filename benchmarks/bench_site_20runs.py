"""Server-side time and size of the site's pages (matrix, op page, compare, grid) on 20 full runs, against their budgets.

Builds the database from one full run: the run is copied 20 times as 20 torch
versions, each copy perturbed (older versions turn more passing cases into
fallback, unsupported or mismatch), then the pages are fetched through
Datasette's own client with a browser's `Accept-Encoding: gzip`. The source is
a DB written by `mpsprobe run` over the whole catalogue, or, with
--synthetic, bench_site.py's full run (a few real fake-MPS cases replicated
over every OpInfo op and 13 dtypes: no sweep needed).

Cold: the first request in a fresh process (SQLite's page cache empty; the OS
file cache is not dropped). Cached: the median of the next five, answered from
the site's cache of rendered pages (an immutable database). Rendered: the
median of five requests with the database served --live, so every page is
queried and rendered anew: the budgets are judged on this one. Compare is also
timed on a database of two full runs, as its budget says.

Budgets (issue 15): matrix <= 150 ms warm server-side on 20 full runs and
<= 150 KB transferred; compare <= 500 ms on two full runs.

    mpsprobe run --device cpu --samples 3 --no-timing --db full.db     # one full run
    python benchmarks/bench_site_20runs.py full.db                       # build 20 runs, time
    python benchmarks/bench_site_20runs.py --synthetic                   # no sweep: a synthetic full run
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
    from mpsprobe.versions import version_key
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


# (page, URL, ms budget, KiB transferred budget): issue 15's budgets.
PAGES = (("matrix", "/-/matrix", 150, 150), ("op page", "/-/op/{op}", None, None),
         ("compare", "/-/compare", 500, 150), ("grid", "/-/grid", None, None))


def time_pages(path, op, live):
    """Runs in a fresh process: cold, then warm server-side times of each page (cached
    pages of an immutable DB, or rendered anew when `live`), and the bytes a browser
    receives (gzip) beside the page's own size."""
    from mpsprobe.site import make_datasette

    async def go():
        ds = make_datasette(path, live=live)
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


def timed(path, op, live):
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--time-one", path,
                           "--op", op] + (["--live"] if live else []),
                          stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def describe(path):
    conn = sqlite3.connect(path)
    n_runs, n_results = conn.execute(
        "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM results)").fetchone()
    conn.close()
    return f"{n_runs} runs, {n_results} result rows, {os.path.getsize(path) / 2**20:.0f} MiB"


def synthetic_source(folder):
    """bench_site.py's synthetic full run, written into `folder`."""
    import bench_site
    path = os.path.join(folder, "full.db")
    bench_site.synthesise(path)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", nargs="?", help="a DB holding one full run")
    parser.add_argument("--synthetic", action="store_true", help="synthesise the full run (bench_site.py)")
    parser.add_argument("--built", help="time this already-built 20-run DB instead")
    parser.add_argument("--op", default="add", help="the op page to time")
    parser.add_argument("--keep", help="save the built DB here")
    parser.add_argument("--time-one", help=argparse.SUPPRESS)
    parser.add_argument("--live", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.time_one:
        return time_pages(args.time_one, args.op, args.live)
    print(_common.machine_line())
    path, two = args.built, None
    if not path:
        folder = tempfile.mkdtemp(prefix="bench-site20-")
        source = args.source or (synthetic_source(folder) if args.synthetic else None)
        if not source:
            parser.error("give a DB with one full run, --synthetic, or --built")
        path = args.keep or os.path.join(folder, "runs20.db")
        started = time.perf_counter()
        build(source, path)
        print(f"built {path} in {time.perf_counter() - started:.0f} s")
        two = os.path.join(folder, "runs2.db")
        build(source, two, runs=2)
    print(f"20 runs: {describe(path)}")
    if two:
        print(f"2 runs: {describe(two)}")
    cached, rendered = timed(path, args.op, live=False), timed(path, args.op, live=True)
    print("| page | cold ms | cached ms | rendered ms | budget ms | page KiB | sent KiB (gzip) "
          "| budget KiB | met |\n|---|---|---|---|---|---|---|---|---|")
    rows = [(f"{name}, 20 runs", name, cached[name], rendered[name]) for name, *_ in PAGES]
    if two:
        rows.append(("compare, 2 runs", "compare", timed(two, args.op, live=False)["compare"],
                     timed(two, args.op, live=True)["compare"]))
    for label, name, c, r in rows:
        _, _, ms_budget, kib_budget = next(p for p in PAGES if p[0] == name)
        # Judged on the slower of a cold request and a page rendered anew: never on the cache.
        worst_ms = max(c["cold_ms"], r["warm_ms"]) if name == "compare" else r["warm_ms"]
        met = ((ms_budget is None or worst_ms <= ms_budget)
               and (kib_budget is None or c["sent"] / 1024 <= kib_budget))
        print(f"| {label} | {c['cold_ms']:.0f} | {c['warm_ms']:.0f} | {r['warm_ms']:.0f} "
              f"| {ms_budget or '—'} | {c['bytes'] / 1024:.0f} | {c['sent'] / 1024:.0f} "
              f"| {kib_budget or '—'} | {'—' if ms_budget is None and kib_budget is None else 'yes' if met else 'NO'} |")


if __name__ == "__main__":
    main()
