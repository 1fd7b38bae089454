"""What the legend and the grid's filters need from the store."""
from mpsprobe.vocabulary import STATUSES
from . import rows


def examples(conn):
    """{status: one (run, op, dtype) that has it}, for the legend's examples."""
    found = {}
    for status in STATUSES:
        hit = rows(conn, "SELECT run_id, op_id, dtype FROM results WHERE status = ? LIMIT 1",
                   [status])
        if hit:
            found[status] = hit[0]
    return found


def dtypes(conn):
    """Every dtype measured, in the matrix's order."""
    from .op import order_dtypes
    return order_dtypes({r[0] for r in conn.execute("SELECT DISTINCT dtype FROM cases")})
