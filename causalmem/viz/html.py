"""Self-contained HTML pictures: data, script and style inlined; no network at view time.

Stored text reaches the page only as JSON inside ``<script type="application/json">`` (with
``<``, ``>`` and ``&`` escaped, so no text can close the block) and is put on screen with
``textContent``. A Content-Security-Policy allows only the page's own inline script and style
(by hash), so even markup that slipped through would not run.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

from . import style
from .layout import layout
from .subgraph import SubGraph


def asset(name: str) -> str:
    """Text of a file in ``causalmem/viz/static``."""
    return resources.files("causalmem.viz").joinpath("static").joinpath(name).read_text(encoding="utf-8")


def palette() -> dict[str, Any]:
    pol = {("none" if k is None else k): list(v) for k, v in style.POLARITY_FILL.items()}
    return {"polarity": pol, "relation": dict(style.RELATION_COLOR), "default_edge": style.DEFAULT_EDGE_COLOR,
            "highlight": style.HIGHLIGHT, "invalid": style.INVALID, "label": dict(style.LABEL_COLOR)}


def json_for_script(data: Any) -> str:
    """JSON safe to embed in a ``<script>`` block: no ``</script>``, ``<!--`` or entity can form."""
    return (json.dumps(data, ensure_ascii=False, sort_keys=True).replace("&", "\\u0026").replace("<", "\\u003c")
            .replace(">", "\\u003e").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def csp_hash(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode("utf-8")).digest()).decode("ascii") + "'"


def picture_data(sg: SubGraph) -> dict[str, Any]:
    """What the page script draws: the graph, its layout and the palette."""
    if not isinstance(sg, SubGraph):
        raise TypeError(f"sg must be a causalmem.viz.SubGraph, got {type(sg).__name__}")
    return {"graph": sg.as_dict(), "layout": layout(sg), "palette": palette()}


_PAGE_SCRIPT = r"""
(function () {
  var data = JSON.parse(document.getElementById("cm-data").textContent);
  var g = data.graph;
  var head = g.mode === "what-if" ? "what if: " :
    (g.query === null ? "chosen memories" : ({forward: "what follows from: ", reverse: "what caused: ",
      both: "around: "})[g.direction]);
  var title = document.getElementById("cm-title");
  title.textContent = head + (g.query === null ? "" : g.query) + " ";
  if (g.label) {
    var badge = document.createElement("span");
    badge.className = "cm-badge " + g.label;
    badge.textContent = g.label;
    title.appendChild(badge);
  }
  document.getElementById("cm-summary").textContent = g.summary || "";
  CausalmemGraph.draw(document.getElementById("cm-picture"), data);
  CausalmemGraph.legend(document.getElementById("cm-legend"), data.palette);
  var tbody = document.getElementById("cm-rows");
  g.nodes.forEach(function (n) {
    var tr = document.createElement("tr");
    if (n.highlighted) tr.className = "cm-highlight";
    [n.text, n.kind, n.polarity || "", n.q_value.toFixed(3),
     n.energy === null ? "" : CausalmemGraph.fmt(n.energy),
     n.cause_energy === null ? "" : CausalmemGraph.fmt(n.cause_energy),
     (n.seed ? "seed " : "") + (n.highlighted ? "on the labelled chain" : "")].forEach(function (v, i) {
      var td = document.createElement("td");
      if (i >= 3 && i <= 5) td.className = "num";
      td.textContent = v;
      tr.appendChild(td);
    });
    tbody.appendChild(tr);
  });
  document.body.setAttribute("data-rendered", "yes");
})();
"""

_PAGE_CSS = """
body { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; margin: 20px; color: #1d2329; background: #f7f8fa; }
h1 { font-size: 18px; font-weight: 600; margin: 0 0 4px 0; }
#cm-summary { color: #5f6b76; font-size: 13px; margin: 0 0 10px 0; }
footer { color: #8a949c; font-size: 11px; margin-top: 14px; }
"""


def render_html(sg: SubGraph, out: str | os.PathLike[str] | None = None, *, title: str | None = None) -> str:
    """One HTML file holding the picture (inline script, style and data); written to ``out`` when given."""
    data = picture_data(sg)
    script = asset("graph.js") + "\n" + _PAGE_SCRIPT
    css = asset("graph.css") + _PAGE_CSS
    csp = (f"default-src 'none'; script-src {csp_hash(script)}; style-src {csp_hash(css)}; "
           "img-src data:; base-uri 'none'; form-action 'none'")
    page_title = title if title is not None else "causalmem picture"
    esc_title = (page_title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))
    html = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc_title}</title>
<style>{css}</style>
</head>
<body>
<h1 id="cm-title"></h1>
<p id="cm-summary"></p>
<div id="cm-legend" class="cm-legend"></div>
<div id="cm-picture" class="cm-scroll"></div>
<table class="cm-table">
<thead><tr><th>memory</th><th>kind</th><th>polarity</th><th>Q</th><th>energy</th>
<th>cause energy</th><th></th></tr></thead>
<tbody id="cm-rows"></tbody>
</table>
<footer>made by causalmem.viz</footer>
<script type="application/json" id="cm-data">{json_for_script(data)}</script>
<script>{script}</script>
</body>
</html>
"""
    if out is not None:
        Path(out).write_text(html, encoding="utf-8")
    return html
