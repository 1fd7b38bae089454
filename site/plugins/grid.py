"""The compat grid (/-/grid) and the legend (/-/legend).

The grid: ops as rows, torch versions as columns grouped by device and OS
(mpsprobe.db.query.grid answers); each cell a status symbol and colour, "k of
n" cases working when only some do, the reason kind of its worst cases, and
hatched when only PyTorch's declaration speaks for it. The legend: every
status and reason kind from mpsprobe.vocabulary, with an example from the
database.
"""
from datasette import hookimpl

from mpsprobe.db.query import grid as grid_q, legend as legend_q
from mpsprobe.site.common import (ask, cached, cases_url, get_database, op_url, reason_label, render,
                                  status_symbol, url)
from mpsprobe.vocabulary import FORWARD, PASS_COLUMN, PASSES, REASON_KIND, STATUS, STATUSES, is_status

PAGE_SIZE = 100


def _pattern(text):
    text = (text or "").strip()
    if not text:
        return ""
    return text.replace("*", "%").replace("?", "_") if "*" in text or "?" in text else f"%{text}%"


def _why(cell):
    """The worst cases' reason, with the macOS they need where they name one ("needs macOS 14.0")."""
    if cell.get("reason_kind") == "macos_version" and cell.get("min_macos"):
        return f"needs macOS {cell['min_macos']}"
    return reason_label(cell["reason_kind"])


def _cell(datasette, db, op_id, dtype, cell):
    if cell is None:
        return None
    status = cell["status"]
    partial = cell["k"] is not None and 0 < cell["k"] < cell["n"]
    if cell["declared_only"]:
        href, note = url(datasette, f"/{db.name}/declared", op_id=op_id,
                         torch_version=cell["torch_version"]), "declared, not measured"
    elif dtype:
        href, note = cases_url(datasette, db, cell["run_id"], op_id, dtype), ""
    else:
        href, note = url(datasette, f"/{db.name}/results", run_id=cell["run_id"], op_id=op_id), ""
    return {"status": status, "known": is_status(status), "symbol": status_symbol(status),
            "partial": f"{cell['k']} of {cell['n']}" if partial else "",
            "reason": _why(cell), "declared": cell["declared_only"],
            "href": href, "note": note, "torch_version": cell["torch_version"]}


@cached
async def grid_page(datasette, request):
    db = get_database(datasette)
    args = request.args
    op_filter, dtype = args.get("op", ""), args.get("dtype", "")
    pass_ = args.get(PASS_COLUMN) if args.get(PASS_COLUMN) in PASSES else FORWARD
    wanted = [s for s in args.getlist("status") if is_status(s)]
    try:
        page = max(1, int(args.get("page") or 1))
    except ValueError:
        page = 1
    found = await ask(db, grid_q.grid, _pattern(op_filter), dtype, pass_, wanted,
                      limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)
    rows = [{"op_id": r["op_id"], "op_url": op_url(datasette, r["op_id"]),
             "ranges": r["ranges"],
             "cells": [_cell(datasette, db, r["op_id"], dtype, c) for c in r["cells"]]}
            for r in found["rows"]]
    pages = (found["total"] + PAGE_SIZE - 1) // PAGE_SIZE
    params = {"op": op_filter, "dtype": dtype, PASS_COLUMN: pass_ if pass_ != FORWARD else ""}
    return await render(datasette, request, "mpsprobe_grid.html", {
        "title": "Compat grid", "db": db.name, "columns": found["columns"],
        "groups": found["groups"], "rows": rows, "total": found["total"], "page": page,
        "pages": pages, "op_filter": op_filter, "dtype": dtype, "pass_": pass_,
        "passes": PASSES, "wanted": wanted,
        "dtypes": await ask(db, legend_q.dtypes),
        "prev_url": url(datasette, "/-/grid", page=page - 1, **params) if page > 1 else None,
        "next_url": url(datasette, "/-/grid", page=page + 1, **params) if page < pages else None,
    }, data={"columns": [{"group": c["label"], "torch_version": c["torch_version"],
                          "run_id": c["run_id"]} for c in found["columns"]],
             "total": found["total"], "page": page, "pages": pages,
             "rows": [{"op_id": r["op_id"], "ranges": r["ranges"], "cells": r["cells"]}
                      for r in found["rows"]]})


async def legend_page(datasette, request):
    db = get_database(datasette)
    examples = await ask(db, legend_q.examples)
    statuses = [{"name": s, "symbol": STATUS[s].symbol, "label": STATUS[s].label,
                 "meaning": STATUS[s].meaning,
                 "example": examples.get(s) and dict(
                     examples[s], href=cases_url(datasette, db, examples[s]["run_id"],
                                                 examples[s]["op_id"], examples[s]["dtype"]),
                     op_url=op_url(datasette, examples[s]["op_id"]))}
                for s in STATUSES]
    return await render(datasette, request, "mpsprobe_legend.html", {
        "title": "What the statuses mean", "legend_statuses": statuses},
        data={"statuses": [{k: v for k, v in s.items() if k != "example"} for s in statuses],
              "reason_kinds": [{"name": r.name, "label": r.label, "meaning": r.meaning,
                                "statuses": list(r.statuses)}
                               for r in REASON_KIND.values()]})


@hookimpl
def register_routes():
    return [(r"^/-/grid(\.json)?$", grid_page), (r"^/-/legend(\.json)?$", legend_page)]
