"""Bundles: one run's rows, its provenance and a content hash, in one JSON file.

A contributor writes a bundle (`mpsprobe submit`) and attaches it to a pull
request or uploads it; the fleet's jobs write one per shard. `verify` checks it
before anything is merged:

- the file: the format, a schema this mpsprobe reads, columns it knows;
- the content hash (SHA-256 over the run and its rows, canonical JSON): any
  edit made after `submit` wrote the file, without recomputing it;
- internal consistency, which an edit that did recompute the hash must also
  get right: one run, complete, its cases_total and per-status counts equal to
  its rows, every planned (op, dtype) pair holding exactly the cases it
  recorded, no row twice, every status, reason kind and pass in the
  vocabulary (mpsprobe.vocabulary) and each reason kind with a status it can
  explain, timings finite, non-negative and within the run's wall time, and
  the provenance complete and coherent (a paravirtual GPU is a virtual
  machine; MPS runs on macOS);
- for review, not refusal: results that contradict what is known elsewhere,
  a working float64 or complex128 case on MPS (which has neither), or a
  status that disagrees with both PyTorch's declaration for that release and
  every other machine that measured the same case.

What this cannot catch is a forgery consistent in every figure: that is what
the review flags, the provenance and the pull request's review are for.
"""
import gzip
import hashlib
import json
import math
import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field

from mpsprobe.errors import MpsprobeError
from mpsprobe.versions import version_key
from mpsprobe.vocabulary import FORWARD, PASS, PASS_COLUMN, PASSES, REASON_KIND, STATUSES, WORKING
from . import schema

FORMAT = "mpsprobe-bundle"
VERSION = 1
TABLES = ("ops", "cases", "results", "pairs_done")
# The run facts a bundle must carry to say where it was measured.
REQUIRED_FACTS = ("id", "state", "started", "finished", "mpsprobe_version", "torch_version",
                  "python", "os_name", "os_version", "machine", "chip", "device", "device_name",
                  "command")
# A Mac's facts besides: which chip variant, which macOS build, bare metal or not.
REQUIRED_MAC_FACTS = ("os_build", "gpu_cores", "memory_bytes", "virtualized")
# MPS has no float64 and no complex128: a case working in them is a mistake somewhere.
MPS_MISSING_DTYPES = ("float64", "complex128")
WALL_SLACK_S = 5.0   # a case's clock and the run's are read at different moments


class BundleError(MpsprobeError):
    """A bundle that cannot be written or read: one line for the user."""


@dataclass
class Verdict:
    """What `verify` found: `problems` refuse the bundle, `flags` ask for review."""
    path: str
    run: dict = field(default_factory=dict)
    rows: int = 0
    problems: list = field(default_factory=list)
    flags: list = field(default_factory=list)

    @property
    def ok(self):
        return not self.problems

    def to_json(self):
        return {"path": self.path, "ok": self.ok, "run_id": self.run.get("id"), "results": self.rows,
                "problems": self.problems, "flags": self.flags}


# ---------------------------------------------------------------- writing

def content_hash(body):
    """sha256 over the canonical JSON of everything but the hash itself."""
    canonical = json.dumps({k: v for k, v in body.items() if k != "hash"}, sort_keys=True,
                           separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def _table(conn, sql, params):
    cursor = conn.execute(sql, params)
    return {"columns": [d[0] for d in cursor.description], "rows": [list(r) for r in cursor]}


def build(db_path, run_id=None):
    """The bundle of one run of `db_path` as a dict (the run picker's run by default)."""
    from .query.runs import pick_run
    if not os.path.exists(db_path):
        raise BundleError(f"{db_path} does not exist: record a run first with `mpsprobe run --db {db_path}`")
    db = schema.open_db(db_path, readonly=True)
    try:
        conn = db.conn
        conn.execute("BEGIN")   # one snapshot, even while a run writes
        run = pick_run(conn, run_id=run_id)
        if run.get("state") != "complete":
            raise BundleError(f"run {run['id']} is {run.get('state')}: finish it (re-run the same "
                              "command) before submitting it")
        run = {k: v for k, v in run.items() if k != "has_results"}
        where = [run["id"]]
        rows = {
            "results": _table(conn, "SELECT * FROM results WHERE run_id = ? ORDER BY case_id", where),
            "cases": _table(conn, "SELECT * FROM cases WHERE id IN (SELECT case_id FROM results "
                                  "WHERE run_id = ?) ORDER BY id", where),
            "ops": _table(conn, "SELECT * FROM ops WHERE id IN (SELECT op_id FROM results "
                                "WHERE run_id = ?) ORDER BY id", where),
            "pairs_done": _table(conn, "SELECT * FROM pairs_done WHERE run_id = ? "
                                       "ORDER BY op_id, dtype", where),
        }
        conn.execute("COMMIT")
    finally:
        schema.close(db)
    body = {"format": FORMAT, "version": VERSION, "schema_version": schema.SCHEMA_VERSION,
            "run": run, "rows": rows}
    body["hash"] = content_hash(body)
    return body


def write(db_path, out_path, run_id=None):
    """Write the bundle of a run of `db_path` to `out_path` (gzip when it ends in .gz;
    "{run}" in it stands for the run id's first 12 characters); returns the bundle.
    The file appears whole or not at all."""
    body = build(db_path, run_id)
    out_path = str(out_path).replace("{run}", body["run"]["id"][:12])
    folder = os.path.dirname(os.path.abspath(out_path))
    if not os.path.isdir(folder):
        raise BundleError(f"cannot write {out_path}: no folder {folder}")
    data = json.dumps(body, sort_keys=True, indent=1).encode()
    if out_path.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    handle, partial = tempfile.mkstemp(dir=folder, prefix=".bundle-")
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(data)
        os.replace(partial, out_path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return body


# ---------------------------------------------------------------- reading

def is_bundle(path):
    """True when `path` looks like a bundle (JSON or gzip), not an SQLite file."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return False
    return head[:2] == b"\x1f\x8b" or head.lstrip()[:1] == b"{"


def read(path):
    """A bundle's dict; BundleError when the file is not one."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise BundleError(f"cannot read {path}: {e.strerror}") from None
    try:
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        body = json.loads(data)
    except (OSError, EOFError, ValueError) as e:
        raise BundleError(f"{path} is not an mpsprobe bundle (not readable JSON: {e})") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise BundleError(f"{path} is not an mpsprobe bundle (no \"format\": \"{FORMAT}\")")
    if body.get("version") != VERSION:
        raise BundleError(f"{path} is a bundle of format version {body.get('version')}; "
                          f"this mpsprobe reads version {VERSION}")
    return body


def _records(body, table):
    part = (body.get("rows") or {}).get(table)
    if not isinstance(part, dict) or not isinstance(part.get("columns"), list) \
            or not isinstance(part.get("rows"), list):
        raise BundleError(f"the bundle's {table} rows are missing or malformed")
    columns = part["columns"]
    found = []
    for values in part["rows"]:
        if not isinstance(values, list) or len(values) != len(columns):
            raise BundleError(f"a row of the bundle's {table} does not match its columns")
        found.append(dict(zip(columns, values)))
    return columns, found


# ---------------------------------------------------------------- verifying

def verify(path, against=None):
    """Check the bundle at `path`; returns a Verdict. `against`: a database whose
    other runs and declarations the results are compared with (review flags)."""
    if not os.path.isfile(path):
        raise BundleError(f"{path}: no such bundle")
    verdict = Verdict(str(path))
    try:
        body = read(path)
        verdict.run = body.get("run") if isinstance(body.get("run"), dict) else {}
        tables = {t: _records(body, t) for t in TABLES}
    except BundleError as e:
        verdict.problems.append(str(e))
        return verdict
    _check_schema(body, tables, verdict)
    if body.get("hash") != content_hash(body):
        verdict.problems.append("the content hash does not match: the run or its rows were changed "
                                "after `mpsprobe submit` wrote the bundle")
    records = {t: rows for t, (_, rows) in tables.items()}
    verdict.rows = len(records["results"])
    _check_provenance(verdict.run, verdict)
    _check_rows(verdict.run, records, verdict)
    _check_timings(verdict.run, records["results"], verdict)
    if not verdict.problems:
        verdict.flags = review_flags(verdict.run, records["results"], against)
    return verdict


def _check_schema(body, tables, verdict):
    version = body.get("schema_version")
    if not isinstance(version, int) or version > schema.SCHEMA_VERSION:
        verdict.problems.append(f"made with schema version {version}; this mpsprobe reads up to "
                                f"{schema.SCHEMA_VERSION}: upgrade mpsprobe")
        return
    known = _known_columns()
    for table, (columns, _) in tables.items():
        unknown = sorted(set(columns) - known[table])
        if unknown:
            verdict.problems.append(f"{table} has columns this schema does not: {', '.join(unknown)}")
    unknown = sorted(set(verdict.run) - known["runs"])
    if unknown:
        verdict.problems.append(f"the run has fields this schema does not: {', '.join(unknown)}")


def _known_columns():
    expected = schema.expected_columns(schema.SCHEMA_VERSION)
    return {t: set(expected[t]) for t in ("runs", *TABLES)}


def _check_provenance(run, verdict):
    missing = [k for k in REQUIRED_FACTS if run.get(k) in (None, "")]
    if run.get("os_name") == "macOS":
        missing += [k for k in REQUIRED_MAC_FACTS if run.get(k) in (None, "")]
    if missing:
        verdict.problems.append(f"the provenance is incomplete: no {', '.join(missing)}")
    if run.get("state") not in (None, "complete"):
        verdict.problems.append(f"the run is {run['state']}, not complete")
    if run.get("torch_version") and run.get("torch_version_key") not in (None, version_key(run["torch_version"])):
        verdict.problems.append("the provenance contradicts itself: torch_version_key is not "
                                f"torch {run['torch_version']}'s")
    if "paravirtual" in str(run.get("device_name") or "").lower() and run.get("virtualized") != 1:
        verdict.problems.append("the provenance contradicts itself: a paravirtual GPU "
                                f"({run['device_name']}) on a machine recorded as bare metal")
    if str(run.get("device") or "").split(":")[0] == "mps" and run.get("os_name") not in (None, "macOS"):
        verdict.problems.append(f"the provenance contradicts itself: device mps on {run['os_name']}")


def _check_rows(run, records, verdict):
    problems = verdict.problems
    results, cases = records["results"], records["cases"]
    run_id = run.get("id")
    keys = Counter(r.get("case_id") for r in results)
    twice = sorted(k for k, n in keys.items() if n > 1)
    if twice:
        problems.append(f"{len(twice)} result(s) appear more than once (first: {twice[0]})")
    for table, key in (("cases", "id"), ("ops", "id"), ("pairs_done", ("op_id", "dtype"))):
        seen = Counter(tuple(r.get(k) for k in key) if isinstance(key, tuple) else r.get(key)
                       for r in records[table])
        if any(n > 1 for n in seen.values()):
            problems.append(f"a row of {table} appears more than once")
    others = {r.get("run_id") for r in results + records["pairs_done"]} - {run_id}
    if others:
        problems.append(f"rows of another run ({sorted(map(str, others))[0]}) are in the bundle")
    by_id = {c.get("id"): c for c in cases}
    ops = {o.get("id") for o in records["ops"]}
    for r in results:
        case = by_id.get(r.get("case_id"))
        if case is None or (case.get("op_id"), case.get("dtype")) != (r.get("op_id"), r.get("dtype")) \
                or (case.get(PASS_COLUMN) or FORWARD) != (r.get(PASS_COLUMN) or FORWARD):
            problems.append(f"result {r.get('case_id')} does not match a case of the bundle")
            break
        if r.get("op_id") not in ops:
            problems.append(f"result {r.get('case_id')} names an op the bundle lacks")
            break
    _check_vocabulary(results, problems)
    # Planned against recorded: each pair done holds the cases it said it recorded.
    per_pair = Counter((r.get("op_id"), r.get("dtype")) for r in results)
    planned = {(p.get("op_id"), p.get("dtype")): p.get("n_cases") for p in records["pairs_done"]}
    wrong = sorted(f"{op} {dtype}: {planned[(op, dtype)]} planned, {per_pair.get((op, dtype), 0)} recorded"
                   for op, dtype in planned if planned[(op, dtype)] != per_pair.get((op, dtype), 0))
    if wrong:
        problems.append(f"cases recorded differ from the pairs' counts ({len(wrong)} pair(s); {wrong[0]})")
    unplanned = sorted(f"{op} {dtype}" for op, dtype in per_pair if (op, dtype) not in planned)
    if unplanned:
        problems.append(f"results of pairs the run never finished ({unplanned[0]})")
    if run.get("cases_total") is not None and run["cases_total"] != len(results):
        problems.append(f"the run says {run['cases_total']} cases, the bundle holds {len(results)}")
    try:
        counts = json.loads(run.get("counts") or "{}")
    except (TypeError, ValueError):
        counts = None
    actual = Counter(r.get("status") for r in results)
    if counts is None or {k: v for k, v in (counts or {}).items() if v} != dict(actual):
        problems.append("the run's per-status counts differ from its results "
                        f"(run: {json.dumps(counts, sort_keys=True)}; results: "
                        f"{json.dumps(dict(sorted(actual.items())))})")


def _check_vocabulary(results, problems):
    for r in results:
        status, kind, pass_ = r.get("status"), r.get("reason_kind"), r.get(PASS_COLUMN) or FORWARD
        if status not in STATUSES:
            problems.append(f"result {r.get('case_id')}: status {status!r} is not in the vocabulary")
            return
        if pass_ not in PASSES:
            problems.append(f"result {r.get('case_id')}: pass {pass_!r} is not in the vocabulary")
            return
        if kind is not None:
            if kind not in REASON_KIND:
                problems.append(f"result {r.get('case_id')}: reason kind {kind!r} is not in the vocabulary")
                return
            if status not in REASON_KIND[kind].statuses:
                problems.append(f"result {r.get('case_id')}: status {status} with reason kind {kind}, "
                                f"which explains only {'/'.join(REASON_KIND[kind].statuses)}")
                return


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_timings(run, results, verdict):
    wall = run.get("wall_s")
    if wall is not None and (not _number(wall) or wall < 0):
        verdict.problems.append(f"the run's wall time {wall!r} is not a duration")
        return
    if run.get("started") and run.get("finished") and run["finished"] < run["started"]:
        verdict.problems.append("the run finished before it started")
    limit = (wall or 0) + WALL_SLACK_S if wall is not None else None
    for r in results:
        for key, scale in (("duration_s", 1.0), ("ref_ms", 1e-3), ("target_ms", 1e-3), ("eager_ms", 1e-3),
                           ("compile_ms", 1e-3)):
            value = r.get(key)
            if value is None:
                continue
            if not _number(value) or value < 0:
                verdict.problems.append(f"result {r.get('case_id')}: {key} {value!r} is not a duration")
                return
            if limit is not None and value * scale > limit:
                verdict.problems.append(f"result {r.get('case_id')}: {key} {value} is longer than the "
                                        f"whole run ({wall} s)")
                return


# ---------------------------------------------------------------- review

def review_flags(run, results, against=None):
    """Results to review before they are believed: a working case in a dtype MPS lacks,
    and (with `against`, a database) a status at odds with both the declaration for the
    run's release and every other machine that measured the case."""
    from .query.declared import declared_device
    flags = []
    device = declared_device(run.get("device"))
    if device == "mps":
        for r in results:
            if r.get("dtype") in MPS_MISSING_DTYPES and r.get("status") == PASS:
                flags.append(f"{r['case_id']}: {r['status']} in {r['dtype']} on MPS, which has no "
                             f"{r['dtype']}")
    if against and device:
        flags += _against(run, results, against, device)
    return flags


def _works(status):
    return status in WORKING


def _against(run, results, against, device):
    from .query.declared import version_for
    from .query import rows
    db = schema.open_db(against, readonly=True)
    conn = db.conn
    try:
        release = version_for(conn, device, run.get("torch_version"))
        declared = {}
        if release:
            for r in rows(conn, "SELECT op_id, dtype, status FROM declared WHERE torch_version = ? "
                                "AND device = ?", [release, device]):
                declared[(r["op_id"], r["dtype"])] = r["status"]
        others = {}
        # Other runs on the same kind of device, a test backend's only beside a test backend's.
        kind = str(run.get("device") or "").split(":")[0]
        for r in rows(
                conn, f'SELECT op_id, dtype, "{PASS_COLUMN}" AS p, status FROM results JOIN runs ON runs.id = results.run_id '
                "WHERE runs.id != ? AND (runs.device = ? OR runs.device LIKE ?) AND (runs.backend IS NULL) = ?",
                [run.get("id"), kind, kind + ":%", not run.get("backend")]):
            others.setdefault((r["op_id"], r["dtype"], r["p"]), set()).add(_works(r["status"]))
    finally:
        schema.close(db)
    worst = {}
    for r in results:   # per (op, dtype, pass): works only if every case does
        key = (r.get("op_id"), r.get("dtype"), r.get(PASS_COLUMN) or FORWARD)
        worst[key] = worst.get(key, True) and _works(r.get("status"))
    flags = []
    for (op, dtype, pass_), works in sorted(worst.items()):
        said = declared.get((op, dtype)) if pass_ == FORWARD else None
        elsewhere = others.get((op, dtype, pass_), set())
        if said is None and not elsewhere:
            continue   # nothing to contradict
        if (said is None or _works(said) != works) and elsewhere == {not works}:
            what = "works" if works else "fails"
            base = f"declared {said} for torch {release}" if said else "nothing declared"
            flags.append(f"{op} {dtype} {pass_}: {what} here; {base}, and "
                         f"{'fails' if works else 'works'} on every other machine measured")
    return flags


# ---------------------------------------------------------------- loading

def load(body, db_path):
    """Write a bundle's run and rows into a new database at `db_path` (for merge)."""
    db = schema.open_db(db_path)
    try:
        with schema.write_transaction(db.conn):
            known = set(db["runs"].columns_dict)
            run = {k: v for k, v in body["run"].items() if k in known}
            db.execute(f"INSERT INTO runs ({', '.join(run)}) VALUES ({', '.join('?' for _ in run)})",
                       list(run.values()))
            for table in ("ops", "cases", "results", "pairs_done"):
                columns, records = _records(body, table)
                quoted = ", ".join(f'"{c}"' for c in columns)
                db.conn.executemany(f'INSERT OR IGNORE INTO "{table}" ({quoted}) VALUES '
                                    f"({', '.join('?' for _ in columns)})",
                                    [[r[c] for c in columns] for r in records])
    finally:
        schema.close(db)
    return db_path

