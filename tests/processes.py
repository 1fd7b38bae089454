"""Whether a process a test started (or that a test's subject started) still runs."""
import os
import time


def alive(pid):
    """True while `pid` runs; a zombie (dead, not yet reaped) runs nothing."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:   # no /proc (macOS): os.kill's answer stands
        return True


def gone_soon(pids, within_s=5.0):
    """Wait up to `within_s` for every pid of `pids` to end; True when none runs."""
    deadline = time.monotonic() + within_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(alive(p) for p in pids)
