"""The site's limits on what one request may cost: a wall-clock deadline that
holds inside long function calls, a cap on the bytes of one answer (pages, JSON,
streamed CSV) and on what the server holds for it, and a bounded number of
heavy queries at once, so cheap pages keep answering. Through Datasette's own
test client, on the site's database (tests/conftest.py)."""
import asyncio
import json
import shutil
import sqlite3
import time
import tracemalloc
import urllib.parse
from collections import Counter

import pytest

from mpsprobe.site import database_name, make_datasette
from mpsprobe.site.limits import MAX_ANSWER_BYTES, MAX_LENGTH

TIME_LIMIT_MS = 200        # short, so that running on past it cannot pass for load
# Runs until something stops it: nothing but the time limit can.
ENDLESS = "with recursive c(x) as (select 1 union all select x + 1 from c) select count(*) from c"


def served(db_path, time_limit_ms):
    datasette = make_datasette(db_path, time_limit_ms=time_limit_ms)
    asyncio.run(datasette.invoke_startup())
    return datasette


def sql_url(db_path, sql, fmt=".json"):
    return f"/{database_name(db_path)}{fmt}?" + urllib.parse.urlencode({"sql": sql})


def timed_get(ds, path):
    async def fetch():
        started = time.perf_counter()
        response = await ds.client.get(path)
        return response, time.perf_counter() - started
    return asyncio.run(fetch())


@pytest.mark.parametrize("sql", [
    # Each row's value is one long call (instr is quadratic), a few SQLite instructions a row:
    # Datasette's progress handler, looking at the clock every 1,000 instructions, let it run on.
    "select instr(zeroblob(49000) || (r1.rowid + r2.rowid), zeroblob(24000) || 'x') "
    "from results r1, results r2 limit 400",
    # The values that made one call long are refused before the call runs.
    "select length(hex(randomblob(9999999))) from results limit 200",
    "select instr(zeroblob(500000) || rowid, zeroblob(250000) || 'x') from results limit 1",
])
def test_the_deadline_holds_for_a_query_that_spends_its_time_in_function_calls(site_db, sql):
    ds = served(site_db, TIME_LIMIT_MS)
    response, seconds = timed_get(ds, sql_url(site_db, sql))
    assert response.status_code == 400, response.text[:300]
    assert "took too long" in response.text or "too big" in response.text
    # Near the limit: past it by at most one call (0.03 s) on a loaded machine, never by
    # seconds of calls (the instr query ran 6.6 s before, at load 15).
    assert seconds < TIME_LIMIT_MS / 1000 + 1, seconds


def test_one_call_within_the_length_cap_stays_short_and_legit_sql_still_runs(site_db):
    ds = served(site_db, 2000)
    largest = f"select length(replace(hex(zeroblob({MAX_LENGTH // 2 - 1})), '0', 'a')) AS n"
    response, _ = timed_get(ds, sql_url(site_db, largest) + "&_shape=array")
    assert response.json() == [{"n": MAX_LENGTH - 2}]
    over = f"select length(replace(hex(zeroblob({MAX_LENGTH // 2 + 1})), '0', 'a'))"
    response, _ = timed_get(ds, sql_url(site_db, over))
    assert response.status_code == 400 and "too big" in response.text


def test_an_answer_over_the_cap_is_refused_before_the_server_holds_it(site_db):
    ds = served(site_db, 2000)
    # 600 rows of 48 KB: 29 MB, which the server used to build and send (holding ~10 times that).
    sql = "select hex(randomblob(24000)) AS v from results, results r2 limit 600"
    for fmt in (".json", ""):
        tracemalloc.start()
        try:
            response, _ = timed_get(ds, sql_url(site_db, sql, fmt))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert response.status_code == 400, (fmt, response.status_code)
        assert "answer too large" in response.text and f"{MAX_ANSWER_BYTES:,} bytes" in response.text
        assert peak < 3 * MAX_ANSWER_BYTES, (fmt, peak)
    # Under the cap the same query answers in full.
    response, _ = timed_get(ds, sql_url(site_db, sql.replace("600", "20")) + "&_shape=array")
    assert response.status_code == 200 and len(response.json()) == 20


@pytest.fixture(scope="module")
def big_db(site_db, tmp_path_factory):
    """The site's database plus a table of 3,000 rows of 12 KB: 36 MB in any format."""
    path = tmp_path_factory.mktemp("big") / "big.db"
    shutil.copy(site_db, path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        conn.executemany("INSERT INTO notes (body) VALUES (?)",
                         [(f"{i:06d}" + "n" * 12_000,) for i in range(3000)])
    conn.close()
    return str(path)


def test_a_page_over_the_cap_says_so_in_one_line(big_db):
    ds = served(big_db, 2000)
    name = database_name(big_db)
    response, _ = timed_get(ds, f"/{name}/notes.json?_size=max")     # 1,000 rows: 12 MB
    assert response.status_code == 400
    assert response.json()["error"].startswith("answer too large")
    page, _ = timed_get(ds, f"/{name}/notes.json?_size=500")         # 6 MB: under the cap
    assert page.status_code == 200 and len(page.json()["rows"]) == 500


def test_a_streamed_csv_stops_at_the_cap_on_a_line_end_with_a_notice(big_db):
    ds = served(big_db, 2000)
    name = database_name(big_db)
    response, _ = timed_get(ds, f"/{name}/notes.csv?_stream=1")
    assert response.status_code == 200
    body = response.content
    assert MAX_ANSWER_BYTES * 0.9 < len(body) <= MAX_ANSWER_BYTES + 500
    *rows, notice = body.decode().rstrip("\n").split("\n")
    assert notice.startswith("# cut here: answer too large")
    assert rows[0].startswith("id,body")
    ids = [int(row.split(",")[0]) for row in rows[1:] if row.strip()]
    assert ids == list(range(1, len(ids) + 1))                       # whole rows, in order
    assert all(row.rstrip("\r").endswith("n" * 100) for row in rows[1:] if row.strip())
    # The database file itself is the way to everything: never cut.
    download, _ = timed_get(ds, f"/{name}.db")
    assert download.status_code == 200 and len(download.content) == len(open(big_db, "rb").read())


def test_heavy_queries_queue_or_are_refused_while_a_cheap_page_answers(site_db):
    """Two heavy queries run at once (one SQL thread fewer than Datasette's three),
    four wait, the rest get 429 at once; a cheap page answers while they run."""
    ds = served(site_db, 1500)
    name = database_name(site_db)
    finished = []

    async def get(path, label):
        response = await ds.client.get(path, timeout=60)
        finished.append((label, response.status_code, time.perf_counter()))
        return response

    async def scenario():
        heavy = [asyncio.ensure_future(get(sql_url(site_db, ENDLESS), "heavy")) for _ in range(8)]
        await asyncio.sleep(0.3)
        cheap = await get(f"/{name}/runs.json?_shape=array", "cheap")
        return await asyncio.gather(*heavy), cheap

    heavy, cheap = asyncio.run(scenario())
    assert cheap.status_code == 200 and cheap.json()
    # The cheap page came back while the first heavy queries were still running.
    assert finished[0][0] == "heavy" and finished[0][1] == 429
    first_heavy_done = min(t for label, status, t in finished if label == "heavy" and status != 429)
    cheap_done = next(t for label, _, t in finished if label == "cheap")
    assert cheap_done < first_heavy_done
    assert Counter(r.status_code for r in heavy) == Counter({400: 6, 429: 2})
    for r in heavy:
        if r.status_code == 429:
            error = r.json()["error"]
            assert "too many queries are running" in error and "\n" not in error
            assert r.headers["retry-after"]
        else:
            assert "took too long" in r.json()["error"]


def test_what_counts_as_heavy(site_db):
    from mpsprobe.site.guard import Guard
    ds = served(site_db, 2000)
    name = database_name(site_db)
    guard = Guard(ds, None, lambda database: {"fallbacks"} if database == name else set())
    heavy = [f"/{name}?sql=select+1", f"/{name}.json?sql=select+1", f"/{name}.csv?sql=select+1",
             f"/{name}/fallbacks", f"/{name}/fallbacks.json?run_id=", f"/{name}/results?_where=1",
             f"/{name}/results.json?_search=conv", f"/{name}/results?_search_message=x"]
    cheap = [f"/{name}", f"/{name}?sql=", f"/{name}/results", f"/{name}/results.json?status=pass",
             f"/{name}.db", "/-/matrix", "/-/grid.json?op=add", "/mpsprobe-static/site.css",
             "/nosuchdb?sql=select+1"]
    for path in heavy + cheap:
        route, _, query = path.partition("?")
        assert guard.is_heavy(route, query.encode()) == (path in heavy), path
    assert guard.is_download(f"/{name}.db") and not guard.is_download(f"/{name}.json")
