"""Processes a case left running outside its process group, found and killed.

A case's process group (groups.py) holds whatever its op forks or spawns, but
a program can leave it: `setsid`, `start_new_session=True`, a daemon's double
fork. Two ways find those:

- descendants: on Linux the worker is a child subreaper (prctl), so an orphan
  of a case is re-parented to the worker instead of init and stays its
  descendant; the tree is read from /proc (…/task/T/children). Elsewhere
  (macOS) psutil walks the tree where it is installed.
- a mark: every worker puts MPSPROBE_WORKER=<its pid> in its environment, which
  every program a case starts inherits; after a worker died (nothing left to
  re-parent to) the pool looks for processes carrying its mark.

Both are only walked when a case did start something (the worker has had a
child since the last case), so a case that starts nothing pays one syscall.
"""
import ctypes
import os
import signal
import sys

MARK = "MPSPROBE_WORKER"
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper():
    """On Linux, adopt the orphans of this process's descendants; elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children_linux(pid):
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return found


def descendants(pid):
    """The pids below `pid` in the process tree (children first)."""
    if os.path.isdir("/proc/self/task"):
        found, todo = [], [pid]
        while todo:
            for child in _children_linux(todo.pop()):
                if child not in found:
                    found.append(child)
                    todo.append(child)
        return found
    try:
        import psutil
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except Exception:   # no psutil, or the process is gone
        return []


def marked(value):
    """The pids of live processes whose environment carries MARK=value."""
    needle = f"{MARK}={value}".encode()
    if os.path.isdir("/proc/self"):
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        found.append(int(name))
            except OSError:
                pass
        return found
    try:
        import psutil
    except ImportError:
        return []
    found = []
    for p in psutil.process_iter():
        try:
            if p.pid != os.getpid() and p.environ().get(MARK) == str(value):
                found.append(p.pid)
        except Exception:   # gone, or not ours to read
            pass
    return found


def _name(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        try:
            import psutil
            return psutil.Process(pid).name()
        except Exception:
            return "?"


def kill(pids):
    """SIGKILL each of `pids`; ["name (pid N)"] for those that were alive."""
    killed = []
    for pid in pids:
        name = _name(pid)
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
        killed.append(f"{name} (pid {pid})")
    return killed
