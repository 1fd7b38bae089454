"""Schema 8 -> 9: `run_events`, what happened to a run's device or workers outside any case.

A device check that failed after a killed hang (it crashed, hung or raised), a
worker lost between cases: recorded once here, never as a case of an op that
did nothing wrong. `before_op`/`before_dtype` name the pair about to run, for
orientation only. Results recorded after a failed check carry the note
`after_device_failure`.
"""


def migrate(db):
    if "run_events" in db.table_names():
        return
    db["run_events"].create({
        "id": str,              # a UUID: merges key on it
        "run_id": str,
        "at": str,              # ISO time
        "kind": str,            # device_check_failed | worker_lost
        "how": str,             # signal | exit | hang | raised
        "detail": str,
        "signal": int,
        "stderr_tail": str,
        "before_op": str,
        "before_dtype": str,
    }, pk="id", foreign_keys=[("run_id", "runs", "id")])
    db.execute("CREATE INDEX run_events_run ON run_events (run_id)")
