"""The bundled knowledge base, read like the store: what PyTorch declares for MPS, per release.

The file ships with the package (mpsprobe/db/knowledge/mps.json.gz, built by
`mpsprobe declared --versions … --bundle`, see mpsprobe.ops.declared.bundle).
It answers when no measured MPS run does: on a fresh install, or for a torch
release or macOS nobody measured. Nothing of it is copied into a database.

Evidence ranks, best first (every answer about a device names its own):
measured on MPS (bare metal) > measured on MPS in a virtual machine >
declared by PyTorch for that release (+ the MPS-wide macOS rules) > unknown.
A test backend's run (the fake MPS of the test suite) is labelled as one and
answers only for itself; a CPU or CUDA run never answers an MPS question.
"""
import functools
import gzip
import json
import os

from mpsprobe.errors import MpsprobeError
from mpsprobe.versions import matches, sort_key

DEFAULT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "knowledge", "mps.json.gz")

# Evidence ranks, best first: what an answer about a device rests on.
MEASURED, MEASURED_VM, TEST_BACKEND, DECLARED, NO_EVIDENCE, OTHER_DEVICE = (
    "measured on MPS (bare metal)", "measured on MPS in a virtual machine",
    "a test backend (not a real device)", "declared by PyTorch", "no evidence",
    "measured on another device")
RANKS = (MEASURED, MEASURED_VM, TEST_BACKEND, DECLARED, NO_EVIDENCE)


class KnowledgeError(MpsprobeError):
    """The knowledge base cannot answer what was asked: one line for the user."""


@functools.lru_cache(maxsize=4)
def load(path=DEFAULT):
    """The knowledge base as a dict (cached per path). Raises KnowledgeError."""
    try:
        with open(path, "rb") as f:
            data = json.loads(gzip.decompress(f.read()).decode("utf-8"))
    except (OSError, EOFError, ValueError) as e:
        raise KnowledgeError(f"cannot read the knowledge base {path}: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("releases"), dict):
        raise KnowledgeError(f"{path} is not an mpsprobe knowledge base")
    return data


def releases(kb):
    """Its torch releases, oldest first."""
    return sorted(kb["releases"], key=sort_key)


def release_for(kb, torch=None, installed=None):
    """The release that answers for `torch` (a prefix: "2.5" is 2.5.1), else for the
    installed torch `installed` ("2.13.0+cpu"): that release, or the newest older one
    (None when it is older than them all: no release speaks for it); with neither, the
    newest. Raises KnowledgeError when `torch` matches none."""
    have = releases(kb)
    if torch:
        found = [v for v in have if matches(v, torch)]
        if not found:
            raise KnowledgeError(f"the knowledge base has no torch {torch} (it has "
                                 f"{have[0]} to {have[-1]})")
        return found[-1]
    if installed:
        plain = installed.split("+", 1)[0]
        older = [v for v in have if sort_key(v) <= sort_key(plain)]
        return older[-1] if older else None
    return have[-1]


@functools.lru_cache(maxsize=64)
def _kernels(path, release):
    groups = load(path)["releases"][release]["kernels"]
    return {name: group for group, names in groups.items() for name in names}


def kernel(release, aten_op, path=DEFAULT):
    """How `release` declares `aten_op` ("aten::add.Tensor"): "mps" (an MPS kernel),
    "composite" (none, but it decomposes), "none" (neither), or None (not in its yaml)."""
    name = aten_op.split("::", 1)[-1]
    return _kernels(path, release).get(name)


def read_ok(kb, release, source):
    """Whether `release`'s `source` file (native_functions.yaml, common_mps.py) was read."""
    sources = kb["releases"][release]["sources"]
    return source in sources and sources[source] is None


def declared_rows(kb, release, op_id=None):
    """Its (OpInfo op, dtype) predictions as dicts: op_id, dtype, status, source, note."""
    names = ("op_id", "dtype", "status", "source", "note")
    return [dict(zip(names, r)) for r in kb["releases"][release]["declared"]
            if op_id is None or r[0] == op_id]


def op_statuses(kb, release):
    """{op id: [declared statuses over its dtypes]} of one release."""
    found = {}
    for op_id, _, status, _, _ in kb["releases"][release]["declared"]:
        found.setdefault(op_id, []).append(status)
    return found


def backend_macos(kb, release):
    """The macOS the MPS backend of `release` needs (the bundle's rule for it)."""
    found = None
    for rule in kb["backend_macos"]:
        if sort_key(release) >= sort_key(rule["from_torch"]):
            found = rule
    return found
