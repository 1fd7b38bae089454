"""Schema 1, as mpsprobe first shipped it: runs, ops, cases, results, pairs_done.

Append-only: this step never changes, so a database made by any mpsprobe
upgrades through the same steps as a new one is built. (Migration 1 once also
created the `declared*` tables, after migration 2 existed; databases made then
hold them, and migration 4 creates them where they are missing.)

Migration 1 also created the views `op_dtype_status`, `aten_op_status` and
`run_status_counts`; every view now lives in db/views.py and is recreated
after each migration, so views are defined in one place.
"""


def migrate(db):
    db["runs"].create({
        "id": str,              # stable id: unique across machines, the merge key
        "run_key": str,         # what makes two invocations "the same run" (resume)
        "state": str,           # running | complete | interrupted
        "started": str, "finished": str,
        "mpsprobe_version": str,
        "torch_version": str, "torch_git": str, "python": str,
        "os_name": str, "os_version": str, "os_build": str, "kernel": str,
        "machine": str, "chip": str, "gpu_cores": int, "memory_bytes": int,
        "virtualized": int,
        "device": str,          # the target as named: mps, cuda, cpu, or a test backend
        "device_name": str,     # what the hardware calls itself
        "backend": str,         # a non-standard target backend (tests), else null
        "hostname": str, "pid": int,
        "options": str,         # JSON of the options that shaped the run
        "cases_total": int, "wall_s": float,
        "counts": str,          # JSON {status: n}
    }, pk="id")
    db["runs"].create_index(["run_key"])
    db["ops"].create({
        "id": str,              # OpInfo name, with ".variant" when it has one
        "name": str, "variant": str, "aten_name": str, "source": str,
    }, pk="id")
    db["cases"].create({
        "id": str,              # "op_id|dtype|sample_index"
        "op_id": str, "dtype": str, "sample_index": int,
        "sample": str,          # readable summary of the sample's shapes, dtypes, args
    }, pk="id", foreign_keys=[("op_id", "ops", "id")])
    db["results"].create({
        "run_id": str, "case_id": str,
        "op_id": str, "dtype": str,        # denormalised from cases for fast roll-ups
        "status": str,
        "check_kind": str,      # values | shape | none: how far the output could be checked
        "reason": str,          # one line on why the status is what it is
        "error_type": str, "message": str,
        "aten_op": str,         # the aten op an unsupported/error message names
        "fallback_ops": str,    # JSON list of aten ops that fell back to the CPU
        "aten_ops": str,        # JSON list of aten ops the case dispatched
        "max_abs_err": float, "max_rel_err": float,
        "ref_abs_err": float,   # the CPU's own error in this dtype, against float64
        "tol_atol": float, "tol_rtol": float, "tol_factor": float,
        "nonfinite_mismatch": int,
        "signal": int,
        "ref_ms": float, "target_ms": float, "speedup": float,
        "duration_s": float,
    }, pk=("run_id", "case_id"), foreign_keys=[
        ("run_id", "runs", "id"), ("case_id", "cases", "id"), ("op_id", "ops", "id"),
    ])
    db["results"].create_index(["op_id", "dtype"])
    db["results"].create_index(["status"])
    # A pair is marked here once all its samples are recorded, so a resumed
    # run skips it without regenerating samples.
    db["pairs_done"].create({
        "run_id": str, "op_id": str, "dtype": str, "n_cases": int,
    }, pk=("run_id", "op_id", "dtype"), foreign_keys=[("run_id", "runs", "id")])
