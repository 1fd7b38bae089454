"""The compat grid (/-/grid) and the legend (/-/legend).

The grid: ops as rows, torch versions as columns grouped by device and OS
(mpsprobe.db.query.grid answers); each cell one answer over the dtypes in view
(supported, partial, unsupported, unknown) with "k of n dtypes" and the notes
that matter on hover, the reason of its worst dtype, and hatched when only
PyTorch's declaration speaks for it. What a device lacks altogether (MPS's
float64) is a footnote on its columns. An "eager | compiled" switch shows the
compiled layer (grid_q's pass `compiled`), off and "not measured" where no run
compiled ops. The legend: every
status and reason kind from mpsprobe.vocabulary, with an example from the
database.
"""
import html
import os
import urllib.parse

from datasette import hookimpl
from markupsafe import Markup

from mpsprobe.db.query import grid as grid_q, legend as legend_q
from mpsprobe.site.charts import SHARE_COLOURS
from mpsprobe.site.common import (ask, cached, cases_url, get_database, op_url, reason_label, refuse,
                                  render, too_long, url)
from mpsprobe.vocabulary import (COMPILED, EAGER_PASSES, FORWARD, PARTIAL, PASS_COLUMN, PASSES, REASON_KIND, STATUS, STATUSES, SUPPORT, SUPPORTED,
                                 SUPPORTS, WORKING, is_status)

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


def _links(datasette, db, dtypes, pass_=FORWARD):
    """href(op_id, cell) for the grid's cells: the prefixes built once a page, not a
    urlencode a cell (1,500 cells a page). A pass other than forward is kept in a
    link to the results table."""
    quote = urllib.parse.quote
    in_pass = "" if pass_ == FORWARD else f"&{PASS_COLUMN}={quote(pass_, safe='')}"
    declared = url(datasette, f"/{db.name}/declared") + "?op_id="
    if len(dtypes) == 1:
        cases = url(datasette, f"/{db.name}/cell_cases") + "?run_id="

        def href(op_id, cell):
            if cell["declared_only"]:
                return f"{declared}{quote(op_id, safe='')}&torch_version={quote(cell['torch_version'], safe='')}"
            return (f"{cases}{quote(cell['run_id'], safe='')}&op_id={quote(op_id, safe='')}"
                    f"&dtype={quote(dtypes[0], safe='')}")
        return href
    results = url(datasette, f"/{db.name}/results") + "?run_id="

    def href(op_id, cell):
        if cell["declared_only"]:
            return f"{declared}{quote(op_id, safe='')}&torch_version={quote(cell['torch_version'], safe='')}"
        return f"{results}{quote(cell['run_id'], safe='')}&op_id={quote(op_id, safe='')}{in_pass}"
    return href


def _cell_html(op_id, cell, where, href):
    """One grid cell as HTML (built here, not in Jinja: ~40 µs a cell there)."""
    if cell is None:
        return '<td class="mp-none" title="not measured"></td>'
    esc = html.escape
    answer = cell["answer"]
    count = f"{cell['k']} of {cell['n']} dtypes" if cell["n"] else ""
    failing = [d for d, status in cell["dtypes"].items() if status not in WORKING]
    # Under the symbol: the worst dtype's reason, else which dtypes do not work (a declaration has no reason).
    reason = "" if answer == SUPPORTED else _why(cell) or ("not " + ", ".join(failing[:2])
                                                            + (" …" if len(failing) > 2 else ""))
    title = "; ".join(x for x in (f"torch {cell['torch_version']} on {where}: {answer}", count, *cell["notes"],
                                  "declared, not measured" if cell["declared_only"] else "") if x)
    return (f'<td class="sp-{answer}{" declared" if cell["declared_only"] else ""}">'
            f'<a href="{esc(href(op_id, cell))}" title="{esc(title)}">{SUPPORT[answer].symbol}'
            + (f" <small>{esc(count)}</small>" if answer == PARTIAL else "")
            + (f'<small class="mp-reason">{esc(reason)}</small>' if reason else "") + "</a></td>")


def _row_html(datasette, row, cols, groups, href):
    esc = html.escape
    parts = [f'<tr><th class="mp-op"><a href="{esc(op_url(datasette, row["op_id"]))}"><bdi>{esc(row["op_id"])}</bdi></a>']
    for label, (since, until) in row["ranges"].items():
        where = (label.split(" · ")[1] + ": ") if len(groups) > 1 and " · " in label else ""
        if since:
            parts.append(f' <small class="mp-since" title="{esc(label)}">{esc(where)}since {esc(since)}</small>')
        elif until:
            parts.append(f' <small class="mp-until" title="{esc(label)}">{esc(where)}until {esc(until)}</small>')
    parts.append("</th>")
    parts += [_cell_html(row["op_id"], c, col["label"], href) for c, col in zip(row["cells"], cols)]
    parts.append("</tr>")
    return "".join(parts)


def _chips(datasette, params, dtypes, chosen):
    """The dtype chips: each toggles its dtype in the view; "every dtype" clears them."""
    chips = [{"label": "every dtype", "on": not chosen,
              "href": url(datasette, "/-/grid", **dict(params, dtype=None))}]
    for d in dtypes:
        toggled = [x for x in chosen if x != d] if d in chosen else [*chosen, d]
        chips.append({"label": d, "on": d in chosen,
                      "href": url(datasette, "/-/grid", **dict(params, dtype=toggled or None))})
    return chips


EAGER = "eager"


def _layers(datasette, params, pass_, compiled_measured):
    """The "eager | compiled" switch: each layer's label, link (None: the one shown, or
    the compiled layer where no run compiled anything) and why it is off."""
    eager_pass = pass_ if pass_ != COMPILED else FORWARD
    return [{"label": EAGER, "on": pass_ != COMPILED, "title": "the ops run eagerly",
             "href": url(datasette, "/-/grid", **dict(params, **{PASS_COLUMN: "" if eager_pass == FORWARD
                                                                 else eager_pass}))},
            {"label": COMPILED, "on": pass_ == COMPILED,
             "title": ("each op's forward through torch.compile, judged against the CPU" if compiled_measured
                       else "not measured: no run here compiled ops (mpsprobe run --passes compiled)"),
             "href": url(datasette, "/-/grid", **dict(params, **{PASS_COLUMN: COMPILED}))
             if compiled_measured else None}]


@cached
async def grid_page(datasette, request):
    db = get_database(datasette)
    args = request.args
    op_filter = args.get("op", "")
    if too_long(op_filter):
        return await refuse(datasette, request, "the op filter", op_filter)
    known = await ask(db, grid_q.dtypes)
    chosen = [d for d in dict.fromkeys(args.getlist("dtype")) if d in known]
    pass_ = args.get(PASS_COLUMN) if args.get(PASS_COLUMN) in PASSES else FORWARD
    wanted = [s for s in args.getlist("status") if is_status(s)]
    try:
        page = max(1, int(args.get("page") or 1))
    except ValueError:
        page = 1
    compiled_measured = await ask(db, grid_q.compiled_measured)
    if pass_ == COMPILED and not compiled_measured:   # "not measured", never every op unknown
        found = {"columns": [], "groups": [], "footnotes": {}, "rows": [], "total": 0}
    else:
        found = await ask(db, grid_q.grid, _pattern(op_filter), chosen, pass_, wanted,
                          limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)
    cols = found["columns"]
    href = _links(datasette, db, chosen, pass_)
    rows = Markup("\n".join(_row_html(datasette, r, cols, found["groups"], href) for r in found["rows"]))
    pages = (found["total"] + PAGE_SIZE - 1) // PAGE_SIZE
    params = {"op": op_filter, "dtype": chosen or None, "status": wanted or None,
              PASS_COLUMN: pass_ if pass_ != FORWARD else ""}
    # One footnote per text (MPS's float64 for every MPS group), numbered as the groups come.
    texts = list(dict.fromkeys(t for l, _ in found["groups"] for t in found["footnotes"].get(l, [])))
    marks = {l: texts.index(ts[0]) + 1 for l, ts in found["footnotes"].items()}
    layers = _layers(datasette, {k: v for k, v in params.items() if k != PASS_COLUMN}, pass_, compiled_measured)
    return await render(datasette, request, "mpsprobe_grid.html", {
        "title": "Compat grid", "db": db.name, "columns": cols, "layers": layers,
        "compiled": pass_ == COMPILED, "compiled_measured": compiled_measured,
        "groups": found["groups"], "rows": rows, "shown": len(found["rows"]), "total": found["total"], "page": page,
        "pages": pages, "op_filter": op_filter, "chosen": chosen, "pass_": pass_,
        "passes": EAGER_PASSES, "wanted": wanted, "supports": [SUPPORT[s] for s in SUPPORTS],
        "chips": _chips(datasette, {k: v for k, v in params.items() if k != "dtype"}, known, chosen),
        "marks": marks, "footnotes": [(i + 1, t) for i, t in enumerate(texts)],
        "measured_versions": {label: sum(1 for c in cols if c["label"] == label and c["run_id"])
                              for label, _ in found["groups"]},
        "prev_url": url(datasette, "/-/grid", page=page - 1, **params) if page > 1 else None,
        "next_url": url(datasette, "/-/grid", page=page + 1, **params) if page < pages else None,
    }, data={"layer": COMPILED if pass_ == COMPILED else EAGER, PASS_COLUMN: pass_,
             "compiled_measured": compiled_measured,
             "columns": [{"group": c["label"], "torch_version": c["torch_version"],
                          "run_id": c["run_id"]} for c in cols],
             "dtypes": chosen, "footnotes": found["footnotes"],
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


# The home page's chart per served file and modification time: its queries read every run.
_CHART = {}


async def support_chart(datasette):
    """The home page's chart of support across releases, with its numbers as a table."""
    from mpsprobe.site.charts import svg_share_chart
    from mpsprobe.versions import sort_key
    db = get_database(datasette)
    key = None if db.is_mutable or not db.path else (db.path, os.path.getmtime(db.path))
    if key is None or key not in _CHART:
        groups = await ask(db, grid_q.support_by_release)
        groups = [g for g in groups if g["points"]]
        # One x position per release: 2.13.0 and 2.13.0+cpu are the same release.
        def release(version):
            return version.split("+", 1)[0]
        versions = sorted({release(p["torch_version"]) for g in groups for p in g["points"]}, key=sort_key)
        series = [(g["label"], g["declared"], {release(p["torch_version"]): p["working"] / p["ops"]
                                                for p in g["points"]}) for g in groups]
        title = "Share of ops that work in at least one dtype, per torch release"
        answer = {"svg": Markup(svg_share_chart(series, versions, title=title)), "groups": groups,
                  "title": title, "colours": list(SHARE_COLOURS)}
        if key is None:
            return answer
        _CHART.clear()
        _CHART[key] = answer
    return _CHART[key]


@hookimpl
def extra_template_vars(template, datasette):
    if template != "index.html":
        return {}

    async def chart():
        return {"mpsprobe_chart": await support_chart(datasette)}
    return chart


@hookimpl
def register_routes():
    return [(r"^/-/grid(\.json)?$", grid_page), (r"^/-/legend(\.json)?$", legend_page)]
