"""A worker's process groups: nothing an op starts outlives its case.

The pool starts each worker in a process group of its own (its pid). Between
cases the worker waits in its parent's group; for each case it moves back
into its own group, so every process the op forks or spawns is born there.
When the case ends the worker steps out again and kills that group: the
op's `sleep 300`, its forked children, everything, and never the worker.
If the worker dies mid-case, the pool kills the same group (pool._kill_group).
"""
import contextlib
import os
import signal


class CaseGroups:
    def __init__(self):
        self.own = os.getpid()
        self.waiting = os.getpgid(os.getppid())
        self.in_case = False
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
        try:
            os.killpg(self.own, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:   # reap the op's own children; orphans of theirs go to init
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
