"""The grid answers per cell for the dtypes in view (supported, partial, unsupported, unknown),
MPS's missing float64 is a footnote on its columns, and no query string makes a page fail.

A small database made by hand: a CPU run of torch 2.13 and what PyTorch declares for
MPS in 2.12 and 2.13 (every dtype but float64 and complex128), as the declared history
records it. No OpInfo, no sweep.
"""
import asyncio
import html
import json
import re

import pytest

from mpsprobe.db import schema
from mpsprobe.site import make_datasette

from answers_db import (DTYPES, OPS, RTL_OP, add_older_sweep_and_bench, add_result, add_run,
                        build_answers_db)


@pytest.fixture(scope="module")
def answers_db(tmp_path_factory):
    return build_answers_db(tmp_path_factory.mktemp("answers") / "answers.db")


@pytest.fixture(scope="module")
def site(answers_db):
    ds = make_datasette(answers_db)
    asyncio.run(ds.invoke_startup())
    return ds


def get(ds, path, status=200):
    response = asyncio.run(ds.client.get(path))
    assert response.status_code == status, (path, response.text[:1000])
    return response


def cell(data, op, group_starts, version):
    row = next(r for r in data["rows"] if r["op_id"] == op)
    [found] = [c for col, c in zip(data["columns"], row["cells"])
               if col["group"].startswith(group_starts) and col["torch_version"] == version]
    return found


def test_abs_is_partial_for_mps_by_default_not_unsupported(site):
    data = get(site, "/-/grid.json").json()
    abs_213 = cell(data, "abs", "mps", "2.13.0")
    # float64 is left out (a footnote); complex128 is the one declared dtype that fails.
    assert (abs_213["answer"], abs_213["k"], abs_213["n"]) == ("partial", 6, 7)
    assert "float64" not in abs_213["dtypes"] and abs_213["dtypes"]["complex128"] == "unsupported"
    assert abs_213["notes"] == ["complex128: unsupported"] and abs_213["declared_only"]
    assert cell(data, "abs", "cpu", "2.13.0+cpu")["answer"] == "supported"
    page = html.unescape(get(site, "/-/grid").text)
    row = re.search(r'<a href="/-/op/abs"><bdi>abs</bdi></a>.*?</tr>', page).group(0)
    assert re.search(r'<td class="sp-partial declared"><a [^>]*title="torch 2\.13\.0 on mps[^"]*'
                     r'6 of 7 dtypes; complex128: unsupported', row)
    assert "◐ <small>6 of 7 dtypes</small>" in row and "sp-unsupported" not in row


def test_float64_is_a_footnote_on_mps_not_a_cross_unless_picked(site):
    data = get(site, "/-/grid.json").json()
    [(label, [note])] = data["footnotes"].items()
    assert label.startswith("mps") and "float64" in note
    page = html.unescape(get(site, "/-/grid").text)
    assert "<sup><a href=\"#fn-1\"" in page and '<li id="fn-1" value="1">MPS has no float64' in page
    picked = get(site, "/-/grid.json?dtype=float64").json()
    assert picked["footnotes"] == {}
    assert cell(picked, "abs", "mps", "2.13.0")["answer"] == "unsupported"


def test_dtype_chips_filter_and_the_count_matches_the_rows(site):
    page = html.unescape(get(site, "/-/grid").text)
    chips = dict((label, href) for href, label in re.findall(r'<a class="mp-chip[^"]*" href="([^"]*)"[^>]*>([^<]+)</a>', page))
    assert set(chips) == {"every dtype", *DTYPES}
    float32 = get(site, chips["float32"]).json() if chips["float32"].endswith(".json") else \
        get(site, chips["float32"].replace("/-/grid", "/-/grid.json", 1)).json()
    assert float32["dtypes"] == ["float32"]
    assert {r["op_id"] for r in float32["rows"]} == set(OPS) - {"only_half"} | {RTL_OP}
    assert float32["total"] == len(float32["rows"]) == len(OPS)
    assert cell(float32, "abs", "mps", "2.13.0")["answer"] == "supported"
    shown = html.unescape(get(site, chips["float32"]).text)
    assert f"<p class=\"mp-count\">{len(OPS)} ops in float32" in shown
    assert len(re.findall(r'<th class="mp-op"><a href="/-/op/', shown)) == len(OPS)
    # A second chip adds its dtype; a chip that is on takes it away again.
    two = dict((label, href) for href, label in re.findall(
        r'<a class="mp-chip[^"]*" href="([^"]*)"[^>]*>([^<]+)</a>', shown))
    both = get(site, two["float16"].replace("/-/grid", "/-/grid.json", 1)).json()
    assert sorted(both["dtypes"]) == ["float16", "float32"] and both["total"] == len(OPS) + 1
    assert two["float32"] == "/-/grid"


def test_since_badges_only_where_more_than_one_version_was_measured(site, answers_db, tmp_path):
    page = get(site, "/-/grid").text
    assert "since " not in page   # one CPU version measured: nothing to say since when
    import shutil
    path = tmp_path / "two.db"
    shutil.copy(answers_db, path)
    db = schema.open_db(path)
    add_run(db, "cpu-old", "cpu", "2.12.0+cpu", "Linux", "2025-06-01")
    for op in OPS:
        add_result(db, "cpu-old", op, "float16", "pass")
    db.conn.close()
    ds = make_datasette(path)
    asyncio.run(ds.invoke_startup())
    assert re.search(r'<small class="mp-since"[^>]*>[^<]*since 2\.12\.0\+cpu</small>', get(ds, "/-/grid").text)


LONG = "a" * 60_000   # the test client's URLs stop at 64 KiB; the browser walk sends 100,000


@pytest.mark.parametrize("path", ["/-/grid?op=", "/-/grid.json?op=", "/-/matrix?op=", "/-/matrix.json?op=",
                                  "/-/matrix?run="])
def test_a_long_filter_is_refused_with_a_message_not_a_server_error(site, path):
    response = get(site, path + LONG, status=400)
    text = response.text
    assert "60000 characters long; at most 500 are accepted" in text and LONG not in text
    if ".json" not in path:
        assert 'class="mp-nav"' in text


def _copy(answers_db, tmp_path, name):
    import shutil
    path = tmp_path / name
    shutil.copy(answers_db, path)
    return path, schema.open_db(path)


def _site(path):
    ds = make_datasette(path)
    asyncio.run(ds.invoke_startup())
    return ds


@pytest.mark.parametrize("typed, first", [("BatchNorm2d", "nn.functional.batch_norm"),
                                          ("Conv2d", "nn.functional.conv2d"),
                                          ("conv 2d", "nn.functional.conv2d"),
                                          ("aten::add.Tensor", "add"), ("ABS", "abs")])
def test_search_finds_ops_by_what_people_type_one_row_each(site, typed, first):
    import urllib.parse
    data = get(site, "/-/search.json?" + urllib.parse.urlencode({"q": typed})).json()
    ops = [r["op_id"] for r in data["rows"]]
    assert ops[0] == first and len(ops) == len(set(ops)) == data["total"]
    # Each row says what each device answers, MPS first, in the grid's words.
    answers = data["rows"][0]["answers"]
    assert answers[0]["where"].startswith("mps") and answers[0]["declared"]
    assert {a["answer"] for a in answers} <= {"supported", "partial", "unsupported", "unknown"}
    page = html.unescape(get(site, "/-/search?" + urllib.parse.urlencode({"q": typed})).text)
    assert f'<a href="/-/op/{first}"><bdi>{first}</bdi></a>' in page
    assert "SELECT" not in page and "sql" not in page.lower().replace("mpsprobe-statuses", "")


def test_untrusted_names_are_isolated_from_the_text_around_them(site):
    import urllib.parse
    for path in ("/-/grid", "/-/search?q=rtl"):
        page = get(site, path).text
        assert f"<bdi>{RTL_OP}</bdi>" in page, path
    assert f"<h1><code><bdi>{RTL_OP}</bdi></code>" in get(site, "/-/op/" + urllib.parse.quote(RTL_OP, safe="")).text


def test_search_counts_and_pages_every_match(answers_db, tmp_path):
    path, db = _copy(answers_db, tmp_path, "many.db")
    for i in range(60):
        db["declared"].insert({"torch_version": "2.13.0", "device": "mps", "op_id": f"many_{i:02d}",
                               "dtype": "float32", "status": "pass", "source": "test"})
    db.conn.close()
    ds = _site(path)
    first = get(ds, "/-/search.json?q=many").json()
    second = get(ds, "/-/search.json?q=many&page=2").json()
    assert first["total"] == second["total"] == 60 and first["pages"] == 2
    assert len(first["rows"]) + len(second["rows"]) == 60
    assert not {r["op_id"] for r in first["rows"]} & {r["op_id"] for r in second["rows"]}
    page = get(ds, "/-/search?q=many").text
    assert "60 ops match" in page and "page 1 of 2" in page and 'href="/-/search?q=many&amp;page=2"' in page
    assert get(ds, "/-/search?q=" + "x" * 60_000, status=400)


def test_the_canned_search_hides_its_sql_and_has_no_silent_cap(site):
    from mpsprobe.site.plugins.mpsprobe_site import CANNED_QUERIES, SQL_SEARCH_SUBSTRINGS
    assert CANNED_QUERIES["search"]["hide_sql"]
    assert "LIMIT" not in CANNED_QUERIES["search"]["sql"] and "LIMIT" not in SQL_SEARCH_SUBSTRINGS
    assert 'href="/-/search"' in get(site, "/-/grid").text   # the navigation's Search is the op search


def test_compare_defaults_to_two_sweeps_of_one_device_kind_never_a_bench_run(answers_db, tmp_path):
    path, db = _copy(answers_db, tmp_path, "compare.db")
    add_older_sweep_and_bench(db)
    db.conn.close()
    ds = _site(path)
    data = get(ds, "/-/compare.json").json()
    assert (data["a"], data["b"]) == ("cpu-old", "cpu")
    fixed = [c for c in data["changes"] if (c["op_id"], c["dtype"]) == ("abs", "float32")]
    assert [(c["before"], c["after"]) for c in fixed] == [("unsupported", "pass")]
    assert get(ds, "/-/compare.json?b=bench").json()["a"] != "bench"
    options = re.findall(r'<option value="(\w[\w-]*)"[^>]*>([^<]+)</option>', html.unescape(get(ds, "/-/compare").text))
    labels = dict(options)
    assert "bench (speed only)" in labels["bench"] and "sweep" in labels["cpu"]
    assert len(set(labels.values())) == len(labels)   # no two runs look alike in the picker


def test_csv_exports_are_gzipped_as_they_stream(site, answers_db):
    import gzip
    name = answers_db.stem
    for path in (f"/{name}/results.csv", f"/{name}/results.csv?_stream=on"):
        zipped = asyncio.run(site.client.get(path, headers={"accept-encoding": "gzip"}))
        plain = asyncio.run(site.client.get(path, headers={"accept-encoding": "identity"}))
        assert zipped.headers["content-encoding"] == "gzip" and "content-encoding" not in plain.headers
        assert zipped.text == plain.text and zipped.text.startswith("run_id,case_id,op_id")
        assert zipped.num_bytes_downloaded < len(plain.content)


def test_the_results_table_asks_no_facet_suggestions(site, answers_db, monkeypatch):
    """Suggesting facets for a table as wide as results is ~90 queries (seconds on a sweep)."""
    from datasette.database import Database
    asked = []
    execute = Database.execute

    async def counting(self, sql, *args, **kwargs):
        asked.append(sql)
        return await execute(self, sql, *args, **kwargs)
    monkeypatch.setattr(Database, "execute", counting)
    page = get(site, f"/{answers_db.stem}/results").text
    assert "abs" in page and len(asked) < 20, len(asked)
    assert get(site, f"/{answers_db.stem}/results.json?_facet=status").json()["facet_results"]


def test_the_readme_links_the_page_serve_prints():
    import inspect
    from pathlib import Path
    from mpsprobe.cli import serve
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    linked = re.findall(r"mpsprobe serve mpsprobe\.db +# http://127\.0\.0\.1:8001(/-/\w+)", readme)
    assert linked and f'{{bound}}{linked[0]}"' in inspect.getsource(serve)


def test_the_op_page_opens_with_the_mps_answer_then_other_devices_labelled(site):
    page = html.unescape(get(site, "/-/op/abs").text)
    headings = re.findall(r"<h2>([^<]+)</h2>", page)
    assert headings[0] == "On MPS"
    mps = page[page.index("<h2>On MPS</h2>"):page.index("<h3>Other devices")]
    assert "mps · declared, not measured" in mps and "PyTorch's own lists, not measured" in mps
    assert re.search(r'sp-partial declared" title="torch 2\.13\.0: partial; complex128: unsupported[^"]*">'
                     r"2\.13\.0 ◐ 6 of 7 dtypes", mps)
    assert "2.13.0+cpu" not in mps   # a CPU result is never an MPS answer
    assert "not MPS answers" in page and "2.13.0+cpu ✓" in page[page.index("<h3>Other devices"):]
    data = get(site, "/-/op/abs.json").json()["answers"]
    assert [g["device"] for g in data["mps"]] == ["mps"] and [g["device"] for g in data["other_devices"]] == ["cpu"]


def test_the_home_page_charts_support_across_releases_per_device(answers_db, tmp_path):
    path, db = _copy(answers_db, tmp_path, "chart.db")
    for dtype in DTYPES:   # an op PyTorch declares for no dtype on MPS in 2.13
        db["declared"].insert({"torch_version": "2.13.0", "device": "mps", "op_id": "never", "dtype": dtype,
                               "status": "unsupported", "source": "test"})
    db.conn.close()
    page = html.unescape(get(_site(path), "/").text)
    section = page[page.index("<h2>Support across releases</h2>"):]
    rows = dict(re.findall(r"</span> ([^<]+?) \((?:declared|measured)\)</th><td>([^<]+)</td>", section))
    assert rows["mps · declared, not measured"] == "2.12.0: 5 of 5 · 2.13.0: 6 of 7"
    assert rows["cpu · Linux 15"] == "2.13.0+cpu: 5 of 5"
    assert section.count('<polyline class="mp-series"') == 1       # a line needs two releases
    assert 'stroke-dasharray="5 4"' in section                       # declared is drawn dashed


def test_a_refusal_on_the_op_page_links_to_where_pytorch_says_it(answers_db, tmp_path):
    path, db = _copy(answers_db, tmp_path, "messages.db")
    add_run(db, "mps", "mps", "2.13.0", "macOS", "2026-02-01")
    message = ("The operator 'aten::abs.out' is not currently implemented for the MPS device. If you want "
               "this op to be added in priority during the prototype phase of this feature, please comment on "
               "https://github.com/pytorch/pytorch/issues/77764.")
    add_result(db, "mps", "abs", "float16", "unsupported", message=message, reason_kind="no_kernel",
            aten_op="aten::abs.out")
    db.conn.close()
    from mpsprobe.engine.messages import match_family
    family, _ = match_family(message)
    page = html.unescape(get(_site(path), "/-/op/abs").text)
    row = re.search(r"<code><bdi>The operator 'aten::abs\.out'.*?</td>", page, re.S).group(0)
    expected = family.reports[0] if family.reports else "https://github.com/pytorch/pytorch/blob/"
    assert f'<a href="{expected}' in row


def test_a_verdict_from_a_case_run_again_after_a_worker_died_says_so_on_the_op_page(answers_db, tmp_path):
    path, db = _copy(answers_db, tmp_path, "rerun.db")
    add_run(db, "mps", "mps", "2.13.0", "macOS", "2026-02-01")
    died = "worker killed by SIGSEGV; 2 lines of stderr"
    add_result(db, "mps", "add", "float32", "pass", notes=json.dumps({"crash_not_reproduced": died}))
    # A reason that merely mentions the words is not a death.
    add_result(db, "mps", "add", "float16", "pass", reason="crash_not_reproduced in prose")
    db.conn.close()
    page = html.unescape(get(_site(path), "/-/op/add").text)
    mps = page[page.index("<h2>On MPS</h2>"):page.index("<h3>Other devices")]
    title = re.search(r'<span class="st sp-supported" title="torch 2\.13\.0: supported([^"]*)">', mps).group(1)
    assert "float32: 1 case(s) killed a worker once and ran to this verdict in another" in title
    assert "float16" not in title
    clean = html.unescape(get(_site(answers_db), "/-/op/add").text)
    assert "killed a worker" not in clean
