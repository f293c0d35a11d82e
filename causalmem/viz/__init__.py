"""See the memory: causal pictures (Graphviz SVG or a self-contained HTML page) and a local inspector.

>>> from causalmem.viz import subgraph, render_html
>>> sg = subgraph(mem, "deploy without tests", depth=2, direction="forward")
>>> render_html(sg, "chain.html")
"""
from __future__ import annotations

from .export import dot_binary, render_svg, to_dot, to_networkx
from .html import render_html
from .layout import layout
from .subgraph import DIRECTIONS, GraphEdge, GraphNode, SubGraph, subgraph, what_if_graph

__all__ = [
    "DIRECTIONS", "GraphEdge", "GraphNode", "SubGraph", "dot_binary", "layout", "render_html", "render_svg",
    "subgraph", "to_dot", "to_networkx", "what_if_graph", "write_picture",
]


def write_picture(sg: SubGraph, out, *, fmt: str | None = None) -> str:
    """Write ``sg`` to ``out`` as SVG (Graphviz) or HTML, chosen by ``fmt`` or the file suffix."""
    import os

    name = os.fspath(out)
    kind = fmt or os.path.splitext(name)[1].lower().lstrip(".")
    if kind == "svg":
        return render_svg(sg, name)
    if kind in ("html", "htm"):
        return render_html(sg, name)
    if kind == "dot":
        text = to_dot(sg)
        with open(name, "w", encoding="utf-8") as fh:
            fh.write(text)
        return text
    raise ValueError(f"out must end in .svg, .html or .dot (or pass fmt=), got {name!r}")
