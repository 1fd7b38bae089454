"""A real browser against `mpsprobe serve`: every page renders, at desktop and phone width.

Drives Debian's headless Chromium (`apt-get install chromium`) over the
DevTools protocol (websocket-client, a test dependency); skips only when
Chromium or websocket-client is missing. The walk loads the site's pages and
the links on them at 1400 px and 390 px on a multi-run database with hostile
strings, and fails on a 5xx, markup from the data, a console error, a page
wider than the window, or a table whose op column leaves the screen. A second
server holds a declared MPS history and a CPU run (test_site_answers' database):
there the grid, op page, search and compare must answer first, and at phone
width every link must be a tap target of 24 px or more.
"""
import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request

import pytest

from chromium import CHROMIUM, Browser, free_port, wait_for

websocket = pytest.importorskip("websocket", reason="websocket-client is not installed")
pytestmark = [pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed"), pytest.mark.slow]  # a headless Chromium walks the site of three sweeps

WIDTHS = (1400, 390)
PAGES_PER_WIDTH = 36

# Evaluated in each page: what the walk checks, as JSON.
PROBE = """JSON.stringify((() => {
  const width = window.innerWidth;
  const tables = [...document.querySelectorAll('table.mp-matrix')].map(t => {
    const box = t.closest('.mp-scroll') || t.parentElement;
    box.scrollLeft = box.scrollWidth;               // scrolled right, the op column stays
    const first = t.querySelector('tbody tr th.mp-op');
    const r = first ? first.getBoundingClientRect() : null;
    const b = box.getBoundingClientRect();
    box.scrollLeft = 0;
    return r ? {left: r.left, right: r.right, boxLeft: b.left, width: r.width} : null;
  }).filter(Boolean);
  return {
    scrollWidth: document.documentElement.scrollWidth, width,
    scripts: [...document.scripts].filter(s => s.textContent.includes('alert(1)')).length,
    nav: !!document.querySelector('.mp-nav'),
    tables,
    links: [...document.querySelectorAll('a[href]')].map(a => a.href)
             .filter(h => h.startsWith(location.origin)),
  };
})())"""


@pytest.fixture(scope="module")
def server(extra_db):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mpsprobe", "serve", extra_db, "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(base + "/-/legend", proc, "mpsprobe serve")
        yield base, extra_db
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    tab = Browser(tmp_path_factory.mktemp("chromium") / "profile")
    yield tab
    tab.close()


def status_of(url):
    try:
        return urllib.request.urlopen(url, timeout=30).status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.mark.parametrize("width", WIDTHS)
def test_walk_every_page_at_desktop_and_phone_width(server, browser, width):
    base, db = server
    name = os.path.splitext(os.path.basename(db))[0]
    queue = [f"{base}{p}" for p in ("/-/grid", "/-/matrix", "/-/op/histc", "/-/compare", "/-/legend",
                                    "/-/findings", "/-/check-ops?ops=add%0Ahistc", "/",
                                    f"/{name}/search?q=conv", f"/{name}/fallbacks",
                                    "/-/search?q=conv", "/-/search?q=BatchNorm2d", "/-/grid?dtype=float32",
                                    "/-/op/nn.functional.interpolate", "/-/op/exp", "/-/speed",
                                    "/-/op/" + urllib.parse.quote("<script>alert(1)</script>", safe=""),
                                    # No-match deep links and hostile parameters.
                                    "/-/matrix?torch=2.5&os=14&device=mps", "/-/matrix?run=declared:2.13.0",
                                    "/-/grid?op=%3Cscript%3Ealert(1)%3C/script%3E&status=%22",
                                    "/-/compare?a=zzz&b=%3Cx%3E", "/-/op/no_such_op",
                                    "/-/check-ops?ops=%22%3Cscript%3Ealert(1)%3C/script%3E")]
    seen, visited = set(queue), 0
    while queue and visited < PAGES_PER_WIDTH:
        url = queue.pop(0)
        if url.endswith((".csv", ".json", ".db")) or "/-/static" in url or "_sort" in url:
            continue
        status = status_of(url)
        assert status < 500, url
        browser.errors.clear()
        browser.open(url, width)
        page = browser.evaluate(PROBE)
        visited += 1
        # A missing page's own 404 is logged as a failed load; nothing else may be.
        errors = [e for e in browser.errors if not (status == 404 and "status of 404" in e)]
        assert not errors, (url, errors)
        assert page["scripts"] == 0, url
        assert page["nav"], url
        assert page["scrollWidth"] <= page["width"] + 1, (url, page["scrollWidth"], width)
        for table in page["tables"]:
            assert table["left"] >= table["boxLeft"] - 1 and table["right"] <= width + 1, (url, table)
        for link in page["links"]:
            link = link.split("#")[0]
            if link not in seen:
                seen.add(link)
                queue.append(link)
    assert visited >= 12


def test_matrix_cells_are_coloured_and_carry_symbols(server, browser):
    from mpsprobe.vocabulary import STATUS
    base, _ = server
    browser.open(f"{base}/-/matrix", 1400)
    found = json.loads(browser.call("Runtime.evaluate", returnByValue=True, expression="""
        JSON.stringify([...document.querySelectorAll('table.mp-matrix td[class^="st-"]')].map(
            td => [td.className, td.textContent.trim(), getComputedStyle(td).backgroundColor]))
    """)["result"]["value"])
    assert found
    for klass, text, colour in found:
        status = klass.split()[0][3:]
        assert text == STATUS[status].symbol
        assert colour not in ("rgba(0, 0, 0, 0)", "rgb(255, 255, 255)")


# For each status symbol shown, in the font its element uses: does it draw a glyph
# of its own, or the missing-glyph box (drawn the same for any code point no font has)?
GLYPHS = """JSON.stringify((() => {
  const canvas = document.createElement('canvas');
  canvas.width = canvas.height = 48;
  const g = canvas.getContext('2d');
  const draw = (text, font) => {
    g.clearRect(0, 0, 48, 48); g.font = font; g.fillText(text, 4, 36);
    return g.getImageData(0, 0, 48, 48).data.join(',');
  };
  const found = {};
  for (const el of document.querySelectorAll('[class*="st-"]')) {
    const symbol = [...el.textContent.trim()][0];
    if (!symbol) continue;
    const style = getComputedStyle(el.querySelector('a') || el);
    const font = `${style.fontWeight} 28px ${style.fontFamily}`;
    const drawn = draw(symbol, font);
    found[symbol + ' in ' + style.fontFamily] =
      drawn !== draw('\\uE000', font) && drawn !== draw('\\u{10FFFD}', font) && drawn !== draw(' ', font);
  }
  return found;
})())"""


@pytest.mark.parametrize("path", ["/-/legend", "/-/grid", "/-/matrix", "/-/op/lgamma", "/-/op/histc",
                                  "/-/compare", "/extra/results?_size=200", "/-/findings"])
def test_every_status_symbol_draws_a_glyph(server, browser, path):
    from mpsprobe.vocabulary import STATUS
    base, _ = server
    browser.open(base + path, 1400)
    drawn = browser.evaluate(GLYPHS)
    shown = {key.split(" in ")[0] for key in drawn}
    assert shown, path
    assert not [key for key, ok in drawn.items() if not ok], (path, drawn)
    if path == "/-/legend":   # every status, the timeout's too
        assert {s.symbol for s in STATUS.values()} <= shown


@pytest.mark.parametrize("width", WIDTHS)
def test_the_op_page_draws_its_speed_curve_inside_the_window(server, browser, width):
    """exp has a ladder (conftest's extra_db): CPU and target lines, inside the window."""
    base, _ = server
    browser.open(base + "/-/op/exp", width)
    charts = browser.evaluate("""JSON.stringify([...document.querySelectorAll('svg.mp-chart')].map(svg => {
        const r = svg.getBoundingClientRect();
        return {left: r.left, right: r.right, height: r.height,
                lines: [...svg.querySelectorAll('polyline.mp-series')].map(p => p.points.length)};
    }))""")
    assert charts
    for chart in charts:
        assert len(chart["lines"]) == 2 and min(chart["lines"]) >= 2, chart   # CPU and target, a point per rung
        assert chart["left"] >= 0 and chart["right"] <= width + 1 and chart["height"] > 80, chart


def test_screenshots_of_the_grid_and_an_op_page(server, browser, tmp_path):
    """The way benchmarks/site_screenshots.py takes the README's: a window, and a whole page."""
    base, _ = server
    out = str(tmp_path)
    for page, path in (("grid", "/-/grid"), ("op", "/-/op/histc")):
        for width, label in ((1400, "desktop"), (390, "phone")):
            browser.open(base + path, width)
            shot = os.path.join(out, f"{page}-{label}.png")
            browser.screenshot(shot, full_page=2600 if page == "op" else 0)
            with open(shot, "rb") as f:
                head = f.read(24)
            assert head[:8] == b"\x89PNG\r\n\x1a\n"
            assert int.from_bytes(head[16:20], "big") == width              # PNG width
            assert int.from_bytes(head[20:24], "big") >= 900                # the page's height


@pytest.fixture(scope="module")
def answers_server(tmp_path_factory):
    from answers_db import build_answers_db
    db = build_answers_db(tmp_path_factory.mktemp("answers") / "answers.db", older_sweep_and_bench=True)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mpsprobe", "serve", str(db), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(base + "/-/legend", proc, "mpsprobe serve")
        yield base
    finally:
        proc.terminate()
        proc.wait(10)


# Links under 24 px tall (WCAG 2.2's minimum target), with their text.
SMALL_TARGETS = """JSON.stringify([...document.querySelectorAll('a[href]')].map(a => {
  const r = a.getBoundingClientRect();
  return [r.height, a.textContent.trim().slice(0, 40)];
}).filter(([h]) => h > 0 && h < 24))"""


@pytest.mark.parametrize("width", WIDTHS)
def test_the_answer_comes_first_in_the_grid_op_page_search_and_compare(answers_server, browser, width):
    base = answers_server
    browser.open(f"{base}/-/grid", width)
    cell = browser.evaluate("""JSON.stringify((() => {
        const row = [...document.querySelectorAll('table.mp-grid tbody tr')]
            .find(tr => tr.querySelector('th a').textContent === 'abs');
        const td = [...row.querySelectorAll('td')].find(td => {
            const a = td.querySelector('a'); return a && a.title.startsWith('torch 2.13.0 on mps'); });
        return {cls: td.className, text: td.textContent.trim(),
                bdi: [...document.querySelectorAll('th.mp-op a')].every(a => a.querySelector('bdi'))};
    })())""")
    assert cell["cls"].split()[0] == "sp-partial" and cell["text"].startswith("◐"), cell   # not ✗
    assert cell["bdi"]   # every op name isolated: a right-to-left override flips nothing around it
    browser.open(f"{base}/-/op/abs", width)
    first = browser.evaluate("JSON.stringify(document.querySelector('section.content h2, h2').textContent)")
    assert first == "On MPS"
    browser.open(f"{base}/-/search?q=BatchNorm2d", width)
    found = browser.evaluate("JSON.stringify([...document.querySelectorAll('table.mp-search tbody th a')]"
                             ".map(a => a.textContent))")
    assert found == ["nn.functional.batch_norm"]
    browser.open(f"{base}/-/compare", width)
    picked = browser.evaluate("JSON.stringify([...document.querySelectorAll('select')]"
                              ".map(s => s.options[s.selectedIndex].text))")
    # Before: the older CPU sweep, after: the newer; never the (newest) bench run.
    assert picked[0].startswith("torch 2.12.0+cpu") and picked[1].startswith("torch 2.13.0+cpu"), picked
    assert all(" · sweep · " in p for p in picked), picked
    if width < 600:
        for path in ("/-/grid", "/-/grid?dtype=float32", "/-/op/abs", "/-/search?q=conv", "/-/compare", "/"):
            browser.open(base + path, width)
            assert browser.evaluate(SMALL_TARGETS) == [], path


@pytest.mark.parametrize("path", ["/-/grid?op=", "/-/matrix?op=", "/-/grid.json?op=", "/-/search?q="])
def test_a_100000_character_filter_is_a_400_with_a_message(answers_server, path):
    try:
        urllib.request.urlopen(answers_server + path + "a" * 100_000, timeout=30)
        raise AssertionError("accepted")
    except urllib.error.HTTPError as e:
        assert e.code == 400
        assert "100000 characters long; at most 500 are accepted" in e.read().decode()


def test_a_click_on_a_column_header_sorts_the_table(answers_server, browser):
    browser.open(f"{answers_server}/-/search?q=n", 1400)
    ops = "JSON.stringify([...document.querySelectorAll('table.mp-search tbody th a')].map(a => a.textContent))"
    before = browser.evaluate(ops)
    assert len(before) > 2 and before != sorted(before)   # best match first, not alphabetical
    browser.evaluate("JSON.stringify((document.querySelector('table.mp-search thead th button').click(), true))")
    assert browser.evaluate(ops) == sorted(before, key=str.lower)
    browser.evaluate("JSON.stringify((document.querySelector('table.mp-search thead th button').click(), true))")
    assert browser.evaluate(ops) == sorted(before, key=str.lower, reverse=True)
