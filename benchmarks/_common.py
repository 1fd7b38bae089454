"""Shared pieces of the benchmark scripts: running a sweep, sampling memory, printing.

The scripts import mpsprobe from wherever Python finds it: an installation,
or PYTHONPATH pointing at a folder made with `pip install --target`, so they
run on a machine where mpsprobe is not installed (see benchmarks/README.md).
"""
import os
import platform
import resource
import sys
import tempfile
import threading
import time


def machine_line(env=None):
    """One line naming the machine, Python and (from a sweep's `env`) torch and device.

    It does not import torch itself, so the parent's memory figure stays honest.
    """
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    line = (f"{platform.system()} {platform.release()}, {os.cpu_count()} cores ({cpu}); "
            f"Python {platform.python_version()}")
    if env:
        line += f", torch {env.get('torch_version')}, target {env.get('device_name')}"
    return line + f"; load {load:.2f}; {time.strftime('%Y-%m-%d %H:%M %Z')}"


def _children(pid):
    """Every descendant pid of `pid` (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(x) for x in f.read().split()]
    except OSError:
        return []
    return kids + [g for k in kids for g in _children(k)]


def _rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class MemorySampler:
    """Samples the RSS of this process and its workers every `interval` seconds.

    Reports the parent's peak (getrusage), the largest single worker seen and
    the peak of all workers together. On systems without /proc only the
    parent's and the largest reaped child's peaks are known.
    """

    def __init__(self, interval=0.25):
        self.interval = interval
        self.worker_peak = 0
        self.workers_total_peak = 0
        self.max_workers_seen = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        me = os.getpid()
        while not self._stop.is_set():
            rss = [_rss_bytes(p) for p in _children(me)]
            rss = [r for r in rss if r]
            if rss:
                self.worker_peak = max(self.worker_peak, max(rss))
                self.workers_total_peak = max(self.workers_total_peak, sum(rss))
                self.max_workers_seen = max(self.max_workers_seen, len(rss))
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    @staticmethod
    def _ru_bytes(who):
        peak = resource.getrusage(who).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024

    def figures(self):
        return {
            "parent_peak_mib": self._ru_bytes(resource.RUSAGE_SELF) / 2**20,
            "worker_peak_mib": max(self.worker_peak, self._ru_bytes(resource.RUSAGE_CHILDREN)) / 2**20,
            "workers_total_peak_mib": self.workers_total_peak / 2**20,
            "workers_seen": self.max_workers_seen,
        }


def run_sweep(device="cpu", ops=(), dtypes=(), samples=3, timing=True, workers=1,
              shard=None, timeout=60.0, db_path=None, pairs_filter=None, passes="forward"):
    """One fresh sweep through mpsprobe's Python API; returns a dict of figures.

    `pairs_filter(pair) -> bool` narrows the planned pairs (the peer comparison
    uses it to run exactly the (op, dtype) pairs another tool runs). `passes`:
    forward only unless asked (the figures compare forward sweeps).
    """
    import mpsprobe
    own_dir = None
    if db_path is None:
        own_dir = tempfile.mkdtemp(prefix="mpsprobe-bench-")
        db_path = os.path.join(own_dir, "bench.db")
    marks = {}
    started = time.perf_counter()
    with MemorySampler() as memory:
        run = mpsprobe.probe(list(ops), list(dtypes), device, samples, db_path, timing=timing,
                             workers=workers, shard=shard, timeout=timeout, fresh=True,
                             select=pairs_filter, passes=passes,
                             on_start=lambda run, todo: marks.setdefault("ready", time.perf_counter()),
                             on_case=lambda pair, index, result: marks.setdefault("first", time.perf_counter()))
    wall = time.perf_counter() - started
    return {"db": db_path, "state": run.state, "pairs": run.pairs, "cases": run.total,
            "counts": run.counts, "wall_s": wall, "startup_s": marks["ready"] - started,
            # Until the first case is answered: the worker's imports (OpInfo's database,
            # which a cached plan no longer needs before the run opens) and the device's
            # first initialisation, which a sweep pays once whatever its size.
            "first_case_s": marks.get("first", marks["ready"]) - started,
            "cases_per_s": run.total / wall if wall else float("nan"),
            "env": {k: run.env.get(k) for k in ("torch_version", "device", "device_name")},
            "workers": workers or _default_workers(run.env.get("device")),
            **memory.figures()}


def _default_workers(device):
    from mpsprobe.engine.sweep import default_workers
    return default_workers(device, os.cpu_count())


def parse_shard(text):
    if not text:
        return None
    i, n = (int(x) for x in text.split("/"))
    return i, n


def split(text):
    return [x.strip() for x in (text or "").split(",") if x.strip()]
