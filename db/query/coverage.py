"""What the store says the catalogue reached: the aten ops its runs' cases dispatched.

`mpsprobe coverage` (mpsprobe.ops.coverage) measures MPS-kernel coverage
against these rows; the SQL stays here.
"""
import json

from mpsprobe.vocabulary import PASS_COLUMN
from . import rows


def catalogue_runs(conn, torch_version=None, run_ids=()):
    """The runs whose cases count as the catalogue's (not a model's replay), newest first:
    those named by id (or unique prefix), else every run of `torch_version` (None: all)."""
    found = rows(conn, "SELECT id, torch_version, device, device_name, backend, os_name, "
                       "started, source FROM runs WHERE coalesce(source, 'opinfo') != 'model' "
                       "ORDER BY started DESC")
    if run_ids:
        return [r for r in found if any(r["id"].startswith(p) for p in run_ids)]
    if torch_version:
        return [r for r in found if r["torch_version"] == torch_version]
    return found


def dispatched(conn, run_ids):
    """{(aten op, pass): {op source: {op id, ...}}}: every aten op the runs' cases
    dispatched (in any status: a case that ran its kernel reached it), by pass and by
    where the op's samples came from (ops.source: opinfo, module, generated)."""
    if not run_ids:
        return {}
    marks = ",".join("?" * len(run_ids))
    reached = {}
    for r in rows(conn, f"""
            SELECT DISTINCT r.op_id, coalesce(o.source, 'opinfo') AS source, r."{PASS_COLUMN}" AS pass_,
                   r.aten_ops
            FROM results r LEFT JOIN ops o ON o.id = r.op_id
            WHERE r.run_id IN ({marks}) AND r.aten_ops IS NOT NULL""", list(run_ids)):
        try:
            ops = json.loads(r["aten_ops"]) or []
        except ValueError:
            continue
        for op in ops:
            reached.setdefault((op, r["pass_"]), {}).setdefault(r["source"], set()).add(r["op_id"])
    return reached
