"""The user's model runs in a process of its own.

Importing a model file, capturing its calls and timing a whole step all run the
user's code, which may segfault, abort, call sys.exit or hang. Run in `check`'s
own process, any of these ended the command with no word; here each costs one
line (MpsprobeError: what happened and where) and leaves nothing running.

The child reports its progress in a file as it goes (the stage, the module it
is in, the aten calls made so far), so the parent can say where it died, and
time it out when it makes no progress for `timeout` seconds: a per-call limit,
not a limit on the whole model. The answer (ModelOps, the replayable calls,
a whole step's times) comes back pickled in a file.

A model given as an nn.Module object (the Python API) cannot be rebuilt in
another process; it runs in the caller's process, as the caller chose.
"""
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time

from mpsprobe.errors import MpsprobeError

STARTUP_S = 180.0   # importing torch (and torchvision) before the model's own code runs


class ModelCrashed(MpsprobeError):
    """The model's own code killed or held its process."""


class ModelSpecError(MpsprobeError):
    """MODEL names no model mpsprobe can load."""


def check_spec(spec):
    """Refuse a spec that names no model, before any process is started for it."""
    if not spec.startswith("torchvision:") and not spec.endswith(".py"):
        raise ModelSpecError(f"{spec}: a model is a .py file defining build(), torchvision:NAME, "
                             "or an op list written by --export (.json)")


def capture(spec, *, input_shape=None, dtype=None, train=False, optimizer="sgd", portable=True,
            for_mps=None, record_calls=False, timeout=60.0):
    """(ModelOps, [replay.Call] or None, {op: why not replayable}) for the model `spec`
    ("file.py" or "torchvision:NAME"), captured in a child process."""
    from . import replay
    answer = _run("capture", dict(spec=spec, input_shape=input_shape, dtype=dtype, train=train,
                                  optimizer=optimizer, portable=portable, for_mps=for_mps,
                                  record_calls=record_calls),
                  timeout)
    calls = [replay.decode(text) for text in answer["calls"]] if answer["calls"] is not None else None
    return answer["model_ops"], calls, answer["skipped"]


def whole_step(spec, *, input_shape=None, dtype=None, device="auto", backend=None, train=False,
               optimizer="sgd", strict=False, timeout=60.0):
    """The timings (or a note) of one whole step of the model `spec`, taken in a child process."""
    return _run("whole_step", dict(spec=spec, input_shape=input_shape, dtype=dtype, device=device,
                                   backend=backend, train=train, optimizer=optimizer, strict=strict),
                timeout)


def _run(job, kwargs, timeout):
    with tempfile.TemporaryDirectory(prefix="mpsprobe-model-") as folder:
        paths = {name: os.path.join(folder, name) for name in ("request", "answer", "progress", "log")}
        with open(paths["request"], "wb") as f:
            pickle.dump({"job": job, "kwargs": kwargs}, f)
        with open(paths["log"], "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "mpsprobe.modelcheck.isolated", folder],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    start_new_session=True)   # its own group: killed whole
            try:
                code, stalled = _wait(proc, paths["progress"], timeout)
            finally:
                _kill(proc)
        progress = _progress(paths["progress"])
        if stalled:
            raise ModelCrashed(f"the model made no progress for {stalled:g} s {_where(progress)}; "
                               "killed (raise --timeout if a call really takes that long)")
        if code != 0 or not os.path.exists(paths["answer"]):
            raise ModelCrashed(f"the model {_death(code)} {_where(progress)}{_last_line(paths['log'])}")
        with open(paths["answer"], "rb") as f:
            answer = pickle.load(f)
    if "refused" in answer:   # a clean refusal of the model's (it raised): its own one line
        raise answer["refused"]
    return answer["value"]


def _wait(proc, progress_path, timeout):
    """(exit code, None) once the child ends, or (None, seconds) if it stalled that long."""
    last_size, last_change = -1, time.monotonic()
    while True:
        try:
            return proc.wait(timeout=0.1), None
        except subprocess.TimeoutExpired:
            pass
        try:
            size = os.path.getsize(progress_path)
        except OSError:
            size = 0
        now = time.monotonic()
        if size != last_size:
            last_size, last_change = size, now
        # Before the model's code starts (size 0) the child is importing torch: more time.
        limit = timeout if size else max(timeout, STARTUP_S)
        if now - last_change > limit:
            return None, limit


def _kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _death(code):
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    if code == 0:
        return "ended its process without an answer"
    return f"exited with status {code}"


def _progress(path):
    """The child's last stage, module and call count."""
    found = {"stage": "starting", "module": None, "calls": 0}
    try:
        with open(path) as f:
            for line in f:
                kind, _, value = line.rstrip("\n").partition(" ")
                if kind == "stage":
                    found["stage"], found["module"] = value, None
                elif kind == "module":
                    found["module"] = value
                elif kind == "call":
                    found["calls"] = int(value)
    except (OSError, ValueError):
        pass
    return found


STAGES = {"starting": "while starting", "import": "while its file was imported (build())",
          "forward": "during its forward pass", "training": "during its training step",
          "whole_step": "while a whole step was timed on the target"}


def _where(progress):
    where = STAGES.get(progress["stage"], f"during {progress['stage']}")
    if progress["module"]:
        where += f", in {progress['module']}"
    if progress["calls"]:
        where += f", after {progress['calls']} aten calls"
    return where


def _last_line(log_path):
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, os.path.getsize(log_path) - 4096))
            lines = [x for x in f.read().decode(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return f": {lines[-1][:300]}" if lines else ""


# --- the child ------------------------------------------------------------------------------

class _Progress:
    def __init__(self, path):
        self.file = open(path, "w", buffering=1)
        self.calls = 0

    def stage(self, name):
        self.file.write(f"stage {name}\n")

    def module(self, text):
        self.file.write(f"module {text}\n")

    def call(self, *_):
        self.calls += 1
        self.file.write(f"call {self.calls}\n")


def _watch_modules(model, progress):
    """Say which module runs (a global forward pre-hook), named by path and class."""
    import torch
    names = {m: n for n, m in model.named_modules()}

    def hook(module, args):
        name = names.get(module)
        if name is not None:
            progress.module(f"{name or 'model'} ({type(module).__name__})")
    return torch.nn.modules.module.register_module_forward_pre_hook(hook)


def _load(spec, input_shape, dtype, progress):
    import torch
    from . import load
    progress.stage("import")
    loaded = load.load(spec, input_shape)
    if dtype:
        load.cast(loaded, getattr(torch, dtype) if isinstance(dtype, str) else dtype)
    return loaded


def _job_capture(progress, spec, input_shape, dtype, train, optimizer, portable, for_mps, record_calls):
    from . import capture as capturing, replay
    loaded = _load(spec, input_shape, dtype, progress)
    recorder = replay.CallRecorder() if record_calls else None

    def on_call(*args):
        progress.call()
        if recorder is not None:
            recorder(*args)
    progress.stage("training" if train else "forward")
    with _watch_modules(loaded.model, progress):
        model_ops = capturing.capture(loaded, train=train, optimizer=optimizer, portable=portable,
                                      on_call=on_call, for_mps=for_mps)
    calls = [replay.encode(c) for c in recorder.list()] if recorder is not None else None
    return {"model_ops": model_ops, "calls": calls, "skipped": recorder.skipped if recorder else {}}


def _job_whole_step(progress, spec, input_shape, dtype, device, backend, train, optimizer, strict):
    from mpsprobe.api import _whole_step
    loaded = _load(spec, input_shape, dtype, progress)
    progress.stage("whole_step")
    with _watch_modules(loaded.model, progress):
        return _whole_step(loaded, device, backend, train, optimizer, strict)


def main(folder):
    with open(os.path.join(folder, "request"), "rb") as f:
        request = pickle.load(f)
    progress = _Progress(os.path.join(folder, "progress"))
    job = {"capture": _job_capture, "whole_step": _job_whole_step}[request["job"]]
    try:
        answer = {"value": job(progress, **request["kwargs"])}
    except MpsprobeError as e:   # the model refused cleanly: the parent raises it as it is
        answer = {"refused": MpsprobeError(str(e))}
    with open(os.path.join(folder, "answer.part"), "wb") as f:
        pickle.dump(answer, f)
    os.replace(os.path.join(folder, "answer.part"), os.path.join(folder, "answer"))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)   # a model's atexit hooks or threads cannot turn an answer into a failure


if __name__ == "__main__":
    main(sys.argv[1])
