"""Search ops by what people type: op names, aten names, module names, words.

`BatchNorm2d` finds the batch-norm ops, `Conv2d` and `conv 2d` find conv2d,
`aten::add.Tensor` finds add. Matching is on a squashed form of each op's
id and aten name (lower case, letters and digits only), so spelling,
separators and case do not matter: every typed word must appear in it, or
the whole query squashed together. A module name's dimension suffix (the
`2d` of `BatchNorm2d`) is dropped when nothing matches with it, since the
ops behind `nn.BatchNorm1d/2d/3d` are one `batch_norm`. One row per op,
best matches first; the caller pages them.
"""
import re

from . import present, rows


def squash(text):
    return re.sub(r"[^a-z0-9]", "", (text or "").lower())


def words(query):
    """The typed words, an aten name's namespace and overload taken off (`aten::add.Tensor` -> add)."""
    text = (query or "").strip()
    text = re.sub(r"^\w+::", "", text)
    text = re.sub(r"\.(Tensor|Scalar|out|default|self|int|dim|input|grad_input|[A-Z]\w*)$", "", text)
    # CamelCase and letters against digits are separate words to a reader: BatchNorm2d, conv2d.
    spaced = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", text)
    return [w for w in re.findall(r"[a-z0-9]+", spaced.lower()) if w]


def candidates(conn):
    """[(op_id, aten_name)] of the ops with something to show (a sweep's result or a declaration)."""
    found = {r["id"]: r["aten_name"] for r in rows(
        conn, "SELECT id, aten_name FROM ops WHERE EXISTS (SELECT 1 FROM results WHERE results.op_id = ops.id)")}
    if "declared" in present(conn):
        for r in rows(conn, "SELECT DISTINCT op_id FROM declared"):
            found.setdefault(r["op_id"], None)
    return sorted(found.items())


def search(conn, query):
    """The op ids matching `query`, best first: [{"op_id", "aten_name", "how"}]."""
    typed = words(query)
    if not typed:
        return []
    whole = "".join(typed)
    ops = [(op, aten, squash(op) + " " + squash(aten)) for op, aten in candidates(conn)]

    def matching(terms):
        return [(op, aten, key) for op, aten, key in ops if all(t in key for t in terms)]
    found, how = matching([whole]), "name"
    if len(typed) > 1:
        found += [m for m in matching(typed) if m not in found]
    if not found:
        stem = re.sub(r"[123]d$", "", whole)   # nn.BatchNorm2d -> batch_norm
        if stem != whole and len(stem) > 2:
            found, how = matching([stem]), "module name"

    def rank(match):
        op, aten, key = match
        last = squash(op.rsplit(".", 1)[-1])
        exact = whole in (squash(op), squash(aten), last)
        return (not exact, not last.startswith(whole), len(op), op)
    return [{"op_id": op, "aten_name": aten, "how": how} for op, aten, _ in sorted(found, key=rank)]
