"""Planning a sweep: its options, which (op, dtype) pairs a shard holds, and the
key that makes two invocations the same run (so a second one resumes it)."""
import hashlib
import json
import math
import zlib
from dataclasses import dataclass, field

from mpsprobe.errors import MpsprobeError
from mpsprobe.vocabulary import COMPILED, EAGER_PASSES, FORWARD, PASSES


class PlanError(MpsprobeError):
    """Options that cannot make a sweep: one line for the user, nothing written."""


@dataclass
class SweepOptions:
    db_path: str = "mpsprobe.db"
    device: str = "auto"
    backend: str = None           # a Python file defining a test/custom target
    ops: list = field(default_factory=list)
    dtypes: list = field(default_factory=list)
    samples: int = 3
    timing: bool = True
    workers: int = 0              # 0: the device's default (sweep.default_workers)
    timeout: float = 60.0
    mps_fallback: bool = False    # set PYTORCH_ENABLE_MPS_FALLBACK=1 in workers
    shard: tuple = None           # (i, n), 1-based
    python: str = None            # the interpreter whose torch is probed
    resume: bool = False          # continue the newest unfinished run
    fresh: bool = False           # never continue: always start a new run
    strict_precision: bool = False  # reduced-precision modes (TF32, fast math) off in workers
    passes: tuple = EAGER_PASSES  # which passes of each op (vocabulary.PASSES; compiled only when asked)
    runner_label: str = None      # the fleet machine running it (not part of the run's identity)
    command: str = None           # the command line recorded with the run (default: this process's)
    layouts: bool = False         # also run each forward sample with its input in ops/layouts.py's layouts
    compiled_samples: int = 1     # samples per (op, dtype) of the compiled pass (each compiles anew)
    compile_timeout: float = 60.0  # seconds a compiled case may take, compiling included

    def key_fields(self):
        """The options that decide which cases a run holds (and so its identity)."""
        return {"ops": sorted(self.ops), "dtypes": sorted(self.dtypes), "samples": self.samples,
                "mps_fallback": self.mps_fallback, "shard": list(self.shard) if self.shard else None,
                **({"strict_precision": True} if self.strict_precision else {}),
                **({"layouts": True} if self.layouts else {}),
                **({"compiled_samples": self.compiled_samples} if COMPILED in self.passes else {}),
                # A forward-only run keeps the identity runs had before passes existed.
                **({"passes": list(self.passes)} if tuple(self.passes) != (FORWARD,) else {})}

    def check(self):
        if self.samples < 1:
            raise PlanError("--samples must be at least 1")
        if self.resume and self.fresh:
            raise PlanError("--resume and --fresh contradict each other")
        for name, value in (("--timeout", self.timeout), ("--compile-timeout", self.compile_timeout)):
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise PlanError(f"{name} must be a positive number of seconds (got {value})")
        if not isinstance(self.compiled_samples, int) or self.compiled_samples < 1:
            raise PlanError(f"--compiled-samples must be at least 1 (got {self.compiled_samples})")
        unknown = [p for p in self.passes if p not in PASSES]
        if unknown or not self.passes:
            raise PlanError(f"--passes takes some of {','.join(PASSES)} (got {','.join(self.passes) or 'none'})")
        self.passes = tuple(p for p in PASSES if p in self.passes)
        if not isinstance(self.workers, int) or self.workers < 0:
            raise PlanError(f"--workers must be at least 1, or 0 for the device's default (got {self.workers})")


def refuse_unknown_names(options):
    """Refuse (PlanError) an op or dtype the cached catalogue does not know, before a sweep
    imports its store and pool: a mistyped name answers at once. Without a cached
    catalogue nothing is refused here (the sweep checks once a worker has read it)."""
    from mpsprobe.ops import catalogue
    options.check()
    cached = catalogue.load(catalogue.torch_build(options.python))
    if cached is not None:
        try:
            catalogue.pairs(cached, options.ops, options.dtypes, options.passes)
        except catalogue.CatalogueError as e:
            raise PlanError(str(e)) from None


def case_key(index, pass_=FORWARD, layout=None):
    """How a recorded case is named between the sweep and its workers (the `done`
    lists): the sample index for a forward case, "index|pass" for the others;
    a layout variant's ends in "@layout"."""
    key = index if pass_ == FORWARD else f"{index}|{pass_}"
    return f"{key}@{layout}" if layout else key


def key_index(key):
    """The sample index of a case_key."""
    return key if isinstance(key, int) else int(str(key).split("@", 1)[0].split("|", 1)[0])


def parse_shard(text):
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise PlanError(f"--shard takes I/N, like 1/4 (got {text!r})") from None
    if not 1 <= i <= n:
        raise PlanError(f"--shard {text}: I must be between 1 and N")
    return i, n


def in_shard(pair, shard):
    if not shard:
        return True
    i, n = shard
    return zlib.crc32(f"{pair['op']}|{pair['dtype']}".encode()) % n == i - 1


def run_key(env, options):
    identity = {k: env.get(k) for k in ("torch_version", "torch_git", "device", "device_name",
                                         "backend", "hostname", "os_version")}
    identity.update(options.key_fields())
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
