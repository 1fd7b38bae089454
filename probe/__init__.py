"""mpsprobe: measure which PyTorch ops work on a device, and keep the answers in SQLite.

The `mpsprobe` import namespace maps the repository's folders:
``mpsprobe`` (probe/: runner and CLI), ``mpsprobe.ops`` (ops/: the op catalogue),
``mpsprobe.db`` (db/: the SQLite store) and ``mpsprobe.site`` (site/: Datasette).
"""

__version__ = "0.1.0"
