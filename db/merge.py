"""Combine mpsprobe databases: many machines, shards, torch versions -> one DB.

Every row is keyed by stable ids (a run's id is a UUID made where it ran;
cases are "op|dtype|index"), so merging is a union: a row already present is
left alone, and merging the same source twice adds nothing. A run present on
both sides takes the source's row only when the source's copy is further
along (it was resumed and finished since the last merge), and the results it
gained since are added.

Shard runs stay separate runs, each with its own machine facts; the
`run_sweeps`/`sweeps`/`sweep_op_dtype_status` views (db/views.py) group
the shards of one sweep, so a merged sharded sweep reads like one run.

A source may also be a bundle (`mpsprobe submit`, db/bundle.py): it is
verified first and refused, with the reason, unless it passes (or
`unverified=True` says to take it anyway); a verified bundle's run is merged
like a database's.

Sources are only read, each in one snapshot (one read transaction), so a
source a run is still writing gives a consistent picture; nothing is created
beside a source. A source with an older schema is migrated in a temporary
copy; a newer one is refused. The target is written in one transaction: a
failure leaves it exactly as it was (and a target this merge created is
removed again).
"""
import os
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, field

import sqlite_utils

from mpsprobe.errors import MpsprobeError
from . import files, schema
from .migrations.m002_history import backfill_version_keys

SKIPPED_TABLES = ("mpsprobe_meta",)
_STATE_RANK = {"running": 0, "interrupted": 1, "incomplete": 1, "complete": 2}


class MergeError(MpsprobeError):
    """A merge that cannot be done: one line for the user; nothing was written."""


@dataclass
class SourceReport:
    path: str
    schema_version: int
    runs_added: int = 0
    runs_updated: int = 0
    rows_added: dict = field(default_factory=dict)   # table -> rows new to the target

    @property
    def migrated(self):
        return self.schema_version < schema.SCHEMA_VERSION

    @property
    def results_added(self):
        return self.rows_added.get("results", 0)


def _check_sources(sources, target):
    versions = {}
    for path in sources:
        if not os.path.lexists(path):
            raise MergeError(f"{path}: no such database")
        if os.path.exists(target) and os.path.samefile(path, target):
            raise MergeError(f"{path} is the output database; name another with -o")
        try:
            version = schema.inspect(path, migratable=True)
        except schema.DatabaseError as e:
            raise MergeError(f"cannot merge: {e}") from None
        if version is None:
            raise MergeError(f"{path} is empty, not an mpsprobe database")
        versions[path] = version
    return versions


def _snapshot(path, version, scratch):
    """A read-only connection to `path` (or to a migrated copy if its schema is
    older) inside one read transaction: every table is read from one snapshot."""
    if version == schema.SCHEMA_VERSION:
        conn = files.connect_ro(path)
    else:
        copy = os.path.join(scratch, f"{len(os.listdir(scratch))}.db")
        with files.connect_ro(path) as src, sqlite3.connect(copy) as dst:
            src.backup(dst)   # consistent even while another process writes the source
        schema.close(schema.open_db(copy))
        conn = sqlite3.connect(files.uri(copy, mode="ro"), uri=True)
    conn.isolation_level = None
    conn.execute("BEGIN")
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the snapshot starts here
    return conn


def _keyed_tables(db):
    """Tables with an explicit primary key, parents before children (foreign keys)."""
    tables = {}
    names = db.table_names()
    # A full-text index's shadow tables are rebuilt from its table, never merged.
    shadows = tuple(f"{n}_" for n in names if db[n].virtual_table_using)
    for name in names:
        if name in SKIPPED_TABLES or name.startswith(("sqlite_", *shadows)):
            continue
        table = db[name]
        if table.pks == ["rowid"] or table.virtual_table_using:
            continue  # no stable key to merge on (or a search index rebuilt from its table)
        tables[name] = {fk.other_table for fk in table.foreign_keys if fk.other_table != name}
    ordered, seen = [], set()

    def visit(name, path=()):
        if name in seen or name in path or name not in tables:
            return
        for parent in sorted(tables[name]):
            visit(parent, path + (name,))
        seen.add(name)
        ordered.append(name)
    for name in sorted(tables):
        visit(name)
    return ordered


def _further_along(new, old):
    def rank(run):
        return (_STATE_RANK.get(run.get("state"), -1), run.get("cases_total") or 0,
                run.get("finished") or "")
    return rank(new) > rank(old)


def _merge_runs(src, db, report, columns):
    existing = {r["id"]: r for r in db.query("SELECT id, state, cases_total, finished FROM runs")}
    for run in src.query(f"SELECT {', '.join(columns)} FROM runs"):
        old = existing.get(run["id"])
        if old is None:
            db.execute(f"INSERT INTO runs ({', '.join(columns)}) VALUES "
                       f"({', '.join('?' for _ in columns)})", [run[c] for c in columns])
            report.runs_added += 1
        elif _further_along(run, old):
            sets = ", ".join(f"{c} = ?" for c in columns if c != "id")
            db.execute(f"UPDATE runs SET {sets} WHERE id = ?",
                       [run[c] for c in columns if c != "id"] + [run["id"]])
            report.runs_updated += 1


def _merge_table(src_conn, db, table, columns):
    quoted = ", ".join(f'"{c}"' for c in columns)
    sql = (f'INSERT OR IGNORE INTO "{table}" ({quoted}) '
           f"VALUES ({', '.join('?' for _ in columns)})")
    added = 0
    cursor = src_conn.execute(f'SELECT {quoted} FROM "{table}"')
    while True:
        rows = cursor.fetchmany(5000)
        if not rows:
            break
        # rowcount counts this statement's rows only, not what triggers (the search index) write.
        added += db.conn.executemany(sql, rows).rowcount
    return added


def _merge_one(src_conn, db, report):
    src = sqlite_utils.Database(src_conn)
    target_tables = set(db.table_names())
    for table in _keyed_tables(src):
        if table not in target_tables:
            continue  # a table this mpsprobe does not know: nothing can read it here
        target_columns = set(db[table].columns_dict)
        columns = [c for c in src[table].columns_dict if c in target_columns]
        if table == "runs":
            _merge_runs(src, db, report, columns)
            report.rows_added["runs"] = report.runs_added
        else:
            report.rows_added[table] = _merge_table(src_conn, db, table, columns)


def _bundles_as_databases(sources, scratch, unverified):
    """Each bundle among `sources` verified and written into a database in `scratch`;
    returns (the sources with those databases in their place, {database: bundle path})."""
    from . import bundle
    found, names = [], {}
    for path in sources:
        if not os.path.isfile(path) or not bundle.is_bundle(path):
            found.append(path)
            continue
        verdict = bundle.verify(path)
        if not verdict.ok and not unverified:
            raise MergeError(f"{path}: refused, not verified: {verdict.problems[0]} "
                             f"(`mpsprobe verify {path}` lists every problem)")
        try:
            body = bundle.read(path)
            db_path = bundle.load(body, os.path.join(scratch, f"bundle-{len(names)}.db"))
        except (bundle.BundleError, KeyError, TypeError, sqlite3.Error) as e:
            raise MergeError(f"{path}: cannot merge this bundle: {e}") from None
        names[db_path] = path
        found.append(db_path)
    return found, names


def merge(sources, target, say=lambda text: None, unverified=False):
    """Merge the mpsprobe databases and bundles `sources` into `target` (created if missing).

    Returns a SourceReport per source. Raises MergeError, writing nothing, for
    an unusable source (missing, not mpsprobe, newer schema, a bundle that
    fails verification unless `unverified`) or target.
    """
    sources = [str(s) for s in sources]
    target = str(target)
    scratch = tempfile.mkdtemp(prefix="mpsprobe-merge-")
    try:
        sources, bundles = _bundles_as_databases(sources, scratch, unverified)
        versions = _check_sources(sources, target)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    created = not os.path.exists(target)
    try:
        db = schema.open_db(target)
    except schema.DatabaseError as e:
        shutil.rmtree(scratch, ignore_errors=True)
        raise MergeError(f"cannot write the output: {e}") from None
    reports = []
    merged = False
    try:
        with schema.write_transaction(db.conn):  # the whole merge, or nothing
            for path in sources:
                report = SourceReport(bundles.get(path, path), versions[path])
                src_conn = _snapshot(path, versions[path], scratch)
                try:
                    _merge_one(src_conn, db, report)
                finally:
                    src_conn.close()
                reports.append(report)
                say(report)
            backfill_version_keys(db)
        merged = True
    finally:
        schema.close(db)
        if created and not merged:
            files.remove(target)   # nothing half-made is left behind
        shutil.rmtree(scratch, ignore_errors=True)
    return reports
