"""Server time (median of 20) and gzipped size of the pages a porter opens first.

The database, like the one the site's review measured on: bench_site.py's
synthetic full sweep (a few real fake-MPS cases replicated over every OpInfo
op and 13 dtypes) filed as an MPS run of torch 2.13, the same sweep again as
a CPU run, and a declared history of MPS for torch 2.0 to 2.13 (every op
declared for every dtype but float64 and complex128: a synthetic stand-in for
`mpsprobe declared --history`, which needs the wheels). The pages are
rendered anew on each request (the database served --live, so the site's
cache of rendered pages never answers) through Datasette's own client, with a
browser's `Accept-Encoding: gzip`.

    python benchmarks/bench_site_pages.py                 # synthesise, then time
    python benchmarks/bench_site_pages.py --keep all.db   # and keep the database
    python benchmarks/bench_site_pages.py --built all.db  # time an existing one
"""
import argparse
import asyncio
import os
import sqlite3
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402

DECLARED_VERSIONS = [f"2.{minor}.0" for minor in range(0, 14)]
NOT_DECLARED = ("float64", "complex128")

PAGES = (("grid", "/-/grid"), ("grid, float32", "/-/grid?dtype=float32"),
         ("matrix", "/-/matrix"), ("op page", "/-/op/abs"), ("compare", "/-/compare"),
         ("search conv", "/-/search?q=conv"), ("search (canned)", "/all/search?q=conv"),
         ("results table", "/all/results"), ("results CSV", "/all/results.csv"))


def build(path):
    """The synthetic sweep as an MPS run of 2.13, its copy as a CPU run, and a declared history."""
    import bench_site
    from mpsprobe.db import schema
    from mpsprobe.versions import version_key
    bench_site.synthesise(path)
    conn = sqlite3.connect(path)
    run = conn.execute("SELECT * FROM runs")
    names = [d[0] for d in run.description]
    run = dict(zip(names, run.fetchone()))
    cols = [r[1] for r in conn.execute("PRAGMA table_info(results)") if r[1] != "run_id"]
    cpu = uuid.uuid4().hex
    with conn:
        # Filed as MPS to line up with the declarations; its backend column keeps
        # "test backend, not a real device" on every page that names it.
        conn.execute("UPDATE runs SET device = 'mps', os_name = 'macOS', os_version = '15.3', "
                     "torch_version = '2.13.0', torch_version_key = ? WHERE id = ?",
                     [version_key("2.13.0"), run["id"]])
        row = dict(run, id=cpu, run_key=cpu, device="cpu", os_name="Linux", os_version="6.1",
                   torch_version="2.13.0+cpu", torch_version_key=version_key("2.13.0+cpu"),
                   started="2026-02-01T00:00:00")
        conn.execute(f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                     list(row.values()))
        conn.execute(f"INSERT INTO results (run_id, {', '.join(cols)}) SELECT ?, {', '.join(cols)} "
                     "FROM results WHERE run_id = ?", [cpu, run["id"]])
        ops = [r[0] for r in conn.execute("SELECT id FROM ops")]
        dtypes = bench_site.DTYPES
        conn.executemany(
            "INSERT INTO declared (torch_version, device, op_id, dtype, status, source, note) "
            "VALUES (?, 'mps', ?, ?, ?, 'synthetic', NULL)",
            [(v, op, d, "unsupported" if d in NOT_DECLARED else "pass")
             for v in DECLARED_VERSIONS for op in ops for d in dtypes])
    conn.execute("VACUUM")
    conn.close()
    schema.inspect(path)


def time_pages(path, repeats=20):
    from mpsprobe.site import make_datasette
    prefix = "/" + os.path.splitext(os.path.basename(path))[0] + "/"

    async def go():
        ds = make_datasette(path, live=True)
        await ds.invoke_startup()
        figures = []
        for name, url in PAGES:
            url = url.replace("/all/", prefix)
            walls = []
            for _ in range(repeats):
                start = time.perf_counter()
                response = await ds.client.get(url, headers={"accept-encoding": "gzip"})
                walls.append(time.perf_counter() - start)
            figures.append((name, url, response.status_code, sorted(walls)[len(walls) // 2] * 1000,
                            len(response.content), response.num_bytes_downloaded,
                            response.headers.get("content-encoding", "none")))
        return figures
    return asyncio.run(go())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--built", help="time this database instead of synthesising one")
    parser.add_argument("--keep", help="write the synthesised database here (name it all.db)")
    args = parser.parse_args()
    print(_common.machine_line())
    path = args.built
    if not path:
        path = args.keep or os.path.join(tempfile.mkdtemp(prefix="bench-pages-"), "all.db")
        started = time.perf_counter()
        build(path)
        print(f"built {path} in {time.perf_counter() - started:.0f} s")
    print("| page | URL | status | server ms (median of 20) | page KiB | sent KiB | encoding |")
    print("|---|---|---|---|---|---|---|")
    for name, url, status, ms, size, sent, encoding in time_pages(path):
        print(f"| {name} | `{url}` | {status} | {ms:.0f} | {size / 1024:.0f} | {sent / 1024:.1f} | {encoding} |")


if __name__ == "__main__":
    main()
