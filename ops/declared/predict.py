"""What PyTorch itself declares about an op on a device, as rows in our vocabulary.

Three declarations, each read without the device it describes:

- MPS kernels: which aten functions have an MPS dispatch entry
  (native_functions.yaml, see native_functions.py);
- MPS test expectations: the expected failures and skips of PyTorch's MPS
  consistency tests (common_mps.py, see common_mps.py), plus, for the
  installed torch, the dtypes its OpInfos declare for MPS (dtypesIfMPS);
- CUDA dtypes: what each OpInfo declares for CUDA (dtypesIfCUDA), computed by
  OpInfo itself, which needs no GPU.

A declaration predicts one status per (op, dtype): `pass` (declared to work),
`unsupported` (not implemented, or a dtype the device lacks), `mismatch`
(runs, numbers undefined or wrong), `error` (declared to fail otherwise),
`skip` (the test is skipped: no prediction).

An op that a release does not have at all (presence.py: absent from a
wheel's native_functions.yaml or Python module) is declared `unsupported`
for every dtype, its note saying "not in this release", rather than left
without rows: the matrix of a release then covers every op of the list, a
blank cell keeps meaning "nothing declared", and a run of that release,
where calling the op fails, agrees with its declaration instead of showing
up as an undeclared failure. It is never `pass`.

MPS kernels registered from Python (python_kernels.py) count as MPS kernels
of declared_kernels: has_mps is set, and dispatch_keys says where they come from.
"""
from mpsprobe.vocabulary import ERROR, MISMATCH, PASS, SKIP, UNSUPPORTED
from . import common_mps, native_functions, presence, python_kernels
from .common_mps import SKIP_DECORATOR
from mpsprobe.ops.opinfo import dtype_name, op_key, reference_dtypes

# MPS has no float64: the tests never run these dtypes there.
MPS_MISSING_DTYPES = ("float64", "complex128")


def key_index(opinfos):
    """{common_mps key ("divno_rounding_mode"): our op id ("div.no_rounding_mode")}."""
    return {o.name + (getattr(o, "variant_test_name", "") or ""): op_key(o) for o in opinfos}


def op_id_for(key, index):
    """Our op id for a common_mps key; keys no OpInfo has are kept as written."""
    return index.get(key, key)


def _status_of(decorator, source):
    if decorator == SKIP_DECORATOR:
        return SKIP
    if "UNIMPLEMENTED" in source or source == "every op" or source.startswith("not in "):
        return UNSUPPORTED
    if "UNDEFINED" in source:
        return MISMATCH
    return ERROR


def _explain(decorator, source):
    verb = "skipped" if decorator == SKIP_DECORATOR else "expected to fail"
    if source == "every op":
        return f"{verb} for every op in this dtype"
    if source.startswith("not in "):
        return f"{verb}: the op is {source}"
    return f"{verb}: listed in {source}"


def mps_rows(torch_version, expectations, opinfos, mps_dtypes=None, release=None):
    """One declared row per (OpInfo op, dtype it supports on the CPU).

    `expectations`: a common_mps.Expectations, or None when the version has no
    common_mps.py. `mps_dtypes`: {op id: set of dtype names} that OpInfo
    declares for MPS (only known for the installed torch), or None.
    `release`: a presence.Release, to declare the ops it lacks absent.
    """
    rows = []
    for o in opinfos:
        op_id = op_key(o)
        key = o.name + (getattr(o, "variant_test_name", "") or "")
        dtypes = [dtype_name(d) for d in reference_dtypes(o)]
        gone = release.absent(o) if release else None
        if gone:
            rows += [{"torch_version": torch_version, "device": "mps", "op_id": op_id,
                      "dtype": dtype, "status": UNSUPPORTED, "source": gone[0], "note": gone[1]}
                     for dtype in dtypes]
            continue
        predicted = expectations.predict(key, dtypes) if expectations else {d: [] for d in dtypes}
        for dtype in dtypes:
            matches = predicted[dtype]
            notes = [_explain(dec, src) for dec, src in matches]
            if mps_dtypes is not None and dtype not in mps_dtypes.get(op_id, ()):
                status, source = UNSUPPORTED, "OpInfo dtypesIfMPS"
                notes.insert(0, "OpInfo does not declare this dtype for MPS: the tests never run it")
            elif any(dec == SKIP_DECORATOR for dec, _ in matches):
                dec, source = next(m for m in matches if m[0] == SKIP_DECORATOR)
                status = SKIP
            elif matches:
                dec, source = matches[0]
                status = _status_of(dec, source)
            elif dtype in MPS_MISSING_DTYPES:
                status, source = UNSUPPORTED, "no float64 on MPS"
                notes.append("MPS has no 64-bit floating point; the tests never run this dtype")
            else:
                status = PASS
                source = "common_mps" if expectations else "OpInfo dtypesIfMPS"
                notes.append("declared to work: no expected failure or skip names it")
            rows.append({"torch_version": torch_version, "device": "mps", "op_id": op_id,
                         "dtype": dtype, "status": status, "source": source,
                         "note": "; ".join(dict.fromkeys(notes))})
    return rows


def opinfo_dtypes(opinfos, device):
    """{op id: set of dtype names} that each OpInfo declares for `device`."""
    out = {}
    for o in opinfos:
        try:
            out[op_key(o)] = {dtype_name(d) for d in o.supported_dtypes(device)}
        except Exception:            # an internal API: one op's failure costs that op
            continue
    return out


def cuda_rows(torch_version, opinfos):
    """OpInfo's CUDA declaration for every (op, dtype it supports on the CPU)."""
    declared = opinfo_dtypes(opinfos, "cuda")
    rows = []
    for o in opinfos:
        op_id = op_key(o)
        if op_id not in declared:
            continue
        for dtype in (dtype_name(d) for d in reference_dtypes(o)):
            ok = dtype in declared[op_id]
            rows.append({"torch_version": torch_version, "device": "cuda", "op_id": op_id,
                         "dtype": dtype, "status": PASS if ok else UNSUPPORTED,
                         "source": "OpInfo dtypesIfCUDA",
                         "note": "OpInfo declares this dtype for CUDA" if ok else
                                 "OpInfo does not declare this dtype for CUDA"})
    return rows


def entry_rows(torch_version, expectations, index):
    """Every list entry of common_mps.py as written, gated or not, forward and gradient."""
    import json
    rows = []
    for modifier in expectations.modifiers:
        for list_name, key, dtypes, gate in expectations.entries(modifier):
            rows.append({"torch_version": torch_version, "modifier": modifier,
                         "list_name": list_name, "list_key": key,
                         "op_id": op_id_for(key, index),
                         "dtypes": None if dtypes is None else json.dumps(dtypes),
                         "gate": gate})
    return rows


def kernel_rows(torch_version, functions, python_mps=None):
    """Rows of declared_kernels; `python_mps` ({aten name: "file:line"}) adds
    the MPS kernels registered from Python to the functions they name."""
    python_mps = python_mps or {}
    rows = []
    for f in functions:
        keys, where = f["dispatch_keys"], python_mps.get(f["aten_name"])
        if where:
            keys = ", ".join(k for k in (keys, f"MPS (torch.library, {where})") if k)
        rows.append({"torch_version": torch_version, "aten_name": f["aten_name"],
                     "name": f["name"], "overload": f["overload"],
                     "has_mps": int(f["has_mps"] or bool(where)), "composite": f["composite"],
                     "dispatch_keys": keys, "structured_delegate": f["structured_delegate"]})
    return rows


def parse_kernels(text):
    return native_functions.parse(text)


def parse_expectations(text, macos, filename="common_mps.py"):
    return common_mps.Expectations(text, macos=macos, filename=filename)


class Reading:
    """One source of one torch version, read: rows per table, or why it could not be."""

    def __init__(self, torch_version, device, source, origin, tables=None, error=None):
        self.torch_version, self.device, self.source, self.origin = \
            torch_version, device, source, origin
        self.tables = tables or {}
        self.error = error

    @property
    def n_rows(self):
        return sum(len(rows) for rows in self.tables.values())


def read_mps(files, opinfos, macos, mps_dtypes=None, known_names=None):
    """Readings of native_functions.yaml and common_mps.py of one torch (a wheel's or ours).

    A source that is missing or unreadable becomes a Reading with an error;
    the other is still read. `known_names`: base names of the aten functions
    in the yaml of the torch whose OpInfo list `opinfos` is; with the
    release's yaml, they tell which ops the release lacks (presence.py).
    """
    version, origin = files.torch_version, files.origin
    readings, release = [], None
    if files.native_functions is None:
        readings.append(Reading(version, "mps", "native_functions.yaml", origin,
                                error=files.missing("native_functions.yaml")))
    else:
        try:
            functions = parse_kernels(files.native_functions)
            python_mps = python_kernels.mps_kernels(files.python)
            reading = Reading(version, "mps", "native_functions.yaml", origin,
                              {"declared_kernels": kernel_rows(version, functions, python_mps)})
            reading.python_kernels = sorted(python_mps)
            readings.append(reading)
            if known_names is not None:
                release = presence.Release(version, {f["name"] for f in functions},
                                           files.python, known_names)
        except native_functions.NativeFunctionsError as e:
            readings.append(Reading(version, "mps", "native_functions.yaml", origin, error=str(e)))
    if files.common_mps is None:
        readings.append(Reading(version, "mps", "common_mps.py", origin, error=(
            files.missing("common_mps.py") + ": torch wheels ship it from 2.8 on; before, the "
            "lists lived in test/test_mps.py (read one with --common-mps FILE)")))
        return readings
    try:
        expectations = parse_expectations(files.common_mps, macos)
    except common_mps.CommonMpsError as e:
        readings.append(Reading(version, "mps", "common_mps.py", origin, error=str(e)))
        return readings
    rows = mps_rows(version, expectations, opinfos, mps_dtypes, release)
    entries = entry_rows(version, expectations, key_index(opinfos))
    reading = Reading(version, "mps", "common_mps.py", origin,
                      {"declared": rows, "declared_entries": entries})
    reading.unknown = list(dict.fromkeys(expectations.unknown))
    readings.append(reading)
    return readings
