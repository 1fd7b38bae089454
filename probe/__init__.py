"""mpsprobe: measure which PyTorch ops work on a device, and keep the answers in SQLite.

The Python API (see the README for a notebook example):

    import mpsprobe
    run = mpsprobe.probe(ops=["add"], dtypes=["float32"], device="cpu", samples=1, db="x.db")
    run.counts, list(run.results())
    report = mpsprobe.check_model(model, example_inputs, db="x.db")
    report.ops, report.to_json()
    db = mpsprobe.open_db("x.db")            # a sqlite-utils Database
    mpsprobe.findings("x.db"), mpsprobe.record_declared("x.db")
    mpsprobe.record_declared_history("x.db", "2.0..2.13")   # downloads macOS wheels
    mpsprobe.build_knowledge("kb.json.gz", "2.0..2.15")    # the bundled knowledge base
    mpsprobe.merge(["a.db", "b.db"], "all.db"), mpsprobe.migrate("old.db")
    mpsprobe.submit("x.db", "x.bundle.json"), mpsprobe.verify("x.bundle.json")   # a contribution
    speed = mpsprobe.bench(ops=["add", "matmul"], device="mps", max_size=1e6, db="x.db")
    speed.crossovers                         # where the target starts to beat the CPU
    mpsprobe.sweep_batches(model, example_inputs, batches=(1, 8, 32), device="mps", db="x.db")

Every user mistake raises mpsprobe.MpsprobeError. The names load lazily, so
`import mpsprobe` imports neither torch nor the store.

The `mpsprobe` import namespace maps the repository's folders: ``mpsprobe``
(probe/: the API, the engine, model check, the CLI), ``mpsprobe.ops`` (ops/:
the op catalogue and upstream declarations), ``mpsprobe.db`` (db/: the store)
and ``mpsprobe.site`` (site/: Datasette).
"""
from mpsprobe.errors import MpsprobeError

__version__ = "0.1.0"

_API = ("probe", "check_model", "open_db", "findings", "record_declared",
        "record_declared_history", "build_knowledge", "merge", "migrate", "op_statuses", "coverage",
        "Run", "submit", "verify")
_SPEED = {"bench": "mpsprobe.speed", "Bench": "mpsprobe.speed", "sweep_batches": "mpsprobe.modelcheck.batches"}
__all__ = ["MpsprobeError", "__version__", *_API, *_SPEED]


def __getattr__(name):
    if name in _API:
        from mpsprobe import api
        return getattr(api, name)
    if name in _SPEED:
        import importlib
        return getattr(importlib.import_module(_SPEED[name]), name)
    raise AttributeError(f"module 'mpsprobe' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_API) + list(_SPEED))
