"""The compatibility matrix of one run: a status per (op, dtype)."""
from mpsprobe.vocabulary import FORWARD, PASS_COLUMN, STATUSES
from . import rows, view


def cells(conn, run_id, op_like="", pass_=FORWARD):
    """op_dtype_status rows of one run (op ids LIKE `op_like`, '' for all)."""
    counts = ", ".join(f"n_{s}" for s in STATUSES)
    return rows(conn, f"""
        SELECT op_id, dtype, status, n_cases, {counts} FROM {view(conn, "op_dtype_status")}
        WHERE run_id = ? AND {PASS_COLUMN} = ? AND (? = '' OR op_id LIKE ?)""",
                [run_id, pass_, op_like, op_like])


def op(conn, op_id):
    found = rows(conn, "SELECT * FROM ops WHERE id = ?", [op_id])
    return found[0] if found else None
