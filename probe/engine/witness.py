"""Which aten op was being dispatched when a warning fired or an exception rose.

A fallback warning that names no op ("Falling back on CPU. This may have
performance implications.") still says which op fell back: the one being
dispatched at that moment. `witness()` finds it by running the target call
once more under a recorder, and only when needed: never around the reference
call, and never around the measured target call (a mode in the way would
change what is timed and how the target dispatches).
"""
import warnings

from torch.utils._python_dispatch import TorchDispatchMode

from .aten import aten_name


class DispatchWitness(TorchDispatchMode):
    """Attributes each warning recorded in `caught` to the aten op whose call it fired in.

    `warned`: {index in caught: aten op}; `raised_by`: the op an exception rose from.
    A mode is not re-entered by its own calls, so the ops it names are the ones
    the code called, at the level a user (and PyTorch's messages) name them.
    """

    def __init__(self, caught):
        super().__init__()
        self.caught = caught
        self.warned = {}
        self.raised_by = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = aten_name(func)
        before = len(self.caught)
        try:
            return func(*args, **(kwargs or {}))
        except Exception:
            if self.raised_by is None:
                self.raised_by = name
            raise
        finally:
            for index in range(before, len(self.caught)):
                self.warned.setdefault(index, name)


def witness(call, target, before=None):
    """Run `call()` on `target` again under a DispatchWitness.

    Returns ([(warning text, aten op or None)], op an exception rose from or None).
    The witness sits inside the target's own context, so a backend that warns
    from its own dispatch mode (the test backend) is seen like a real kernel.
    `before`: run first, outside the witness (its warnings name no op), its result
    passed to `call` (a backward's forward).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        recorder = DispatchWitness(caught)
        try:
            with target.context():
                prepared = before() if before else None
                with recorder:
                    call(prepared) if before else call()
                target.synchronize()
        except Exception:
            pass
        seen = [(str(w.message), recorder.warned.get(i)) for i, w in enumerate(caught)]
    return seen, recorder.raised_by
