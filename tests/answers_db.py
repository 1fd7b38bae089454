"""A small database made by hand for the site's answer-first pages: a CPU run of torch
2.13 and what PyTorch declares for MPS in 2.12 and 2.13 (every dtype but float64 and
complex128), as the declared history records it. No OpInfo, no sweep. Used by
test_site_answers.py and the browser walk (test_browser.py).
"""
from mpsprobe.db import schema
from mpsprobe.versions import version_key

DTYPES = ("bool", "int64", "float16", "bfloat16", "float32", "float64", "complex64", "complex128")
NOT_DECLARED = ("float64", "complex128")
OPS = ("abs", "add", "nn.functional.batch_norm", "nn.functional.conv2d", "only_half")


def add_run(db, run_id, device, torch, os_name, started):
    db["runs"].insert({"id": run_id, "run_key": run_id, "started": started, "device": device,
                       "torch_version": torch, "torch_version_key": version_key(torch),
                       "os_name": os_name, "os_version": "15.3", "state": "complete", "source": "opinfo"})


def add_result(db, run_id, op, dtype, status, **extra):
    case = f"{op}|{dtype}|0"
    db["cases"].insert({"id": case, "op_id": op, "dtype": dtype, "sample_index": 0}, ignore=True)
    db["results"].insert(dict({"run_id": run_id, "case_id": case, "op_id": op, "dtype": dtype,
                               "status": status, "pass": "forward"}, **extra))


# A right-to-left override in an op id: shown isolated (<bdi>), it cannot flip the text around it.
RTL_OP = "rtl\u202eevil"


def add_older_sweep_and_bench(db):
    """An older CPU sweep (abs float32 unsupported) and a bench run with no op results:
    what compare must tell apart."""
    add_run(db, "cpu-old", "cpu", "2.12.0+cpu", "Linux", "2025-06-01")
    add_result(db, "cpu-old", "abs", "float32", "unsupported")
    db["runs"].insert({"id": "bench", "run_key": "bench", "started": "2026-06-01", "device": "cpu",
                       "torch_version": "2.13.0+cpu", "torch_version_key": version_key("2.13.0+cpu"),
                       "os_name": "Linux", "state": "complete", "source": "bench"})


def build_answers_db(path, older_sweep_and_bench=False):
    """The module's database at `path` (the browser walk serves it too, with an older
    CPU sweep and a newer bench run for compare to choose from)."""
    db = schema.open_db(path)
    add_run(db, "cpu", "cpu", "2.13.0+cpu", "Linux", "2026-01-01")
    for op in OPS:
        db["ops"].insert({"id": op, "name": op.rsplit(".", 1)[-1], "aten_name": op.rsplit(".", 1)[-1]})
        for dtype in (("float16",) if op == "only_half" else DTYPES):
            add_result(db, "cpu", op, dtype, "pass")
            for version in ("2.12.0", "2.13.0"):
                db["declared"].insert({"torch_version": version, "device": "mps", "op_id": op, "dtype": dtype,
                                       "status": "unsupported" if dtype in NOT_DECLARED else "pass",
                                       "source": "test"})
    db["declared"].insert({"torch_version": "2.13.0", "device": "mps", "op_id": RTL_OP, "dtype": "float32",
                           "status": "pass", "source": "test"})
    if older_sweep_and_bench:
        add_older_sweep_and_bench(db)
    db.conn.close()
    return path
