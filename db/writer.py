"""The one writer: runs, ops, cases and results, committed as they arrive."""
import datetime
import json
import uuid

from mpsprobe.vocabulary import STATUSES

RESULT_FIELDS = (
    "status", "check_kind", "reason", "error_type", "message", "aten_op",
    "max_abs_err", "max_rel_err", "ref_abs_err", "tol_atol", "tol_rtol", "tol_factor",
    "nonfinite_mismatch", "signal", "ref_ms", "target_ms", "speedup", "duration_s",
    "reason_kind", "min_macos", "stderr_tail",
)
JSON_RESULT_FIELDS = ("notes",)
JSON_RUN_FIELDS = ("device_env",)


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def case_id(op, dtype, index):
    return f"{op}|{dtype}|{index}"


def find_resumable(db, run_key):
    """The newest run with this key, as a dict, or None."""
    rows = list(db.query(
        "SELECT * FROM runs WHERE run_key = ? ORDER BY started DESC LIMIT 1", [run_key]))
    return rows[0] if rows else None


def latest_unfinished(db):
    rows = list(db.query(
        "SELECT * FROM runs WHERE state != 'complete' ORDER BY started DESC LIMIT 1"))
    return rows[0] if rows else None


class RunWriter:
    """Records one run. Every result is committed on arrival, so a killed run loses nothing."""

    def __init__(self, db, run):
        self.db = db
        self.run = run
        self.run_id = run["id"]
        self._known_ops = {r["id"] for r in db.query("SELECT id FROM ops")}

    @classmethod
    def start(cls, db, run_key, env, options, version, pid):
        env = {k: json.dumps(v, sort_keys=True) if k in JSON_RUN_FIELDS and v is not None else v
               for k, v in env.items()}
        run = dict(env, id=uuid.uuid4().hex, run_key=run_key, state="running",
                   started=now(), finished=None, mpsprobe_version=version,
                   options=json.dumps(options, sort_keys=True), pid=pid)
        with db.conn:
            db["runs"].insert(run, alter=False)
        return cls(db, run)

    @classmethod
    def resume(cls, db, run, pid):
        with db.conn:
            db["runs"].update(run["id"], {"state": "running", "pid": pid, "finished": None})
        return cls(db, run)

    def done(self):
        """What a resumed run must not repeat: the finished (op, dtype) pairs, and
        {(op, dtype): [sample indices recorded]} for the rest."""
        pairs = {(r["op_id"], r["dtype"]) for r in self.db.query(
            "SELECT op_id, dtype FROM pairs_done WHERE run_id = ?", [self.run_id])}
        cases = {}
        for r in self.db.query(
                "SELECT r.op_id, r.dtype, c.sample_index FROM results r "
                "JOIN cases c ON c.id = r.case_id WHERE r.run_id = ?", [self.run_id]):
            cases.setdefault((r["op_id"], r["dtype"]), []).append(r["sample_index"])
        return pairs, cases

    def record(self, pair, index, sample, result):
        op = pair["op"]
        cid = case_id(op, pair["dtype"], index)
        row = {k: result.get(k) for k in RESULT_FIELDS}
        row.update({k: json.dumps(result[k], sort_keys=True) if result.get(k) is not None else None
                    for k in JSON_RESULT_FIELDS})
        row.update(run_id=self.run_id, case_id=cid, op_id=op, dtype=pair["dtype"],
                   fallback_ops=json.dumps(result.get("fallback_ops") or []),
                   aten_ops=json.dumps(result["aten_ops"]) if result.get("aten_ops") is not None else None)
        with self.db.conn:
            if op not in self._known_ops:
                self.db.execute(
                    "INSERT OR IGNORE INTO ops (id, name, variant, aten_name, source) VALUES (?, ?, ?, ?, 'opinfo')",
                    [op, pair.get("name", op), pair.get("variant", ""), pair.get("aten_name")])
                self._known_ops.add(op)
            self.db.execute(
                "INSERT OR IGNORE INTO cases (id, op_id, dtype, sample_index, sample) VALUES (?, ?, ?, ?, ?)",
                [cid, op, pair["dtype"], index, sample])
            columns = list(row)
            self.db.execute(
                f"INSERT OR IGNORE INTO results ({', '.join(columns)}) "
                f"VALUES ({', '.join('?' for _ in columns)})", [row[c] for c in columns])

    def pair_done(self, pair, n_cases):
        with self.db.conn:
            self.db.execute("INSERT OR IGNORE INTO pairs_done VALUES (?, ?, ?, ?)",
                            [self.run_id, pair["op"], pair["dtype"], n_cases])

    def counts(self):
        row = next(self.db.query(
            f"SELECT count(*) AS n, {', '.join(f'sum(status = {s!r}) AS {s}' for s in STATUSES)} "
            "FROM results WHERE run_id = ?", [self.run_id]))
        return row.pop("n"), {s: row[s] or 0 for s in STATUSES}

    def finish(self, state, wall_s):
        total, counts = self.counts()
        with self.db.conn:
            self.db["runs"].update(self.run_id, {
                "state": state, "finished": now(), "cases_total": total,
                "counts": json.dumps(counts),
                "wall_s": (self.run.get("wall_s") or 0.0) + wall_s})
        return total, counts

    def close(self):
        """Fold the write-ahead log into the database file and close it, so the
        file alone is the whole database (to copy, publish or serve immutable)."""
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.db.conn.close()
