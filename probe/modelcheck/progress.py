"""A progress line for `check` when it takes longer than a moment.

Quiet when the answer comes within `after` seconds; past that, the step now
running is said once, and each later step as it starts.
"""
import threading
import time

AFTER_S = 2.0


class Progress:
    def __init__(self, say, after=None):
        after = AFTER_S if after is None else after
        self._say, self._after = say, after
        self._started = time.monotonic()
        self._step = None
        self._speaking = False
        self._lock = threading.Lock()
        self._timer = threading.Timer(after, self._late)
        self._timer.daemon = True
        self._timer.start()

    def _late(self):
        with self._lock:
            self._speaking = True
            if self._step:
                self._say(self._line(self._step))

    def _line(self, step):
        return f"check: {step} … ({time.monotonic() - self._started:.1f} s so far)"

    def step(self, text):
        """The step starting now."""
        with self._lock:
            self._step = text
            if self._speaking:
                self._say(self._line(text))

    def done(self):
        self._timer.cancel()
