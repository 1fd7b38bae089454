"""Stores with `compiled` cases, recorded through the run writer as a sweep with
`--passes forward,compiled` records them: each op's forward case and its compiled case
(the op through torch.compile), the compiled one carrying the eager op's own aten ops.

On MPS (bare metal, torch 2.13, macOS 15.3), float32, one sample each:
- add: compiles and passes (1.8x faster than eager, interval above 1);
- mul: the compiler leaves it to eager (compiled_fallback, naming aten::mul.Tensor);
- sort: compiling it fails (error, compile_failed);
- cumsum: compiled, wrong numbers (mismatch);
- relu: forward only, never compiled;
- exp: compiles and passes, no clear speed difference (interval spans 1).
A CPU run compiles add and fails to compile relu: no MPS evidence.
Used by test_check_compiled.py and test_site_compiled.py.
"""
import os

from mpsprobe.db import schema
from mpsprobe.db.writer import RunWriter
from mpsprobe.vocabulary import COMPILED, FORWARD

MPS_ENV = {"torch_version": "2.13.0", "device": "mps", "device_name": "Apple M2", "os_name": "macOS",
           "os_version": "15.3", "chip": "Apple M2", "virtualized": 0, "source": "opinfo"}
CPU_ENV = {"torch_version": "2.13.0+cpu", "device": "cpu", "device_name": "x86_64", "os_name": "Linux",
           "os_version": "6.1", "source": "opinfo"}
ATEN = {"add": "aten::add.Tensor", "mul": "aten::mul.Tensor", "sort": "aten::sort.default",
        "cumsum": "aten::cumsum.default", "relu": "aten::relu", "exp": "aten::exp"}
COMPILE_ERROR = "InductorError: LoweringException: NotImplementedError: sort on mps"

# op -> its compiled case on MPS (None: never compiled)
MPS_COMPILED = {
    "add": {"status": "pass", "compile_ms": 812.0, "eager_ms": 0.09, "target_ms": 0.05,
            "compiled_speedup": 1.8, "compiled_speedup_lo": 1.5, "compiled_speedup_hi": 2.1},
    "mul": {"status": "fallback", "reason_kind": "compiled_fallback", "fallback_ops": ["aten::mul.Tensor"],
            "reason": "the compiler leaves aten::mul.Tensor to eager"},
    "sort": {"status": "error", "reason_kind": "compile_failed", "error_type": "InductorError",
             "message": COMPILE_ERROR},
    "cumsum": {"status": "mismatch", "max_abs_err": 0.5, "reason": "compiled output differs from the CPU"},
    "relu": None,
    "exp": {"status": "pass", "compile_ms": 640.0, "eager_ms": 0.04, "target_ms": 0.041,
            "compiled_speedup": 0.98, "compiled_speedup_lo": 0.9, "compiled_speedup_hi": 1.07},
}
CPU_COMPILED = {"add": {"status": "pass"},
                "relu": {"status": "error", "reason_kind": "compile_failed", "error_type": "BackendCompilerFailed",
                         "message": "BackendCompilerFailed: no C++ compiler"}}


def _record(db, env, forward, compiled, started):
    passes = [FORWARD] + ([COMPILED] if compiled else [])
    writer = RunWriter.start(db, f"{env['device']}-{started}", dict(env, started=started),
                             {"passes": passes, "samples": 1}, "0.1.0", os.getpid())
    for op in forward:
        pair = {"op": op, "dtype": "float32", "name": op, "aten_name": ATEN[op].split("::")[1].split(".")[0]}
        ran = {"aten_ops": [ATEN[op]], "aten_dtypes": {ATEN[op]: ["float32"]}}
        writer.record(pair, 0, "float32[4, 4]", dict(ran, status="pass", check_kind="values",
                                                     ref_ms=0.02, target_ms=0.09))
        if compiled and compiled.get(op):
            case = dict(compiled[op])
            if case["status"] != "pass":
                case.setdefault("aten_op", None)
            writer.record(pair, 0, "float32[4, 4]", dict(ran, check_kind="values", ref_ms=0.02,
                                                         **{"pass": COMPILED}, **case))
        writer.pair_done(pair, 2 if compiled and compiled.get(op) else 1)
    writer.finish("complete", 1.0)
    return writer.run_id


def build(path, mps_compiled=True, cpu_compiled=True, vm_compiled=False):
    """A store at `path`: an MPS sweep (with its compiled cases when `mps_compiled`) and a
    CPU sweep (compiling add and relu when `cpu_compiled`); with `vm_compiled`, also an MPS
    sweep in a macOS virtual machine whose compiled add passes and compiled mul fails.
    Returns {"mps": id, "cpu": id[, "vm": id]}."""
    db = schema.open_db(str(path))
    ids = {"mps": _record(db, MPS_ENV, list(MPS_COMPILED), MPS_COMPILED if mps_compiled else None,
                          "2026-11-01T10:00:00"),
           "cpu": _record(db, CPU_ENV, ["add", "relu"], CPU_COMPILED if cpu_compiled else None,
                          "2026-11-02T10:00:00")}
    if vm_compiled:
        ids["vm"] = _record(db, dict(MPS_ENV, device_name="Apple Paravirtual device", virtualized=1),
                            ["add", "mul"], {"add": {"status": "pass"},
                                             "mul": {"status": "error", "reason_kind": "compile_failed",
                                                     "message": "InductorError: out of memory"}},
                            "2026-11-03T10:00:00")
    schema.close(db)
    return ids
