"""One op, as its page tells it: history per pass, declared vs measured per
release, the messages seen, its compiled cases beside the eager ones, and where
to look when the name is not an op."""
import json

from mpsprobe.versions import same_release, sort_key
from mpsprobe.vocabulary import COMPILED, FORWARD, PASSES, PASS_COLUMN
from . import declared as declared_q, history, matrix, rows
from .runs import device_rank, machine_kind_sql

DTYPE_ORDER = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
               "float32", "float64", "complex32", "complex64", "complex128")


def order_dtypes(dtypes):
    known = [d for d in DTYPE_ORDER if d in dtypes]
    return known + sorted(set(dtypes) - set(known))


def passes(conn, op_id):
    found = {r[0] for r in conn.execute(
        f"SELECT DISTINCT {PASS_COLUMN} FROM results WHERE op_id = ?", [op_id])}
    return [p for p in PASSES if p in found] + sorted(found - set(PASSES))


def messages(conn, op_id, limit=20):
    """The distinct messages the op's cases gave, most frequent first, per device and kind of
    machine (a virtual machine's apart from bare metal's)."""
    have = {r[1] for r in conn.execute("PRAGMA table_info(results)")}
    kind = "results.reason_kind" if "reason_kind" in have else "NULL"
    macos = "results.min_macos" if "min_macos" in have else "NULL"
    said = "coalesce(results.message, results.reason)"
    return rows(conn, f"""
        SELECT results.status, {kind} AS reason_kind, {macos} AS min_macos, results.dtype,
               {said} AS message, count(*) AS n_cases, count(DISTINCT results.run_id) AS n_runs,
               min(results.run_id) AS run_id, runs.device, {machine_kind_sql()} AS machine_kind
        FROM results JOIN runs ON runs.id = results.run_id
        WHERE results.op_id = ? AND {said} IS NOT NULL AND {said} != ''
        GROUP BY results.status, {said}, runs.device, machine_kind ORDER BY n_cases DESC LIMIT ?""",
                [op_id, limit])


def releases(conn, op_id, configurations, declared):
    """Declared vs measured per (torch release, device, dtype): what PyTorch
    declares beside what the newest run of that release measured."""
    measured = {}
    for c in configurations:
        device = declared_q.declared_device(c["run"]["device"])
        for dtype, status in c["cells"].items():
            measured.setdefault((device, c["run"]["torch_version"], dtype), status)
    found = []
    for d in declared:
        versions = [v for (dev, v, dt) in measured if dev == d["device"] and dt == d["dtype"]]
        version = same_release(versions, d["torch_version"])
        found.append({"torch_version": d["torch_version"], "device": d["device"],
                      "dtype": d["dtype"], "declared": d["status"],
                      "measured": measured.get((d["device"], version, d["dtype"]))})
    found.sort(key=lambda r: (r["device"], r["dtype"]))
    found.sort(key=lambda r: sort_key(r["torch_version"]), reverse=True)
    return found


# What the op page shows of an op the store knows only from elsewhere (speed).
EMPTY_PAGE = {"op": None, "history": {}, "declared": [], "dtypes": [], "releases": [],
              "firsts": [], "notes": [], "messages": []}


def op_page(conn, op_id):
    """Everything the op page shows, or None when the database knows no such op."""
    op = matrix.op(conn, op_id)
    by_pass = {p: history.op_history(conn, op_id, p) for p in passes(conn, op_id)}
    declared = declared_q.for_op(conn, op_id)
    if not op and not any(by_pass.values()) and not declared:
        return None
    # History columns are the dtypes measured: declared-only dtypes (bool, uint8, …) would
    # push the measured ones off-screen; they have the declared table of their own.
    dtypes = order_dtypes({d for cs in by_pass.values() for c in cs for d in c["cells"]}
                          or {d["dtype"] for d in declared})
    forward = next(iter(by_pass.values()), [])
    return {"op": op, "history": by_pass, "declared": declared, "dtypes": dtypes,
            "releases": releases(conn, op_id, forward, declared),
            "firsts": history.firsts(conn, op_id), "notes": history.notes(conn, op_id),
            "messages": messages(conn, op_id)}


def variants(conn, op_id):
    """Op ids that are variants of `op_id` (nn.functional.interpolate.bilinear)."""
    return [r[0] for r in conn.execute(
        "SELECT id FROM ops WHERE id > ? AND id < ? ORDER BY id", [op_id + ".", op_id + "/"])]


def similar(conn, name, limit=8):
    """Op ids containing `name`, or whose last dotted component starts with it."""
    last = name.rsplit(".", 1)[-1]
    found = [r[0] for r in conn.execute(
        "SELECT id FROM ops WHERE id LIKE ? ORDER BY length(id), id LIMIT ?",
        [f"%{last}%", limit])]
    return found


def compiled_beside_eager(conn, op_id):
    """Per run and dtype where the op was compiled (newest run first): the worst status of
    its forward cases ("eager") and of its compiled cases ("compiled"), the compiled cases'
    worst reason kind and the ops the compiler left to eager ("left_to_eager", from their
    fallback_ops), with the run's facts."""
    from mpsprobe.db.views import in_list, status_rank, worst_status
    from mpsprobe.vocabulary import WORKING

    def of(pass_, column="status"):
        return f"(CASE WHEN res.{PASS_COLUMN} = '{pass_}' THEN res.{column} END)"
    # The reason of the worst compiled cases: "rank|kind", the highest rank wins.
    why = (f"max(CASE WHEN res.{PASS_COLUMN} = '{COMPILED}' AND res.status NOT IN {in_list(WORKING)} "
           f"THEN printf('%02d|%s', {status_rank('res.status')}, coalesce(res.reason_kind, '')) END)")
    found = rows(conn, f"""
        SELECT res.run_id, res.dtype, {worst_status(of(FORWARD))} AS eager,
               {worst_status(of(COMPILED))} AS compiled, {why} AS why,
               sum(res.{PASS_COLUMN} = '{COMPILED}') AS n_compiled,
               (SELECT json_group_array(DISTINCT je.value) FROM results AS c, json_each(c.fallback_ops) AS je
                WHERE c.op_id = res.op_id AND c.dtype = res.dtype AND c.{PASS_COLUMN} = '{COMPILED}'
                  AND c.run_id = res.run_id AND json_valid(c.fallback_ops)) AS left_to_eager,
               r.device, r.device_name, r.torch_version, r.os_name, r.os_version, r.chip, r.started,
               r.virtualized, r.translated, r.backend, r.device_env, {machine_kind_sql('r')} AS machine_kind
        FROM results res JOIN runs r ON r.id = res.run_id
        WHERE res.op_id = ? AND res.{PASS_COLUMN} IN (?, ?)
        GROUP BY res.run_id, res.dtype HAVING n_compiled > 0
        ORDER BY r.started DESC, res.run_id""", [op_id, FORWARD, COMPILED])
    for r in found:
        r["reason_kind"] = (r.pop("why") or "|").split("|", 1)[1] or None
        r["left_to_eager"] = sorted(json.loads(r["left_to_eager"] or "[]"))
    order = {d: i for i, d in enumerate(order_dtypes({r["dtype"] for r in found}))}
    found.sort(key=lambda r: order[r["dtype"]])
    found.sort(key=lambda r: r["started"] or "", reverse=True)
    found.sort(key=lambda r: device_rank(r["device"]))   # MPS first, as the answers are
    return found
