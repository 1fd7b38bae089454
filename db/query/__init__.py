"""The one query layer over the store: run selection, blame, history, findings.

The CLI, `check`, the Python API and the site's pages all ask here, so each
question has one answer. Every function takes a plain sqlite3 connection
(sqlite-utils' `db.conn`, or the one Datasette hands to `execute_fn`) and
reads only.
"""


def rows(conn, sql, params=()):
    """The rows of a query as dicts."""
    cursor = conn.execute(sql, params)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def present(conn):
    """The names of the tables and views the database has."""
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def view(conn, name):
    """What to select FROM for one of our views: the view itself, or, in a database
    whose views were dropped or never made (a hand-edited file, served read-only),
    its definition inline. Either way the one definition in db/views.py answers."""
    from mpsprobe.db.views import VIEWS
    return name if name in present(conn) else f"({VIEWS[name]}) AS {name}"
