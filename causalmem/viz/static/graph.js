/* causalmem: draw a causal subgraph as SVG from {graph, layout, palette}.
   Every stored string goes through textContent / setAttribute: memories are user input and
   are never parsed as markup. Shared by the HTML picture and the inspector page. */
"use strict";
(function (root) {
  var NS = "http://www.w3.org/2000/svg";

  function el(tag, attrs, parent) {
    var node = document.createElementNS(NS, tag);
    for (var k in attrs) {
      if (Object.prototype.hasOwnProperty.call(attrs, k) && attrs[k] !== null && attrs[k] !== undefined) {
        node.setAttribute(k, String(attrs[k]));
      }
    }
    if (parent) parent.appendChild(node);
    return node;
  }

  function fmt(v) {
    return (v >= 0 ? "+" : "") + v.toFixed(3);
  }

  function relColor(pal, rel) {
    return pal.relation[rel] || pal.default_edge;
  }

  function nodeColors(pal, pol) {
    return pal.polarity[pol === null || pol === undefined ? "none" : pol] || pal.polarity.none;
  }

  function width(conf) {
    var c = Math.min(Math.max(Number(conf) || 0, 0), 1);
    return 1 + 4 * c;
  }

  function markerId(kind, color) {
    return kind + "-" + color.replace("#", "");
  }

  function ensureMarker(defs, seen, kind, color) {
    var id = markerId(kind, color);
    if (seen[id]) return id;
    seen[id] = true;
    var m = el("marker", {id: id, viewBox: "0 0 10 10", refX: kind === "tee" ? 5 : 9, refY: 5,
      markerWidth: 11, markerHeight: 11, markerUnits: "userSpaceOnUse", orient: "auto"}, defs);
    if (kind === "tee") {
      el("path", {d: "M 5 0 L 5 10", stroke: color, "stroke-width": 3, fill: "none"}, m);
    } else {
      el("path", {d: "M 0 0 L 10 5 L 0 10 z", fill: color}, m);
    }
    return id;
  }

  function draw(container, data, options) {
    options = options || {};
    var g = data.graph, lay = data.layout, pal = data.palette;
    while (container.firstChild) container.removeChild(container.firstChild);
    var svg = el("svg", {xmlns: NS, width: lay.width, height: lay.height,
      viewBox: "0 0 " + lay.width + " " + lay.height, "class": "cm-graph", role: "img"}, container);
    var defs = el("defs", {}, svg);
    var seen = {};
    if (!g.nodes.length) {
      var t = el("text", {x: 20, y: 40, "class": "cm-empty"}, svg);
      t.textContent = "nothing in memory matches this query";
      return svg;
    }
    var edgeLayer = el("g", {"class": "cm-edges"}, svg);
    var nodeLayer = el("g", {"class": "cm-nodes"}, svg);
    var labelLayer = el("g", {"class": "cm-edge-labels"}, svg);
    var back = {};
    (lay.back_edges || []).forEach(function (k) { back[k] = true; });

    g.edges.forEach(function (e, idx) {
      var a = lay.nodes[e.src], b = lay.nodes[e.dst];
      if (!a || !b) return;
      var d, mx, my;
      if (e.src === e.dst) {
        var sx = a.x + a.w / 2, sy = a.y - a.h / 2;
        d = "M " + (sx - 10) + " " + sy + " C " + (sx - 10) + " " + (sy - 40) + " " + (sx + 30) + " " +
            (sy - 40) + " " + sx + " " + (a.y - 4);
        mx = sx + 6; my = sy - 32;
      } else if (back[e.src + ">" + e.dst] || b.layer <= a.layer) {
        var x1 = a.x, y1 = a.y + a.h / 2, x2 = b.x, y2 = b.y + b.h / 2;
        var dip = Math.max(y1, y2) + 45 + 10 * (idx % 3);
        d = "M " + x1 + " " + y1 + " C " + x1 + " " + dip + " " + x2 + " " + dip + " " + x2 + " " + (y2 + 2);
        mx = (x1 + x2) / 2; my = dip - 8;
      } else {
        var x1b = a.x + a.w / 2, y1b = a.y, x2b = b.x - b.w / 2 - 2, y2b = b.y;
        var cx = (x2b - x1b) / 2;
        d = "M " + x1b + " " + y1b + " C " + (x1b + cx) + " " + y1b + " " + (x2b - cx) + " " + y2b + " " +
            x2b + " " + y2b;
        mx = (x1b + x2b) / 2; my = (y1b + y2b) / 2 - 6;
      }
      var color = e.valid ? relColor(pal, e.relation) : pal.invalid;
      var w = width(e.confidence);
      var grp = el("g", {"class": "cm-edge" + (e.highlighted ? " cm-highlight" : "") +
        (e.inhibitory ? " cm-inhibitory" : "") + (e.valid ? "" : " cm-invalid"),
        "data-id": e.id, "data-relation": e.relation}, edgeLayer);
      var title = el("title", {}, grp);
      title.textContent = e.relation + " (confidence " + Number(e.confidence).toFixed(2) + ")" +
        (e.valid ? "" : " - invalid") + (e.superseded_by ? " - superseded" : "");
      if (e.highlighted) {
        el("path", {d: d, fill: "none", stroke: pal.highlight, "stroke-width": w + 7, "stroke-opacity": 0.45,
          "stroke-linecap": "round"}, grp);
      }
      var dash = e.inhibitory ? "7 5" : (e.valid ? null : "2 4");
      el("path", {d: d, fill: "none", stroke: color, "stroke-width": w, "stroke-dasharray": dash,
        "marker-end": "url(#" + ensureMarker(defs, seen, e.inhibitory ? "tee" : "arrow", color) + ")"}, grp);
      var lt = el("text", {x: mx, y: my, "text-anchor": "middle", fill: color, "class": "cm-edge-label"},
        labelLayer);
      lt.textContent = e.relation + " " + Number(e.confidence).toFixed(2);
    });

    g.nodes.forEach(function (n) {
      var b = lay.nodes[n.id];
      if (!b) return;
      var c = nodeColors(pal, n.polarity);
      var grp = el("g", {"class": "cm-node" + (n.highlighted ? " cm-highlight" : "") + (n.seed ? " cm-seed" : "") +
        (n.valid ? "" : " cm-invalid"), "data-id": n.id, "data-polarity": n.polarity || "none",
        transform: "translate(" + (b.x - b.w / 2) + "," + (b.y - b.h / 2) + ")"}, nodeLayer);
      var title = el("title", {}, grp);
      title.textContent = n.text + "\n" + n.kind + ", polarity " + (n.polarity || "unknown") +
        ", Q " + Number(n.q_value).toFixed(3) + (n.valid ? "" : ", deleted");
      var stroke = n.highlighted ? pal.highlight : (n.valid ? c[1] : pal.invalid);
      el("rect", {width: b.w, height: b.h, rx: 8, ry: 8, fill: n.valid ? c[0] : "#f4f4f4", stroke: stroke,
        "stroke-width": n.highlighted ? 3 : (n.seed ? 2 : 1.2)}, grp);
      if (n.seed) {
        el("rect", {x: 3, y: 3, width: b.w - 6, height: b.h - 6, rx: 6, ry: 6, fill: "none", stroke: stroke,
          "stroke-width": 1}, grp);
      }
      var text = el("text", {x: b.w / 2, y: 8 + 12, "text-anchor": "middle", "class": "cm-node-text"}, grp);
      b.lines.forEach(function (line, i) {
        var ts = el("tspan", {x: b.w / 2, dy: i === 0 ? 0 : 15}, text);
        ts.textContent = line;
      });
      var facts = el("text", {x: b.w / 2, y: 8 + 12 + 15 * b.lines.length, "text-anchor": "middle",
        "class": "cm-node-facts"}, grp);
      facts.textContent = b.facts;
      if (options.onNodeClick) {
        grp.addEventListener("click", function () { options.onNodeClick(n); });
      }
    });
    return svg;
  }

  function legend(container, pal) {
    while (container.firstChild) container.removeChild(container.firstChild);
    function item(swatchAttrs, label, isLine) {
      var span = document.createElement("span");
      span.className = "cm-legend-item";
      var s = document.createElementNS(NS, "svg");
      s.setAttribute("width", isLine ? "34" : "18");
      s.setAttribute("height", "14");
      if (isLine) el("line", Object.assign({x1: 1, y1: 7, x2: 33, y2: 7}, swatchAttrs), s);
      else el("rect", Object.assign({x: 1, y: 1, width: 16, height: 12, rx: 3}, swatchAttrs), s);
      span.appendChild(s);
      span.appendChild(document.createTextNode(" " + label));
      container.appendChild(span);
    }
    ["negative", "positive", "mixed"].forEach(function (p) {
      var c = pal.polarity[p];
      item({fill: c[0], stroke: c[1]}, p, false);
    });
    ["caused", "enabled", "prevented", "fact", "temporal"].forEach(function (r) {
      var a = {stroke: pal.relation[r], "stroke-width": 3};
      if (r === "prevented") a["stroke-dasharray"] = "6 4";
      item(a, r, true);
    });
    item({stroke: pal.highlight, "stroke-width": 6, "stroke-opacity": 0.6}, "chain behind the label", true);
    var note = document.createElement("span");
    note.className = "cm-legend-note";
    note.textContent = "line width = confidence; dashed ending in a bar = prevented (inhibitory)";
    container.appendChild(note);
  }

  root.CausalmemGraph = {draw: draw, legend: legend, fmt: fmt};
})(window);
