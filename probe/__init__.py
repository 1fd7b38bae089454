"""mpsprobe: measure which PyTorch ops work on a device, and keep the answers in SQLite.

The `mpsprobe` import namespace maps the repository's folders:
``mpsprobe`` (probe/: runner and CLI), ``mpsprobe.ops`` (ops/: the op catalogue),
``mpsprobe.db`` (db/: the SQLite store) and ``mpsprobe.site`` (site/: Datasette).
"""

__version__ = "0.1.0"


def __getattr__(name):
    # Loaded on first use, so `import mpsprobe` imports neither torch nor the store.
    if name == "bench":
        from mpsprobe.speed import bench
        return bench
    if name == "sweep_batches":
        from mpsprobe.modelcheck.batches import sweep_batches
        return sweep_batches
    raise AttributeError(f"module 'mpsprobe' has no attribute {name!r}")
