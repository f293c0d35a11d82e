"""A small layered (Sugiyama-style) layout in plain Python for the HTML picture and the inspector.

Causes on the left, effects on the right: a node's layer is its longest path from a source
once the edges that close cycles are set aside; a few barycentre sweeps order each layer to
cut crossings. No Graphviz needed, deterministic for the same graph.
"""
from __future__ import annotations

from typing import Any

from . import style
from .subgraph import SubGraph

CHAR_W = 7.0  # px per character at the page's 12 px sans-serif (approximate, generous)
LINE_H = 15.0
PAD_X, PAD_Y = 12.0, 8.0
LAYER_GAP = 150.0
NODE_GAP = 26.0
MARGIN = 24.0


def _back_edges(order: list[str], succ: dict[str, list[str]]) -> set[tuple[str, str]]:
    """Edges that close a cycle in a depth-first walk started from ``order`` (seeds first)."""
    state: dict[str, int] = {}
    back: set[tuple[str, str]] = set()
    for root in order:
        if root in state:
            continue
        stack = [(root, iter(succ[root]))]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                back.add((node, nxt))
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(succ[nxt])))
    return back


def layout(sg: SubGraph) -> dict[str, Any]:
    """Positions for every node (box centre, size, wrapped lines) and the picture's size."""
    ids = [n.id for n in sg.nodes]
    succ: dict[str, list[str]] = {i: [] for i in ids}
    pred: dict[str, list[str]] = {i: [] for i in ids}
    for e in sg.edges:
        if e.src != e.dst:
            succ[e.src].append(e.dst)
    roots = list(sg.seeds) + ids
    back = _back_edges(roots, succ)
    for e in sg.edges:
        if e.src != e.dst and (e.src, e.dst) not in back:
            pred[e.dst].append(e.src)
    # longest path layering over the acyclic part
    layer: dict[str, int] = {}

    def depth_of(i: str) -> int:
        stack = [i]
        while stack:
            cur = stack[-1]
            if cur in layer:
                stack.pop()
                continue
            todo = [p for p in pred[cur] if p not in layer]
            if todo:
                stack.extend(todo)
            else:
                layer[cur] = 1 + max((layer[p] for p in pred[cur]), default=-1)
                stack.pop()
        return layer[i]

    for i in ids:
        depth_of(i)
    n_layers = 1 + max(layer.values(), default=0)
    layers: list[list[str]] = [[] for _ in range(n_layers)]
    for i in ids:  # initial order: assembly order (seeds first, then strongest edges)
        layers[layer[i]].append(i)
    pos_in = {i: k for lay in layers for k, i in enumerate(lay)}
    for sweep in range(4):
        rng = range(1, n_layers) if sweep % 2 == 0 else range(n_layers - 2, -1, -1)
        for li in rng:
            nb = pred if sweep % 2 == 0 else succ

            def bary(i: str) -> float:
                ps = [pos_in[p] for p in nb[i] if p in pos_in]
                return sum(ps) / len(ps) if ps else pos_in[i]

            layers[li].sort(key=lambda i: (bary(i), pos_in[i]))
            for k, i in enumerate(layers[li]):
                pos_in[i] = k

    by_id = {n.id: n for n in sg.nodes}
    boxes: dict[str, dict[str, Any]] = {}
    for i in ids:
        n = by_id[i]
        lines = style.wrap(n.text)
        facts = f"Q {n.q_value:.2f}"
        if n.energy is not None:
            facts += f" · energy {n.energy:+.3f}"
        elif n.cause_energy is not None:
            facts += f" · cause {n.cause_energy:+.3f}"
        w = max(max(len(x) for x in lines), len(facts)) * CHAR_W + 2 * PAD_X
        h = (len(lines) + 1) * LINE_H + 2 * PAD_Y
        boxes[i] = {"lines": lines, "facts": facts, "w": round(w, 1), "h": round(h, 1)}
    layer_w = [max((boxes[i]["w"] for i in lay), default=0.0) for lay in layers]
    layer_h = [sum(boxes[i]["h"] for i in lay) + NODE_GAP * max(len(lay) - 1, 0) for lay in layers]
    height = max(layer_h, default=0.0) + 2 * MARGIN
    x = MARGIN
    for li, lay in enumerate(layers):
        y = MARGIN + (height - 2 * MARGIN - layer_h[li]) / 2
        for i in lay:
            b = boxes[i]
            b["x"] = round(x + layer_w[li] / 2, 1)
            b["y"] = round(y + b["h"] / 2, 1)
            b["layer"] = li
            y += b["h"] + NODE_GAP
        x += layer_w[li] + LAYER_GAP
    width = x - LAYER_GAP + MARGIN if layers else 2 * MARGIN
    return {"width": round(max(width, 200.0), 1), "height": round(max(height, 80.0), 1), "nodes": boxes,
            "back_edges": sorted(f"{a}>{b}" for a, b in back)}
