"""The site's limits, measured against a real server (`mpsprobe serve`, over HTTP).

1. Deadline: wall time of queries that spend their time inside function calls,
   against the SQL time limit, with N background CPU burners (--burners).
2. Answer size: bytes received and the server's resident memory (VmRSS) before
   and after requests for 180 MB and for 98 MB.
3. Four heavy: a cheap uncached page (an op page not asked for before) fetched
   while four clients keep sending heavy queries (a recursive CTE that only the
   time limit stops), one every half second; its median and max, and what the
   heavy requests got.

The database is a small synthetic one (4 runs of 50 results, written by the real
writer; no torch needed) unless a path is given. The server runs in a child
process with this Python, so PYTHONPATH chooses which mpsprobe is measured
(another checkout's code gives the "before" figures). Prints Markdown rows.

    python benchmarks/bench_site_limits.py
    python benchmarks/bench_site_limits.py --burners 0,4 --cheap 10
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line  # noqa: E402

TIME_LIMIT_MS = 2000
ENDLESS = "with recursive c(x) as (select 1 union all select x + 1 from c) select count(*) from c"
DEADLINE_QUERIES = {
    "length(hex(randomblob(9999999))) x 200 rows": "select length(hex(randomblob(9999999))) from results",
    "sum(length(hex(randomblob(24999)))) x 40,000 rows":
        "select sum(length(hex(randomblob(24999)))) from results, results r2",
    "instr over 49 KB and 24 KB x 200 rows":
        "select instr(zeroblob(49000) || r.rowid, zeroblob(24000) || 'x') from results r",
    "endless recursive CTE": ENDLESS,
}
SIZE_QUERIES = {
    "hex(randomblob(9000000)) x 10 rows (180 MB)": "select hex(randomblob(9000000)) from runs, runs r2 limit 10",
    "hex(randomblob(24000)) x 1,000 rows (48 MB)":
        "select hex(randomblob(24000)) from results, results r2 limit 1000",
}


def synthesise(path):
    """4 complete runs of 50 results each, as the real writer records them."""
    from mpsprobe.db import schema
    from mpsprobe.db.writer import RunWriter
    for r in range(4):
        db = schema.open_db(path)
        writer = RunWriter.start(db, f"bench{r}", {"torch_version": f"2.{10 + r}.0", "device": "cpu",
                                                   "hostname": "bench"}, {}, "0.1.0", os.getpid())
        for i in range(50):
            pair = {"op": f"op{i}", "dtype": "float32"}
            writer.record(pair, 0, "f32[3]", {"status": "pass", "message": "x" * 500})
            writer.pair_done(pair, 1)
        writer.finish("complete", 1.0)
        writer.close()


class Server:
    def __init__(self, db_path):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.name = Path(db_path).stem
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mpsprobe", "serve", str(db_path), "--port", str(self.port),
             "--time-limit", str(TIME_LIMIT_MS)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(1200):
            if self.get("/-/versions.json", timeout=5)[0] == 200:
                return
            time.sleep(0.1)
        raise SystemExit("the server did not start")

    def get(self, path, timeout=120):
        """(status, bytes received, seconds)."""
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=timeout) as r:
                status, size = r.status, len(r.read())
        except urllib.error.HTTPError as e:
            status, size = e.code, len(e.read())
        except OSError:       # refused, reset or timed out
            status, size = "no answer", 0
        return status, size, time.perf_counter() - started

    def sql(self, sql, timeout=120):
        return self.get(f"/{self.name}.json?" + urllib.parse.urlencode({"sql": sql}), timeout)

    def memory_mib(self, field="VmRSS"):
        """The server's resident memory now (VmRSS), or its peak so far (VmHWM)."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith(field))
        return kb / 1024

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


class Burners:
    """N processes spinning on the CPU, to load the machine."""

    def __init__(self, n):
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]

    def __enter__(self):
        time.sleep(1 if self.procs else 0)
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


def deadline(server, burners):
    print(f"\n### Deadline (limit {TIME_LIMIT_MS} ms)\n")
    print("| query | burners | load at start | status | wall s | wall / limit |")
    print("|---|---|---|---|---|---|")
    for n in burners:
        with Burners(n):
            for label, sql in DEADLINE_QUERIES.items():
                load = os.getloadavg()[0]
                status, _, seconds = server.sql(sql, timeout=300)
                print(f"| {label} | {n} | {load:.1f} | {status} | {seconds:.2f} | "
                      f"{seconds / (TIME_LIMIT_MS / 1000):.1f}× |", flush=True)


def sizes(server):
    print("\n### Answer size and server memory\n")
    print("| query | status | bytes received | wall s | server RSS before MiB | peak MiB | after MiB |")
    print("|---|---|---|---|---|---|---|")
    for label, sql in SIZE_QUERIES.items():
        before = server.memory_mib()
        status, size, seconds = server.sql(sql, timeout=300)
        time.sleep(0.5)
        print(f"| {label} | {status} | {size:,} | {seconds:.2f} | {before:.0f} | "
              f"{server.memory_mib('VmHWM'):.0f} | {server.memory_mib():.0f} |", flush=True)


def four_heavy(server, cheap_count, timeout):
    print("\n### A cheap uncached page while four heavy queries run\n")
    quiet = [server.get(f"/-/op/op{i}?quiet=1")[2] for i in range(cheap_count)]
    stop = threading.Event()
    outcomes = []

    def heavy():
        while not stop.is_set():
            outcomes.append(server.sql(ENDLESS, timeout=300)[0])

    clients = [threading.Thread(target=heavy) for _ in range(4)]
    for c in clients:
        c.start()
    time.sleep(0.5)
    load = os.getloadavg()[0]
    busy = []
    for i in range(cheap_count):     # spread over several rounds of heavy queries
        busy.append(server.get(f"/-/op/op{i}?busy=1", timeout=timeout))
        time.sleep(0.5)
    stop.set()
    for c in clients:
        c.join()
    times = [s for _, _, s in busy]
    late = sum(status != 200 for status, _, _ in busy)
    print("| cheap page | requests | load at start | median ms | max ms | not 200 | heavy answers |")
    print("|---|---|---|---|---|---|---|")
    print(f"| alone | {cheap_count} | — | {statistics.median(quiet) * 1000:.0f} | {max(quiet) * 1000:.0f} | 0 | — |")
    counts = ", ".join(f"{k}: {v}" for k, v in sorted(
        {str(s): outcomes.count(s) for s in outcomes}.items()))
    print(f"| with 4 heavy clients | {cheap_count} | {load:.1f} | {statistics.median(times) * 1000:.0f} | "
          f"{max(times) * 1000:.0f} | {late} | {counts} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("db", nargs="?", help="a database to serve (default: a synthetic one)")
    parser.add_argument("--burners", default="0,4", help="background CPU burners, a list (default 0,4)")
    parser.add_argument("--cheap", type=int, default=10, help="cheap page requests (default 10)")
    parser.add_argument("--timeout", type=float, default=120, help="seconds a cheap request may wait")
    parser.add_argument("--parts", default="deadline,sizes,heavy", help="which figures (default all three)")
    args = parser.parse_args()
    from mpsprobe.site import limits
    print(machine_line())
    print(f"site limits: one value <= {limits.MAX_LENGTH:,} bytes; one answer <= "
          f"{getattr(limits, 'MAX_ANSWER_BYTES', 'no limit')} bytes")
    with tempfile.TemporaryDirectory() as folder:
        path = args.db
        if not path:
            path = os.path.join(folder, "bench.db")
            synthesise(path)
        server = Server(path)
        try:
            parts = args.parts.split(",")
            if "deadline" in parts:
                deadline(server, [int(n) for n in args.burners.split(",")])
            if "sizes" in parts:
                sizes(server)
            if "heavy" in parts:
                four_heavy(server, args.cheap, args.timeout)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
