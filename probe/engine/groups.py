"""A worker's process groups: nothing an op starts outlives its case.

The pool starts each worker in a process group of its own (its pid). Between
cases the worker waits in its parent's group; for each case it moves back
into its own group, so every process the op forks or spawns is born there.
When the case ends the worker steps out again and kills that group: the
op's `sleep 300`, its forked children, everything, and never the worker.
What left the group (a new session) is found as a descendant or by the
worker's mark (leftovers.py), killed too, and named in `killed` for the
case's notes. If the worker dies mid-case, the pool kills the same group
(pool._kill_group) and whatever carries the worker's mark.
"""
import contextlib
import os
import signal

from . import leftovers


class CaseGroups:
    def __init__(self):
        self.own = os.getpid()
        self.waiting = os.getpgid(os.getppid())
        self.in_case = False
        self.killed = []    # what the last case left running outside its group: "name (pid N)"
        os.environ[leftovers.MARK] = str(self.own)   # inherited by all a case starts
        self._adopts_orphans = leftovers.become_subreaper()
        self._step_out()

    def _step_out(self):
        if self.waiting != self.own:
            try:
                os.setpgid(0, self.waiting)
            except OSError:
                self.waiting = self.own   # cannot leave (another session): no per-case kill

    @contextlib.contextmanager
    def case(self):
        """Run the block in the worker's own group; kill what it left there afterwards."""
        if self.waiting != self.own:
            os.setpgid(0, 0)
        self.in_case = True
        try:
            yield
        finally:
            self.in_case = False
            if self.waiting != self.own:
                self._step_out()
                self.kill_leftovers()

    def kill_leftovers(self):
        """Kill the case's group, then anything it started that left the group."""
        try:
            os.killpg(self.own, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.killed = []
        if not self._reap():
            return   # the case started nothing: no walk
        pids = leftovers.descendants(self.own)
        if not self._adopts_orphans:   # an orphan went to init: only the mark finds it
            pids += [p for p in leftovers.marked(self.own) if p not in pids]
        self.killed = leftovers.kill(pids)
        self._reap()

    @staticmethod
    def _reap():
        """Reap exited children; True if this process had any child (exited or alive)."""
        had = False
        try:
            while True:
                pid, _ = os.waitpid(-1, os.WNOHANG)
                if not pid:
                    return True   # one is alive
                had = True
        except ChildProcessError:
            return had
