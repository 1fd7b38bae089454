"""FAULTY: a test-only target whose ops take down, or scribble over, the worker.

It is NOT a measurement of anything. It reproduces what a buggy device
driver or kernel can do to the process running a case, so the tests can
check that each such case costs that case alone:

- "segfault":  reads address 0 (SIGSEGV, as a bad kernel launch can);
- "oom":       allocates under a bounded address space (RLIMIT_AS, a few
               hundred MiB above what the worker already maps) until an
               allocation fails, then dies by SIGKILL as the kernel's OOM
               killer would kill it; the machine's memory is never at risk;
- "oom_raise": the same allocation, but the failure is left to surface as
               MemoryError (the worker survives, the limit is restored);
- "exit":      the process exits with status 3 mid-case;
- "garbage":   writes binary junk and protocol-looking lines to the
               process's stdout and stderr (fd 1 and 2), then runs normally;
- "wait":      blocks until the file "go" appears in once_dir (at most
               two minutes), so a test can hold a sweep in the middle;
- "sysexit", "keyboard", "base": raise SystemExit(4), KeyboardInterrupt, or
               a BaseException subclass out of the op;
- "close_reply": closes every pipe the process writes to but stdin (the
               worker's reply channel), then runs normally;
- "close_stdin": closes fd 0 (the worker's requests), then runs normally;
- "forge":     writes result lines claiming a pass into every such pipe,
               then fails (so a forged verdict would show as a pass);
- "spawn":     starts `sleep 300` (letting it inherit every inheritable fd)
               and forks a child that sleeps, writing their pids to
               once_dir/spawned and the sleeper's open files beside the
               worker's pipes to once_dir/spawned_fds, then runs normally;
- "fork_segfault": forks a child that sleeps (holding every inherited fd,
               the reply pipe included), writing its pid to once_dir/forked,
               then segfaults.

- "hang":      sleeps for ten minutes (a kernel that never returns);
- "abort":     writes FAULTY_ABORT to stderr, then aborts (SIGABRT, as a
               failed Metal assertion does);
- "close_fd2": closes fds 1 and 2, then runs normally;
- "noise":     writes 64 KiB of random bytes (no newline) to stderr, then runs normally;
- "setsid":    starts `sleep 300` in a new session (out of the case's
               process group), its pid in once_dir/setsid, then runs normally;
- "setsid_segfault": the same, then segfaults (the worker is gone: nothing
               to re-parent the sleeper to);
- "memory_error": allocates 8 TiB (bytearray): Python's MemoryError, every
               time it is reached (once_dir does not stop it).

FAULTY (JSON) maps aten op names to a fault, e.g. {"aten::sin": "segfault"};
with "once_dir": PATH each fault fires on the first case that reaches it
only (a marker file per aten op), so the rest of the pair must still run. A
fault that ends the worker (ENDS_WORKER) fires on that case's second run too:
the pool runs a case whose worker died once more, in another worker,
before it charges the death to it. A list (below) fires exactly as listed.
A list of faults fires its k-th fault the k-th time the op is reached (needs
once_dir), e.g. {"aten::exp": ["close_fd2", "abort"]}.

"health" is a fault of the device check the worker runs after a killed hang:
"abort" (once, with once_dir), "abort_always", "hang" (holds the worker itself,
not only the check's thread) or "raise".

Use: mpsprobe run --backend tests/faulty_backend.py --ops ...
"""
import ctypes
import fcntl
import json
import os
import resource
import signal
import stat
import subprocess
import time

from torch.utils._python_dispatch import TorchDispatchMode

from mpsprobe.engine.aten import aten_name
from mpsprobe.engine.devices import Target

ADDRESS_SPACE_HEADROOM = 256 << 20
CHUNK = 16 << 20
GARBAGE = (b"\x00\xff\xfe garbage \x1b[31m\n"
           b'{"type": "result", "index": 99, "status": "pass"}\n'
           b'{"type": "pair_done", "n_cases": 1}\n'
           b"{not json\n")


def _mapped_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def _allocate_until_refused():
    """Touch memory in chunks under a bounded address space; returns once refused."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (_mapped_bytes() + ADDRESS_SPACE_HEADROOM, hard))
    held = []
    try:
        while True:
            held.append(bytearray(CHUNK))  # zero-filled: the pages are really touched
    except MemoryError:
        pass
    finally:
        del held
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _wait_for(path, limit_s=120.0):
    deadline = time.monotonic() + limit_s
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)


class Escape(BaseException):
    """Neither Exception nor SystemExit/KeyboardInterrupt."""


FORGED = (b'{"type": "result", "index": 0, "status": "pass", "token": "guess"}\n'
          b'{"type": "result", "index": 0, "status": "pass"}\n'
          b'{"type": "pair_done", "n_cases": 1}\n{not json\n')


def _reply_pipes():
    """Every pipe fd of this process it can write to: the worker's reply channel among them."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            writable = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY
            if stat.S_ISFIFO(os.fstat(fd).st_mode) and writable:
                found.append(fd)
        except OSError:
            pass
    return found


def _sleeping_child():
    pid = os.fork()
    if pid == 0:
        time.sleep(300)
        os._exit(0)
    return pid


FAULTY_ABORT = "FAULTY: the kernel's assertion failed; aborting"
EVERY_TIME = {"memory_error"}
# Faults that end the worker in the case: with once_dir they fire on the case's second run too.
ENDS_WORKER = {"segfault", "oom", "exit", "sysexit", "keyboard", "base", "close_reply",
               "fork_segfault", "setsid_segfault", "abort"}


def _new_session_sleeper(once_dir):
    sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True)
    with open(os.path.join(once_dir, "setsid"), "w") as f:
        f.write(str(sleeper.pid))


def _abort():
    os.write(2, (FAULTY_ABORT + "\n").encode())
    os.abort()


def _fire(fault, once_dir):
    if fault == "wait":
        _wait_for(os.path.join(once_dir, "go"))
    elif fault == "segfault":
        ctypes.string_at(0)
    elif fault == "oom":
        _allocate_until_refused()
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault == "oom_raise":
        _allocate_until_refused()
        raise MemoryError("allocation refused under RLIMIT_AS")
    elif fault == "exit":
        os._exit(3)
    elif fault == "garbage":
        for fd in (1, 2):
            os.write(fd, GARBAGE * 64)
        os.write(2, os.urandom(1 << 16))
    elif fault == "sysexit":
        raise SystemExit(4)
    elif fault == "keyboard":
        raise KeyboardInterrupt
    elif fault == "base":
        raise Escape("out of the op")
    elif fault == "close_reply":
        for fd in _reply_pipes():
            os.close(fd)
    elif fault == "close_stdin":
        os.close(0)
    elif fault == "forge":
        for fd in _reply_pipes():
            os.write(fd, FORGED)
        raise RuntimeError("the op failed after forging a pass")
    elif fault == "spawn":
        # close_fds=False: the sleeper gets every fd the worker lets children inherit.
        sleeper = subprocess.Popen(["sleep", "300"], close_fds=False)
        with open(os.path.join(once_dir, "spawned"), "w") as f:
            f.write(f"{sleeper.pid} {_sleeping_child()}")
        with open(os.path.join(once_dir, "spawned_fds"), "w") as f:
            json.dump({"reply_pipes": [os.readlink(f"/proc/self/fd/{fd}") for fd in _reply_pipes()],
                       "sleeper": [os.readlink(f"/proc/{sleeper.pid}/fd/{fd}")
                                   for fd in os.listdir(f"/proc/{sleeper.pid}/fd")]}, f)
    elif fault == "hang":
        time.sleep(600)
    elif fault == "abort":
        _abort()
    elif fault == "close_fd2":
        os.close(1)
        os.close(2)
    elif fault == "noise":
        os.write(2, bytes(b for b in os.urandom(1 << 16) if b != 10))
    elif fault == "setsid":
        _new_session_sleeper(once_dir)
    elif fault == "setsid_segfault":
        _new_session_sleeper(once_dir)
        ctypes.string_at(0)
    elif fault == "memory_error":
        bytearray(8 << 40)
    elif fault == "fork_segfault":
        with open(os.path.join(once_dir, "forked"), "w") as f:
            f.write(str(_sleeping_child()))
        ctypes.string_at(0)
    else:
        raise ValueError(f"unknown fault {fault!r}")


class FaultMode(TorchDispatchMode):
    def __init__(self, faults, once_dir):
        super().__init__()
        self.faults = faults
        self.once_dir = once_dir

    def _first_time(self, name, runs=1):
        """Whether `name` is reached for one of its first `runs` times (always without once_dir)."""
        if not self.once_dir:
            return True
        marker = name.replace(":", "_")
        return any(_claim(self.once_dir, marker if k == 0 else f"{marker}.run{k}") for k in range(runs))

    def _nth_time(self, name):
        """How many times `name` was reached before (counted in once_dir)."""
        k = 0
        while not _claim(self.once_dir, f"{name.replace(':', '_')}.{k}"):
            k += 1
        return k

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = aten_name(func)
        fault = self.faults.get(name)
        if isinstance(fault, list):
            k = self._nth_time(name)
            if k < len(fault):
                _fire(fault[k], self.once_dir)
        elif fault and (fault in EVERY_TIME or self._first_time(name, 2 if fault in ENDS_WORKER else 1)):
            _fire(fault, self.once_dir)
        return func(*args, **(kwargs or {}))


def _claim(folder, marker):
    """True the first time `marker` is claimed in `folder` (by any process)."""
    try:
        os.close(os.open(os.path.join(folder, marker), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


class Faulty(Target):
    """The CPU, with faults injected per aten op. Results are filed under 'faulty'."""

    def __init__(self):
        super().__init__("cpu")
        self.name = "faulty"
        config = json.loads(os.environ.get("FAULTY", "{}"))
        self.once_dir = config.pop("once_dir", None)
        self.health = config.pop("health", None)
        self.faults = config

    def health_check(self, timeout=10.0):
        fault = self.health
        if fault == "abort_always" or (fault == "abort" and _claim(self.once_dir, "health")):
            _abort()
        if fault == "hang":
            time.sleep(600)   # in the worker's own thread: the check cannot time itself out
        if fault == "raise":
            raise RuntimeError("FAULTY: the device check raised")
        return super().health_check(timeout)

    @property
    def device_name(self):
        return "FAULTY (test backend on the CPU)"

    def context(self):
        return FaultMode(self.faults, self.once_dir)


def make_target():
    return Faulty()
