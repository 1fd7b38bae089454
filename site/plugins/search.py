"""Search (/-/search): ops by what people type, one row per op with its answers.

mpsprobe.db.query.search finds the ops (op names, aten names, module names,
words in any spelling); mpsprobe.db.query.grid answers each found op's newest
column per device and OS, in the grid's words. Every match is counted and
paged: nothing is cut off silently. The full-text search over error messages
stays a canned query, linked from here.
"""
from datasette import hookimpl

from mpsprobe.db.query import grid as grid_q, search as search_q
from mpsprobe.site.common import ask, cached, get_database, op_url, refuse, render, too_long, url
from mpsprobe.vocabulary import PARTIAL, SUPPORT

PAGE_SIZE = 50


def _summary(cell):
    count = f"{cell['k']} of {cell['n']} dtypes" if cell["answer"] == PARTIAL else ""
    return {"where": cell["where"], "torch_version": cell["torch_version"], "answer": cell["answer"],
            "symbol": SUPPORT[cell["answer"]].symbol, "count": count, "declared": cell["declared_only"],
            "title": "; ".join([f"torch {cell['torch_version']}: {cell['answer']}", *cell["notes"]]
                               + (["declared, not measured"] if cell["declared_only"] else []))}


@cached
async def search_page(datasette, request):
    db = get_database(datasette)
    q = request.args.get("q", "")
    if too_long(q):
        return await refuse(datasette, request, "the search", q)
    try:
        page = max(1, int(request.args.get("page") or 1))
    except ValueError:
        page = 1
    found = await ask(db, search_q.search, q)
    shown = found[(page - 1) * PAGE_SIZE:page * PAGE_SIZE]
    answers = await ask(db, grid_q.grid, ops=[m["op_id"] for m in shown]) if shown else {"rows": [],
                                                                                       "columns": []}
    summary = grid_q.newest_answers(answers)
    rows = [dict(m, op_url=op_url(datasette, m["op_id"]),
                 answers=[_summary(c) for c in summary.get(m["op_id"], [])]) for m in shown]
    pages = max(1, (len(found) + PAGE_SIZE - 1) // PAGE_SIZE)
    return await render(datasette, request, "mpsprobe_search.html", {
        "title": "Search ops", "q": q, "rows": rows, "total": len(found), "page": page, "pages": pages,
        "first": (page - 1) * PAGE_SIZE + 1,
        "words": search_q.words(q), "how": found[0]["how"] if found else "",
        "messages_url": url(datasette, f"/{db.name}/search", q=q),
        "prev_url": url(datasette, "/-/search", q=q, page=page - 1) if page > 1 else None,
        "next_url": url(datasette, "/-/search", q=q, page=page + 1) if page < pages else None,
    }, data={"q": q, "total": len(found), "page": page, "pages": pages, "page_size": PAGE_SIZE,
             "rows": [{"op_id": r["op_id"], "aten_name": r["aten_name"], "matched_by": r["how"],
                       "answers": [{k: a[k] for k in ("where", "torch_version", "answer", "count", "declared")}
                                   for a in r["answers"]]} for r in rows]})


@hookimpl
def register_routes():
    return [(r"^/-/search(\.json)?$", search_page)]
