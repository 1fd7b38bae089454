"""Which aten functions have an MPS kernel: read from native_functions.yaml.

The yaml is data, so it is parsed, never executed. Each `- func:` entry names
an aten function (`name.overload`) and, under `dispatch:`, the backends that
have a kernel for it ("CPU, CUDA, MPS: add_out"). Two rules of torchgen decide
what an entry without its own MPS key means:

- `structured_delegate: add.out`: the functional form runs the delegate's
  kernels, so it has whatever backends the delegate has;
- no `dispatch:` at all (and no delegate): the function is
  CompositeImplicitAutograd, written in terms of other aten ops, and runs on
  any backend whose kernels those ops have.
"""
import re

import yaml

from mpsprobe.errors import MpsprobeError

COMPOSITE_KEYS = {
    "CompositeImplicitAutograd": "implicit",
    "CompositeImplicitAutogradNestedTensor": "implicit",
    "CompositeExplicitAutograd": "explicit",
    "CompositeExplicitAutogradNonFunctional": "explicit",
}

_FUNC_NAME = re.compile(r"^\s*([\w.]+)\s*\(")


class NativeFunctionsError(MpsprobeError):
    """native_functions.yaml cannot be read as torchgen's format."""


def _loader():
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _dispatch_keys(dispatch):
    """The backend keys of a `dispatch:` mapping; "CPU, CUDA: k" names two."""
    keys = []
    for joined in (dispatch or {}):
        for key in str(joined).split(","):
            key = key.strip()
            if key and key not in keys:
                keys.append(key)
    return keys


def parse(text):
    """Every aten function in the yaml, as dicts, in file order.

    Each dict: aten_name ("add.Tensor"), name ("add"), overload ("Tensor" or
    ""), dispatch_keys (its own, comma-joined), structured_delegate,
    has_mps (own MPS key, or its delegate's), composite ("implicit",
    "explicit" or None).
    """
    try:
        entries = yaml.load(text, Loader=_loader())
    except yaml.YAMLError as e:
        raise NativeFunctionsError(f"native_functions.yaml is not valid YAML: {e}") from None
    if not isinstance(entries, list):
        raise NativeFunctionsError("native_functions.yaml is not a list of `- func:` entries")
    functions = []
    for entry in entries:
        if not isinstance(entry, dict) or "func" not in entry:
            continue
        m = _FUNC_NAME.match(str(entry["func"]))
        if not m:
            continue
        aten_name = m.group(1)
        name, _, overload = aten_name.partition(".")
        keys = _dispatch_keys(entry.get("dispatch"))
        delegate = entry.get("structured_delegate")
        composite = None
        for key in keys:
            composite = composite or COMPOSITE_KEYS.get(key)
        if not keys and not delegate:
            composite = "implicit"
        functions.append({
            "aten_name": aten_name, "name": name, "overload": overload,
            "dispatch_keys": ", ".join(keys), "structured_delegate": delegate,
            "own_mps": "MPS" in keys, "composite": composite,
        })
    by_name = {f["aten_name"]: f for f in functions}
    for f in functions:
        delegate = by_name.get(f["structured_delegate"] or "")
        f["has_mps"] = f.pop("own_mps") or bool(delegate and "MPS" in delegate["dispatch_keys"].split(", "))
    return functions


def by_base_name(functions):
    """{base name: summary over its overloads}: what an OpInfo's aten_name refers to.

    has_mps: some overload has an MPS kernel; composite: "implicit" or
    "explicit" when every overload without an MPS kernel is composite.
    """
    summary = {}
    for f in functions:
        s = summary.setdefault(f["name"], {"has_mps": False, "composites": set(), "overloads": []})
        s["overloads"].append(f["aten_name"])
        s["has_mps"] = s["has_mps"] or f["has_mps"]
        if not f["has_mps"]:
            s["composites"].add(f["composite"])
    for s in summary.values():
        kinds = s.pop("composites")
        s["composite"] = kinds.pop() if len(kinds) == 1 and None not in kinds else (
            "mixed" if kinds and None not in kinds else None)
    return summary
