"""Pictures and the inspector in a real browser: headless Chromium opens them, takes a screenshot and
dumps the DOM after the page's scripts ran. Stored ``<script>`` text must show as text and never run."""
from __future__ import annotations

import re
import urllib.parse
from html import unescape

import pytest

from causalmem import Memory
from causalmem.viz import dot_binary, render_html, render_svg, subgraph, what_if_graph
from causalmem.viz import style
from causalmem.viz.server import InspectorServer
from viz_helpers import XSS, assert_not_blank, build_demo, chromium, count_near, hex_rgb, need_chromium

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory):
    need_chromium()
    db = tmp_path_factory.mktemp("viz-browser") / "agent.db"
    ids = build_demo(db)
    return db, ids


def svg_texts(dom: str) -> list[str]:
    """Text of the SVG <tspan>/<text> elements in a dumped DOM."""
    return [unescape(t) for t in re.findall(r"<(?:tspan|text)[^>]*>([^<]*)</(?:tspan|text)>", dom)]


def assert_script_inert(dom: str, title: str) -> None:
    assert f"<title>{title}</title>" in dom, "document.title was changed: a stored script ran"
    assert 'id="pwned"' not in dom, "an element was added: a stored script ran"
    assert "<img src=" not in dom, "stored markup became an element"


def test_html_picture_in_chromium(demo_db, tmp_path):
    db, ids = demo_db
    with Memory(db, embedder=None) as mem:
        sg = subgraph(mem, "production crash", depth=2, direction="both", user_id="eve")
        assert XSS in {n.text for n in sg.nodes}
        page = tmp_path / "eve.html"
        render_html(sg, page)
        forward = subgraph(mem, "deploy without tests", depth=2, direction="forward")
        fpage = tmp_path / "chain.html"
        render_html(forward, fpage)

    # the stored script is shown as text, never run
    dom = chromium(page.as_uri(), tmp_path, dump_dom=True)
    assert 'data-rendered="yes"' in dom, "the page script did not finish"
    assert_script_inert(dom, "causalmem picture")
    cells = [unescape(c) for c in re.findall(r"<td[^>]*>([^<]*)</td>", dom)]
    assert XSS in cells  # the full stored text, as a text node
    assert any("<script>document.title=" in t for t in svg_texts(dom))  # the node box shows it literally

    shot = tmp_path / "chain.png"
    dom = chromium(fpage.as_uri(), tmp_path, dump_dom=True)
    texts = svg_texts(dom)
    for name in ("deploy without tests", "production crash", "user complaints", "safe release", "rollback needed"):
        assert name in texts, name
    assert 'class="cm-badge DANGER"' in dom
    assert len(re.findall(r'class="cm-edge cm-highlight', dom)) == 3
    assert len(re.findall(r'class="cm-edge cm-inhibitory"', dom)) == 1
    chromium(fpage.as_uri(), tmp_path, screenshot=shot, size=(1400, 700))
    img = assert_not_blank(shot)
    assert count_near(img, hex_rgb(style.HIGHLIGHT), tol=60) > 300, "no highlighted chain on screen"
    assert count_near(img, hex_rgb(style.RELATION_COLOR["prevented"]), tol=40) > 50, "no prevented edge on screen"
    assert count_near(img, hex_rgb(style.POLARITY_FILL["negative"][0]), tol=6) > 2000, "no negative node on screen"


@pytest.mark.skipif(dot_binary() is None, reason="Graphviz dot not installed")
def test_graphviz_svg_in_chromium(demo_db, tmp_path):
    db, _ = demo_db
    with Memory(db, embedder=None) as mem:
        out = tmp_path / "what_if.svg"
        render_svg(what_if_graph(mem, "deploy without tests"), out)
        xss = tmp_path / "xss.svg"
        render_svg(subgraph(mem, "production crash", direction="reverse", user_id="eve"), xss)
    shot = tmp_path / "svg.png"
    chromium(out.as_uri(), tmp_path, screenshot=shot, size=(1200, 500))
    img = assert_not_blank(shot)
    assert count_near(img, hex_rgb(style.HIGHLIGHT), tol=60) > 300
    dom = chromium(xss.as_uri(), tmp_path, dump_dom=True)
    assert "pwned" in dom and "<script>document" not in dom and 'id="pwned"' not in dom


@pytest.fixture()
def inspector(demo_db):
    db, ids = demo_db
    mem = Memory(db, embedder=None)
    srv = InspectorServer(mem)
    srv.start()
    try:
        yield srv, ids
    finally:
        srv.shutdown()
        srv.server_close()
        mem.close()


def test_inspector_what_if_page_in_chromium(inspector, tmp_path):
    srv, _ = inspector
    url = srv.url + "?" + urllib.parse.urlencode({"action": "deploy without tests"})
    dom = chromium(url, tmp_path, dump_dom=True)
    assert 'data-ready="yes"' in dom, "the page did not finish its API calls"
    assert 'class="cm-badge DANGER">DANGER<' in dom
    texts = svg_texts(dom)
    for name in ("deploy without tests", "production crash", "user complaints", "safe release"):
        assert name in texts, name
    assert "deploy without tests → production crash → user complaints" in unescape(dom)
    assert ">read-only<" in dom
    shot = tmp_path / "inspector.png"
    chromium(url, tmp_path, screenshot=shot, size=(1300, 800))
    img = assert_not_blank(shot)
    assert count_near(img, hex_rgb(style.HIGHLIGHT), tol=60) > 300


def test_inspector_shows_stored_script_as_text(inspector, tmp_path):
    srv, ids = inspector
    dom = chromium(srv.url + "?" + urllib.parse.urlencode({"q": "ignore document title", "user_id": "eve"}),
                   tmp_path, dump_dom=True)
    assert 'data-ready="yes"' in dom
    assert_script_inert(dom, "causalmem inspector")
    cells = [unescape(c) for c in re.findall(r"<td[^>]*>([^<]*)</td>", dom)]
    assert XSS in cells
    # the memory view: text, history, edges and its neighbourhood picture
    dom = chromium(srv.url + "?" + urllib.parse.urlencode({"memory": ids["xss"]}), tmp_path, dump_dom=True)
    assert 'data-ready="yes"' in dom
    assert_script_inert(dom, "causalmem inspector")
    assert unescape(re.search(r'id="detail-text"[^>]*>([^<]*)<', dom).group(1)) == XSS
    assert "production crash" in svg_texts(dom)


def test_inspector_memories_by_scope_with_history(inspector, tmp_path):
    srv, ids = inspector
    dom = chromium(srv.url + "?" + urllib.parse.urlencode({"memory": ids["edited"]}), tmp_path, dump_dom=True)
    assert 'data-ready="yes"' in dom
    cells = [unescape(c) for c in re.findall(r"<td[^>]*>([^<]*)</td>", dom)]
    assert "pin the base image" in cells and "pin the base image digest" in cells  # history: old and new
    assert "update" in cells and "reproducible builds" in cells
    buttons = [unescape(b) for b in re.findall(r"<button[^>]*>([^<]*)</button>", dom)]
    assert any(b.startswith("user eve — 4 memories") for b in buttons), buttons
    assert any(b.startswith("user (none) — 14 memories") for b in buttons), buttons


def test_inspector_sleep_and_stats_tabs(inspector, tmp_path):
    srv, _ = inspector
    dom = chromium(srv.url + "?tab=sleep", tmp_path, dump_dom=True)
    assert 'data-ready="yes"' in dom
    cells = [unescape(c) for c in re.findall(r"<td[^>]*>([^<]*)</td>", dom)]
    i = cells.index("protected")
    assert int(cells[i + 1]) > 0 and "reactivated" in cells and "ran at" in cells
    dom = chromium(srv.url + "?tab=stats", tmp_path, dump_dom=True)
    cells = [unescape(c) for c in re.findall(r"<td[^>]*>([^<]*)</td>", dom)]
    assert cells[cells.index("edges") + 1] == "13" and cells[cells.index("writable") + 1] == "false"
