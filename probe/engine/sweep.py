"""A sweep: plan the cases, run them in isolated workers, record every result.

This is the Python API behind `mpsprobe run`; the CLI only parses options and
draws progress.
"""
import hashlib
import json
import os
import time
import zlib
from dataclasses import asdict, dataclass, field

import mpsprobe
from mpsprobe.db import schema
from mpsprobe.db.writer import RunWriter, find_resumable, latest_unfinished
from .launch import worker_command
from .pool import Pool


class SweepError(Exception):
    """Bad input found before anything was written: one line for the user."""


@dataclass
class SweepOptions:
    db_path: str = "mpsprobe.db"
    device: str = "auto"
    backend: str = None           # a Python file defining a test/custom target
    ops: list = field(default_factory=list)
    dtypes: list = field(default_factory=list)
    samples: int = 3
    timing: bool = True
    workers: int = 0              # 0: one per CPU core
    timeout: float = 60.0
    mps_fallback: bool = False    # set PYTORCH_ENABLE_MPS_FALLBACK=1 in workers
    shard: tuple = None           # (i, n), 1-based
    python: str = None            # the interpreter whose torch is probed
    resume: bool = False          # continue the newest unfinished run
    fresh: bool = False           # never continue: always start a new run

    def key_fields(self):
        """The options that decide which cases a run holds (and so its identity)."""
        return {"ops": sorted(self.ops), "dtypes": sorted(self.dtypes), "samples": self.samples,
                "mps_fallback": self.mps_fallback, "shard": list(self.shard) if self.shard else None}


def parse_shard(text):
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise SweepError(f"--shard takes I/N, like 1/4 (got {text!r})") from None
    if not 1 <= i <= n:
        raise SweepError(f"--shard {text}: I must be between 1 and N")
    return i, n


def in_shard(pair, shard):
    if not shard:
        return True
    i, n = shard
    return zlib.crc32(f"{pair['op']}|{pair['dtype']}".encode()) % n == i - 1


def run_key(env, options):
    identity = {k: env.get(k) for k in ("torch_version", "torch_git", "device", "device_name",
                                         "backend", "hostname", "os_version")}
    identity.update(options.key_fields())
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def worker_env(options):
    env = dict(os.environ)
    if options.mps_fallback:
        env["PYTORCH_ENABLE_MPS_FALLBACK"] = "1"
    else:
        env.pop("PYTORCH_ENABLE_MPS_FALLBACK", None)
    return env


def _check_writable(path):
    """Refuse, before any worker starts, a database that exists but cannot be written."""
    if not os.path.isfile(path):
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.access(path, os.W_OK):
        raise SweepError(f"{path} is not writable")
    if not os.access(directory, os.W_OK):
        raise SweepError(f"cannot record into {path}: its directory {directory} is not "
                         "writable (SQLite keeps its journal next to the database)")


def _recording_now(run, env):
    """True when a live mpsprobe process on this host is recording `run` right now."""
    pid = run.get("pid")
    if (run["state"] != "running" or not pid or pid == os.getpid()
            or run.get("hostname") != env.get("hostname")):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    if not os.path.isdir("/proc/self"):
        return True
    try:  # where /proc exists, tell mpsprobe from a reused pid or an unreaped corpse
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"mpsprobe" in f.read()
    except OSError:
        return False


def default_workers(device, cpu_count):
    """Workers when --workers is not given: one per CPU core, but one on MPS.

    A Mac has one GPU. Each worker is a process with its own Metal allocator
    and cache on it: parallel workers run each other out of memory (recorded as
    errors that are not the op's) and time each other's work.
    """
    if str(device or "").split(":")[0] == "mps":
        return 1
    return max(1, cpu_count or 1)


class Sweep:
    """Prepare (validate everything, write nothing), then run."""

    def __init__(self, options):
        self.options = options
        size = options.workers or os.cpu_count() or 1
        self.config = {"device": options.device, "backend": options.backend,
                       "samples": options.samples, "timing": options.timing,
                       "threads": max(1, (os.cpu_count() or 1) // size)}
        self.pool = Pool(self.config, size=size, timeout=options.timeout,
                         python=options.python, env=worker_env(options))
        self.env = self.pairs = self.writer = None
        self.resumed = False

    def _fit_pool_to_device(self):
        """Once the device is known: one worker on MPS unless --workers says otherwise."""
        if self.options.workers or not self.env:
            return
        size = default_workers(self.env.get("device"), os.cpu_count())
        if size == self.pool.size:
            return
        self.pool.close()  # the describing worker ran with the threads of another pool size
        self.pool.size = size
        self.config["threads"] = max(1, (os.cpu_count() or 1) // size)
        self.pool.command = worker_command(self.config, self.options.python)

    def prepare(self):
        """Check the DB, the device and the op/dtype filters. Raises SweepError."""
        options = self.options
        if options.samples < 1:
            raise SweepError("--samples must be at least 1")
        _check_writable(options.db_path)
        try:
            schema.inspect(options.db_path)
        except schema.DatabaseError as e:
            raise SweepError(str(e)) from None
        from .pool import WorkerError
        try:
            self.env = self.pool.request({"cmd": "describe"})["env"]
            plan = self.pool.request({"cmd": "plan", "ops": options.ops, "dtypes": options.dtypes})
        except WorkerError as e:
            self.pool.close()
            raise SweepError(str(e)) from None
        self.pairs = [p for p in plan["pairs"] if in_shard(p, options.shard)]
        return self.env, self.pairs

    def open(self):
        """Open the DB and start or resume the run; returns the pairs still to do."""
        options = self.options
        try:
            db = schema.open_db(options.db_path)
        except schema.DatabaseError as e:
            self.pool.close()
            raise SweepError(str(e)) from None
        key = run_key(self.env, options)
        # Choosing the run and claiming it happen under SQLite's write lock, so
        # two processes started at once cannot both start (or both resume) it.
        db.conn.execute("BEGIN IMMEDIATE")
        try:
            previous = latest_unfinished(db) if options.resume else (
                None if options.fresh else find_resumable(db, key))
            if options.resume and previous is None:
                raise SweepError(f"{options.db_path} has no unfinished run to resume")
            if previous is not None and previous["run_key"] != key:
                raise SweepError("the unfinished run was made with other options or another "
                                 "torch/device; re-run with the same options, or use --fresh")
            if previous is not None and _recording_now(previous, self.env):
                raise SweepError(
                    f"run {previous['id']} is being recorded right now by process "
                    f"{previous['pid']} on this host; wait for it to finish (it records the "
                    f"same cases), or use --fresh for a separate run")
            if previous is not None:
                self.writer = RunWriter.resume(db, previous, os.getpid())
                self.resumed = True
            else:
                options_record = {k: v for k, v in asdict(options).items()
                                  if k not in ("resume", "fresh", "db_path")}
                self.writer = RunWriter.start(db, key, self.env, options_record,
                                              mpsprobe.__version__, os.getpid())
        except BaseException:
            if db.conn.in_transaction:
                db.conn.rollback()
            self.pool.close()
            raise
        done_pairs, done_cases = self.writer.done()
        todo = []
        for pair in self.pairs:
            key = (pair["op"], pair["dtype"])
            if key not in done_pairs:
                todo.append(dict(pair, done=done_cases.get(key, [])))
        return todo

    def run(self, todo, on_case=None, on_pair=None, should_stop=lambda: False):
        """Run `todo` to the end (or until should_stop()); returns (state, total, counts)."""
        started = time.monotonic()
        state = "interrupted"
        self._fit_pool_to_device()

        def case(pair, index, sample, result):
            self.writer.record(pair, index, sample, result)
            if on_case:
                on_case(pair, index, result)

        def pair_finished(pair, n):
            self.writer.pair_done(pair, n)
            if on_pair:
                on_pair(pair, n)
        try:
            with self.pool:
                self.pool.run(todo, case, pair_finished, should_stop)
            if not should_stop():
                state = "complete"
        finally:
            total, counts = self.writer.finish(state, time.monotonic() - started)
            self.writer.close()
        return state, total, counts
