"""The one writer: runs, ops, cases and results, a pair's results committed
together; what PyTorch declares, one reading at a time; and speed ladders and
model batch sweeps, one op or sweep at a time.

Every transaction is opened and closed here: claiming a run (choosing which
run to start or resume and marking it running, under SQLite's write lock),
recording a pair's cases, finishing a run, replacing a declared reading,
recording a ladder or a batch sweep.
"""
import dataclasses
import datetime
import json
import time
import uuid

from mpsprobe.errors import MpsprobeError
from mpsprobe.versions import version_key
from mpsprobe.vocabulary import FORWARD, PASS_COLUMN, STATUSES
from . import files
from .migrations import m006_speed, m011_speed_spread
from .migrations.m006_speed import MODEL_CROSSOVERS, MODEL_SPEED

SPEED = {**m006_speed.SPEED, **m011_speed_spread.SPEED_SPREAD}
SPEED_CROSSOVERS = {**m006_speed.SPEED_CROSSOVERS, **m011_speed_spread.CROSSOVER_SPREAD}
from .schema import write_transaction
from .views import status_counts

RESULT_FIELDS = (
    "status", "check_kind", "reason", "reason_kind", "error_type", "message", "aten_op",
    "max_abs_err", "max_rel_err", "ref_abs_err", "tol_atol", "tol_rtol", "tol_factor",
    "nonfinite_mismatch", "signal", "ref_ms", "target_ms", "speedup", "duration_s",
    "min_macos", "precision_mode", "stderr_tail", "layout",
    "compile_ms", "eager_ms", "compiled_speedup", "compiled_speedup_lo", "compiled_speedup_hi",
)
JSON_RESULT_FIELDS = ("notes", "aten_variants", "aten_dtypes")
# Run facts a describe() or the options may carry beyond schema 1's.
JSON_RUN_FIELDS = ("precision_modes", "device_env")


class ClaimError(MpsprobeError):
    """The run asked for cannot be started or resumed: one line for the user."""


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def case_id(op, dtype, index, pass_=FORWARD, layout=None):
    """"op|dtype|index"; a pass other than forward is part of the id: "op|dtype|index|backward";
    a layout variant's ends in "@layout"."""
    base = f"{op}|{dtype}|{index}"
    base = base if pass_ == FORWARD else f"{base}|{pass_}"
    return f"{base}@{layout}" if layout else base


def _rows(db, sql, params=()):
    return list(db.query(sql, params))


def _insert(db, table, row):
    columns = list(row)
    db.execute(f"INSERT INTO {table} ({', '.join(columns)}) "
               f"VALUES ({', '.join('?' for _ in columns)})", [row[c] for c in columns])


def complete_pairs(db, run_key):
    """The (op, dtype) pairs finished by the newest run `run_key` names (the run RunWriter.claim
    would take), when that run is complete; None otherwise."""
    newest = list(db.query("SELECT id, state FROM runs WHERE run_key = ? ORDER BY started DESC LIMIT 1",
                           [run_key]))
    if not newest or newest[0]["state"] != "complete":
        return None
    return {(r["op_id"], r["dtype"]) for r in db.query(
        "SELECT op_id, dtype FROM pairs_done WHERE run_id = ?", [newest[0]["id"]])}


class RunWriter:
    """Records one run. A pair's results are committed together, with the pair's
    end (or sooner: after HOLD_ROWS results or HOLD_S seconds), so a killed run
    loses at most the pairs in flight, which a resumed run repeats, never twice."""
    HOLD_ROWS = 500
    HOLD_S = 2.0

    def __init__(self, db, run):
        self.db = db
        self.run = run
        self.run_id = run["id"]
        self._known_ops = {r["id"] for r in db.query("SELECT id FROM ops")}
        self._run_columns = set(db["runs"].columns_dict)
        self._held = []          # results recorded, not yet committed
        self._held_since = None

    @classmethod
    def claim(cls, db, run_key, env, options, version, pid, resume=False, fresh=False,
              busy=lambda run: None):
        """Start the run `run_key` names, or resume it; returns (writer, resumed).

        Choosing the run and marking it running happen in one transaction under
        SQLite's write lock, so two processes started at once cannot both start
        (or both resume) it. `resume`: continue the newest unfinished run (any
        key); `fresh`: always start a new one. `busy(run)` returns why an
        unfinished run cannot be taken over (another live process records it),
        or None. Raises ClaimError.
        """
        with write_transaction(db.conn):
            if resume:
                found = _rows(db, "SELECT * FROM runs WHERE state != 'complete' "
                                  "ORDER BY started DESC LIMIT 1")
                if not found:
                    raise ClaimError("the database has no unfinished run to resume")
            else:
                found = [] if fresh else _rows(
                    db, "SELECT * FROM runs WHERE run_key = ? ORDER BY started DESC LIMIT 1",
                    [run_key])
            previous = found[0] if found else None
            if previous is not None and previous["run_key"] != run_key:
                raise ClaimError("the unfinished run was made with other options or another "
                                 "torch/device; re-run with the same options, or use --fresh")
            why = busy(previous) if previous is not None else None
            if why:
                raise ClaimError(why)
            if previous is not None:
                db.execute("UPDATE runs SET state = 'running', pid = ?, finished = NULL "
                           "WHERE id = ?", [pid, previous["id"]])
                return cls(db, previous), True
            run = dict(env, id=uuid.uuid4().hex, run_key=run_key, state="running",
                       started=now(), finished=None, mpsprobe_version=version,
                       options=json.dumps(options, sort_keys=True), pid=pid)
            for field in JSON_RUN_FIELDS:
                if field in run and not isinstance(run[field], (str, type(None))):
                    run[field] = json.dumps(run[field], sort_keys=True)
            columns = set(db["runs"].columns_dict)
            _insert(db, "runs", {k: v for k, v in run.items() if k in columns})
        return cls(db, run), False

    @classmethod
    def start(cls, db, run_key, env, options, version, pid):
        """A new run, never resuming one."""
        return cls.claim(db, run_key, env, options, version, pid, fresh=True)[0]

    def done(self):
        """What a resumed run must not repeat: the finished (op, dtype) pairs, and
        {(op, dtype): [case keys recorded]} for the rest: the sample index of a
        forward case, "index|pass" of another pass (mpsprobe.engine.plan.case_key)."""
        pairs = {(r["op_id"], r["dtype"]) for r in self.db.query(
            "SELECT op_id, dtype FROM pairs_done WHERE run_id = ?", [self.run_id])}
        cases = {}
        for r in self.db.query(
                f'SELECT r.op_id, r.dtype, c.sample_index, r."{PASS_COLUMN}" AS pass_, r.layout '
                "FROM results r JOIN cases c ON c.id = r.case_id WHERE r.run_id = ?", [self.run_id]):
            index, pass_ = r["sample_index"], r["pass_"] or FORWARD
            key = index if pass_ == FORWARD else f"{index}|{pass_}"
            cases.setdefault((r["op_id"], r["dtype"]), []).append(
                f"{key}@{r['layout']}" if r["layout"] else key)
        return pairs, cases

    def record(self, pair, index, sample, result):
        """One case's result. `pair` names the op ({"op", "dtype"}, and for a new
        op "name", "variant", "aten_name", "source"); result["pass"] its pass."""
        op, dtype = pair["op"], pair["dtype"]
        pass_ = result.get(PASS_COLUMN) or FORWARD
        layout = result.get("layout")
        cid = case_id(op, dtype, index, pass_, layout)
        row = {k: result.get(k) for k in RESULT_FIELDS}
        row.update({k: json.dumps(result[k], sort_keys=True) if result.get(k) is not None else None
                    for k in JSON_RESULT_FIELDS})
        row.update(run_id=self.run_id, case_id=cid, op_id=op, dtype=dtype,
                   fallback_ops=json.dumps(result.get("fallback_ops") or []),
                   aten_ops=json.dumps(result["aten_ops"]) if result.get("aten_ops") is not None else None)
        row[PASS_COLUMN] = pass_
        op_row = [op, pair.get("name", op), pair.get("variant", ""), pair.get("aten_name"),
                  pair.get("source", "opinfo")]
        self._held.append((op_row, [cid, op, dtype, index, sample, pass_, layout], row))
        if self._held_since is None:
            self._held_since = time.monotonic()
        if len(self._held) >= self.HOLD_ROWS or time.monotonic() - self._held_since >= self.HOLD_S:
            self.commit()

    def _write_held(self):
        for op_row, case_row, row in self._held:
            if op_row[0] not in self._known_ops:
                self.db.execute(
                    "INSERT OR IGNORE INTO ops (id, name, variant, aten_name, source) VALUES (?, ?, ?, ?, ?)",
                    op_row)
            self.db.execute(
                f'INSERT OR IGNORE INTO cases (id, op_id, dtype, sample_index, sample, "{PASS_COLUMN}", layout) '
                "VALUES (?, ?, ?, ?, ?, ?, ?)", case_row)
            columns = [f'"{c}"' for c in row]
            self.db.execute(
                f"INSERT OR IGNORE INTO results ({', '.join(columns)}) "
                f"VALUES ({', '.join('?' for _ in columns)})", list(row.values()))

    def _written(self):
        """After a commit: what was held is in the database."""
        self._known_ops.update(op_row[0] for op_row, _, _ in self._held)
        self._held, self._held_since = [], None

    def commit(self):
        """Commit the results held so far."""
        if not self._held:
            return
        with write_transaction(self.db.conn):
            self._write_held()
        self._written()

    def pair_done(self, pair, n_cases):
        """The pair's end, committed with its results."""
        with write_transaction(self.db.conn):
            self._write_held()
            self.db.execute("INSERT OR IGNORE INTO pairs_done VALUES (?, ?, ?, ?)",
                            [self.run_id, pair["op"], pair["dtype"], n_cases])
        self._written()

    def event(self, event):
        """Something that happened outside any case (pool.Pool's on_event): committed at once."""
        row = {k: event.get(k) for k in ("kind", "how", "detail", "signal", "stderr_tail",
                                          "before_op", "before_dtype")}
        with write_transaction(self.db.conn):
            self._write_held()
            self.db["run_events"].insert(dict(row, id=uuid.uuid4().hex, run_id=self.run_id, at=now()))
        self._written()

    def events(self):
        return list(self.db.query("SELECT * FROM run_events WHERE run_id = ? ORDER BY at", [self.run_id]))

    def counts(self):
        row = next(self.db.query(
            f"SELECT count(*) AS n, {status_counts()} FROM results WHERE run_id = ?", [self.run_id]))
        return row.pop("n"), {s: row[f"n_{s}"] or 0 for s in STATUSES}

    def finish(self, state, wall_s):
        self.commit()
        total, counts = self.counts()
        with write_transaction(self.db.conn):
            self.db["runs"].update(self.run_id, {
                "state": state, "finished": now(), "cases_total": total,
                "counts": json.dumps(counts),
                "wall_s": (self.run.get("wall_s") or 0.0) + wall_s})
        return total, counts

    def close(self):
        """Fold the write-ahead log into the database file, leave WAL mode and
        close it, so the file alone is the whole database (to copy, publish,
        serve immutable, or read from read-only media)."""
        files.leave(self.db.conn)


# -- what PyTorch declares ------------------------------------------------------
# A new reading of the same (version, device, source) replaces the old one in
# one transaction, so a table never holds half of two readings.

def _replace(db, table, where, rows):
    clause = " AND ".join(f"{k} = ?" for k in where)
    db.execute(f"DELETE FROM {table} WHERE {clause}", list(where.values()))
    if rows:
        db[table].insert_all(rows, batch_size=1000)


def record_declared(db, torch_version, device, source, origin, rows_by_table, options=None):
    """Replace one reading: rows for each declared table, and its `declared_sources` line."""
    with write_transaction(db.conn):
        n = 0
        for table, rows in rows_by_table.items():
            where = {"torch_version": torch_version}
            if table == "declared":
                where["device"] = device
            _replace(db, table, where, rows)
            n += len(rows)
        db["declared_sources"].upsert({
            "torch_version": torch_version, "torch_version_key": version_key(torch_version),
            "device": device, "source": source, "origin": origin, "recorded": now(), "ok": 1,
            "error": None, "n_rows": n, "options": json.dumps(options or {}, sort_keys=True),
        }, pk=("torch_version", "device", "source"))
    return n


def record_declared_failure(db, torch_version, device, source, origin, error):
    """Note a source that could not be read; rows of an earlier reading are kept."""
    with write_transaction(db.conn):
        db["declared_sources"].upsert({
            "torch_version": torch_version, "torch_version_key": version_key(torch_version),
            "device": device, "source": source, "origin": origin, "recorded": now(), "ok": 0,
            "error": error, "n_rows": 0,
        }, pk=("torch_version", "device", "source"))


# -- speed: ladders (`bench`) and model batch sweeps (`check --run --batch`) -----
# Rows arrive as dicts or dataclasses (mpsprobe.engine.ladder.LadderRow) with the
# columns of db/migrations/m006_speed.py and m011_speed_spread.py; unknown keys are dropped. Each call
# commits, so a killed bench keeps every op it finished; re-recording a key
# replaces the row (a resumed or repeated op in the same run).

def _insert_speed(db, table, columns, run_id, rows):
    rows = [dict({k: v for k, v in (dataclasses.asdict(r) if dataclasses.is_dataclass(r) else dict(r)).items()
                  if k in columns}, run_id=run_id) for r in rows]
    if not rows:
        return 0
    names = list(columns)
    sql = (f'INSERT OR REPLACE INTO "{table}" ({", ".join(names)}) '
           f'VALUES ({", ".join("?" for _ in names)})')
    db.conn.executemany(sql, [[r.get(c) for c in names] for r in rows])
    return len(rows)


def record_ladder(db, run_id, rows, crossovers=()):
    """One op's ladder rows and their crossovers (dicts with speed_crossovers' columns)."""
    with write_transaction(db.conn):
        return _insert_speed(db, "speed", SPEED, run_id, rows), \
            _insert_speed(db, "speed_crossovers", SPEED_CROSSOVERS, run_id, crossovers)


def record_model_sweep(db, run_id, rows, crossovers=()):
    """One model sweep's rows (model_speed's columns) and its crossover."""
    with write_transaction(db.conn):
        return _insert_speed(db, "model_speed", MODEL_SPEED, run_id, rows), \
            _insert_speed(db, "model_crossovers", MODEL_CROSSOVERS, run_id, crossovers)
