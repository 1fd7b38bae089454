"""Tables of what PyTorch declares, beside what we measure.

- `declared`: one predicted status per (torch_version, device, op_id, dtype),
  in the status vocabulary; device 'mps' (common_mps.py + OpInfo dtypesIfMPS)
  or 'cuda' (OpInfo dtypesIfCUDA); `source` names the list or rule.
- `declared_kernels`: every aten function of native_functions.yaml, whether it
  has an MPS kernel (its own or its structured delegate's), and whether it is
  composite.
- `declared_entries`: every entry of common_mps.py's lists as written
  (forward, gradient and error-input lists; macOS-gated ones with their gate).
- `declared_sources`: what was read for each (version, device, source): when,
  from where, and the error when it could not be read.

A new reading of the same (version, device, source) replaces the old one in
one transaction, so a table never holds half of two readings.
"""
import datetime
import json

from mpsprobe.engine.environment import version_key


def create(db):
    """The declared tables (schema version 1 creates them; `ensure` for older files)."""
    db["declared"].create({
        "torch_version": str, "device": str, "op_id": str, "dtype": str,
        "status": str, "source": str, "note": str,
    }, pk=("torch_version", "device", "op_id", "dtype"))
    db["declared"].create_index(["op_id", "dtype"])
    db["declared_kernels"].create({
        "torch_version": str, "aten_name": str, "name": str, "overload": str,
        "has_mps": int, "composite": str, "dispatch_keys": str, "structured_delegate": str,
    }, pk=("torch_version", "aten_name"))
    db["declared_kernels"].create_index(["name"])
    db["declared_entries"].create({
        "torch_version": str, "modifier": str, "list_name": str, "list_key": str,
        "op_id": str, "dtypes": str, "gate": str,
    }, pk=("torch_version", "modifier", "list_name", "list_key"))
    db["declared_sources"].create({
        "torch_version": str, "torch_version_key": str, "device": str, "source": str,
        "origin": str, "recorded": str, "ok": int, "error": str, "n_rows": int, "options": str,
    }, pk=("torch_version", "device", "source"))


def ensure(db):
    """Create the tables in a database written before they existed."""
    if "declared" not in db.table_names():
        with db.conn:
            create(db)


def _now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _replace(db, table, where, rows):
    clause = " AND ".join(f"{k} = ?" for k in where)
    db.execute(f"DELETE FROM {table} WHERE {clause}", list(where.values()))
    if rows:
        db[table].insert_all(rows, batch_size=1000)


def record(db, torch_version, device, source, origin, rows_by_table, options=None):
    """Replace one reading: rows for each table, and its `declared_sources` line."""
    with db.conn:
        n = 0
        for table, rows in rows_by_table.items():
            where = {"torch_version": torch_version}
            if table == "declared":
                where["device"] = device
            _replace(db, table, where, rows)
            n += len(rows)
        db["declared_sources"].upsert({
            "torch_version": torch_version, "torch_version_key": version_key(torch_version),
            "device": device, "source": source, "origin": origin, "recorded": _now(), "ok": 1, "error": None, "n_rows": n,
            "options": json.dumps(options or {}, sort_keys=True),
        }, pk=("torch_version", "device", "source"))
    return n


def record_failure(db, torch_version, device, source, origin, error):
    """Note a source that could not be read; rows of an earlier reading are kept."""
    with db.conn:
        db["declared_sources"].upsert({
            "torch_version": torch_version, "torch_version_key": version_key(torch_version),
            "device": device, "source": source, "origin": origin, "recorded": _now(), "ok": 0, "error": error, "n_rows": 0,
        }, pk=("torch_version", "device", "source"))


def versions(db, device):
    """Torch versions with declared rows for `device`."""
    if "declared" not in db.table_names():
        return []
    return [r["torch_version"] for r in db.query(
        "SELECT DISTINCT torch_version FROM declared WHERE device = ? ORDER BY torch_version",
        [device])]


def kernel_versions(db):
    """Torch versions with a reading of native_functions.yaml."""
    if "declared_kernels" not in db.table_names():
        return []
    return [r["torch_version"] for r in db.query(
        "SELECT DISTINCT torch_version FROM declared_kernels ORDER BY torch_version")]


def match_version(known, torch_version):
    """The version among `known` to compare a run of `torch_version` with, or None.

    Exact first; else the same public version ("2.13.0+cpu" matches "2.13.0").
    """
    if torch_version in known:
        return torch_version
    public = (torch_version or "").split("+", 1)[0]
    same = [v for v in known if v.split("+", 1)[0] == public]
    return same[0] if same else None
