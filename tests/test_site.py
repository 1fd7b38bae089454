"""The Datasette site, through Datasette's own test client, on a DB the real probe built.

The fixture DB holds three real runs: the session's fake-MPS run (every failure
mode), the session's CPU run (timings), and one more fake-MPS run with a
different fault configuration, relabelled as an older torch on an older macOS
so the op history has two versions. Every expectation is derived from the DB
with SQL, never copied from output.
"""
import asyncio
import hashlib
import html
import json
import re
import shutil
import sqlite3
import urllib.parse

import pytest

from mpsprobe.vocabulary import FALLBACK, FORWARD, PASS_COLUMN, STATUS, STATUSES, SUPPORT, WORKING
from mpsprobe.versions import version_key
from mpsprobe.site import database_name, make_datasette

pytestmark = pytest.mark.slow  # every test reads the site's database, made by three sweeps


@pytest.fixture(scope="module")
def ds(site_db):
    datasette = make_datasette(site_db)
    asyncio.run(datasette.invoke_startup())
    return datasette


def get(ds, path):
    async def fetch():
        return await ds.client.get(path)
    response = asyncio.run(fetch())
    assert response.status_code == 200, (path, response.text[:2000])
    return response


def query_json(ds, db_path, name, **params):
    params["_shape"] = "array"
    return get(ds, f"/{database_name(db_path)}/{name}.json?{urllib.parse.urlencode(params)}").json()


@pytest.fixture(scope="session")
def runs_by_device(rows):
    def runs_by_device(db_path):
        return {r["device"]: r for r in rows(db_path, "SELECT * FROM runs ORDER BY started")}
    return runs_by_device


@pytest.fixture(scope="session")
def fake_runs(rows):
    def fake_runs(db_path):
        return rows(db_path, "SELECT * FROM runs WHERE device = 'fake-mps' ORDER BY torch_version_key")
    return fake_runs


def matrix_cells(page):
    """{(op, dtype): status} from the matrix HTML, reading each cell's link."""
    cells = {}
    for status, href in re.findall(r'<td class="st-(\w+)"><a href="([^"]+)"', page):
        query = urllib.parse.parse_qs(urllib.parse.urlparse(html.unescape(href)).query)
        cells[(query["op_id"][0], query["dtype"][0])] = status
    return cells


@pytest.fixture(scope="session")
def db_cells(rows):
    def db_cells(db_path, run_id):
        return {(r["op_id"], r["dtype"]): r["status"] for r in rows(
            db_path, f"SELECT op_id, dtype, status FROM op_dtype_status WHERE run_id = ? AND {PASS_COLUMN} = ?",
            [run_id, FORWARD])}
    return db_cells


@pytest.fixture
def site_copy(site_db, tmp_path):
    """A writable copy of the site's database: copy(name) -> (its path, an open connection)."""
    def copy(name):
        path = tmp_path / name
        shutil.copy(site_db, path)
        return path, sqlite3.connect(path)
    return copy


def test_every_page_and_query_answers(ds, site_db, rows):
    name = database_name(site_db)
    ops = [r["id"] for r in rows(site_db, "SELECT id FROM ops")]
    paths = ["/", f"/{name}", "/-/matrix", "/-/compare", "/mpsprobe-static/site.css",
             f"/{name}/results", f"/{name}/op_dtype_status", f"/{name}/runs",
             f"/{name}/results.csv", f"/{name}/op_dtype_status.json"]
    paths += [f"/-/op/{urllib.parse.quote(op, safe='')}" for op in ops]
    paths += [f"/{name}/{q}" for q in ("fallbacks", "unsupported_for_dtype", "slowest_vs_cpu",
                                       "first_pass_version", "check_ops", "search", "cell_cases")]
    for path in paths:
        get(ds, path)


def test_matrix_shows_every_measured_cell_with_its_status(ds, site_db, db_cells, rows):
    for run in rows(site_db, "SELECT id FROM runs"):
        page = get(ds, f"/-/matrix?run={run['id']}").text
        expected = db_cells(site_db, run["id"])
        assert matrix_cells(page) == expected
        for status in set(expected.values()):  # the legend counts what is shown
            n = sum(s == status for s in expected.values())
            symbol = STATUS[status].symbol
            assert re.search(rf'st-{status}">{re.escape(symbol)} {status}</span> <small>{n}</small>', page)


def test_every_page_gets_the_vocabularys_status_colours(ds):
    page = get(ds, "/-/matrix").text
    links = re.findall(r'<link rel="stylesheet" href="([^"]+)"', page)
    assert links.index("/-/mpsprobe-statuses.css") < links.index("/mpsprobe-static/site.css")
    css = get(ds, "/-/mpsprobe-statuses.css")
    assert css.headers["content-type"].startswith("text/css")
    for status in STATUSES:
        colours = STATUS[status]
        assert f"--st-{status}: {colours.colour}; --st-{status}-bg: {colours.background};" in css.text
        assert f".st-{status} {{ --fg: var(--st-{status}); --bg: var(--st-{status}-bg); }}" in css.text
    site_css = get(ds, "/mpsprobe-static/site.css").text
    used = set(re.findall(r"var\((--[\w-]+)", site_css)) - {"--fg", "--bg"}
    assert used and used <= set(re.findall(r"(--[\w-]+):", css.text))   # every colour it uses is defined


def test_check_findings_ops_and_the_pages_answer_from_the_same_run(site_copy):
    """One run picker: with an older torch's run recorded last, `check`, `findings`,
    `ops --db`, the matrix and the check-ops page all answer from the newest torch's run."""
    import mpsprobe
    from pathlib import Path
    from mpsprobe.db.query import runs as runs_q
    path, conn = site_copy("same.db")
    picked = runs_q.pick_run(conn)
    accelerated = conn.execute("SELECT id, torch_version_key FROM runs WHERE device != 'cpu' "
                               "ORDER BY started DESC").fetchall()
    assert accelerated[0][0] != picked["id"]                      # not the newest start
    assert picked["torch_version_key"] == max(key for _, key in accelerated)
    with conn:   # a declaration of the picked run's release, for findings to compare with
        conn.execute("INSERT INTO declared (torch_version, device, op_id, dtype, status, source, note) "
                     "VALUES (?, 'mps', 'add', 'float32', 'pass', 'test', NULL)", [picked["torch_version"]])
    conn.close()
    model = Path(__file__).parent / "models" / "convnet.py"
    assert mpsprobe.check_model(str(model), db=path).run["id"] == picked["id"]
    assert mpsprobe.findings(path)["run"]["id"] == picked["id"]
    assert mpsprobe.op_statuses(path)[0]["id"] == picked["id"]
    datasette = make_datasette(str(path))
    asyncio.run(datasette.invoke_startup())
    assert get(datasette, "/-/matrix.json").json()["run"]["id"] == picked["id"]
    page = get(datasette, "/-/check-ops?ops=aten::add.Tensor").text
    assert f"Answered from run {picked['id'][:12]}" in page


def test_the_matrix_toggles_between_passes(ds, site_db, rows):
    shown = 0
    for run in rows(site_db, "SELECT id FROM runs"):
        for pass_ in ("backward", "inplace", "out"):
            expected = {(r["op_id"], r["dtype"]): r["status"] for r in rows(
                site_db, f"SELECT op_id, dtype, status FROM op_dtype_status WHERE run_id = ? AND {PASS_COLUMN} = ?",
                [run["id"], pass_])}
            assert matrix_cells(get(ds, f"/-/matrix?run={run['id']}&pass={pass_}").text) == expected, pass_
            shown += len(expected)
    assert shown  # the fixture has cases of other passes than the forward


def test_fixture_covers_the_statuses_the_site_colours(site_db, rows):
    present = {r["status"] for r in rows(site_db, "SELECT DISTINCT status FROM results")}
    assert {"pass", "fallback", "mismatch", "unsupported", "crash", "timeout"} <= present


def test_matrix_defaults_to_the_run_pickers_run(ds, site_db, db_cells, rows):
    """Not a CPU run; then the newest torch version (not the newest start: the
    older torch's run was recorded last); then the newest run."""
    newest = rows(site_db, "SELECT id FROM runs WHERE device != 'cpu' "
                           "ORDER BY torch_version_key DESC, started DESC")[0]
    assert matrix_cells(get(ds, "/-/matrix").text) == db_cells(site_db, newest["id"])
    last_started = rows(site_db, "SELECT id FROM runs ORDER BY started DESC")[0]
    assert last_started["id"] != newest["id"]


def test_matrix_picks_a_run_by_torch_os_and_device(ds, site_db, db_cells, rows, site_old_run):
    old_torch = site_old_run[0]
    old = rows(site_db, "SELECT id FROM runs WHERE torch_version = ?", [old_torch])[0]
    page = get(ds, f"/-/matrix?torch={old_torch[:3]}&os=14&device=fake-mps").text
    assert matrix_cells(page) == db_cells(site_db, old["id"])


def test_matrix_filters_by_op_and_status(ds, site_db, db_cells, fake_runs):
    run = fake_runs(site_db)[-1]["id"]
    cells = db_cells(site_db, run)
    by_op = matrix_cells(get(ds, f"/-/matrix?run={run}&op=hist").text)
    assert by_op == {k: v for k, v in cells.items() if "hist" in k[0]}
    glob = matrix_cells(get(ds, f"/-/matrix?run={run}&op=e*").text)
    assert glob == {k: v for k, v in cells.items() if k[0].startswith("e")}
    for status in ("unsupported", "crash"):
        shown = {op for op, _ in matrix_cells(
            get(ds, f"/-/matrix?run={run}&status={status}").text)}
        assert shown == {op for (op, _), s in cells.items() if s == status}


def test_cell_link_lists_the_cases_behind_it(ds, site_db, db_cells, fake_runs, rows):
    run = fake_runs(site_db)[-1]["id"]
    for (op_id, dtype) in db_cells(site_db, run):
        got = query_json(ds, site_db, "cell_cases", run_id=run, op_id=op_id, dtype=dtype)
        want = rows(site_db, "SELECT case_id, status, message FROM results WHERE run_id = ? "
                    "AND op_id = ? AND dtype = ?", [run, op_id, dtype])
        assert sorted((r["case_id"], r["status"], r["message"]) for r in got) == \
            sorted((r["case_id"], r["status"], r["message"]) for r in want)
        assert all(r["sample"] for r in got)


def test_op_page_shows_history_across_versions(ds, site_db, rows):
    runs = rows(site_db, "SELECT * FROM runs")
    for op in ("exp", "add", "histc"):
        page = get(ds, f"/-/op/{op}").text
        measured = rows(site_db, "SELECT DISTINCT run_id FROM op_dtype_status WHERE op_id = ?", [op])
        for run in runs:
            if run["id"] in {m["run_id"] for m in measured}:
                assert f"torch {run['torch_version']}" in page
        statuses = {r["status"] for r in rows(
            site_db, "SELECT status FROM op_dtype_status WHERE op_id = ?", [op])}
        for status in statuses:
            assert f'class="st-{status}"' in page


def test_op_page_says_since_when_an_op_works(ds, site_db, db_cells, fake_runs):
    fake = fake_runs(site_db)
    old, new = fake[0], fake[-1]
    for dtype in ("float16", "float32"):
        before = db_cells(site_db, old["id"])[("exp", dtype)]
        after = db_cells(site_db, new["id"])[("exp", dtype)]
        page = html.unescape(get(ds, "/-/op/exp").text)
        line = re.search(rf"<strong>{dtype}</strong> on fake-mps — ([^<]*)</li>", page).group(1)
        if before not in WORKING and after in WORKING:
            assert line == f"works since torch {new['torch_version']}"
        elif after not in WORKING:
            assert line.startswith(f"{after} in torch {new['torch_version']}")


def test_compare_lists_only_differing_cells_with_regressions_and_fixes(ds, site_db, db_cells, fake_runs, runs_by_device):
    devices = runs_by_device(site_db)
    cpu, fake = devices["cpu"]["id"], fake_runs(site_db)[-1]["id"]
    a, b = db_cells(site_db, cpu), db_cells(site_db, fake)
    differing = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    page = get(ds, f"/-/compare?a={cpu}&b={fake}").text
    shown = re.findall(r'<tr class="mp-(\w+)"><th><a href="[^"]+"><bdi>([^<]+)</bdi></a></th><td>(\w+)</td>', page)
    assert {(op, dtype) for _, op, dtype in shown} == differing
    for kind, op, dtype in shown:
        before, after = a.get((op, dtype)), b.get((op, dtype))
        if before in WORKING and after is not None and after not in WORKING:
            assert kind == "regression"
    # The other way round, every regression becomes a fix.
    back = get(ds, f"/-/compare?a={fake}&b={cpu}").text
    back_kinds = dict(((op, dt), k) for k, op, dt in re.findall(
        r'<tr class="mp-(\w+)"><th><a href="[^"]+"><bdi>([^<]+)</bdi></a></th><td>(\w+)</td>', back))
    for kind, op, dtype in shown:
        if kind == "regression":
            assert back_kinds[(op, dtype)] == "fix"


def test_canned_fallbacks_and_unsupported(ds, site_db, rows):
    got = query_json(ds, site_db, "fallbacks")
    want = rows(site_db, "SELECT run_id, op_id, dtype FROM op_dtype_status WHERE n_fallback > 0")
    assert want and sorted((r["run_id"], r["op_id"], r["dtype"]) for r in got) == \
        sorted((r["run_id"], r["op_id"], r["dtype"]) for r in want)
    got = query_json(ds, site_db, "unsupported_for_dtype", dtype="float16")
    want = rows(site_db, "SELECT run_id, op_id FROM op_dtype_status "
                "WHERE status = 'unsupported' AND dtype = 'float16'")
    assert want and sorted((r["run_id"], r["op_id"]) for r in got) == \
        sorted((r["run_id"], r["op_id"]) for r in want)


def test_canned_slowest_vs_cpu(ds, site_db, rows):
    got = query_json(ds, site_db, "slowest_vs_cpu")
    want = rows(site_db, "SELECT run_id, op_id, dtype, mean_speedup FROM op_dtype_status "
                "WHERE mean_speedup < 1 ORDER BY mean_speedup")
    assert [(r["run_id"], r["op_id"], r["dtype"]) for r in got] == \
        [(r["run_id"], r["op_id"], r["dtype"]) for r in want]


def test_canned_first_pass_version(ds, site_db, rows):
    got = query_json(ds, site_db, "first_pass_version")
    measured = rows(site_db, "SELECT s.op_id, s.dtype, r.device, r.torch_version, s.status "
                    "FROM op_dtype_status s JOIN runs r ON r.id = s.run_id")
    firsts = {}
    for m in sorted(measured, key=lambda m: version_key(m["torch_version"])):
        if m["status"] == "pass":
            firsts.setdefault((m["op_id"], m["dtype"], m["device"]), m["torch_version"])
    shown = {}
    for r in got:
        key = (r["op_id"], r["dtype"], r["device"])
        if r["first_pass_torch"]:
            shown[key] = min(shown.get(key, r["first_pass_torch"]), r["first_pass_torch"],
                             key=version_key)
    assert shown == firsts


def test_canned_check_ops_takes_a_pasted_list(ds, site_db, db_cells, rows):
    # By default, the run picker's run (the matrix's default), not a second choice in SQL.
    newest = rows(site_db, "SELECT id FROM runs WHERE device != 'cpu' "
                           "ORDER BY torch_version_key DESC, started DESC")[0]["id"]
    got = query_json(ds, site_db, "check_ops", ops="add, histc\nno_such_op")
    cells = db_cells(site_db, newest)
    assert {(r["op_id"], r["dtype"], r["status"]) for r in got if r["status"]} == \
        {(op, dt, s) for (op, dt), s in cells.items() if op in ("add", "histc")}
    assert [r for r in got if r["op_id"] == "no_such_op"][0]["status"] is None


def test_search_is_full_text_over_ops_aten_ops_and_messages(ds, site_db, rows):
    got = query_json(ds, site_db, "search", q="histc")
    expected = rows(site_db, "SELECT run_id, case_id FROM results WHERE op_id LIKE '%histc%' "
                    "OR aten_op LIKE '%histc%' OR message LIKE '%histc%' "
                    "OR fallback_ops LIKE '%histc%' OR aten_ops LIKE '%histc%'")
    assert expected
    assert {(r["run_id"], r["case_id"]) for r in got} == \
        {(e["run_id"], e["case_id"]) for e in expected}
    # Words of a message, in any order, and text that is not valid FTS syntax.
    assert query_json(ds, site_db, "search", q="implemented MPS")
    assert query_json(ds, site_db, "search", q='"unbalanced ( OR') == []
    # Datasette's own table search uses the same index.
    page = get(ds, f"/{database_name(site_db)}/results.json?_search=histc&_shape=array").json()
    assert len(page) == len(expected)


def test_search_without_the_index_falls_back_to_substrings(site_copy, rows):
    path, conn = site_copy("nofts.db")
    with conn:
        for trigger in ("insert", "delete", "update"):
            conn.execute(f"DROP TRIGGER results_fts_{trigger}")
        conn.execute("DROP TABLE results_fts")
        # One more histc case that crashed: its aten op's row must now say crash,
        # the worst status, which sorts before the others as text.
        run_id = conn.execute("SELECT run_id FROM results WHERE op_id = 'histc' LIMIT 1").fetchone()[0]
        conn.execute("INSERT INTO cases (id, op_id, dtype, sample_index) VALUES ('histc|float32|99', 'histc', 'float32', 99)")
        conn.execute("INSERT INTO results (run_id, case_id, op_id, dtype, status, aten_ops, pass) VALUES "
                     "(?, 'histc|float32|99', 'histc', 'float32', 'crash', '[\"aten::histc\"]', 'forward')", [run_id])
    conn.close()
    datasette = make_datasette(path)
    got = query_json(datasette, str(path), "search", q="histc")
    assert {r["kind"] for r in got} == {"op", "aten op", "message"}
    from mpsprobe.vocabulary import worst
    cases = {}
    for r in rows(path, "SELECT r.op_id, r.dtype, r.status, je.value AS aten_op FROM results r, "
                        "json_each(r.aten_ops) je WHERE je.value LIKE '%histc%'"):
        cases.setdefault((r["aten_op"], r["op_id"], r["dtype"]), []).append(r["status"])
    aten_rows = {(r["matched"], r["op_id"], r["dtype"]): r["status"] for r in got if r["kind"] == "aten op"}
    assert aten_rows == {key: worst(statuses) for key, statuses in cases.items()}
    assert aten_rows["aten::histc", "histc", "float32"] == "crash"


def test_csv_export_still_works(ds, site_db, rows):
    text = get(ds, f"/{database_name(site_db)}/fallbacks.csv").text
    lines = text.strip().splitlines()
    assert lines[0].startswith("op_id,dtype,status")
    assert len(lines) - 1 == len(rows(site_db, "SELECT 1 FROM op_dtype_status WHERE n_fallback > 0"))


def test_status_colours_in_plain_table_views(ds, site_db, rows):
    name = database_name(site_db)
    for status in {r["status"] for r in rows(site_db, "SELECT DISTINCT status FROM results")}:
        page = get(ds, f"/{name}/results?status={status}").text
        assert f'<span class="st st-{status}">{STATUS[status].symbol} {status}</span>' in page
    page = get(ds, f"/{name}/fallbacks").text
    assert f'<span class="st st-fallback">{STATUS["fallback"].symbol} fallback</span>' in page


def test_declared_status_is_a_matrix_choice_and_looks_different(site_copy):
    path, conn = site_copy("declared.db")
    with conn:
        conn.executemany("INSERT INTO declared (torch_version, device, op_id, dtype, status, "
                         "source, note) VALUES ('2.9.0', 'mps', ?, ?, ?, 'test', NULL)",
                         [("add", "float16", "pass"), ("histc", "float16", "unsupported")])
    conn.close()
    datasette = make_datasette(path)
    asyncio.run(datasette.invoke_startup())
    page = get(datasette, "/-/matrix").text
    assert "declared: torch 2.9.0 · mps" in page
    page = get(datasette, "/-/matrix?run=declared:2.9.0:mps").text
    assert '<table class="mp-matrix declared">' in page
    cells = re.findall(r'<td class="st-(\w+)"><a href="[^"]*declared[^"]*"', page)
    assert sorted(cells) == ["pass", "unsupported"]


def test_pages_work_without_the_optional_views(site_copy, db_cells, fake_runs):
    path, conn = site_copy("bare.db")
    with conn:
        for view in ("op_firsts", "op_history"):
            conn.execute(f"DROP VIEW IF EXISTS {view}")
        conn.execute("DROP TABLE IF EXISTS declared")
    conn.close()
    datasette = make_datasette(path)
    asyncio.run(datasette.invoke_startup())
    run = fake_runs(str(path))[-1]["id"]
    assert matrix_cells(get(datasette, f"/-/matrix?run={run}").text) == db_cells(str(path), run)
    for page in ("/-/op/exp", "/-/compare", f"/{database_name(str(path))}/first_pass_version"):
        get(datasette, page)


def test_site_never_writes_the_database(site_db, ds):
    digest = hashlib.sha256(open(site_db, "rb").read()).hexdigest()
    for path in ("/-/matrix", "/-/op/add", "/-/compare", f"/{database_name(site_db)}/results"):
        get(ds, path)
    assert hashlib.sha256(open(site_db, "rb").read()).hexdigest() == digest
    databases = get(ds, "/-/databases.json").json()
    assert [d["is_mutable"] for d in databases if d["name"] == database_name(site_db)] == [False]
    assert get(ds, "/-/settings.json").json()["sql_time_limit_ms"] > 0


def test_serve_refuses_what_it_cannot_show(tmp_path, run_cli):
    result = run_cli("serve", tmp_path / "missing.db")
    assert result.exit_code == 2 and "does not exist" in result.output
    not_db = tmp_path / "notes.db"
    not_db.write_text("hello")
    result = run_cli("serve", not_db)
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1


def test_publish_passes_the_site_files_to_datasette(site_db, run_cli, tmp_path):
    result = run_cli("publish", site_db, "cloudrun", "--dry-run", "--out", tmp_path, "--", "--service", "probe")
    assert result.exit_code == 0, result.output
    command = result.stdout.split()
    assert command[1:4] == ["publish", "cloudrun", site_db]
    for flag in ("--metadata", "--template-dir", "--plugins-dir", "--static"):
        assert flag in command
    assert command[-2:] == ["--service", "probe"]
    metadata = json.load(open(command[command.index("--metadata") + 1]))
    assert metadata["plugins"]["mpsprobe"]["statuses"] == list(STATUSES)
    assert database_name(site_db) in metadata["databases"]


def test_nav_links_the_other_plugin_pages_when_present(ds):
    from mpsprobe.site import PLUGINS_DIR

    page = get(ds, "/-/matrix").text
    nav = re.search(r'<p class="mp-nav">(.*?)</p>', page, re.S).group(1)
    for filename, label in (("check_ops.py", "Check ops"), ("findings.py", "Findings")):
        if (PLUGINS_DIR / filename).exists():
            href = re.search(rf'<a href="([^"]+)">{label}</a>', nav).group(1)
            assert href.startswith("/-/")
            get(ds, href)


def test_a_hostile_status_from_a_merged_database_is_never_markup(site_copy):
    """A status string is data: from a merged database it may hold anything, and
    must reach the page escaped, never as a class name or a tag."""
    path, conn = site_copy("hostile.db")
    hostile = '"><script>alert(1)</script>'
    with conn:
        conn.execute("INSERT INTO declared (torch_version, device, op_id, dtype, status, "
                     "source, note) VALUES ('2.9.0', 'mps', 'add', 'float16', ?, 'test', NULL)",
                     (hostile,))
    conn.close()
    datasette = make_datasette(path)
    asyncio.run(datasette.invoke_startup())
    for page_path in ("/-/matrix?run=declared:2.9.0:mps", "/-/op/add"):
        page = get(datasette, page_path).text
        assert "<script>alert(1)</script>" not in page
        assert 'class="st-unknown"' in page or "declared st-unknown" in page


# ---------------------------------------------------------------- issue 15: every page, every link

HOSTILE = '<script>alert(1)</script>'  # as conftest's extra_db stores it


@pytest.fixture(scope="module")
def extra(extra_db):
    datasette = make_datasette(extra_db)
    asyncio.run(datasette.invoke_startup())
    return datasette


def fetch(ds, path, **headers):
    async def go():
        return await ds.client.get(path, headers=headers)
    return asyncio.run(go())


LINK = re.compile(r'(?:href|action)="([^"]*)"')


def walk(ds, start, limit=300):
    """Every page reachable from `start` through the site's own links (up to
    `limit`), with its response: {path: response}."""
    seen, queue, found = set(start), list(start), {}
    while queue and len(found) < limit:
        path = queue.pop(0)
        response = fetch(ds, path)
        found[path] = response
        if "text/html" not in response.headers.get("content-type", ""):
            continue
        for href in LINK.findall(response.text):
            href = html.unescape(href).split("#")[0]
            if not href.startswith("/") or href.startswith("//") or href in seen:
                continue
            seen.add(href)
            queue.append(href)
    return found


def test_the_walk_finds_no_server_error_no_markup_and_the_navigation_everywhere(extra, extra_db):
    name = database_name(extra_db)
    start = ["/", "/-/grid", "/-/matrix", "/-/compare", "/-/legend", "/-/findings", "/-/check-ops",
             f"/-/op/{urllib.parse.quote(HOSTILE, safe='')}", "/-/op/nn.functional.interpolate",
             f"/{name}", f"/{name}/search?q=histc"]
    pages = walk(extra, start)
    assert len(pages) > 60
    for path, response in pages.items():
        assert response.status_code < 500, (path, response.text[:500])
        if "text/html" in response.headers.get("content-type", ""):
            assert HOSTILE not in response.text, path
            assert 'class="mp-nav"' in response.text, path


@pytest.mark.parametrize("path", [
    "/-/matrix?torch=2.5&os=14&device=mps", "/-/matrix?device=mps", "/-/matrix?run=declared:2.13.0",
    "/-/matrix?run=declared:", "/-/matrix?run=nope", "/-/matrix?status=%3Cb%3E&op=%25%27%22",
    "/-/compare?a=zzz&b=%3Cx%3E", "/-/compare?kind=%3Cscript%3E", "/-/grid?page=-3&pass=x&dtype=%27",
    "/-/grid?status=nope&op=*", "/-/findings?against=%3Cx%3E", "/-/check-ops?ops=%22&run=",
    "/-/check-ops?ops=%5B1%2C2%5D", "/-/op/%00", "/-/op/..%2F..", "/-/legend.json",
])
def test_hostile_and_no_match_parameters_never_fail(extra, path):
    response = fetch(extra, path)
    assert response.status_code < 500, response.text[:800]
    assert "<script>alert" not in response.text and "<x>" not in response.text and "<b>" not in response.text


def test_no_match_deep_links_say_what_the_database_has(ds):
    for path in ("/-/matrix?torch=2.5&os=14&device=mps", "/-/matrix?device=mps"):
        page = html.unescape(get(ds, path).text)
        assert "no run matches those filters; the database has:" in page
        assert 'class="mp-empty"' in page
    page = html.unescape(get(ds, "/-/matrix?run=declared:2.13.0").text)
    assert "Nothing is declared for torch 2.13.0 on mps" in page


def test_compare_defaults_for_the_oldest_run_to_the_next(ds, site_db, rows):
    oldest = rows(site_db, "SELECT id FROM runs ORDER BY started LIMIT 1")[0]["id"]
    data = get(ds, f"/-/compare.json?b={oldest}").json()
    assert data["b"] == oldest and data["a"] and data["a"] != oldest
    assert "needs two runs" not in get(ds, f"/-/compare?b={oldest}").text


def test_compare_reads_each_run_alone(site_db, fake_runs):
    """The roll-up of both runs comes from each run's own results, never every run's."""
    from mpsprobe.db.query import history
    conn = sqlite3.connect(site_db)
    plan = " ".join(str(r) for r in conn.execute(
        "EXPLAIN QUERY PLAN SELECT op_id, dtype FROM results WHERE run_id = ? AND pass = ? "
        "GROUP BY op_id, dtype", ["x", "forward"]))
    assert "run_id=?" in plan
    a, b = (r["id"] for r in fake_runs(site_db)[:2])
    assert history.changes(conn, a, b) == history.changes(conn, a, b)  # deterministic
    conn.close()


def test_search_matches_word_prefixes_and_survives_any_text(ds, site_db, rows):
    conv = {r["op_id"] for r in rows(site_db, "SELECT DISTINCT op_id FROM results WHERE op_id LIKE '%conv%'")}
    assert conv
    for q in ("conv", "conv*", "CONV"):
        assert conv <= {r["op_id"] for r in query_json(ds, site_db, "search", q=q)}
    page = html.unescape(get(ds, f"/{database_name(site_db)}/search?q=%22").text)
    assert "No match for" in page and "syntax error" not in page


def test_canned_queries_say_when_they_stop_at_the_row_limit(site_db):
    datasette = make_datasette(site_db)
    datasette.max_returned_rows = 2
    name = database_name(site_db)
    page = get(datasette, f"/{name}/first_pass_version").text
    assert "mp-truncated" in page and "row limit" in page
    assert get(datasette, f"/{name}/first_pass_version.json").json()["truncated"] is True


def test_a_name_with_variants_points_to_them(extra):
    response = fetch(extra, "/-/op/nn.functional.interpolate")
    assert response.status_code == 200
    for variant in ("nn.functional.interpolate.bilinear", "nn.functional.interpolate.nearest"):
        assert f'href="/-/op/{variant}"' in response.text
    missing = fetch(extra, "/-/op/conv")
    assert missing.status_code == 404 and 'class="mp-nav"' in missing.text


def test_every_custom_page_has_json(ds, site_db, db_cells, fake_runs):
    run = fake_runs(site_db)[-1]["id"]
    data = get(ds, f"/-/matrix.json?run={run}").json()
    assert {(r["op_id"], d): s for r in data["rows"] for d, s in r["cells"].items()} == \
        db_cells(site_db, run)
    op = get(ds, "/-/op/add.json").json()
    assert op["op_id"] == "add" and op["history"]
    assert "changes" in get(ds, "/-/compare.json").json()
    for path in ("/-/grid.json", "/-/legend.json", "/-/findings.json", "/-/check-ops.json?ops=add"):
        assert get(ds, path).headers["content-type"].startswith("application/json")


def test_check_ops_takes_the_dtype_of_a_pasted_list_and_reads_bare_names(ds):
    data = get(ds, "/-/check-ops.json?ops=add%0Aexp,histc&dtype=float16").json()
    ops = data["report"]["ops"]
    assert ops and {o["dtype"] for o in ops} == {"float16"}
    assert data["read_as"]["add"] and all(n.startswith("aten::add.") for n in data["read_as"]["add"])
    assert all(o["class"] != "unknown" or "float16" not in o["note"] for o in ops
               if o["aten_op"].startswith("aten::add."))
    page = get(ds, "/-/check-ops?ops=add&dtype=float32").text
    assert "ops ops" not in page and "Your list" in page


def test_findings_link_their_ops(extra, extra_db, rows):
    fake = rows(extra_db, "SELECT id FROM runs WHERE device = 'fake-mps' ORDER BY torch_version_key DESC")[0]
    page = get(extra, f"/-/findings?run={fake['id']}&against=mps").text
    linked = set(re.findall(r'<th><a href="/-/op/([^"]+)">', page))
    assert {"add", "histc"} <= linked


def test_legend_defines_every_status_and_reason_kind(ds):
    from mpsprobe.vocabulary import REASON_KIND
    page = html.unescape(get(ds, "/-/legend").text)
    for status in STATUSES:
        assert f"{STATUS[status].symbol} {status}" in page and STATUS[status].meaning in page
    for kind in REASON_KIND.values():
        assert kind.label in page and kind.meaning in page
    assert "not measured" in page


def test_home_page_lists_the_canned_queries(ds, site_db):
    page = get(ds, "/").text
    for name in ("fallbacks", "unsupported_for_dtype", "first_pass_version", "search", "check_ops"):
        assert f'href="/{database_name(site_db)}/{name}"' in page


def test_error_pages_keep_the_navigation(ds):
    for path in ("/-/op/no_such_op", "/no_such_database", "/-/no-such-page"):
        response = fetch(ds, path)
        assert response.status_code == 404 and 'class="mp-nav"' in response.text
        assert 'href="/-/grid"' in response.text and 'href="/-/legend"' in response.text


def test_every_status_cell_carries_its_symbol(ds, extra):
    for d, path in ((ds, "/-/matrix"), (ds, "/-/op/exp"), (ds, "/-/grid"), (extra, "/-/op/add"),
                    (ds, "/-/compare")):
        page = get(d, path).text
        cells = re.findall(r'<td class="(?:declared )?st-(\w+)[^"]*">(?:<a [^>]*>)?([^<]*)', page)
        answers = re.findall(r'<td class="sp-(\w+)[^"]*">(?:<a [^>]*>)?([^<]*)', page)
        assert cells or (answers and path == "/-/grid"), path
        for status, text in cells:
            assert text.startswith(STATUS[status].symbol), (path, status, text)
        for answer, text in answers:   # the grid's cells answer in words of their own, each with its symbol
            assert text.startswith(SUPPORT[answer].symbol), (path, answer, text)


def test_declared_cells_on_the_op_page_are_coloured_and_hatched(extra):
    page = get(extra, "/-/op/add").text
    assert re.search(r'<td class="declared st-(pass|unsupported)">', page)
    css = get(extra, "/mpsprobe-static/site.css").text
    assert 'table.mp-plain td[class*="st-"]' in css and "td.declared" in css


def test_pages_are_gzipped(ds):
    response = fetch(ds, "/-/matrix", **{"accept-encoding": "gzip"})
    assert response.headers["content-encoding"] == "gzip"
    assert response.num_bytes_downloaded < len(response.content)
    assert "<table" in response.text
    plain = fetch(ds, "/-/matrix", **{"accept-encoding": "identity"})
    assert "content-encoding" not in plain.headers


@pytest.mark.parametrize("sql", ["select randomblob(1000000000)",
                                 "select printf('%.*c', 2000000000, 'x')",
                                 "select format('%2000000000c', 'x')",
                                 "select length(zeroblob(2000000000))"])
def test_arbitrary_sql_cannot_build_huge_values(ds, site_db, sql):
    import time
    started = time.perf_counter()
    response = fetch(ds, f"/{database_name(site_db)}.json?" + urllib.parse.urlencode({"sql": sql}))
    assert response.status_code == 400 and time.perf_counter() - started < 2
    ok = fetch(ds, f"/{database_name(site_db)}.json?" + urllib.parse.urlencode(
        {"sql": "select printf('%5.2f|%s', 3.14159, 'x') AS v", "_shape": "array"}))
    assert ok.json() == [{"v": " 3.14|x"}]


def test_grid_has_a_column_per_torch_version_and_a_row_per_op(ds, site_db, rows):
    data = get(ds, "/-/grid.json").json()
    runs = rows(site_db, "SELECT DISTINCT device, torch_version FROM runs")
    assert len(data["columns"]) == len(runs)
    ops = {r["op_id"] for r in rows(site_db, "SELECT DISTINCT op_id FROM results WHERE pass = 'forward'")}
    assert {r["op_id"] for r in data["rows"]} == ops
    from mpsprobe.vocabulary import SKIP, worst
    from mpsprobe.db.query.grid import device_lacks
    cases = {}
    for r in rows(site_db, "SELECT r.run_id, r.op_id, r.dtype, r.status, runs.device FROM results r "
                           "JOIN runs ON runs.id = r.run_id WHERE pass = 'forward'"):
        if r["dtype"] not in device_lacks(r["device"]):   # MPS's float64: a footnote, not in a cell
            cases.setdefault((r["run_id"], r["op_id"]), {}).setdefault(r["dtype"], []).append(r["status"])
    for row in data["rows"]:
        for col, cell in zip(data["columns"], row["cells"]):
            by_dtype = cases.get((col["run_id"], row["op_id"]))
            if not by_dtype:
                assert cell is None
                continue
            worst_by_dtype = {d: worst(s) for d, s in by_dtype.items()}
            known = [s for s in worst_by_dtype.values() if s != SKIP]
            assert cell["dtypes"] == worst_by_dtype and cell["status"] == worst(worst_by_dtype.values())
            assert cell["cases"] == sum(map(len, by_dtype.values()))
            assert (cell["k"], cell["n"]) == (sum(s in WORKING for s in known), len(known))
            assert cell["answer"] == ("unknown" if not known else "supported" if cell["k"] == len(known)
                                      else "unsupported" if not cell["k"] and FALLBACK not in known
                                      else "partial")


def test_a_grid_cell_gives_the_reason_of_its_worst_cases(site_copy):
    """A cell whose worst case is refused for its dtype says so, not the reason of a
    milder case in another dtype (kernel_fallback sorts after dtype as text)."""
    from mpsprobe.db.query import grid
    path, conn = site_copy("mixed.db")
    with conn:
        run_id = conn.execute("SELECT id FROM runs WHERE device = 'fake-mps' "
                              "ORDER BY torch_version_key DESC LIMIT 1").fetchone()[0]
        conn.execute("INSERT INTO ops (id, name) VALUES ('zz_mixed', 'zz_mixed')")
        for dtype, status, kind in (("float16", "unsupported", "dtype"),
                                    ("float32", "fallback", "kernel_fallback"),
                                    ("bfloat16", "pass", None)):
            case = f"zz_mixed|{dtype}|0"
            conn.execute("INSERT INTO cases (id, op_id, dtype, sample_index) VALUES (?, 'zz_mixed', ?, 0)",
                         [case, dtype])
            conn.execute("INSERT INTO results (run_id, case_id, op_id, dtype, status, reason_kind, pass) "
                         "VALUES (?, ?, 'zz_mixed', ?, ?, ?, 'forward')", [run_id, case, dtype, status, kind])
    data = grid.grid(conn, op_like="zz_mixed")
    [cell] = [c for c in data["rows"][0]["cells"] if c and c["run_id"] == run_id]
    assert (cell["status"], cell["reason_kind"], cell["k"], cell["n"]) == ("unsupported", "dtype", 1, 3)
    only_working = grid.grid(conn, op_like="zz_mixed", dtype="bfloat16")["rows"][0]["cells"]
    assert [c["reason_kind"] for c in only_working if c and c["run_id"] == run_id] == [None]
    conn.close()


def test_grid_counts_only_ops_it_has_rows_for(site_copy, site_db, rows):
    """A model replay's aten ops (`check --run`) have no grid column: no row, and not counted."""
    path, conn = site_copy("replay.db")
    with conn:
        conn.execute("INSERT INTO runs (id, run_key, state, started, torch_version, device, source, options) "
                     "VALUES ('replay', 'replay', 'complete', '2030-01-01', '9.9.0', 'fake-mps', 'model', '{}')")
        conn.execute("INSERT INTO ops (id, name) VALUES ('aten::relu', 'aten::relu')")
        conn.execute("INSERT INTO cases (id, op_id, dtype, sample_index) VALUES ('r|float32|0', 'aten::relu', 'float32', 0)")
        conn.execute("INSERT INTO results (run_id, case_id, op_id, dtype, status, pass) "
                     "VALUES ('replay', 'r|float32|0', 'aten::relu', 'float32', 'pass', 'forward')")
    conn.close()
    ds = make_datasette(str(path))
    asyncio.run(ds.invoke_startup())
    data = get(ds, "/-/grid.json").json()
    assert "aten::relu" not in {r["op_id"] for r in data["rows"]}
    assert data["total"] == len(data["rows"]) == len(
        {r["op_id"] for r in rows(site_db, "SELECT DISTINCT op_id FROM results")})


def test_grid_filters_and_links(ds, site_db, rows):
    page = get(ds, "/-/grid?op=hist").text
    ops = set(re.findall(r'<th class="mp-op"><a href="/-/op/([^"]+)">', page))
    assert ops == {"histc"}
    data = get(ds, "/-/grid.json?dtype=float16&status=unsupported").json()
    assert data["rows"] and all(any(c and c["status"] == "unsupported" for c in r["cells"])
                                for r in data["rows"])
    page = get(ds, "/-/grid?op=histc&dtype=float32").text
    assert "/cell_cases?run_id=" in html.unescape(page)
    backward = {r["op_id"] for r in get(ds, "/-/grid.json?pass=backward").json()["rows"]}
    measured = {r["op_id"] for r in rows(site_db, "SELECT DISTINCT op_id FROM results WHERE pass = 'backward'")}
    forward_only = {r["op_id"] for r in rows(site_db, "SELECT DISTINCT op_id FROM results WHERE op_id NOT IN "
                                                      "(SELECT op_id FROM results WHERE pass = 'backward')")}
    assert backward and backward <= measured and not backward & forward_only


def test_grid_shows_partial_support_reasons_ranges_and_declared_cells(extra, extra_db):
    page = html.unescape(get(extra, "/-/grid").text)
    assert re.search(r"\d+ of \d+ dtypes</small>", page)
    assert "since " in page or "until " in page
    assert "declared, not measured" in page and 'declared"><a' in page
    data = get(extra, "/-/grid.json?op=zeta_only_declared").json()
    assert data["rows"][0]["cells"] and any(c and c["declared_only"] for c in data["rows"][0]["cells"])


def test_op_page_has_history_per_pass_messages_and_workarounds(extra, extra_db, rows):
    page = html.unescape(get(extra, "/-/op/histc").text)
    assert "forward pass" in page and "Messages seen" in page
    assert "Declared vs measured, per release" in page
    bad = rows(extra_db, "SELECT 1 FROM results WHERE op_id = 'histc' AND status IN ('unsupported', 'fallback')")
    if bad:
        assert "Workarounds" in page and "source</a>" in page


def test_suggestions_are_sourced_and_fit_the_failure():
    from mpsprobe import suggestions
    from mpsprobe.vocabulary import FALLBACK, PASS, UNSUPPORTED
    cast = suggestions.for_case("add", UNSUPPORTED, "dtype", "float64")
    assert suggestions.CAST_FLOAT32 in cast
    switch = suggestions.for_case("histc", UNSUPPORTED, "no_kernel", "float32")
    assert suggestions.FALLBACK_SWITCH in switch
    macos = suggestions.for_case("x", UNSUPPORTED, "macos_version", "float32", min_macos="14.0")
    assert "14.0" in macos[0].text
    assert suggestions.for_case("x", FALLBACK, "cpu_fallback", "float32")
    assert suggestions.for_case("x", PASS, None, "float32") == []
    for s in (suggestions.CAST_FLOAT32, suggestions.FALLBACK_SWITCH, suggestions.ON_CPU):
        assert s.source.startswith("https://")


def test_history_rows_say_what_ran_each_run_in_the_grids_words(site_copy, site_db, rows):
    """A history row names the device and what it is, and says so where a run was
    virtualised or had the CPU fallback switched on; the summary and the grid use
    the same words for a virtual machine."""
    path, conn = site_copy("labels.db")
    old = rows(site_db, "SELECT id FROM runs WHERE device = 'fake-mps' ORDER BY torch_version_key LIMIT 1")[0]["id"]
    with conn:
        conn.execute("UPDATE runs SET virtualized = 1, device_env = ? WHERE id = ?",
                     [json.dumps({"PYTORCH_ENABLE_MPS_FALLBACK": "1"}), old])
    conn.close()
    ds = make_datasette(str(path))
    asyncio.run(ds.invoke_startup())
    labels = {h["run"]: h["label"] for h in get(ds, "/-/op/add.json").json()["history"][FORWARD]}
    assert old in labels and len(labels) > 1
    for run in rows(str(path), "SELECT * FROM runs"):
        if run["id"] not in labels:
            continue
        label = labels[run["id"]]
        assert f"torch {run['torch_version']}" in label and f"{run['device']}: {run['device_name']}" in label
        assert ("virtual machine" in label) == (run["id"] == old)
        assert ("CPU fallback on" in label) == (run["id"] == old)
    page, grid = html.unescape(get(ds, "/-/op/add").text), html.unescape(get(ds, "/-/grid").text)
    assert "on fake-mps · virtual machine —" in page
    assert "fake-mps · macOS 14 · virtual machine" in grid


def test_a_grid_cell_gives_the_reason_of_its_worst_cases(tmp_path):
    """One case refused below macOS 14, another with wrong numbers: the cell is unsupported, and
    says why in the refusal's words, not the mismatch's."""
    from mpsprobe.db import schema
    from mpsprobe.db.query import grid as grid_q
    from mpsprobe.site.plugins.grid import _why
    db = schema.open_db(tmp_path / "g.db")
    db["runs"].insert({"id": "r1", "started": "2026-01-01", "device": "mps", "torch_version": "2.5.0",
                       "os_name": "macOS", "os_version": "13.6", "state": "complete"})
    db["ops"].insert({"id": "x", "name": "x"})
    for i, (status, kind, macos) in enumerate((("mismatch", "values", None),
                                               ("unsupported", "macos_version", "14.0"), ("pass", None, None))):
        db["cases"].insert({"id": f"x|float32|{i}", "op_id": "x", "dtype": "float32", "sample_index": i})
        db["results"].insert({"run_id": "r1", "case_id": f"x|float32|{i}", "op_id": "x", "dtype": "float32",
                              "status": status, "reason_kind": kind, "min_macos": macos})
    [cell] = [c for c in grid_q.grid(db.conn)["rows"][0]["cells"] if c]
    assert (cell["status"], cell["reason_kind"], cell["min_macos"], cell["k"], cell["n"], cell["cases"]) == \
        ("unsupported", "macos_version", "14.0", 0, 1, 3)
    assert _why(cell) == "needs macOS 14.0"
    assert _why(dict(cell, reason_kind="values", min_macos=None)) == "wrong values"
