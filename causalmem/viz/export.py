"""Exports of a ``SubGraph``: networkx, Graphviz DOT, and SVG rendered by Graphviz ``dot``."""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from . import style



class SubGraph(Protocol):
    """What the exports read of a ``causalmem.viz.SubGraph`` (this module does not import it:
    ``SubGraph.to_dot`` / ``to_networkx`` import this one)."""

    @property
    def query(self) -> str | None: ...

    @property
    def direction(self) -> str: ...

    @property
    def nodes(self) -> tuple[Any, ...]: ...

    @property
    def edges(self) -> tuple[Any, ...]: ...

    @property
    def seeds(self) -> tuple[str, ...]: ...

    @property
    def label(self) -> str | None: ...

    @property
    def summary(self) -> str: ...

    @property
    def mode(self) -> str: ...

    @property
    def truncated(self) -> bool: ...


    def as_dict(self) -> dict[str, Any]: ...


def _check(sg: Any) -> SubGraph:
    if type(sg).__name__ != "SubGraph" or not all(hasattr(sg, a) for a in ("nodes", "edges", "as_dict")):
        raise TypeError(f"sg must be a causalmem.viz.SubGraph, got {type(sg).__name__}")
    return sg


def to_networkx(sg: SubGraph):
    """A ``networkx.MultiDiGraph`` keyed by chunk id (edge key: edge id); all fields as attributes."""
    _check(sg)
    try:
        import networkx as nx
    except ImportError as exc:  # pragma: no cover - networkx is in the [viz] extra
        raise ImportError("to_networkx needs networkx: pip install 'causalmem-engine[viz]'") from exc
    g = nx.MultiDiGraph(query=sg.query, direction=sg.direction, label=sg.label, mode=sg.mode, seeds=list(sg.seeds))
    for n in sg.nodes:
        attrs = asdict(n)
        attrs.pop("id")
        g.add_node(n.id, **attrs)
    for e in sg.edges:
        attrs = asdict(e)
        attrs.pop("src"), attrs.pop("dst")
        attrs["inhibitory"] = e.inhibitory
        g.add_edge(e.src, e.dst, key=e.id, **attrs)
    return g


def _q(text: Any) -> str:
    """A DOT double-quoted string: backslashes and quotes escaped, so stored text stays text."""
    s = str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\r", " ").replace("\n", " ")
    return f'"{s}"'


def _html(text: Any) -> str:
    """Text for a DOT HTML-like label (legend)."""
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def _fmt(v: float | None) -> str:
    return "" if v is None else f"{v:+.3f}"


def _node_label(n) -> str:
    lines = style.wrap(n.text)
    facts = [f"Q {n.q_value:.2f}"]
    if n.energy is not None:
        facts.append(f"energy {_fmt(n.energy)}")
    elif n.cause_energy is not None:
        facts.append(f"cause {_fmt(n.cause_energy)}")
    # Joined with DOT's centred line break; each line escaped on its own.
    return '"' + "\\n".join(_q(x)[1:-1] for x in lines + [" · ".join(facts)]) + '"'


def _title(sg: SubGraph) -> str:
    if sg.mode == "what-if":
        head = f"what if: {sg.query}"
    elif sg.query is not None:
        head = {"forward": "what follows from", "reverse": "what caused", "both": "around"}[sg.direction]
        head = f"{head}: {sg.query}"
    else:
        head = f"{len(sg.seeds)} chosen memories"
    return f"{head}  \u2192  {sg.label}" if sg.label else head


def _legend() -> str:
    cells = []
    for pol in ("negative", "positive", "mixed"):
        fill, border = style.node_colors(pol)
        cells.append(f'<td bgcolor="{fill}" color="{border}" border="1"><font point-size="11">{pol}</font></td>')
    for rel in ("caused", "enabled", "prevented"):
        dash = "&#9549;&#9549;" if rel == "prevented" else "&#9473;&#9473;"
        cells.append(f'<td><font point-size="11" color="{style.edge_color(rel)}">{dash} {rel}</font></td>')
    cells.append(f'<td><font point-size="11" color="{style.HIGHLIGHT}">'
                 '&#9473;&#9473; chain behind the label</font></td>')
    return ('<table border="0" cellspacing="4" cellpadding="3"><tr>' + "".join(cells)
            + '</tr><tr><td colspan="7" align="left"><font point-size="11" color="#5f6b76">line width = confidence;'
            + " dashed ending in a bar = prevented (inhibitory); double border = the query's own memory</font>"
            + "</td></tr></table>")


def to_dot(sg: SubGraph, *, legend: bool = True, title: bool = True) -> str:
    """Graphviz DOT source of the picture (left to right; every stored string escaped)."""
    _check(sg)
    out = ["digraph causalmem {",
           '  graph [rankdir=LR, bgcolor="white", fontname="Helvetica", fontsize=16, nodesep=0.35, ranksep=0.9,'
           ' pad=0.3, labelloc=t, labeljust=l];',
           '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=12, margin="0.15,0.08"];',
           '  edge [fontname="Helvetica", fontsize=10, arrowsize=0.8];']
    rows = []
    if title:
        color = style.LABEL_COLOR.get(sg.label or "", "#1d2329")
        rows.append(f'<tr><td align="left"><font point-size="16" color="{color}">{_html(_title(sg))}</font></td></tr>')
    if legend and sg.nodes:
        rows.append(f'<tr><td align="left">{_legend()}</td></tr>')
    if rows:
        out.append(f'  label=<<table border="0" cellspacing="0" cellpadding="2">{"".join(rows)}</table>>;')
    for i, n in enumerate(sg.nodes):
        fill, border = style.node_colors(n.polarity)
        pen = 3.0 if n.highlighted else (2.0 if n.seed else 1.2)
        color = style.HIGHLIGHT if n.highlighted else border
        extra = ", peripheries=2" if n.seed else ""
        if not n.valid:
            fill, color, extra = "#f4f4f4", style.INVALID, extra + ', fontcolor="#888888"'
        out.append(f"  n{i} [id={_q('node-' + n.id)}, label={_node_label(n)}, tooltip={_q(n.text)}, "
                   f'fillcolor="{fill}", color="{color}", penwidth={pen}{extra}];')
    index = {n.id: i for i, n in enumerate(sg.nodes)}
    for e in sg.edges:
        color = style.edge_color(e.relation)
        attrs = [f"id={_q('edge-' + e.id)}", f"penwidth={style.edge_width(e.confidence)}",
                 f"label={_q(f'{e.relation} {e.confidence:.2f}')}", f'fontcolor="{color}"',
                 f"tooltip={_q(f'{e.relation} (confidence {e.confidence:.2f})')}"]
        styles = []
        if e.inhibitory:
            styles.append("dashed")
            attrs.append("arrowhead=tee")
        if not e.valid:
            styles.append("dotted")
            color = style.INVALID
        if e.highlighted:
            # the relation colour between two highlight strokes: still readable as a relation
            color = f"{style.HIGHLIGHT}:{color}:{style.HIGHLIGHT}"
            styles.append("bold")
        attrs.append(f'color="{color}"')
        if styles:
            attrs.append(f'style="{",".join(styles)}"')
        out.append(f"  n{index[e.src]} -> n{index[e.dst]} [{', '.join(attrs)}];")
    if not sg.nodes:
        out.append(f"  empty [shape=plaintext, style=\"\", label={_q('nothing in memory matches this query')}];")
    out.append("}")
    return "\n".join(out) + "\n"


def dot_binary() -> str | None:
    """Path of Graphviz ``dot`` ($CAUSALMEM_DOT overrides), or None if it is not installed."""
    return os.environ.get("CAUSALMEM_DOT") or shutil.which("dot")


def render_svg(sg: SubGraph, out: str | os.PathLike[str] | None = None, *, timeout: float = 60.0) -> str:
    """SVG of the picture made by Graphviz ``dot``; written to ``out`` when given. Returns the SVG text."""
    _check(sg)
    binary = dot_binary()
    if binary is None:
        raise RuntimeError("SVG output needs Graphviz's `dot` (Debian: apt-get install graphviz); "
                           "or write an .html picture, which needs nothing")
    proc = subprocess.run([binary, "-Tsvg"], input=to_dot(sg).encode("utf-8"), capture_output=True,
                          timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"dot failed ({proc.returncode}): {proc.stderr.decode('utf-8', 'replace').strip()}")
    svg = proc.stdout.decode("utf-8")
    if out is not None:
        Path(out).write_text(svg, encoding="utf-8")
    return svg
