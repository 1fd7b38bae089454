"""A sweep: plan the cases, run them in isolated workers, record every result.

The engine decides and runs; the store (mpsprobe.db.writer) records, and owns
every transaction. The Python API (mpsprobe.probe) and `mpsprobe run` drive
this class.
"""
import os
import time
from dataclasses import asdict

import mpsprobe
from mpsprobe.db import schema
from mpsprobe.db.writer import RunWriter, complete_pairs
from . import described, environment
from mpsprobe.ops import catalogue
from mpsprobe.vocabulary import COMPILED
from .compiled import cache_env as compiled_cache_env
from .launch import worker_command
from .plan import PlanError, SweepOptions, in_shard, parse_shard, run_key  # noqa: F401
from .pool import Pool, WorkerError

# The error a sweep raises for bad input; PlanError under its old name.
SweepError = PlanError


def worker_env(options):
    env = dict(os.environ)
    if COMPILED in options.passes:
        # Inductor's and Triton's caches, kept across runs, one per torch version.
        build = catalogue.torch_build(options.python) or {}
        env.update(compiled_cache_env(build.get("version"), env))
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


def _command_line(pid):
    """The command line of process `pid` as text ("" for an unreaped corpse), or None when it
    cannot be read: /proc where it exists, else ps (macOS has no /proc)."""
    if os.path.isdir("/proc/self"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return ""
    import subprocess
    try:
        out = subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else ""


def _recording_now(run, env):
    """True when a live mpsprobe process on this host may be recording `run` right now."""
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
    # Tell a recorder from a reused pid or an unreaped corpse. A recorder is `mpsprobe` or a
    # Python calling mpsprobe.probe (a notebook's kernel names no mpsprobe): any Python counts.
    command = _command_line(pid)
    return command is None or "mpsprobe" in command or "python" in command.lower()


def default_workers(device, cpu_count):
    """Workers when --workers is not given: one per CPU core, but one on MPS and at most
    CUDA_WORKERS on CUDA.

    A Mac has one GPU. Each worker is a process with its own Metal allocator
    and cache on it: parallel workers run each other out of memory (recorded as
    errors that are not the op's) and time each other's work. A CUDA GPU is shared
    between processes by time-slicing: past a few workers they wait on each other
    and only add memory (benchmarks/README.md, "Workers on one CUDA GPU").
    """
    kind = str(device or "").split(":")[0]
    if kind == "mps":
        return 1
    if kind == "cuda":
        return max(1, min(CUDA_WORKERS, cpu_count or 1))
    return max(1, cpu_count or 1)


# On an H200, every pass over a quarter of the catalogue took 18-19 s after the first case on
# 4 workers, 17 s on 8, 25 s on 16 and 49 s on 2; 4 workers held 11 GB of GPU memory, 8 held
# 19 GB and 16 held 32 GB: 8 would not fit a 24 GB card.
CUDA_WORKERS = 4


class Sweep:
    """Prepare (validate everything, write nothing), then open the run, then run it."""

    def __init__(self, options, say=None):
        self.options = options
        self.say = say or (lambda text: None)
        size = options.workers or default_workers(options.device, os.cpu_count())
        self.config = {"device": options.device, "backend": options.backend,
                       "samples": options.samples, "timing": options.timing,
                       "strict_precision": options.strict_precision,
                       "passes": list(options.passes), "layouts": options.layouts,
                       "compiled_samples": options.compiled_samples,
                       "compile_timeout": options.compile_timeout,
                       "threads": max(1, (os.cpu_count() or 1) // size),
                       "catalogue": True}   # workers load the OpInfo database as they start
        self.pool = Pool(self.config, size=size, timeout=options.timeout,
                         python=options.python, env=worker_env(options))
        self.env = self.pairs = self.writer = None
        self.resumed = False
        self.described_from_cache = False   # the device's description is the one kept (described.py)

    def _size_is_known(self):
        """Whether the pool's size is settled before the device is described: --workers
        given, or a device named that is not MPS (default_workers sizes it from the name alone)."""
        device = str(self.options.device or "auto").split(":")[0]
        return bool(self.options.workers) or (not self.options.backend and device not in ("auto", "mps"))

    def _fit_pool_to_device(self):
        """Once the device is known: its default workers (default_workers) unless --workers says otherwise."""
        if self.options.workers or not self.env:
            return
        size = default_workers(self.env.get("device"), os.cpu_count())
        if size == self.pool.size:
            return
        self.pool.close()  # the describing worker ran with the threads of another pool size
        self.pool.size = size
        self.config["threads"] = max(1, (os.cpu_count() or 1) // size)
        self.pool.command = worker_command(self.config, self.options.python)

    def prepare(self, select=None):
        """Check the DB, the device and the op/dtype filters; plan the pairs
        (`select(pair)`, if given, keeps only some). Raises SweepError."""
        options = self.options
        try:
            options.check()
            if options.resume and not os.path.exists(options.db_path):
                raise SweepError(f"{options.db_path} does not exist: there is no run to resume")
        except SweepError:
            self.pool.close()
            raise
        _check_writable(options.db_path)
        schema.inspect(options.db_path, migratable=True)
        # Names are checked against the cached catalogue, before any worker starts.
        build = catalogue.torch_build(options.python)
        cached = catalogue.load(build)
        try:
            planned = cached and catalogue.pairs(cached, options.ops, options.dtypes, options.passes)
        except catalogue.CatalogueError as e:
            self.pool.close()
            raise SweepError(str(e)) from None
        if cached and not planned:
            self._refuse_no_pairs()
        description_key = None if options.backend else described.key(
            build, options.device, options.python, options.strict_precision, self.pool.env)
        if cached and self._complete_as_described(described.load(description_key), planned, select):
            return self.env, self.pairs
        self.say("planned from the cached op catalogue; starting the workers (torch) …" if cached else
                 "loading the op catalogue (torch and its OpInfo database) …")
        try:
            if self._size_is_known():
                self.pool.start()   # all at once: each imports torch and the catalogue meanwhile
            self.env = self.pool.request({"cmd": "describe"})["env"]
            described.save(description_key, self.env)
            self._fit_pool_to_device()
            self.pool.start()
            if not cached:
                plan = self.pool.request({"cmd": "plan", "ops": options.ops, "dtypes": options.dtypes,
                                          "passes": list(options.passes)})
                planned = plan["pairs"]
                catalogue.save(build, plan["catalogue"])
        except WorkerError as e:
            self.pool.close()
            raise SweepError(str(e)) from None
        if not planned:
            self._refuse_no_pairs()
        self.pairs = [p for p in planned if in_shard(p, options.shard)
                      and (select is None or select(p))]
        return self.env, self.pairs

    def _complete_as_described(self, env, planned, select):
        """True when the database already holds this run complete, judged with the device's
        kept description `env` (described.py): no worker need start to answer that. Sets the
        env and pairs; the run is then claimed as any run is (open)."""
        options = self.options
        if env is None or options.fresh or options.resume or not os.path.isfile(options.db_path):
            return False
        pairs = [p for p in planned if in_shard(p, options.shard) and (select is None or select(p))]
        try:
            db = schema.open_db(options.db_path, readonly=True)
        except schema.DatabaseError:
            return False   # one to migrate, or not a database: the usual way says so
        try:
            done = complete_pairs(db, run_key(env, options))
        finally:
            db.conn.close()
        # The run claim() will pick: complete, with every planned pair finished.
        if done is None or any((p["op"], p["dtype"]) not in done for p in pairs):
            return False
        self.env, self.pairs, self.described_from_cache = env, pairs, True
        self.say("already complete in the database (the device as its last description says; no worker started)")
        return True

    def _refuse_no_pairs(self):
        self.pool.close()
        raise SweepError(f"no (op, dtype) pair to probe: no op selected by --ops "
                         f"{','.join(self.options.ops) or '(all)'} supports --dtypes "
                         f"{','.join(self.options.dtypes)} on the CPU")

    def open(self):
        """Open the DB and start or resume the run; returns the pairs still to do."""
        options = self.options
        try:
            db = schema.open_db(options.db_path)
        except schema.DatabaseError:
            self.pool.close()
            raise

        def busy(run):
            if _recording_now(run, self.env):
                return (f"run {run['id']} is being recorded right now by process "
                        f"{run['pid']} on this host; wait for it to finish (it records the "
                        f"same cases), or use --fresh for a separate run")
            return None
        options_record = {k: v for k, v in asdict(options).items()
                          if k not in ("resume", "fresh", "db_path", "runner_label", "command")}
        env = dict(self.env, source="opinfo", runner_label=environment.runner_label(options.runner_label),
                   command=options.command or environment.command_line())
        try:
            self.writer, self.resumed = RunWriter.claim(
                db, run_key(self.env, options), env, options_record, mpsprobe.__version__,
                os.getpid(), resume=options.resume, fresh=options.fresh, busy=busy)
        except BaseException:
            db.conn.close()
            self.pool.close()
            raise
        done_pairs, done_cases = self.writer.done()
        todo = [dict(pair, done=done_cases.get((pair["op"], pair["dtype"]), []))
                for pair in self.pairs if (pair["op"], pair["dtype"]) not in done_pairs]
        if todo and self.described_from_cache:
            # The run changed since prepare looked: its cases run only on a device described anew.
            self._check_described(run_key(self.env, options))
        return todo

    def _check_described(self, claimed_key):
        try:
            env = self.pool.request({"cmd": "describe"})["env"]
        except WorkerError as e:
            self.writer.close()
            self.pool.close()
            raise SweepError(str(e)) from None
        if run_key(env, self.options) != claimed_key:
            self.writer.close()
            self.pool.close()
            raise SweepError("the device is no longer the one this run was recorded on; run the "
                             "command again")
        self.env, self.described_from_cache = env, False

    def run(self, todo, on_case=None, on_pair=None, should_stop=lambda: False):
        """Run `todo` to the end (or until should_stop()); returns (state, total, counts).

        The state is "complete" only when every pair of `todo` finished; a pair whose
        worker was lost between cases too often leaves the run "incomplete" (listed
        in self.unfinished; resuming retries it). Events outside any case are in
        self.events."""
        started = time.monotonic()
        state = "interrupted"
        self.unfinished, self.events = [], []

        def case(pair, index, sample, result):
            self.writer.record(pair, index, sample, result)
            if on_case:
                on_case(pair, index, result)

        def pair_finished(pair, n):
            self.writer.pair_done(pair, n)
            if on_pair:
                on_pair(pair, n)

        def event(happened):
            self.writer.event(happened)
            self.events.append(happened)
        try:
            with self.pool:
                self.pool.run(todo, case, pair_finished, should_stop, on_event=event)
            self.unfinished = list(self.pool.unfinished)
            if not should_stop():
                state = "incomplete" if self.unfinished else "complete"
        except BaseException:
            # The sweep's own error is what the user sees; the run stays resumable
            # even when it cannot be marked (a full disk refuses that too).
            try:
                self.writer.finish(state, time.monotonic() - started)
            except schema.DatabaseError:
                pass
            self.writer.close()
            raise
        total, counts = self.writer.finish(state, time.monotonic() - started)
        self.writer.close()
        return state, total, counts
