"""Reading every declaration asked for: which sources, in which order, as Readings.

The pipeline behind `mpsprobe declared` and mpsprobe.record_declared: gather
the torch files (installed, wheels, a loose common_mps.py), read each into
rows (predict.py), add OpInfo's CUDA dtypes when asked. Nothing here writes;
the store records the readings (mpsprobe.db.writer).
"""
import functools
from collections import Counter

from mpsprobe.errors import MpsprobeError
from . import predict, presence, wheel


class DeclaredError(MpsprobeError):
    """Nothing could be read; `summary` says what was tried."""

    def __init__(self, message, summary=()):
        super().__init__(message)
        self.summary = list(summary)


class Sources:
    """What to read, checked before anything is read or written."""

    def __init__(self, wheels=(), installed=None, common_mps=None, torch_version=None,
                 opinfo_cuda=False, macos=26.0):
        if common_mps and not torch_version:
            raise MpsprobeError("--common-mps needs --torch-version (the version the file "
                                "belongs to)")
        self.installed = (not wheels and not common_mps) if installed is None else installed
        self.opinfo_cuda, self.macos, self.common_mps = opinfo_cuda, macos, common_mps
        self.files = []
        if self.installed:
            self.files.append(wheel.installed())
        self.files += [wheel.from_wheel(w) for w in wheels]
        if common_mps:
            with open(common_mps, encoding="utf-8") as f:
                self.files.append(wheel.TorchFiles(torch_version, common_mps, common_mps=f.read()))
        if not self.files and not opinfo_cuda:
            raise MpsprobeError("nothing to read: give --wheel, --common-mps, --installed or "
                                "--opinfo-cuda")


@functools.lru_cache(maxsize=1)
def known_aten_names():
    """Base names of the installed torch's aten functions: those our OpInfo list can call."""
    text = wheel.installed().native_functions
    return frozenset(f["name"] for f in predict.parse_kernels(text)) if text else None


def read(sources, opinfos=None):
    """The Readings of `sources` (a Sources), each with the options it was read under.

    `opinfos`: the OpInfo list, when the caller has it loaded already.
    """
    import torch
    from mpsprobe.ops.opinfo import load_op_db
    opinfos = load_op_db() if opinfos is None else opinfos
    installed_version = (wheel.installed().torch_version
                         if (sources.installed or sources.opinfo_cuda) else None)
    readings = []
    for files in sources.files:
        mps_dtypes = predict.opinfo_dtypes(opinfos, "mps") if files.origin == "installed" else None
        found = predict.read_mps(files, opinfos, sources.macos, mps_dtypes, known_aten_names())
        if files.origin == sources.common_mps:      # a loose file: no yaml was asked for
            found = [r for r in found if r.source != "native_functions.yaml"]
        readings += found
    if sources.opinfo_cuda:
        readings.append(predict.Reading(installed_version, "cuda", "OpInfo dtypesIfCUDA",
                                        "installed",
                                        {"declared": predict.cuda_rows(installed_version, opinfos)}))
    for r in readings:
        r.options = {"macos": sources.macos, "cuda_available": torch.cuda.is_available()} \
            if r.device == "cuda" or r.source == "common_mps.py" else {}
    return readings


def summarize(r):
    """What one reading gave, as a dict (the JSON of `mpsprobe declared`)."""
    item = {"torch_version": r.torch_version, "device": r.device, "source": r.source,
            "origin": r.origin, "ok": not r.error, "error": r.error, "rows": r.n_rows,
            "unknown_conditions": getattr(r, "unknown", [])}
    if "declared" in r.tables:
        item["statuses"] = dict(Counter(x["status"] for x in r.tables["declared"]))
        item["ops"] = len({x["op_id"] for x in r.tables["declared"]})
        item["absent_ops"] = len({x["op_id"] for x in r.tables["declared"]
                                  if x["note"].startswith(presence.ABSENT)})
    if hasattr(r, "python_kernels"):
        item["python_mps_kernels"] = r.python_kernels
    return item
