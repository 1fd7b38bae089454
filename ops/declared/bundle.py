"""The bundled knowledge base: PyTorch's declared MPS support, release by release.

`mpsprobe declared --versions 2.0..2.15 --bundle FILE` builds it; the package
ships one (mpsprobe/db/knowledge/mps.json.gz) so that `check` answers on a
fresh install, before any sweep. Per release it holds what the wheel's files
declare (read as `declared` reads them, see predict.py):

- `kernels`: the aten functions of native_functions.yaml with an MPS kernel
  (their own, a structured delegate's, or registered from Python), those
  without one but composite (they decompose), and those with neither;
- `declared`: the predicted status per (OpInfo op, dtype), from common_mps.py's
  lists, for a macOS new enough for every gate (26);
- `entries`: common_mps.py's list entries as written, gated ones with their gate;
- `sources`: per file, None when read, else why it could not be.

And the MPS-wide rules (rules.py) once for all. The OpInfo list that maps
common_mps keys to ops is the installed torch's, named in `built_with`.

The file is gzipped JSON with sorted keys, sorted rows, no timestamps and a
zero gzip mtime: the same wheels and the same installed torch give the same bytes.
"""
import dataclasses
import gzip
import io
import json

from . import predict, reading, rules

FORMAT = 1
MACOS = 26.0          # every macOS gate of common_mps.py passed: gates live in `entries`
SIZE_BUDGET = 5 * 1024 * 1024


def release_of(version):
    """"2.13.0" for "2.13.0+cpu": a bundle speaks of releases, not local builds."""
    return (version or "").split("+", 1)[0]


def entry(files, opinfos):
    """The bundle's entry for one torch's files (a wheel.TorchFiles): (release, dict)."""
    version = release_of(files.torch_version)
    files = dataclasses.replace(files, torch_version=version)
    found = predict.read_mps(files, opinfos, MACOS, None, reading.known_aten_names())
    out = {"torch": version, "sources": {}, "kernels": {"mps": [], "composite": [], "none": []},
           "python_kernels": [], "declared": [], "entries": []}
    for r in found:
        out["sources"][r.source] = r.error
        for k in r.tables.get("declared_kernels", ()):
            group = "mps" if k["has_mps"] else "composite" if k["composite"] else "none"
            out["kernels"][group].append(k["aten_name"])
        out["python_kernels"] += getattr(r, "python_kernels", [])
        out["declared"] += [[d["op_id"], d["dtype"], d["status"], d["source"], d["note"]]
                            for d in r.tables.get("declared", ())]
        out["entries"] += [[e["modifier"], e["list_name"], e["list_key"], e["op_id"],
                            e["dtypes"], e["gate"]] for e in r.tables.get("declared_entries", ())]
    for group in out["kernels"].values():
        group.sort()
    out["python_kernels"].sort()
    out["declared"].sort()
    out["entries"].sort(key=lambda e: json.dumps(e))
    return version, out


def bundle(entries, opinfo_torch):
    """The whole knowledge base: {release: entry} and the MPS-wide rules."""
    return {"format": FORMAT, "built_with": {"opinfo_torch": release_of(opinfo_torch), "macos": MACOS},
            "rules": list(rules.RULES), "generic_fallback": rules.GENERIC_FALLBACK,
            "backend_macos": [{"from_torch": ".".join(map(str, since)), "min_macos": m, "family": f}
                              for since, m, f in rules.BACKEND_MACOS],
            "releases": dict(entries)}


def dumps(data):
    """The file's bytes: sorted JSON, gzipped without a timestamp or a name."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as f:
        f.write(text.encode("utf-8"))
    return out.getvalue()


def loads(raw):
    return json.loads(gzip.decompress(raw).decode("utf-8"))
