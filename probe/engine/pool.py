"""The parent side of isolation: a pool of worker processes, timeouts and crashes.

A pair (op, dtype) is the unit handed to a worker; the worker announces each
case before running it, so when a worker dies or overruns, the case in flight
is recorded as `crash` or `timeout`, the worker is replaced, and the rest of
the pair is handed out again. No case can cost more than itself. A busy worker
is also sent its next pair ahead, so it never waits for the parent between
pairs; a pair sent ahead and not begun goes back to the queue if the worker dies.
Requests are written without blocking: a request larger than a pipe holds (a
model's calls) waits in the parent for a worker busy in a case, so a case that
hangs is still timed out.

A worker's death is noticed by its exit (polled), not only by the end of its
reply pipe (a child an op forked may hold that open), and is recorded as the
OS reports it once the process has really gone: an exit status ("exited with
status 1", reason kind `exit`) or a signal. Each worker runs its cases in its
own process group (groups.py), killed with it, so nothing an op
starts outlives its case. Each reply line carries a per-worker token sent
over the worker's stdin; a line without it (an op writing into the reply
pipe) is dropped, so an op cannot forge a verdict. A case is a `timeout` only
when its worker's pipe holds nothing past the deadline: the parent may itself
have been held up (by another process's database lock) while the worker replied.
"""
import collections
import json
import os
import secrets
import selectors
import signal
import subprocess
import sys
import tempfile
import time

from mpsprobe.errors import MpsprobeError
from mpsprobe.vocabulary import COMPILED, CRASH, CRASH_NOT_REPRODUCED, ERROR, FORWARD, PASS_COLUMN, TIMEOUT
from . import leftovers
from .launch import worker_command
from .plan import case_key, key_index

STARTUP_BUDGET_S = 180.0  # importing torch and the OpInfo database, on a slow machine
EXIT_GRACE_S = 5.0        # a worker whose reply pipe closed has this long to exit on its own
HEALTH_CHECK_S = 10.0     # a device check after a killed hang: a tiny op must finish within this
HEALTH_GRACE_S = 5.0      # past it the worker itself is stuck (the check holds it): killed
PAIR_ATTEMPTS = 3         # a pair whose worker dies outside any case this often is left unfinished


class WorkerError(MpsprobeError):
    """A worker could not start, or refused a request (device, catalogue, …)."""


def _kill_group(pgid):
    """SIGKILL every process in the group `pgid` (a worker's own); none left is fine."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class _Worker:
    def __init__(self, command, env):
        self.log = tempfile.TemporaryFile()
        # Its own process group: the group, and whatever an op started in it, dies with it.
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=env, process_group=0)
        # Requests are written without blocking (see send): a worker busy in a case
        # that hangs must never hold the parent, or nothing would time the case out.
        os.set_blocking(self.proc.stdin.fileno(), False)
        self.outbox = bytearray()
        self.token = secrets.token_hex(16)
        self.buffer = b""
        self.task = None       # the pair being run
        self.ahead = None      # the pair it runs next, already sent (waiting in its stdin)
        self.index = None      # the case in flight (after "begin", before "result")
        self.layout = None     # its input layout, for a layout variant
        self.stage = None      # outside a case: "health" (the device check) or "samples" (of pass_)
        self.notes = None      # the device check's notes for the results of its pair
        self.pass_ = FORWARD   # and its pass
        self.sample = None
        self.deadline = None
        self.dropped = 0       # reply lines without the token
        self.killed = False    # True once we killed it (it did not exit on its own)
        try:
            self.send(self.token)   # first, before any request; never in argv or the environment
        except OSError:
            pass  # it died at once: its exit status tells why
        self.hangs_seen = 0    # the pool's hang count when this worker last checked the device

    def send(self, message):
        """Queue one request line and write what the pipe takes now; the pool's loop
        writes the rest (push) as the worker reads. Raises OSError if the worker is gone."""
        self.outbox += (json.dumps(message) + "\n").encode()
        self.push()

    def push(self):
        """Write what the pipe takes of the queued requests; True once none is left."""
        while self.outbox:
            try:
                written = os.write(self.proc.stdin.fileno(), self.outbox)
            except BlockingIOError:   # the pipe is full: the worker is busy
                return False
            del self.outbox[:written]
        return True

    def messages(self, data):
        """The authentic messages in `data` (with this worker's token; anything else dropped)."""
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if not isinstance(message, dict) or message.pop("token", None) != self.token:
                self.dropped += 1
                continue
            yield message

    def alive(self):
        return self.proc.poll() is None

    def stderr_lines(self, n=20, limit=400):
        """The last `n` non-blank lines the worker wrote to stderr since its case (or
        device check) began: the worker empties the log before each. Each cut at `limit`.
        Read with pread: the log's offset is shared with the worker's fds 1 and 2."""
        fd = self.log.fileno()
        size = os.fstat(fd).st_size
        text = os.pread(fd, 8192, max(0, size - 8192)).decode(errors="replace")
        lines = [x for x in text.splitlines() if x.strip()]
        return [x[:limit] for x in lines[-n:]]

    def stderr_tail(self, limit=400):
        lines = self.stderr_lines(1, limit)
        return lines[-1] if lines else ""

    def stop(self, grace=0.0):
        """Let the process exit on its own for up to `grace` s, else kill its group;
        reap it and kill what its group still holds. Returns its exit status."""
        if grace and self.alive():
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        if self.alive():
            self.killed = True
            _kill_group(self.proc.pid)
            self.proc.kill()
        code = self.proc.wait()
        _kill_group(self.proc.pid)   # children an op left behind
        leftovers.kill(leftovers.marked(self.proc.pid))   # and those that left the group
        return code

    def close(self):
        self.stop()
        for stream in (self.proc.stdin, self.proc.stdout, self.log):
            try:
                stream.close()
            except OSError:
                pass


def _next_index(pair):
    """The index for a result charged to a pair outside any announced case."""
    return max(key_index(k) for k in pair["done"]) + 1 if pair["done"] else 0


def _evidence(lines):
    """What a dead worker's last stderr lines name: the cause's reason kind, op and macOS."""
    from .classify import crash_evidence   # the message catalogue: only once a worker died
    evidence = crash_evidence("\n".join(lines))
    if evidence is None:
        return {}
    found = {"reason_kind": evidence["reason_kind"], "message": evidence["line"][:500]}
    found.update({k: v for k, v in (("aten_op", evidence["op"]), ("min_macos", evidence["min_macos"])) if v})
    if evidence["dtype"]:
        found["notes"] = {"named_dtype": evidence["dtype"]}
    return found


def _death(returncode, killed=False):
    """(signal number or None, text) for a worker's exit status."""
    if killed:
        return None, "worker stopped answering (its reply channel closed) and was killed"
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return -returncode, f"worker killed by {name}"
    return None, f"worker exited with status {returncode}"


class Pool:
    """Runs pairs on `size` workers; reports through callbacks.

    on_case(pair, index, sample_summary, result) for every case,
    on_pair(pair, n_cases) once a pair is complete,
    on_event(event) for what happened to the device or a worker outside any case
    (a failed device check, a worker lost between cases): never charged to a case.
    After `run`, `unfinished` lists the pairs that could not be finished
    ({"op", "dtype", "why"}): a run with any is not complete.
    """

    def __init__(self, config, size=1, timeout=60.0, python=None, env=None, say=None):
        self.config = config
        self.say = say or (lambda text: print(text, file=sys.stderr, flush=True))
        self.size = max(1, size)
        self.timeout = timeout
        # A compiled case's own budget, compiling included (--compile-timeout).
        self.compile_timeout = config.get("compile_timeout") or timeout
        # The device check is a case's worth of waiting at most.
        self.health_s = min(HEALTH_CHECK_S, timeout)
        config.setdefault("health_check_s", self.health_s)
        self.command = worker_command(config, python)
        self.env = dict(os.environ if env is None else env)
        self.selector = selectors.DefaultSelector()
        self.workers = []
        self.hangs = 0         # hung cases killed so far: the device may still be busy with them
        self.checks_end = 0    # hangs up to this count need no more checks (a check failed after them)
        self.device_failed = None   # notes for every later result once a device check has failed
        self.unfinished = []
        self._should_stop = lambda: False
        self._on_event = lambda event: None

    # -- lifecycle ---------------------------------------------------------
    def _spawn(self):
        try:
            worker = _Worker(self.command, self.env)
        except OSError as e:
            raise WorkerError(f"cannot start a worker with {self.command[0]}: {e}") from None
        worker.hangs_seen = self.checks_end
        self.selector.register(worker.proc.stdout, selectors.EVENT_READ, worker)
        self.workers.append(worker)
        return worker

    def start(self):
        """Start every worker the pool will have, without waiting for any: each
        imports torch on its own, and requests wait in its pipe until it is ready."""
        while len(self.workers) < self.size:
            self._spawn()

    def _retire_dead(self, worker):
        """A worker gone between pairs: nothing is lost; say so, and why."""
        _, text = _death(worker.stop(EXIT_GRACE_S), worker.killed)
        tail = worker.stderr_tail()
        self._retire(worker)
        self.say(f"a worker was gone before its next pair ({text}"
                 f"{': ' + tail if tail else ''}); a new one takes over, no case lost")

    def _retire(self, worker):
        try:
            self.selector.unregister(worker.proc.stdout)
        except (KeyError, ValueError):
            pass
        worker.close()
        self.workers.remove(worker)

    def close(self):
        for worker in list(self.workers):
            self._retire(worker)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- one synchronous request (describe, plan) ---------------------------
    def request(self, message, budget=STARTUP_BUDGET_S):
        worker = self.workers[0] if self.workers else self._spawn()
        deadline = time.monotonic() + budget
        try:
            worker.send(message)
            while not worker.push() and time.monotonic() < deadline:
                select_one(worker.proc.stdin, 0.1, selectors.EVENT_WRITE)
        except OSError:
            pass  # it is gone: its end of the pipe tells how, below
        while time.monotonic() < deadline:
            data = self._read(worker, deadline - time.monotonic())
            if data is None:
                continue
            if data == b"":
                _, text = _death(worker.stop(EXIT_GRACE_S), worker.killed)
                tail = worker.stderr_tail()
                self._retire(worker)
                raise WorkerError(f"the worker died ({text}){': ' + tail if tail else ''}")
            for reply in worker.messages(data):
                if reply["type"] == "fatal":
                    raise WorkerError(reply["message"])
                return reply
        self._retire(worker)
        raise WorkerError(f"the worker did not answer {message['cmd']!r} within {budget:.0f} s")

    def _read(self, worker, wait):
        ready = select_one(worker.proc.stdout, max(0.0, wait))
        return os.read(worker.proc.stdout.fileno(), 1 << 16) if ready else None

    # -- the sweep ------------------------------------------------------------
    def run(self, pairs, on_case, on_pair, should_stop=lambda: False, on_event=None):
        """Run every pair ({"op", "dtype", "done": [indices recorded]}) to completion,
        or to `unfinished` (see the class)."""
        queue = collections.deque(dict(p, done=list(p.get("done", ())), attempts=0, skip_passes=[])
                                  for p in pairs)
        self._should_stop = should_stop
        self._on_event = on_event or (lambda event: None)
        self.unfinished = []
        while queue or any(w.task for w in self.workers):
            if should_stop():
                return
            while queue and (len(self.workers) < self.size or any(w.task is None for w in self.workers)):
                idle = next((w for w in self.workers if w.task is None), None) or self._spawn()
                self._assign(idle, queue.popleft(), queue)
            for worker in self.workers:
                self._send_ahead(worker, queue)
            for worker in [w for w in self.workers if w.outbox]:
                try:
                    worker.push()
                except OSError:   # gone: its death is noticed by its pipe or its exit
                    worker.outbox.clear()
            waiting = 0.01 if any(w.outbox for w in self.workers) else 0.2
            for key, _ in self.selector.select(timeout=waiting):
                worker = key.data
                try:
                    data = os.read(worker.proc.stdout.fileno(), 1 << 16)
                except OSError:
                    data = b""
                if data == b"":
                    self._lost(worker, queue, on_case, on_pair, timed_out=False)
                    continue
                for message in worker.messages(data):
                    self._handle(worker, message, on_case, on_pair, queue)
            now = time.monotonic()
            for worker in [w for w in self.workers if w.task and w.deadline < now]:
                if self._catch_up(worker, on_case, on_pair, queue):
                    self._lost(worker, queue, on_case, on_pair, timed_out=True)
            for worker in [w for w in self.workers if not w.alive()]:
                # Gone without closing its pipe (a child an op forked holds it open).
                self._drain(worker, on_case, on_pair)
                self._lost(worker, queue, on_case, on_pair, timed_out=False)

    def _catch_up(self, worker, on_case, on_pair, queue):
        """Read what an overdue worker has already written: the parent itself may have
        been held up (waiting for another process's database lock, say) while the
        worker replied in time. True if it is still overdue: silent past its deadline."""
        while worker.task and worker.deadline < time.monotonic():
            if not select_one(worker.proc.stdout, 0):
                return True
            try:
                data = os.read(worker.proc.stdout.fileno(), 1 << 16)
            except OSError:
                data = b""
            if data == b"":   # it died meanwhile: a crash, not a hang
                self._lost(worker, queue, on_case, on_pair, timed_out=False)
                return False
            for message in worker.messages(data):
                self._handle(worker, message, on_case, on_pair, queue)
        return False

    def _drain(self, worker, on_case, on_pair):
        """Handle what a dead worker wrote before it died."""
        while select_one(worker.proc.stdout, 0):
            data = os.read(worker.proc.stdout.fileno(), 1 << 16)
            if not data:
                return
            for message in worker.messages(data):
                self._handle(worker, message, on_case, on_pair)

    def _send_ahead(self, worker, queue):
        """Send a busy worker its next pair now, so that it never waits for the parent
        between pairs; not near the end of the queue (an idle worker may take it then)."""
        if (worker.task is not None and worker.ahead is None and queue
                and len(queue) >= len(self.workers) and not self._should_stop()):
            self._assign(worker, queue.popleft(), queue, ahead=True)

    def _next_task(self, worker):
        """The pair just ended: the one sent ahead (if any) is the worker's task now."""
        worker.task, worker.ahead = worker.ahead, None
        worker.index = worker.sample = worker.stage = worker.notes = None
        if worker.task is not None:
            worker.deadline = time.monotonic() + max(self.timeout, STARTUP_BUDGET_S)

    def _assign(self, worker, pair, queue=None, ahead=False):
        if ahead:
            worker.ahead = pair
        else:
            worker.task = pair
            worker.index = worker.sample = worker.stage = worker.notes = None
            worker.deadline = time.monotonic() + max(self.timeout, STARTUP_BUDGET_S)
        message = {"cmd": pair.get("cmd", "pair"), "op": pair["op"], "dtype": pair["dtype"],
                   "done": pair["done"]}
        if "passes" in self.config:
            message["passes"] = self.config["passes"]
        if "calls" in pair:  # a model's calls to replay, instead of OpInfo samples
            message["calls"] = pair["calls"]
        if pair.get("skip_passes"):   # their sample generation killed a worker: charged already
            message["skip_passes"] = pair["skip_passes"]
        if worker.hangs_seen < self.hangs:  # a hung case was killed since: is the device answering?
            message["health_check"] = True
            worker.hangs_seen = self.hangs
        try:
            worker.send(message)
        except OSError:  # gone before its next request (killed while idle, stdin closed)
            if ahead:   # busy with another pair: its loss is noticed as any death is
                worker.ahead = None
                queue.appendleft(pair)
                return
            worker.task = None
            if queue is None:
                raise
            queue.appendleft(pair)
            self._retire_dead(worker)

    def _handle(self, worker, message, on_case, on_pair, queue=None):
        """One message of `worker`'s. At a pair's end the worker gets its next pair
        (from `queue`) before the finished one is recorded: it need not wait for that."""
        kind = message.pop("type")
        pair = worker.task
        worker.deadline = time.monotonic() + self.timeout
        if kind == "begin":
            worker.index, worker.sample = message["index"], message["sample"]
            worker.pass_ = message.get(PASS_COLUMN, FORWARD)
            worker.layout = message.get("layout")
            worker.stage = None
            worker.deadline = time.monotonic() + self._limit(worker.pass_)
        elif kind == "stage":   # outside a case: a device check, or a pass's sample generation
            worker.stage = message["stage"]
            worker.pass_ = message.get(PASS_COLUMN, FORWARD)
            if worker.stage == "health":
                worker.deadline = time.monotonic() + self.health_s + HEALTH_GRACE_S
        elif kind == "health":
            worker.stage = None
            worker.notes = {"after_hang": True}
            if message.get("took_ms") is not None:
                worker.notes["health_check_ms"] = message["took_ms"]
            else:
                self._device_failure(pair, "hang" if message.get("hung") else "raised", message["detail"])
        elif kind == "result":
            index = message.pop("index")
            key = case_key(index, message.get(PASS_COLUMN) or FORWARD, message.get("layout"))
            pair["done"].append(key)
            crashed = pair.get("crashed", {}).pop(key, None)
            if crashed is not None:
                message = self._not_reproduced(pair, index, crashed, message)
            on_case(pair, index, worker.sample, self._noted(worker, message))
            worker.index = worker.sample = None
        elif kind == "pair_done":
            self._next_task(worker)
            if queue and worker.task is None and not self._should_stop():
                self._assign(worker, queue.popleft(), queue)
            if queue:
                self._send_ahead(worker, queue)
            on_pair(pair, message["n_cases"])
        elif kind == "fatal":  # the worker could not run this pair at all
            index = _next_index(pair)
            on_case(pair, index, "(not run)", {
                "status": ERROR, "check_kind": "none",
                "reason": "mpsprobe could not run this pair",
                "error_type": message.get("error_type"), "message": message["message"]})
            on_pair(pair, index + 1)
            self._next_task(worker)

    def _not_reproduced(self, pair, index, crashed, result):
        """A case whose worker died in it ran to a result when run again in another worker:
        one death that did not recur is the run's event, not the case's verdict; the case is
        recorded as it ran, the death named in its notes."""
        detail = (f"the worker died in case {index} ({crashed['why']}); run again in another worker "
                  f"process, the case ran to {result.get('status')}")
        self._event(CRASH_NOT_REPRODUCED, pair, crashed["how"], detail, crashed["lines"],
                    crashed["result"].get("signal"))
        return dict(result, notes={**(result.get("notes") or {}), CRASH_NOT_REPRODUCED: crashed["why"]})

    def _limit(self, pass_):
        """Seconds a case of `pass_` may take."""
        return self.compile_timeout if pass_ == COMPILED else self.timeout

    def _noted(self, worker, result):
        """`result` with what the device checks said: its pair's check, and a failed one earlier."""
        notes = dict(worker.notes or {}, **(self.device_failed or {}))
        if not notes:
            return result
        return dict(result, notes=dict(result.get("notes") or {}, **notes))

    def _device_failure(self, pair, kind, detail, lines=(), signum=None):
        """A device check failed (it crashed, hung or raised): recorded once as a device event,
        every later result flagged, and no more checks for the hangs so far (a broken device
        would fail each one): the cases themselves still run, each recorded as what it does."""
        self.device_failed = {"after_device_failure": True}
        self.checks_end = self.hangs
        for worker in self.workers:
            worker.hangs_seen = max(worker.hangs_seen, self.hangs)
        self._event("device_check_failed", pair, kind, detail, lines, signum)

    def _event(self, kind, pair, how, detail, lines=(), signum=None):
        """Report something outside any case (on_event): `how` is signal, exit, hang or raised."""
        self._on_event({"kind": kind, "how": how, "detail": detail, "signal": signum,
                        "stderr_tail": "\n".join(lines) or None,
                        "before_op": pair["op"] if pair else None, "before_dtype": pair["dtype"] if pair else None})

    def _lost(self, worker, queue, on_case, on_pair, timed_out):
        """A worker died or overran: charge the case in flight (only a case: never one
        its death outside any case would blame), requeue the rest of its pair."""
        if worker.ahead is not None:   # sent ahead, not begun: another worker runs it
            queue.appendleft(worker.ahead)
            worker.ahead = None
        pair, index, sample, pass_, stage = worker.task, worker.index, worker.sample, worker.pass_, worker.stage
        layout = worker.layout if index is not None else None
        if pair is None:
            self._retire_dead(worker)
            return
        signum, text = _death(worker.stop(0 if timed_out else EXIT_GRACE_S), worker.killed)
        lines = worker.stderr_lines()
        tail = lines[-1] if lines else ""
        self._retire(worker)
        limit = self._limit(pass_) if index is not None else self.timeout
        why = (f"no reply within {limit:g} s; killed" if timed_out
               else text + (f": {tail}" if tail else ""))
        how = "hang" if timed_out else ("signal" if signum else "exit")
        if index is None and stage == "health":
            # The device check itself failed: the device's event, not any case's.
            self._device_failure(pair, how, why, lines, signum)
            queue.appendleft(pair)
            self.say(f"the device check after a killed hang failed ({why}); recorded as a device "
                     f"event, later results flagged; {pair['op']} {pair['dtype']} runs again, no case lost")
            return
        if index is None and stage != "samples":
            # Lost between cases, outside anything it announced: no case to charge.
            pair["attempts"] += 1
            self._event("worker_lost", pair, how, why, lines, signum)
            if pair["attempts"] < PAIR_ATTEMPTS:
                queue.appendleft(pair)
                self.say(f"a worker was lost between cases of {pair['op']} {pair['dtype']} "
                         f"({why}); the pair runs again, no case lost")
            else:
                self.unfinished.append({"op": pair["op"], "dtype": pair["dtype"], "why": why})
                self.say(f"{pair['op']} {pair['dtype']}: its worker was lost between cases "
                         f"{PAIR_ATTEMPTS} times ({why}); the pair is left unfinished and the run "
                         "will not be complete")
            return
        in_case = index is not None
        if index is None:   # died making a pass's samples: that pass is charged, the others still run
            index, sample = 0, "(sample generation)"
            pair["skip_passes"].append(pass_)
        if timed_out:
            budget = " (the compile budget, --compile-timeout)" if pass_ == COMPILED else ""
            result = {"status": TIMEOUT, "check_kind": "none", "reason_kind": "hang",
                      "reason": f"no result within {limit:g} s{budget}; worker killed"}
            self.hangs += 1
        else:
            result = {"status": CRASH, "check_kind": "none", "signal": signum,
                      "reason": text, "message": tail or None,
                      "reason_kind": "signal" if signum else "exit",
                      "stderr_tail": "\n".join(lines) or None}
            result.update(_evidence(lines))
        result[PASS_COLUMN] = pass_
        if layout:
            result["layout"] = layout
        result = self._noted(worker, result)
        key = case_key(index, pass_, layout)
        crashed = pair.setdefault("crashed", {})
        if in_case and not timed_out:
            if key not in crashed:
                # A death is charged to a case only when it recurs with the case run again in
                # another worker process: a process may die of what an earlier case left behind
                # (a corrupted allocator, a fault the device reports late).
                crashed[key] = {"result": result, "why": why, "how": how, "lines": lines}
                queue.appendleft(pair)
                self.say(f"{pair['op']} {pair['dtype']}: the worker died in case {index} ({why}); "
                         "the case runs again in another worker process before the death is charged to it")
                return
            # The first death is the evidence recorded; the second confirms it.
            first = crashed.pop(key)["result"]
            result = dict(first, notes=dict(first.get("notes") or {}, crashed_again=why))
        pair["done"].append(key)
        on_case(pair, index, sample, result)
        queue.appendleft(pair)


def select_one(stream, timeout, events=selectors.EVENT_READ):
    with selectors.DefaultSelector() as sel:
        sel.register(stream, events)
        return bool(sel.select(timeout))
