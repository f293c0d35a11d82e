"""causalmem.viz: the subgraph behind every picture, its exports, the layout and Graphviz SVG."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from causalmem import Memory
from causalmem.cli import DEVOPS_EDGES
from causalmem.viz import (GraphEdge, SubGraph, dot_binary, layout, render_html, subgraph, to_dot,
                           to_networkx, what_if_graph, write_picture)
from causalmem.viz import style
from viz_helpers import XSS

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture()
def mem(tmp_path):
    with Memory(tmp_path / "viz.db", embedder=None) as m:
        m.record_many([{"decision": d, "outcome": o, "relation": r, "confidence": c} for d, o, r, c in DEVOPS_EDGES])
        yield m


def by_text(sg: SubGraph) -> dict:
    return {n.text: n for n in sg.nodes}


def edge_pairs(sg: SubGraph, *, only_highlighted: bool = False) -> set[tuple[str, str, str]]:
    t = {n.id: n.text for n in sg.nodes}
    return {(t[e.src], e.relation, t[e.dst]) for e in sg.edges if e.highlighted or not only_highlighted}


def test_forward_subgraph_fields_label_and_highlighted_chain(mem):
    sg = subgraph(mem, "deploy without tests", depth=2, direction="forward")
    nodes = by_text(sg)
    assert set(nodes) == {"deploy without tests", "production crash", "safe release", "user complaints",
                          "rollback needed"}
    assert sg.label == "DANGER" and sg.seeds == (nodes["deploy without tests"].id,)
    assert nodes["deploy without tests"].seed and not nodes["production crash"].seed
    # energies are the forward spread's, read through search_causal
    spread = {a.text: a.energy for a in mem.search_causal("deploy without tests", limit=20)}
    for text in ("production crash", "user complaints", "safe release", "rollback needed"):
        assert nodes[text].energy == pytest.approx(spread[text])
    assert nodes["safe release"].energy < 0
    # polarity from the stored edges, Q from the chunk
    assert nodes["production crash"].polarity == "negative" and nodes["safe release"].polarity == "positive"
    assert all(n.q_value == pytest.approx(0.5) and n.valid for n in sg.nodes)
    # the chain behind DANGER: the negative outcomes' best paths; the prevented edge is not on it
    assert edge_pairs(sg, only_highlighted=True) == {
        ("deploy without tests", "caused", "production crash"), ("production crash", "caused", "user complaints"),
        ("production crash", "enabled", "rollback needed")}
    prevented = [e for e in sg.edges if e.relation == "prevented"]
    assert len(prevented) == 1 and prevented[0].inhibitory and not prevented[0].highlighted
    assert not nodes["safe release"].highlighted and nodes["production crash"].highlighted
    assert {e.confidence for e in sg.edges} == {0.9, 0.85, 0.8, 0.7}


def test_reverse_subgraph_follows_causes_without_a_label(mem):
    sg = subgraph(mem, "production crash", depth=2, direction="reverse")
    nodes = by_text(sg)
    assert set(nodes) == {"production crash", "deploy without tests", "hidden bugs", "skip code review"}
    assert sg.label is None and not any(e.highlighted for e in sg.edges)
    causes = {a.text: a.energy for a in mem.trace_cause("production crash", limit=20)}
    assert nodes["hidden bugs"].cause_energy == pytest.approx(causes["hidden bugs"])
    assert nodes["hidden bugs"].energy is None


def test_both_directions_depth_and_limit(mem):
    one = subgraph(mem, "production crash", depth=1, direction="both")
    assert set(by_text(one)) == {"production crash", "deploy without tests", "hidden bugs", "user complaints",
                                 "rollback needed"}
    zero = subgraph(mem, "production crash", depth=0)
    assert [n.text for n in zero.nodes] == ["production crash"] and zero.edges == ()
    capped = subgraph(mem, "production crash", depth=3, limit=3)
    assert len(capped.nodes) == 3 and capped.truncated
    # within a hop the strongest edges come first: deploy (0.9) and user complaints (0.8)
    assert {n.text for n in capped.nodes} == {"production crash", "deploy without tests", "user complaints"}
    assert not subgraph(mem, "production crash", depth=3, limit=100).truncated


def test_ids_input_relations_filter_and_invalid_edges(mem):
    crash = by_text(subgraph(mem, "production crash", depth=0)).get("production crash").id
    sg = subgraph(mem, [crash], depth=1, direction="forward", relations=["enabled"])
    assert set(by_text(sg)) == {"production crash", "rollback needed"} and sg.query is None
    edge = next(e for e in mem.edges(crash) if e.relation == "enabled")
    mem.invalidate(edge.id, reason="outdated")
    assert "rollback needed" not in by_text(subgraph(mem, [crash], depth=1, direction="forward"))
    shown = subgraph(mem, [crash], depth=1, direction="forward", include_invalid=True)
    invalid = [e for e in shown.edges if e.id == edge.id]
    assert len(invalid) == 1 and invalid[0].valid is False


def test_scope_keeps_other_users_memories_out(mem):
    mem.record_decision("production crash", "pager storm", confidence=0.6, user_id="bob")
    mem.record_decision("deploy without tests", "late night", confidence=0.6, user_id="eve")
    sg = subgraph(mem, "deploy without tests", depth=2, direction="forward", user_id="eve")
    texts = set(by_text(sg))
    assert texts == {"deploy without tests", "late night"}  # eve's own chunks only


def test_bad_arguments_name_themselves(mem):
    with pytest.raises(ValueError, match="direction"):
        subgraph(mem, "x", direction="sideways")
    with pytest.raises(TypeError, match="depth"):
        subgraph(mem, "x", depth=True)
    with pytest.raises(ValueError, match="depth"):
        subgraph(mem, "x", depth=11)
    with pytest.raises(ValueError, match="limit"):
        subgraph(mem, "x", limit=0)
    with pytest.raises(ValueError, match="query_or_ids"):
        subgraph(mem, "   ")
    with pytest.raises(TypeError, match="query_or_ids"):
        subgraph(mem, 42)
    with pytest.raises(KeyError, match="nope"):
        subgraph(mem, ["nope"])
    with pytest.raises(ValueError, match="unknown relation"):
        subgraph(mem, "x", relations=["causes"])
    with pytest.raises(TypeError, match="mem"):
        subgraph(object(), "x")
    with pytest.raises(TypeError, match="sg"):
        to_dot("not a graph")
    with pytest.raises(ValueError, match="out"):
        write_picture(subgraph(mem, "deploy without tests"), "chain.png")


def test_unknown_query_gives_an_empty_picture(mem):
    sg = subgraph(mem, "rewrite everything in a weekend")
    assert sg.nodes == () and sg.edges == ()
    assert "nothing in memory matches" in to_dot(sg)
    assert 'id="cm-data"' in render_html(sg)


def test_what_if_graph_has_only_the_chains(mem):
    sg = what_if_graph(mem, "deploy without tests")
    report = mem.intervention_query("deploy without tests")
    assert sg.label == report.label == "DANGER" and sg.mode == "what-if"
    walked = {(a, b) for o in report.outcomes for a, b in zip(o.chain, o.chain[1:])}
    assert {(e.src, e.dst) for e in sg.edges} == walked
    assert {n.id for n in sg.nodes} == {c for o in report.outcomes for c in o.chain}
    safe = what_if_graph(mem, "enable caching")
    assert safe.label == "SAFE" and not any(e.highlighted for e in safe.edges)
    assert what_if_graph(mem, "rewrite everything in a weekend").nodes == ()


def test_to_networkx_carries_every_field(mem):
    sg = subgraph(mem, "deploy without tests", direction="forward")
    g = to_networkx(sg)
    assert g.number_of_nodes() == len(sg.nodes) and g.number_of_edges() == len(sg.edges)
    crash = by_text(sg)["production crash"]
    assert g.nodes[crash.id]["text"] == "production crash" and g.nodes[crash.id]["polarity"] == "negative"
    e = next(e for e in sg.edges if e.relation == "prevented")
    data = g.get_edge_data(e.src, e.dst)[e.id]
    assert data["relation"] == "prevented" and data["inhibitory"] and data["confidence"] == pytest.approx(0.85)
    assert g.graph["label"] == "DANGER"
    assert sg.to_networkx().number_of_edges() == g.number_of_edges()


def test_layout_puts_causes_left_of_effects_and_survives_cycles(mem):
    sg = subgraph(mem, "deploy without tests", depth=3, direction="both")
    pos = layout(sg)["nodes"]
    for e in sg.edges:
        assert pos[e.src]["x"] < pos[e.dst]["x"], e
    # boxes in one layer do not overlap
    for a in pos.values():
        for b in pos.values():
            if a is not b and a["layer"] == b["layer"]:
                assert abs(a["y"] - b["y"]) >= (a["h"] + b["h"]) / 2
    first = mem.record_decision("retry storm", "queue backlog")
    back = mem.record_decision("queue backlog", "retry storm")
    a, b = first.src, first.dst
    assert (back.src, back.dst) == (b, a)
    cyc = subgraph(mem, [a], depth=2)
    lay = layout(cyc)
    assert set(lay["nodes"]) == {a, b} and len(lay["back_edges"]) == 1


def test_dot_escapes_stored_text(mem):
    mem.record_decision(XSS, "production crash", confidence=0.5)
    sg = subgraph(mem, "production crash", depth=1, direction="reverse")
    dot = to_dot(sg)
    assert '\\"q\\"' in dot and "\\\\N" in dot  # quotes and backslashes escaped, so DOT keeps it as text


@pytest.mark.skipif(dot_binary() is None, reason="Graphviz dot not installed")
def test_svg_from_graphviz_draws_inhibition_highlight_and_escaped_text(mem, tmp_path):
    mem.record_decision(XSS, "production crash", confidence=0.5)
    sg = subgraph(mem, "deploy without tests", depth=2, direction="both")
    out = tmp_path / "chain.svg"
    svg = write_picture(sg, out)
    assert out.read_text(encoding="utf-8") == svg
    root = ET.fromstring(svg)  # well-formed: the stored script became text
    assert not root.findall(f".//{SVG}script")
    texts = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    for name in ("deploy without tests", "production crash", "safe release", "DANGER"):
        assert name in texts
    groups = {g.get("id"): g for g in root.iter(f"{SVG}g") if g.get("id")}
    prevented = next(e for e in sg.edges if e.relation == "prevented")
    pg = groups[f"edge-{prevented.id}"]
    path = pg.find(f".//{SVG}path")
    assert path.get("stroke-dasharray") and path.get("stroke") == style.RELATION_COLOR["prevented"]
    hl = [e for e in sg.edges if e.highlighted]
    assert hl
    for e in hl:
        strokes = {p.get("stroke") for p in groups[f"edge-{e.id}"].iter(f"{SVG}path")}
        assert style.HIGHLIGHT in strokes and style.edge_color(e.relation) in strokes
    # confidence as width: the 0.9 edge is drawn wider than the 0.7 one
    widths = {}
    for e in sg.edges:
        p = groups[f"edge-{e.id}"].find(f".//{SVG}path")
        m = re.search(r"stroke-width[=:]\"?([0-9.]+)", ET.tostring(p, encoding="unicode"))
        widths[e.confidence] = float(m.group(1)) if m else 1.0
    assert widths[0.9] > widths[0.7]
    xss_node = next(n for n in sg.nodes if n.text == XSS)
    title = groups[f"node-{xss_node.id}"].find(f".//{SVG}title")
    assert title is not None


def test_edge_width_and_wrap():
    assert style.edge_width(0.0) == 1.0 and style.edge_width(1.0) == 5.0 and style.edge_width(7) == 5.0
    lines = style.wrap("word " * 40, width=20, max_lines=3)
    assert len(lines) == 3 and lines[-1].endswith("…")
    assert style.wrap("生产环境宕机数据库连接池耗尽" * 3, width=10, max_lines=2)[0] == "生产环境宕机数据库连"
    assert GraphEdge("e", "a", "b", "prevented", 0.5, None, True).inhibitory
