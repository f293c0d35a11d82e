"""The inspector at 1400 px in a real headless Chromium (driven through Playwright, the system's
browser): the landing page shows counts and recent memories, the memory detail leaves the list
readable (names on one line, ``created`` whole, the mini graph inside its box), search marks a
prevented outcome, and the what-if summary names every outcome the table shows. Boxes are measured
in the page with getBoundingClientRect / scrollWidth, and each page is also saved as a screenshot."""
from __future__ import annotations

import urllib.parse

import pytest

from causalmem import Memory
from causalmem.viz.server import InspectorServer
from viz_helpers import assert_not_blank, build_demo, chromium_binary, need_chromium

pytestmark = pytest.mark.slow

WIDTH, HEIGHT = 1400, 900


@pytest.fixture(scope="module")
def browser():
    binary = need_chromium()  # skips (or fails under CAUSALMEM_REQUIRE_BROWSER) only without Chromium
    from playwright.sync_api import sync_playwright  # the test extra: a missing package is a failure

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=binary or chromium_binary(), args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture()
def page(browser):
    pg = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    try:
        yield pg
    finally:
        pg.close()


def _serve(db):
    mem = Memory(db, embedder=None)
    srv = InspectorServer(mem)
    srv.start()
    return mem, srv


@pytest.fixture()
def demo(tmp_path):
    db = tmp_path / "agent.db"
    ids = build_demo(db)
    mem, srv = _serve(db)
    try:
        yield mem, srv, ids
    finally:
        srv.shutdown()
        srv.server_close()
        mem.close()


def _open(page, srv, **params) -> None:
    page.goto(srv.url + ("?" + urllib.parse.urlencode(params) if params else ""))
    page.wait_for_selector("body[data-ready=yes]", timeout=60_000)


def _shot(page, path):
    page.screenshot(path=str(path))
    return assert_not_blank(path)


def test_landing_page_shows_counts_and_recent_memories(demo, page, tmp_path):
    mem, srv, ids = demo
    _open(page, srv)
    _shot(page, tmp_path / "landing.png")
    counts = page.eval_on_selector_all(
        "#overview-counts .count", "els => els.map(e => [e.querySelector('span').textContent, "
        "e.querySelector('b').textContent])")
    counts = dict(counts)
    stats = mem.stats()
    assert counts["memories"] == str(stats["chunks"]) and counts["edges"] == str(stats["edges"]), counts
    assert page.is_visible("#overview-counts") and page.is_visible("#recent-table")
    rows = page.eval_on_selector_all("#recent-rows tr", "trs => trs.map(tr => tr.cells[1].title)")
    newest = sorted(mem.get_all(limit=1000), key=lambda c: (-c.created_at, c.id))[:10]
    assert rows == [c.text for c in newest]
    assert rows[0] == "pin the base image digest"  # the last memory build_demo wrote (then edited)
    # nothing of the landing page runs past the window or is cut inside its box
    boxes = page.evaluate("""() => Array.from(document.querySelectorAll(
        '#overview .count, #recent-table, #recent-table th, #recent-rows td:not(.memtext)')).map(e => {
        const r = e.getBoundingClientRect();
        return [e.textContent, r.right, e.scrollWidth - e.clientWidth]; })""")
    assert boxes
    for text, right, hidden in boxes:
        assert right <= WIDTH and hidden <= 1, (text, right, hidden)


def test_memory_detail_at_1400px_leaves_the_list_readable(demo, page, tmp_path):
    mem, srv, ids = demo
    _open(page, srv, memory=ids["edited"])
    page.wait_for_selector("#detail-picture svg")
    _shot(page, tmp_path / "detail.png")
    m = page.evaluate("""() => {
        const box = e => e.getBoundingClientRect();
        const line = parseFloat(getComputedStyle(document.querySelector('#memories-rows td')).lineHeight) || 18;
        const list = document.querySelector('#memories-table').closest('.col');
        const rows = Array.from(document.querySelectorAll('#memories-rows tr')).map(tr => ({
            text: tr.cells[1].title, nameHeight: tr.cells[1].getClientRects().length ?
                box(tr.cells[1]).height : 0,
            nameCut: tr.cells[1].scrollWidth - tr.cells[1].clientWidth,
            created: tr.cells[5].textContent, createdCut: tr.cells[5].scrollWidth - tr.cells[5].clientWidth,
            createdRight: box(tr.cells[5]).right, rowHeight: box(tr).height}));
        const pic = document.querySelector('#detail-picture'), svg = pic.querySelector('svg');
        return {line, rows, listRight: box(list).right, listHidden: list.scrollWidth - list.clientWidth,
                detail: box(document.querySelector('#detail')), pic: box(pic), svg: box(svg),
                picHidden: pic.scrollWidth - pic.clientWidth,
                fields: Array.from(document.querySelectorAll('#detail-fields td')).map(td =>
                    [td.textContent, td.scrollWidth - td.clientWidth, box(td).right])};
    }""")
    assert len(m["rows"]) == len(mem.get_all(limit=1000))
    assert m["listHidden"] <= 1, "the memory list overflows its column (columns scrolled out of view)"
    for r in m["rows"]:
        assert r["rowHeight"] < 2 * m["line"], f"{r['text']!r} wraps: row {r['rowHeight']} px, line {m['line']}"
        assert r["createdCut"] <= 1 and r["createdRight"] <= m["listRight"] + 1, r
        assert len(r["created"]) == 19, r  # YYYY-MM-DD hh:mm:ss, whole
        if len(r["text"]) <= 30:  # a short name is shown whole; a long text ends in an ellipsis
            assert r["nameCut"] <= 1, r
    d, pic, svg = m["detail"], m["pic"], m["svg"]
    assert d["right"] <= WIDTH, d
    assert m["picHidden"] <= 1 and svg["left"] >= pic["left"] - 1 and svg["right"] <= pic["right"] + 1, (pic, svg)
    for text, hidden, right in m["fields"]:
        assert hidden <= 1 and right <= WIDTH, (text, hidden, right)
    texts = page.eval_on_selector_all("#detail-picture svg text, #detail-picture svg tspan", "els => els.map(e => e.textContent)")
    assert "reproducible builds" in " ".join(texts)


def test_search_marks_the_prevented_outcome(tmp_path, page):
    db = tmp_path / "ops.db"
    with Memory(db, embedder=None) as m:
        m.record_decision("enable caching", "faster response", confidence=0.8)
        m.record_decision("enable caching", "timeout errors", relation="prevented", confidence=0.85)
    mem, srv = _serve(db)
    try:
        _open(page, srv, q="caching")
        _shot(page, tmp_path / "search.png")
        rows = page.eval_on_selector_all("#search-rows tr", """trs => trs.map(tr => [tr.cells[0].textContent,
            tr.cells[1].firstChild.textContent, tr.cells[1].querySelector('.cm-badge') ?
            tr.cells[1].querySelector('.cm-badge').textContent : null])""")
    finally:
        srv.shutdown()
        srv.server_close()
        mem.close()
    by = {text: (float(score), badge) for score, text, badge in rows}
    assert set(by) == {"enable caching", "faster response", "timeout errors"}, rows
    assert by["timeout errors"][1] == "WARNING (prevented)"
    assert by["faster response"][1] is None and by["enable caching"][1] is None
    assert len({s for s, _ in by.values()}) == 3 and by["faster response"][0] > by["timeout errors"][0]


def test_what_if_summary_names_what_the_table_and_graph_show(demo, page, tmp_path):
    mem, srv, ids = demo
    _open(page, srv, action="deploy without tests")
    page.wait_for_selector("#whatif-picture svg")
    _shot(page, tmp_path / "whatif.png")
    summary = page.inner_text("#whatif-summary")
    outcomes = page.eval_on_selector_all("#whatif-rows tr", "trs => trs.map(tr => tr.cells[1].textContent)")
    graph = " ".join(page.eval_on_selector_all("#whatif-picture svg text, #whatif-picture svg tspan",
                                               "els => els.map(e => e.textContent)"))
    assert len(outcomes) >= 4
    for o in outcomes:
        assert o in graph, o
        assert o in summary, (o, summary)
    assert "safe release (WARNING)" in summary and "UNKNOWN" not in summary, summary
