"""The site's compiled layer: the grid's "eager | compiled" switch and its cells from the
compiled cases alone, the op page's compiled answers beside the eager ones, and
compiled-vs-eager speeds claimed only where the interval excludes 1. A store that compiled
nothing shows the layer as not measured, never as every op unknown."""
import asyncio
import html
import re

import pytest

from mpsprobe.site import make_datasette

from compiled_db import build


def serve(path):
    ds = make_datasette(str(path))
    asyncio.run(ds.invoke_startup())
    return ds


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    path = tmp_path_factory.mktemp("compiled") / "compiled.db"
    build(path)
    return serve(path)


@pytest.fixture(scope="module")
def bare_site(tmp_path_factory):
    path = tmp_path_factory.mktemp("eager") / "eager.db"
    build(path, mps_compiled=False, cpu_compiled=False)
    return serve(path)


def get(ds, path, status=200):
    response = asyncio.run(ds.client.get(path))
    assert response.status_code == status, (path, response.text[:1000])
    return response


def cells(data, op):
    """{column group's device: cell} of one op's grid row."""
    row = next(r for r in data["rows"] if r["op_id"] == op)
    return {col["group"].split(" · ")[0]: c for col, c in zip(data["columns"], row["cells"])}


def test_the_compiled_layer_answers_from_compiled_cases_by_the_same_rules(site):
    data = get(site, "/-/grid.json?pass=compiled").json()
    assert data["layer"] == "compiled" and data["compiled_measured"]
    assert cells(data, "add")["mps"]["answer"] == "supported"
    assert cells(data, "sort")["mps"]["answer"] == "unsupported"
    assert cells(data, "cumsum")["mps"]["dtypes"] == {"float32": "mismatch"}
    mul = cells(data, "mul")["mps"]
    assert mul["answer"] == "partial" and mul["notes"] == ["float32: left to eager by the compiler"]
    # Never compiled on MPS: no cell, and no declaration stands in for one.
    assert cells(data, "relu")["mps"] is None
    assert all(not c["declared_only"] for r in data["rows"] for c in r["cells"] if c)
    # The eager layer is unchanged by the compiled cases: mul and sort work eagerly.
    eager = get(site, "/-/grid.json").json()
    assert eager["layer"] == "eager"
    assert cells(eager, "mul")["mps"]["answer"] == cells(eager, "sort")["mps"]["answer"] == "supported"


def test_a_compiled_fallback_is_never_called_a_cpu_one(site):
    page = html.unescape(get(site, "/-/grid?pass=compiled").text)
    row = re.search(r'<a href="/-/op/mul"><bdi>mul</bdi></a>.*?</tr>', page).group(0)
    assert "sp-partial" in row and "left to eager by the compiler" in row
    assert "the compiler leaves it to eager" in row and "CPU" not in row
    assert "&pass=compiled" in row          # the cell's cases are the compiled ones


def test_the_switch_links_both_layers(site):
    page = html.unescape(get(site, "/-/grid?op=mul").text)
    switch = re.search(r'<nav class="mp-chips mp-layers".*?</nav>', page).group(0)
    assert '<span class="mp-chip on"' in switch and ">eager<" in switch
    assert 'href="/-/grid?op=mul&pass=compiled"' in switch
    compiled = html.unescape(get(site, "/-/grid?op=mul&pass=compiled").text)
    switch = re.search(r'<nav class="mp-chips mp-layers".*?</nav>', compiled).group(0)
    assert 'href="/-/grid?op=mul"' in switch and 'aria-current="true">compiled' in switch


def test_nothing_compiled_is_not_measured_not_unknown(bare_site):
    page = html.unescape(get(bare_site, "/-/grid").text)
    switch = re.search(r'<nav class="mp-chips mp-layers".*?</nav>', page).group(0)
    assert "pass=compiled" not in switch and 'aria-disabled="true"' in switch and "not measured" in switch
    data = get(bare_site, "/-/grid.json?pass=compiled").json()
    assert data["compiled_measured"] is False and data["rows"] == [] and data["columns"] == []
    page = html.unescape(get(bare_site, "/-/grid?pass=compiled").text)
    assert "The compiled layer is not measured" in page
    assert "mp-matrix mp-grid" not in page and "<td class=\"sp-" not in page      # no cell painted at all
    op = html.unescape(get(bare_site, "/-/op/add").text)
    section = re.search(r'<section class="mp-answer" id="compiled-answer">.*?</section>', op, re.S).group(0)
    assert "Not measured: no run compiled this op" in section
    assert get(bare_site, "/-/op/add.json").json()["compiled"]["beside_eager"] == []


def test_the_op_page_shows_compiled_cases_beside_eager(site):
    page = html.unescape(get(site, "/-/op/sort").text)
    section = re.search(r'<section class="mp-answer" id="compiled-answer">.*?</section>', page, re.S).group(0)
    assert "mps · macOS 15" in section and "compiling it fails" in section
    row = re.search(r"<tr><td>torch 2\.13\.0 · macOS 15\.3 · mps[^<]*</td>.*?</tr>", section).group(0)
    assert '<td class="st-pass">✓ pass</td>' in row and "! error" in row
    mul = get(site, "/-/op/mul.json").json()["compiled"]["beside_eager"]
    assert [(r["eager"], r["compiled"], r["reason_kind"], r["left_to_eager"]) for r in mul] == \
        [("pass", "fallback", "compiled_fallback", ["aten::mul.Tensor"])]
    # The CPU's compiled relu failure is another device's answer, not MPS's.
    relu = html.unescape(get(site, "/-/op/relu").text)
    section = re.search(r'<section class="mp-answer" id="compiled-answer">.*?</section>', relu, re.S).group(0)
    assert "No MPS answer: no MPS run compiled this op." in section
    assert "Other devices <small>(not MPS answers)</small>" in section and "not an MPS answer" in section


def test_compiled_speed_is_claimed_only_where_the_interval_excludes_1(site):
    add = html.unescape(get(site, "/-/op/add").text)
    assert "compiled faster: 1.80x (1.50-2.10)" in add
    exp = html.unescape(get(site, "/-/op/exp").text)
    assert "no clear difference (0.90-1.07)" in exp and "compiled faster" not in exp
    # Not passed, so not timed: no speed row for sort.
    assert get(site, "/-/op/sort.json").json()["compiled"]["speeds"] == []
    speed = get(site, "/-/speed.json").json()["compiled"]
    [run] = speed
    assert {r["op_id"]: r["verdict"] for r in run["rows"]} == {"add": "compiled faster",
                                                              "exp": "no clear difference"}
    page = html.unescape(get(site, "/-/speed").text)
    assert "Compiled vs eager · torch 2.13.0 · macOS 15.3 · mps" in page


def test_the_fallbacks_query_lists_no_compiled_case(site):
    data = get(site, "/compiled/fallbacks.json?run_id=&_shape=array").json()
    assert data == []


@pytest.mark.parametrize("query", ["pass=compiled&dtype=float32", "pass=compiled&status=fallback",
                                   "pass=nonsense", "pass=compiled&page=9"])
def test_any_query_on_the_compiled_layer_renders(site, query):
    get(site, f"/-/grid?{query}")


def test_the_compiled_layer_escapes_its_filter(site):
    page = get(site, "/-/grid?pass=compiled&op=%3Cscript%3Ex").text
    assert 'value="&lt;script&gt;x"' in page and "<script>x" not in page
