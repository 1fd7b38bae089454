"""The worker: a subprocess that runs cases and reports them as JSON lines.

It reads requests from, and replies over, private duplicates of the pipes
that started as its stdin and stdout. Before each case (and each device
check) fds 0, 1 and 2 are made anew (CaseStdio): stdin reads /dev/null, stdout
and stderr write to the log the parent reads after a crash, emptied first, so
whatever an op prints cannot corrupt the protocol, a crash's stderr holds its
own case's output only, and a case that closes or redirects those fds harms
no later case.
A crash or hang here costs the parent one case: it reads "begin" before each
case, so it always knows which case was running. Each case runs in the
worker's own process group, killed when the case ends (groups.py), and each
reply line carries the token the parent sent as the first line of stdin, so
that nothing an op writes into the reply pipe is taken for a result.

A result is written with the worker's next message (the next case's "begin"
or the pair's end): one write per case. Nothing held is left unsent before
anything that can fail runs.

Requests (stdin, one JSON object a line):
  {"cmd": "describe"}                      -> {"type": "describe", "env": {...}}
  {"cmd": "plan", "ops": [...], "dtypes": [...], "passes": [...]}
      -> {"type": "plan", "pairs": [...], "catalogue": {...}} (ops/catalogue.py's data)
  {"cmd": "pair", "op": ..., "dtype": ..., "passes": [...], "done": [case keys already recorded],
   "health_check": true after a hung case was killed (optional),
   "skip_passes": [passes whose sample generation killed a worker, charged already] (optional)}
      -> with health_check, first {"type": "stage", "stage": "health"} and
         {"type": "health", "took_ms": ms} or {"type": "health", "took_ms": null, "hung": bool, "detail": ...};
         for each pass {"type": "stage", "stage": "samples", "pass": p}, then
         {"type": "begin", "index": i, "pass": p, "sample": "..."} and
         {"type": "result", "index": i, "pass": p, ...} for each sample of each pass
         the op has (a case key: the index for forward, "i|pass" otherwise,
         plan.case_key), then {"type": "pair_done", "n_cases": n}
  {"cmd": "replay", "op": ..., "dtype": ..., "done": [...], "calls": [encoded calls]}
      -> the same, one case per captured call of a model (modelcheck/replay.py)
Any request can instead answer {"type": "fatal", "message": "..."}.
"""
import contextlib
import json
import os
import select
import stat
import sys
import threading
import time

from .groups import CaseGroups



def _watch_parent(groups):
    """Exit when the parent dies, so a killed sweep leaves no workers behind
    (nor anything the case in flight started)."""
    parent = os.getppid()
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            if groups.in_case:
                groups.kill_leftovers()   # the worker's own group: it goes too
            os._exit(0)


class CaseStdio:
    """The worker's own channels, kept apart from fds 0, 1 and 2, which each case gets anew."""

    def __init__(self):
        # os.dup: not inherited by what an op starts. Requests are read unbuffered (_Requests).
        self.requests = os.dup(0)
        self.replies = os.fdopen(os.dup(1), "w")
        self._log = os.dup(2)
        self._null = os.open(os.devnull, os.O_RDONLY)
        self._stderr = sys.stderr
        # The pool's log is a file; a worker started by hand may write to a terminal or pipe.
        self._emptied = stat.S_ISREG(os.fstat(self._log).st_mode)
        self.fresh()

    def fresh(self):
        """Fds 0, 1 and 2 as a case should find them, and the log emptied of earlier output."""
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass   # a case closed it: what it held is not this case's
        os.dup2(self._null, 0)
        os.dup2(self._log, 1)
        os.dup2(self._log, 2)
        sys.stdout = sys.stderr = self._stderr
        if self._emptied:
            os.ftruncate(self._log, 0)
            os.lseek(self._log, 0, os.SEEK_SET)


class Worker:
    def __init__(self, config, send, groups=None, stdio=None):
        import torch
        from . import devices
        self.torch = torch
        self.config = config
        self.send = send
        self.stdio = stdio
        # TORCH_WARN_ONCE (the MPS fallback warning) fires every time only with this.
        torch.set_warn_always(True)
        threads = config.get("threads")
        if threads:
            torch.set_num_threads(threads)
        self.target = devices.resolve(config.get("device", "auto"), config.get("backend"))
        self._opinfos = None
        self.groups = groups
        self._aten_cache = {}  # pass -> {(op, dtype, sample signature): the aten ops it dispatches}
        self.modes = self._precision(config.get("strict_precision", False))

    def _precision(self, strict):
        """The target's precision settings, switched off for the worker's life when strict."""
        from . import precision
        if strict:
            # Held until the process ends: a worker serves one run.
            self._strict = precision.strict_precision(self.target.torch_device)
            self._strict.__enter__()
        return self.target.precision_modes()

    @contextlib.contextmanager
    def case(self):
        """One case: fresh fds 0/1/2, run in the worker's own process group, and what it
        left running killed after it (named in `self.killed`)."""
        if self.stdio:
            self.stdio.fresh()
        if self.groups is None:
            yield
            return
        with self.groups.case():
            yield

    def killed_notes(self, result):
        """`result` with what its case left running and was killed for it, if anything."""
        killed = self.groups.killed if self.groups else None
        if not killed:
            return result
        return dict(result, notes=dict(result.get("notes") or {}, killed_after_case=killed))

    def preload(self):
        """A sweep's worker needs the catalogue for every pair: it loads it when idle,
        after any request already waiting (describe answers before OpInfo's import)."""
        if self._opinfos is None:
            self._opinfos = self._load_catalogue()

    @property
    def opinfos(self):
        if self._opinfos is None:
            self._opinfos = self._load_catalogue()
        return self._opinfos

    @staticmethod
    def _load_catalogue():
        from mpsprobe.ops import opinfo
        return opinfo.with_module_probes(opinfo.load_op_db())

    def start_pair(self, request):
        """After a killed hang, a device check first; then each pair starts from a small
        device cache (no pair pays for another's memory)."""
        if request.get("health_check"):
            self.health_check()
        self.target.trim_cache()

    def health_check(self):
        """After a hung case was killed, is the device answering again? Told to the parent,
        which notes the results that follow and records a failure as the device's event.

        A killed process's GPU work may still be running (pytorch#135442): the
        timings taken next are flagged with how long a tiny synchronised op took.
        The check is announced first, so a check that kills or holds this process
        is the device's failure, never charged to a case.
        """
        from .classify import first_line
        limit = self.config.get("health_check_s", 10.0)
        self.send({"type": "stage", "stage": "health"})
        if self.stdio:
            self.stdio.fresh()   # a crash's stderr is the check's own
        try:
            took = self.target.health_check(limit)
        except Exception as e:
            self.send({"type": "health", "took_ms": None, "hung": False,
                       "detail": f"the device check raised {type(e).__name__}: {first_line(e)}"})
            return
        if took is None:
            self.send({"type": "health", "took_ms": None, "hung": True,
                       "detail": f"a tiny op did not finish within {limit:g} s"})
        else:
            self.send({"type": "health", "took_ms": round(took, 3)})

    def describe(self, request):
        from . import environment
        from .precision import active_modes
        env = environment.describe(self.target)
        # The modes the target's kernels run in (none when strict): runs.precision_modes.
        env["precision_modes"] = [m.name for m in active_modes(self.modes)]
        self.send({"type": "describe", "env": env})

    def plan(self, request):
        """The pairs, and the catalogue they come from (for the parent to cache)."""
        from mpsprobe.ops import catalogue, opinfo
        data = opinfo.describe(self.opinfos)
        pairs = catalogue.pairs(data, request.get("ops"), request.get("dtypes"), request.get("passes"))
        self.send({"type": "plan", "pairs": pairs, "catalogue": data})

    def pair(self, request):
        """Every case of one (op, dtype): each pass asked for, each sample."""
        from mpsprobe.ops import opinfo
        from mpsprobe.vocabulary import FORWARD
        op = opinfo.find(self.opinfos, request["op"])
        dtype = opinfo.parse_dtype(request["dtype"])
        self.start_pair(request)
        done = set(request.get("done") or ())
        skip = set(request.get("skip_passes") or ())
        n_cases = 0
        for pass_ in opinfo.passes(op, dtype, request.get("passes") or (FORWARD,)):
            # A pass whose samples could not be made without killing a worker: its one case is recorded.
            n_cases += 1 if pass_ in skip else self._pass(op, dtype, pass_, request["op"], done)
        self.send({"type": "pair_done", "n_cases": n_cases})

    def _pass(self, op, dtype, pass_, key, done):
        """The cases of one pass; returns how many it holds."""
        from mpsprobe.ops import opinfo, samples as sample_tools
        from mpsprobe.ops.modules import ProbeUnavailable
        from mpsprobe.vocabulary import BACKWARD, COMPILED, FORWARD, OUT, PASS_COLUMN, PROBE_FAULT, SKIP
        from .backward import run_backward_case
        from .classify import first_line
        from .compiled import run_compiled_case, samples_cap
        from .execute import run_case
        from .judge import REFERENCE_FAILED
        from .plan import case_key
        from .timing import PASSING
        from .variants import out_form, run_variant_case
        if getattr(op, "large", False):
            return self._large(op, pass_, done)
        # Announced, with the last pass's held result, before sample generation runs.
        self._hold({"type": "stage", "stage": "samples", PASS_COLUMN: pass_})
        self._flush()
        if self.stdio:
            self.stdio.fresh()
        try:
            cap = samples_cap(self.config) if pass_ == COMPILED else self.config.get("samples", 3)
            cases = opinfo.samples(op, dtype, cap, requires_grad=pass_ == BACKWARD)
        except Exception as e:
            # A probe whose library does not import here says so (ops/modules.py, ProbeUnavailable).
            unavailable = isinstance(e, ProbeUnavailable)
            self.send({"type": "begin", "index": 0, PASS_COLUMN: pass_, "sample": "(sample generation failed)"})
            self.send({"type": "result", "index": 0, "status": SKIP, "check_kind": "none", PASS_COLUMN: pass_,
                       "reason": str(e) if unavailable else "OpInfo could not generate samples for this dtype",
                       "reason_kind": REFERENCE_FAILED,
                       "error_type": type(e).__name__, "message": first_line(e)})
            return 1
        options = dict(aten_cache=self._aten_cache.setdefault(pass_, {}), modes=self.modes)
        # A module probe may be judged by another op's rules (nn.Dropout by dropout's distribution).
        key = getattr(op, "judge_as", None) or key
        fn = out_form(op.op) if pass_ == OUT else opinfo.variant(op, pass_)
        # One case of the pass is timed: the first that passes (timing.PASSING).
        timed = not self.config.get("timing", True)
        n_cases = 0
        for index, layout, sample, reference in self._with_layouts(cases, pass_):
            n_cases += 1
            if case_key(index, pass_, layout) in done:
                continue
            options["timing"] = False if timed else PASSING
            self.send({"type": "begin", "index": index, PASS_COLUMN: pass_, "layout": layout,
                       "sample": sample_tools.summarize(sample)})
            try:
                with self.case():
                    if pass_ == FORWARD:
                        result = run_case(op.op, dtype, sample, self.target, op_key=key, reference=reference,
                                          error_bound=getattr(op, "error_bound", None), **options)
                    elif pass_ == BACKWARD:
                        result = run_backward_case(op.op, dtype, sample, self.target, key, **options)
                    elif pass_ == COMPILED:
                        result = run_compiled_case(op.op, dtype, sample, self.target, key, **options)
                    else:
                        result = run_variant_case(fn, pass_, dtype, sample, self.target, key, **options)
            except Exception as e:
                # The probe's own fault: the target's failures are caught and classified inside the
                # case (its calls synchronise), so this is no evidence against the target either way.
                result = {"status": SKIP, "check_kind": "none", "reason_kind": PROBE_FAULT,
                          "reason": f"mpsprobe could not judge this case: {type(e).__name__}: {first_line(e)}",
                          "error_type": type(e).__name__, "message": str(e)[:500]}
            result[PASS_COLUMN] = pass_
            timed = timed or result.get("target_ms") is not None
            if layout:
                result["layout"] = layout
            self._hold({"type": "result", "index": index, **self.killed_notes(result)})
        return n_cases

    def _large(self, op, pass_, done):
        """`run --large`'s one case of a large record (ops/large.py), built on the target itself."""
        from mpsprobe.ops import large
        from mpsprobe.vocabulary import PASS_COLUMN
        from .plan import case_key
        if case_key(0, pass_, None) in done:
            return 1
        self.send({"type": "begin", "index": 0, PASS_COLUMN: pass_, "sample": f"{large.elements()} elements"})
        with self.case():
            result = large.run_case(op, self.target)
        result[PASS_COLUMN] = pass_
        self._hold({"type": "result", "index": 0, **self.killed_notes(result)})
        return 1

    def _with_layouts(self, cases, pass_):
        """(index, layout, sample, reference) of each case of a pass: each sample as made, then, in
        a forward pass of a sweep with layouts on, its input in each layout (ops/layouts.py), with
        the contiguous twin the CPU reference runs on."""
        from mpsprobe.ops import layouts
        from mpsprobe.vocabulary import FORWARD
        for index, sample in enumerate(cases):
            yield index, None, sample, None
            if pass_ == FORWARD and self.config.get("layouts"):
                for layout, variant in layouts.variants(sample):
                    yield index, layout, variant, layouts.reference(variant)

    def _hold(self, message):
        """A result: sent with the next message (send.hold), or at once where send cannot hold."""
        getattr(self.send, "hold", self.send)(message)

    def _flush(self):
        flush = getattr(self.send, "flush", None)
        if flush:
            flush()

    def replay(self, request):
        """A pair of a model's captured calls (modelcheck.replay.pairs), each a case."""
        from mpsprobe.modelcheck.replay import decode, run_call
        done = set(request.get("done") or ())
        self.start_pair(request)
        calls = [decode(text) for text in request["calls"]]
        for call in calls:
            if call.index in done:
                continue
            self.send({"type": "begin", "index": call.index, "sample": call.summary()})
            with self.case():
                result = run_call(call, self.target, timing=self.config.get("timing", True),
                                  modes=self.modes)
            self._hold({"type": "result", "index": call.index, **self.killed_notes(result)})
        self.send({"type": "pair_done", "n_cases": len(calls)})


class _Sender:
    """send(message): one authenticated reply line, written at once (the token lives
    only here). send.hold(message) writes a line that goes out with the next send:
    a case's result with the next case's "begin" or the pair's end, one write and
    one wake-up of the parent instead of two. Nothing held is left unsent before
    the worker runs anything that could fail (send.flush())."""

    def __init__(self, protocol, token):
        self._protocol = protocol
        self._token = token

    def hold(self, message):
        self._protocol.write(json.dumps(dict(message, token=self._token)) + "\n")

    def __call__(self, message):
        self.hold(message)
        self.flush()

    def flush(self):
        self._protocol.flush()


def main(config_json):
    stdio = CaseStdio()
    requests = _Requests(stdio.requests)
    send = _Sender(stdio.replies, json.loads(requests.next()))   # the parent's first line
    groups = CaseGroups()
    threading.Thread(target=_watch_parent, args=(groups,), daemon=True).start()
    try:
        _serve(json.loads(config_json), send, groups, stdio, requests)
    except BaseException as e:  # SystemExit, KeyboardInterrupt, a reply channel gone, ...
        try:
            send.flush()   # a result held for the next write is still a result
        except BaseException:
            pass
        # Said on stderr, then exit with a status of our own: the parent
        # records "exited with status N" and this line, not a signal.
        sys.stderr.write(f"\nmpsprobe worker exiting on {type(e).__name__}: {e}\n")
        sys.stderr.flush()
        os._exit(e.code if isinstance(e, SystemExit) and isinstance(e.code, int) else 1)


def _serve(config, send, groups, stdio, requests):
    try:
        worker = Worker(config, send, groups, stdio)
    except Exception as e:
        send({"type": "fatal", "message": str(e) or type(e).__name__})
        return
    profile = _Profile.from_env()
    while True:
        idle = worker.preload if config.get("catalogue") and worker._opinfos is None else None
        line = requests.next(idle)   # a call, not iteration: a profile shows the wait
        if not line:
            break
        request = json.loads(line)
        try:
            getattr(worker, request["cmd"])(request)
        except Exception as e:
            send({"type": "fatal", "message": str(e) or type(e).__name__,
                  "error_type": type(e).__name__})
        if profile:
            profile.save_now_and_then()


class _Requests:
    """The request lines of stdin, read unbuffered by Python (os.read), so that the
    worker can tell when none is waiting (select) and use the time."""
    IDLE_S = 0.2   # no request within this long: the worker is idle

    def __init__(self, fd):
        self.fd = fd
        self.buffer = b""

    def next(self, idle=None):
        """The next line ("" at the end); `idle()` runs first if none comes within IDLE_S."""
        if idle is not None and b"\n" not in self.buffer:
            if not select.select([self.fd], [], [], self.IDLE_S)[0]:
                idle()
        while b"\n" not in self.buffer:
            chunk = os.read(self.fd, 65536)
            if not chunk:
                line, self.buffer = self.buffer, b""
                return line.decode()
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode() + "\n"


class _Profile:
    """MPSPROBE_PROFILE=PREFIX: the worker runs under cProfile and writes
    PREFIX.worker-PID.prof every few seconds (the pool kills a worker when the
    sweep ends, so the last seconds may be missing). For benchmarks/profile_sweep.py."""
    EVERY_S = 2.0

    def __init__(self, prefix):
        import cProfile
        self.path = f"{prefix}.worker-{os.getpid()}.prof"
        self.saved = time.monotonic()
        self.profiler = cProfile.Profile()
        self.profiler.enable()

    @classmethod
    def from_env(cls):
        prefix = os.environ.get("MPSPROBE_PROFILE")
        return cls(prefix) if prefix else None

    def save_now_and_then(self):
        if time.monotonic() - self.saved < self.EVERY_S:
            return
        self.profiler.disable()
        self.profiler.dump_stats(self.path)
        self.saved = time.monotonic()
        self.profiler.enable()


if __name__ == "__main__":
    main(sys.argv[1])
