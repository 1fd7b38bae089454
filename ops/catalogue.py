"""The op catalogue as plain data, cached per torch build.

Reading PyTorch's OpInfo database costs 10-30 s (it imports most of
torch.testing), yet listing ops, refusing a mistyped name and planning a run
need only names: each op's id, OpInfo name, variant, aten name, CPU dtypes and
the passes it has per dtype. Those are kept here as JSON, one file per torch
build (version and git hash) and per catalogue code (mpsprobe's version and a
fingerprint of the code that reads OpInfo), under the cache root. Nothing in
this module imports torch; samples are still made by OpInfo, in the workers.
"""
import ast
import difflib
import fnmatch
import json
import os
import re
import subprocess
import sys
import zlib

from mpsprobe.errors import MpsprobeError

FORMAT = 2   # bump when the shape of the cached data changes (2: each op's source)


class CatalogueError(MpsprobeError):
    """The op catalogue cannot be read, or a filter names nothing in it."""


# -- which torch, without importing it -----------------------------------------------

_FIND_TORCH = ("import importlib.util as u; s = u.find_spec('torch'); "
               "print(s.origin if s and s.origin else '')")


def torch_build(python=None):
    """{"version", "git"} of the torch that `python` (default: this interpreter)
    imports, read from torch/version.py without importing torch; None when that
    cannot be told (no torch, an unreadable interpreter)."""
    if python in (None, sys.executable):
        if "torch" in sys.modules:
            import torch
            return {"version": torch.__version__, "git": getattr(torch.version, "git_version", "")}
        import importlib.util
        try:
            spec = importlib.util.find_spec("torch")
        except (ImportError, ValueError):
            return None
        origin = spec.origin if spec else None
    else:
        try:
            out = subprocess.run([python, "-c", _FIND_TORCH], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
        origin = out.stdout.strip() if out.returncode == 0 else None
    if not origin:
        return None
    return _read_version_file(os.path.join(os.path.dirname(origin), "version.py"))


def _read_version_file(path):
    """torch/version.py's __version__ and git_version (literal assignments)."""
    found = {}
    try:
        with open(path) as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Constant):
            found[node.targets[0].id] = node.value.value
    if not isinstance(found.get("__version__"), str):
        return None
    return {"version": found["__version__"], "git": str(found.get("git_version") or "")}


# -- the cache file ------------------------------------------------------------------

def _code_fingerprint():
    """Changes whenever the code that reads OpInfo, the module probes or the generated records
    into this data does."""
    import mpsprobe
    here = os.path.dirname(os.path.abspath(__file__))
    crc = zlib.crc32(f"{FORMAT}|{mpsprobe.__version__}".encode())
    for name in ("opinfo.py", "catalogue.py", "modules.py", "vision.py", "large.py", "generated.py"):
        with open(os.path.join(here, name), "rb") as f:
            crc = zlib.crc32(f.read(), crc)
    return f"{crc:08x}"


def cache_path(build):
    from mpsprobe import cachedirs
    name = f"torch-{build['version']}-{build['git'][:12] or 'nogit'}-{_code_fingerprint()}.json"
    return os.path.join(cachedirs.folder("catalogue"), re.sub(r"[^A-Za-z0-9._+-]", "_", name))


def load(build):
    """The cached catalogue of `build`, or None (none yet, or unreadable: rebuilt then)."""
    if not build:
        return None
    try:
        with open(cache_path(build)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("torch_version") != build["version"] \
            or data.get("torch_git") != build["git"] or not isinstance(data.get("ops"), list):
        return None
    return data


def save(build, data):
    """Keep `data` for `build` when it describes that build; a cache that cannot be
    written only costs the next command its speed."""
    if not build or data.get("torch_version") != build["version"] or data.get("torch_git") != build["git"]:
        return
    from mpsprobe import cachedirs
    cachedirs.write_json(cache_path(build), data)


def current(say=None):
    """This interpreter's catalogue: cached, else read from OpInfo once and cached."""
    build = torch_build()
    data = load(build)
    if data is None:
        if say:
            say("loading the op catalogue (torch and its OpInfo database) …")
        from mpsprobe.ops import opinfo
        data = opinfo.describe(opinfo.with_module_probes(opinfo.load_op_db()))
        save(build, data)
    return data


# -- answering from the data -----------------------------------------------------------

def dtype_name(data, name):
    """The canonical dtype name for `name` (an alias like "float" too), or CatalogueError."""
    found = data["dtype_names"].get(name)
    if found is None:
        raise CatalogueError(f"unknown dtype: {name!r}")
    return found


def search(data, pattern=""):
    """One row per op (id, OpInfo name, variant, aten name, CPU dtypes), for
    `mpsprobe ops`: every op, or those matching `pattern` (a glob when it has *
    or ?, else a case-insensitive substring of the id or the aten name)."""
    found = []
    for row in data["ops"]:
        key, aten = row["op"], row["aten_name"]
        if pattern:
            if any(c in pattern for c in "*?["):
                if not (fnmatch.fnmatchcase(key, pattern) or fnmatch.fnmatchcase(aten, pattern)):
                    continue
            elif pattern.lower() not in key.lower() and pattern.lower() not in aten.lower():
                continue
        found.append(dict({k: row[k] for k in ("op", "name", "variant", "aten_name", "dtypes")},
                          source=row.get("source", "opinfo")))
    found.sort(key=lambda r: r["op"])
    return found


def match(patterns, rows):
    """The rows whose id or OpInfo name matches one of `patterns` (all when none);
    CatalogueError, with the names it may mean, for a pattern that matches nothing."""
    if not patterns:
        return list(rows)
    keys = {r["op"] for r in rows} | {r["name"] for r in rows}
    unknown = [p for p in patterns if not fnmatch.filter(keys, p)]
    if unknown:
        hint = suggest(unknown[0], keys)
        more = f" (did you mean {', '.join(hint)}?)" if hint else ""
        raise CatalogueError(f"unknown op: {unknown[0]!r}{more}; `mpsprobe ops` lists them")
    return [r for r in rows
            if any(fnmatch.fnmatchcase(r["op"], p) or fnmatch.fnmatchcase(r["name"], p) for p in patterns)]


def pairs(data, ops=None, dtypes=None, passes=None):
    """The (op, dtype) pairs to probe, as plain dicts, in a stable order, each with
    the passes of `passes` (default: all) the op has in that dtype.

    `ops`: names or globs matched against op ids and OpInfo names (none: every
    OpInfo op, module probe and generated record, but not the large cases of `run --large`);
    `dtypes`: dtype names; None means every dtype the op supports on the CPU.
    """
    wanted = {dtype_name(data, d) for d in dtypes} if dtypes else None
    # The large cases (`run --large`, ops/large.py) run only when asked for by name.
    rows = data["ops"] if ops else [r for r in data["ops"] if r.get("source", "opinfo") != "large"]
    found = []
    for row in match(list(ops or ()), rows):
        for dtype in row["dtypes"]:
            if wanted is None or dtype in wanted:
                has = row["passes"].get(dtype, [])
                found.append({"op": row["op"], "name": row["name"], "variant": row["variant"],
                              "aten_name": row["aten_name"], "dtype": dtype,
                              "source": row.get("source", "opinfo"),
                              "passes": [p for p in has if passes is None or p in passes]})
    found.sort(key=lambda p: (p["op"], p["dtype"]))
    return found


def planned_cases(pair, samples, compiled_samples=1):
    """The cases a pair is planned to give: `samples` per pass it has, `compiled_samples`
    (at most `samples`) for the compiled pass (fewer when OpInfo makes fewer samples)."""
    from mpsprobe.vocabulary import COMPILED
    eager = [p for p in pair["passes"] if p != COMPILED]
    compiled = len(pair["passes"]) - len(eager)
    return samples * len(eager) + compiled * max(1, min(samples, compiled_samples))


def suggest(name, keys, n=5):
    """Op ids a mistyped or partial name may mean, best first: ids whose last
    dotted component is the name (conv2d -> nn.functional.conv2d), then ids
    containing it, then close spellings."""
    wanted = name.lower().strip("*?")
    keys = sorted(keys, key=lambda k: (len(k), k))
    last = [k for k in keys if k.lower().rsplit(".", 1)[-1] == wanted]
    starts = [k for k in keys if k.lower().rsplit(".", 1)[-1].startswith(wanted)]
    inside = [k for k in keys if wanted and wanted in k.lower()]
    lasts = {}
    for k in keys:
        lasts.setdefault(k.lower().rsplit(".", 1)[-1], []).append(k)
    close_last = [k for m in difflib.get_close_matches(wanted, list(lasts), n=n) for k in lasts[m]]
    close = difflib.get_close_matches(name, keys, n=n)
    return list(dict.fromkeys(last + starts + inside + close_last + close))[:n]
