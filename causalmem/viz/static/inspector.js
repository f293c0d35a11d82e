/* causalmem inspector: talks to the JSON API of the server that served this page.
   Stored text is user input: it is only ever put on screen with textContent. */
"use strict";
(function () {
  var palette = JSON.parse(document.getElementById("cm-palette").textContent);
  var pending = 0;

  function $(id) { return document.getElementById(id); }

  function busy(delta) {
    pending += delta;
    document.body.setAttribute("data-busy", String(pending));
    if (pending === 0) document.body.setAttribute("data-ready", "yes");
  }

  function api(path, params) {
    var qs = [];
    for (var k in params) {
      if (Object.prototype.hasOwnProperty.call(params, k) && params[k] !== undefined && params[k] !== null) {
        qs.push(encodeURIComponent(k) + "=" + encodeURIComponent(params[k]));
      }
    }
    busy(1);
    return fetch(path + (qs.length ? "?" + qs.join("&") : ""), {headers: {"Accept": "application/json"}})
      .then(function (r) {
        return r.json().then(function (body) {
          if (!r.ok) throw new Error(body.error || ("HTTP " + r.status));
          return body;
        });
      })
      .finally(function () { busy(-1); });
  }

  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

  function cell(tr, value, cls) {
    var td = document.createElement("td");
    if (cls) td.className = cls;
    td.textContent = value === null || value === undefined ? "" : String(value);
    tr.appendChild(td);
    return td;
  }

  function num(v, digits) {
    return v === null || v === undefined ? "" : Number(v).toFixed(digits === undefined ? 3 : digits);
  }

  function when(ts) {
    return ts ? new Date(ts * 1000).toISOString().replace("T", " ").slice(0, 19) : "";
  }

  function showError(where, err) {
    var s = $(where);
    if (!s) return;
    s.className = "status error";
    s.textContent = String(err.message || err);
  }

  // ------------------------------------------------------------------ tabs
  var tabs = ["search", "whatif", "memories", "sleep", "stats"];
  var loaded = {};
  function showTab(name) {
    tabs.forEach(function (t) {
      $("tab-" + t).hidden = t !== name;
      var b = document.querySelector('nav button[data-tab="' + t + '"]');
      if (b) b.className = t === name ? "active" : "";
    });
    if (!loaded[name]) {
      loaded[name] = true;
      if (name === "memories") loadScopes();
      if (name === "sleep") loadSleep();
      if (name === "stats") loadStats();
    }
  }
  Array.prototype.forEach.call(document.querySelectorAll("nav button"), function (b) {
    b.addEventListener("click", function () { showTab(b.getAttribute("data-tab")); });
  });

  // ------------------------------------------------------------------ search
  function runSearch(q) {
    $("search-status").className = "status";
    $("search-status").textContent = "searching...";
    return api("/api/search", {q: q, top_k: $("search-k").value, user_id: $("search-user").value})
      .then(function (data) {
        var tbody = $("search-rows");
        clear(tbody);
        $("search-status").textContent = data.hits.length + " hit(s) for \u201c" + data.query + "\u201d";
        $("search-table").hidden = data.hits.length === 0;
        $("overview").hidden = true;  // the landing overview gives way to the results
        data.hits.forEach(function (h) {
          var s = h.signals || {};
          var tr = document.createElement("tr");
          cell(tr, num(h.score), "num");
          var t = cell(tr, h.text, "linkish");
          t.addEventListener("click", function () { openMemory(h.id); });
          if (h.prevented) {  // an outcome the match prevented: a warning, not an equal of a caused one
            tr.className = "prevented";
            var w = document.createElement("span");
            w.className = "cm-badge WARNING";
            w.textContent = "WARNING (prevented)";
            t.appendChild(document.createTextNode(" "));
            t.appendChild(w);
          }
          cell(tr, h.kind);
          cell(tr, s.lexical_rank, "num");
          cell(tr, num(s.lexical_score, 2), "num");
          cell(tr, num(s.cosine), "num");
          cell(tr, num(s.activation), "num");
          cell(tr, num(s.seed_energy), "num");
          cell(tr, num(s.q_value), "num");
          cell(tr, num(s.importance, 1), "num");
          cell(tr, (s.path || []).map(function (p) {
            return p.relation + " " + num(p.confidence, 2);
          }).join(" \u2192 "), "path");
          tbody.appendChild(tr);
        });
      })
      .catch(function (e) { showError("search-status", e); });
  }
  $("search-form").addEventListener("submit", function (ev) {
    ev.preventDefault();
    runSearch($("search-q").value);
  });

  // ------------------------------------------------------------------ what if / pictures
  function drawPicture(container, picture, legendId) {
    picture.palette = picture.palette || palette;
    CausalmemGraph.draw($(container), picture, {onNodeClick: function (n) { openMemory(n.id); }});
    if (legendId) CausalmemGraph.legend($(legendId), picture.palette);
  }

  function setTitle(text, label) {
    var h = $("whatif-title");
    h.textContent = text + " ";
    if (label) {
      var b = document.createElement("span");
      b.className = "cm-badge " + label;
      b.textContent = label;
      h.appendChild(b);
    }
  }

  function runWhatIf(action, mode) {
    var user = $("whatif-user").value;
    var depth = $("whatif-depth").value;
    $("whatif-summary").textContent = "";
    clear($("whatif-rows"));
    if (mode === "what-if") {
      return api("/api/what-if", {action: action, max_depth: depth, user_id: user}).then(function (data) {
        var r = data.report;
        setTitle("what if: " + r.action, r.label);
        $("whatif-summary").textContent = r.summary;
        $("whatif-table").hidden = r.outcomes.length === 0;
        r.outcomes.forEach(function (o) {
          var tr = document.createElement("tr");
          cell(tr, CausalmemGraph.fmt(o.energy), "num");
          cell(tr, o.text);
          cell(tr, o.energy < 0 ? "prevented (" + (o.polarity || "no polarity") + " outcome blocked)" :
            (o.polarity || ""));
          cell(tr, o.chain_texts.join(" \u2192 "));
          cell(tr, o.relations.join(", "));
          cell(tr, num(o.chain_confidence), "num");
          $("whatif-rows").appendChild(tr);
        });
        drawPicture("whatif-picture", data.picture, "whatif-legend");
      }).catch(function (e) { $("whatif-summary").textContent = String(e.message || e); });
    }
    return api("/api/graph", {q: action, direction: mode, depth: depth, user_id: user}).then(function (data) {
      var g = data.picture.graph;
      setTitle(({forward: "what follows from: ", reverse: "what caused: ", both: "around: "})[mode] + action,
        g.label);
      $("whatif-summary").textContent = g.summary || "";
      $("whatif-table").hidden = true;
      drawPicture("whatif-picture", data.picture, "whatif-legend");
    }).catch(function (e) { $("whatif-summary").textContent = String(e.message || e); });
  }
  $("whatif-form").addEventListener("submit", function (ev) {
    ev.preventDefault();
    runWhatIf($("whatif-q").value, $("whatif-mode").value);
  });

  // ------------------------------------------------------------------ memories by scope
  function scopeName(s) {
    return "user " + (s.user_id === null ? "(none)" : s.user_id) +
      (s.agent_id === null ? "" : " \u00b7 agent " + s.agent_id);
  }

  function loadScopes() {
    return api("/api/scopes", {}).then(function (data) {
      var ul = $("scope-list");
      clear(ul);
      var all = {user_id: undefined, agent_id: undefined};
      var buttons = [];
      function add(label, scope) {
        var li = document.createElement("li");
        var b = document.createElement("button");
        b.type = "button";
        b.textContent = label;
        b.addEventListener("click", function () {
          buttons.forEach(function (x) { x.className = ""; });
          b.className = "active";
          loadMemories(scope, label);
        });
        buttons.push(b);
        li.appendChild(b);
        ul.appendChild(li);
      }
      add("all scopes", all);
      data.scopes.forEach(function (s) {
        add(scopeName(s) + " \u2014 " + s.memories + " memories, mean Q " + num(s.mean_q, 2), s);
      });
      buttons[0].className = "active";
      return loadMemories(all, "all scopes");
    });
  }

  function loadMemories(scope, label) {
    var params = {limit: 300};
    // a scope key sent empty means "memories without that scope"; absent means any
    if (scope.user_id !== undefined) params.user_id = scope.user_id === null ? "" : scope.user_id;
    if (scope.agent_id !== undefined) params.agent_id = scope.agent_id === null ? "" : scope.agent_id;
    return api("/api/memories", params).then(function (data) {
      $("memories-title").textContent = "Memories \u2014 " + label + " (" + data.total + ", by Q)";
      var tbody = $("memories-rows");
      clear(tbody);
      data.memories.forEach(function (m) {
        var tr = document.createElement("tr");
        cell(tr, num(m.q_value), "num");
        var t = cell(tr, m.text, "linkish memtext");
        t.title = m.text;
        t.addEventListener("click", function () { openMemory(m.id); });
        cell(tr, m.kind);
        cell(tr, num(m.importance, 1), "num");
        cell(tr, m.access_count, "num");
        cell(tr, when(m.created_at));
        tbody.appendChild(tr);
      });
    });
  }

  function openMemory(id) {
    showTab("memories");
    return api("/api/memory", {id: id}).then(function (data) {
      var m = data.memory;
      $("detail").hidden = false;
      $("memories-split").className = "split with-detail";
      $("detail-text").textContent = m.text;
      var f = $("detail-fields");
      clear(f);
      [["id", m.id], ["kind", m.kind], ["Q", num(m.q_value)], ["importance", num(m.importance, 2)],
       ["accessed", m.access_count], ["created", when(m.created_at)], ["user", m.user_id], ["agent", m.agent_id],
       ["session", m.session_id], ["valid", m.valid ? "yes" : "no (deleted)"]].forEach(function (kv) {
        var tr = document.createElement("tr");
        cell(tr, kv[0]);
        cell(tr, kv[1], kv[0] === "created" ? "when" : null);
        f.appendChild(tr);
      });
      var h = $("detail-history");
      clear(h);
      data.history.forEach(function (ev) {
        var tr = document.createElement("tr");
        cell(tr, ev.event);
        cell(tr, ev.old_text);
        cell(tr, ev.new_text);
        cell(tr, when(ev.at), "when");
        h.appendChild(tr);
      });
      var e = $("detail-edges");
      clear(e);
      data.edges.forEach(function (ed) {
        var tr = document.createElement("tr");
        cell(tr, ed.direction === "out" ? "\u2192" : "\u2190");
        cell(tr, ed.relation + (ed.subtype ? " (" + ed.subtype + ")" : ""));
        cell(tr, num(ed.confidence, 2), "num");
        var t = cell(tr, ed.other_text, "linkish");
        t.addEventListener("click", function () { openMemory(ed.other_id); });
        cell(tr, ed.valid ? "yes" : "no" + (ed.invalid_reason ? ": " + ed.invalid_reason : ""));
        e.appendChild(tr);
      });
      return api("/api/graph", {q: "-", ids: id, direction: "both", depth: 1}).then(function (g) {
        drawPicture("detail-picture", g.picture, null);
      });
    }).catch(function (err) { $("detail").hidden = false; $("detail-text").textContent = String(err.message || err); });
  }

  // ------------------------------------------------------------------ landing: counts and recent memories
  function loadOverview(stats) {
    var counts = $("overview-counts");
    clear(counts);
    [["memories", stats.chunks], ["edges", stats.edges], ["co-occurrence pairs", stats.cooccurrence],
     ["facts", stats.facts], ["with a vector", stats.embeddings]].forEach(function (kv) {
      if (kv[1] === undefined || kv[1] === null) return;
      var d = document.createElement("div");
      d.className = "count";
      var b = document.createElement("b");
      b.textContent = String(kv[1]);
      var l = document.createElement("span");
      l.textContent = kv[0];
      d.appendChild(b);
      d.appendChild(l);
      counts.appendChild(d);
    });
    return api("/api/memories", {order: "recent", limit: 10}).then(function (data) {
      var tbody = $("recent-rows");
      clear(tbody);
      $("recent-table").hidden = data.memories.length === 0;
      $("recent-empty").hidden = data.memories.length !== 0;
      data.memories.forEach(function (m) {
        var tr = document.createElement("tr");
        cell(tr, when(m.created_at));
        var t = cell(tr, m.text, "linkish memtext");
        t.title = m.text;
        t.addEventListener("click", function () { openMemory(m.id); });
        cell(tr, m.kind);
        cell(tr, m.user_id);
        cell(tr, m.agent_id);
        tbody.appendChild(tr);
      });
    });
  }

  // ------------------------------------------------------------------ sleep and stats
  function reportRows(tbody, report) {
    clear(tbody);
    Object.keys(report).sort().forEach(function (k) {
      var v = report[k];
      if (k === "elapsed" && v && typeof v === "object") {
        v = Object.keys(v).map(function (s) { return s + " " + num(v[s], 3) + "s"; }).join(", ");
      } else if (k === "now") {
        v = when(v);
        k = "ran at";
      } else if (typeof v === "number" && !Number.isInteger(v)) {
        v = num(v);
      }
      var tr = document.createElement("tr");
      cell(tr, k);
      cell(tr, v, "num");
      tbody.appendChild(tr);
    });
  }

  function loadSleep() {
    return api("/api/sleep", {}).then(function (data) {
      if (data.report) {
        $("sleep-note").textContent = "";
        reportRows($("sleep-rows"), data.report);
      } else {
        $("sleep-note").textContent = data.note || "no sleep has run on this memory yet";
      }
    });
  }
  $("sleep-preview").addEventListener("click", function () {
    api("/api/sleep", {preview: 1}).then(function (data) { reportRows($("sleep-preview-rows"), data.report); })
      .catch(function (e) { $("sleep-note").textContent = String(e.message || e); });
  });

  function loadStats() {
    return api("/api/stats", {}).then(function (s) {
      var tbody = $("stats-rows");
      clear(tbody);
      Object.keys(s).forEach(function (k) {
        var tr = document.createElement("tr");
        cell(tr, k);
        cell(tr, s[k]);
        tbody.appendChild(tr);
      });
    });
  }

  // ------------------------------------------------------------------ start: ?tab=...&q=...&action=...&mode=...&memory=...
  busy(1);
  api("/api/stats", {}).then(function (s) {
    $("db-path").textContent = s.path;
    $("mode").textContent = s.writable ? "writable" : "read-only";
    return loadOverview(s);
  }).catch(function (e) { showError("search-status", e); });
  var params = new URLSearchParams(window.location.search);
  var tab = params.get("tab") || (params.get("action") ? "whatif" : (params.get("memory") ? "memories" : "search"));
  showTab(tabs.indexOf(tab) >= 0 ? tab : "search");
  if (params.get("q")) {
    $("search-q").value = params.get("q");
    runSearch(params.get("q"));
  }
  if (params.get("action")) {
    $("whatif-q").value = params.get("action");
    var mode = params.get("mode") || "what-if";
    $("whatif-mode").value = mode;
    runWhatIf(params.get("action"), mode);
  }
  if (params.get("memory")) openMemory(params.get("memory"));
  busy(-1);
})();
