"""The compatibility matrix of one run: a status per (op, dtype)."""
from mpsprobe.db.views import status_counts, worst_status
from mpsprobe.vocabulary import FORWARD, PASS_COLUMN
from . import rows


def cells(conn, run_id, op_like="", pass_=FORWARD):
    """Per (op, dtype) of one run (op ids LIKE `op_like`, '' for all): the worst
    status and the cases per status, as op_dtype_status has them, summed from
    the run's results alone (the view's other columns cost a full sweep's
    matrix twice its time)."""
    return rows(conn, f"""
        SELECT op_id, dtype, {worst_status()} AS status, count(*) AS n_cases, {status_counts()}
        FROM results WHERE run_id = ? AND {PASS_COLUMN} = ? AND (? = '' OR op_id LIKE ?)
        GROUP BY op_id, dtype""", [run_id, pass_, op_like, op_like])


def op(conn, op_id):
    found = rows(conn, "SELECT * FROM ops WHERE id = ?", [op_id])
    return found[0] if found else None
