(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("fxflow-data").textContent);
  var diagram = document.getElementById("fx-diagram");
  var panel = document.getElementById("fx-panel");
  var select = document.getElementById("fx-view");
  var search = document.getElementById("fx-search");
  var views = {};
  var current = null, svg = null, box = null, whole = null;
  var groups = {}, clusters = {}, edges = [];

  data.views.forEach(function (view) {
    views[view.id] = view;
    var option = document.createElement("option");
    option.value = view.id;
    option.textContent = view.title + " (" + view.count + " boxes drawn)";  // the graph's nodes: #fx-trace
    select.appendChild(option);
  });

  function el(tag, text, cls) {
    var node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }
  function fmt(value) {
    if (value === null || value === undefined) return "-";
    if (typeof value === "number") return Number(value.toPrecision(4)).toString();
    return String(value);
  }

  // -- views -----------------------------------------------------------------------------
  function show(id, near) {
    current = views[id];
    select.value = id;
    diagram.innerHTML = document.getElementById("fxflow-svg-" + id).textContent;
    svg = diagram.querySelector("svg");
    svg.setAttribute("preserveAspectRatio", "xMidYMid meet");
    var vb = svg.viewBox.baseVal;
    whole = {x: vb.x, y: vb.y, w: vb.width, h: vb.height};
    groups = {}; clusters = {}; edges = [];
    svg.querySelectorAll("g.node").forEach(function (g) {
      var title = g.querySelector("title");
      if (title) groups[title.textContent] = g;
    });
    svg.querySelectorAll("g.cluster").forEach(function (g) {
      var title = g.querySelector("title");
      if (title && title.textContent.indexOf("cluster_") === 0) clusters[title.textContent.slice(8)] = g;
    });
    svg.querySelectorAll("g.edge").forEach(function (g) {
      var title = g.querySelector("title");
      if (!title) return;
      var ends = title.textContent.split("->");
      edges.push({source: ends[0], target: ends[1], g: g});
    });
    document.getElementById("fx-notes").textContent = current.notes.join(" | ");
    fillLegend(current.legend || []);
    document.getElementById("fx-goto-cut").hidden = cutKey() === null;  // never offered where there is none
    panel.replaceChildren(el("p", HINT, "fx-hint"));  // what the last view selected is not in this one
    fit();
    if (search.value) runSearch();
    if (near) centerOn(near, false);
  }
  select.addEventListener("change", function () { show(select.value); });

  // -- pan and zoom ----------------------------------------------------------------------
  function setBox(next) {
    box = next;
    svg.setAttribute("viewBox", [next.x, next.y, next.w, next.h].join(" "));
  }
  var READABLE = 0.55;  // screen pixels per point below which 11-point labels cannot be read
  var FIRST_TEXT_PX = 12;  // the first view opens on the cut with its smallest words at least this tall
  var HINT = panel.textContent;
  function openOnCut() {
    fit();
    var key = cutKey(), g = key === null ? null : groups[key];
    if (!g) return;
    var sizes = Array.prototype.map.call(g.querySelectorAll("text"), function (t) {
      return parseFloat(t.getAttribute("font-size")) || 14;
    });
    var smallest = Math.min.apply(null, sizes.length ? sizes : [14]);
    var rect = diagram.getBoundingClientRect();
    var scale = Math.min(rect.width / box.w, rect.height / box.h);  // screen pixels per point now
    if (smallest * scale >= FIRST_TEXT_PX) return;  // the whole view is readable as it is
    var w = rect.width * smallest / (FIRST_TEXT_PX + 0.5), h = w * rect.height / Math.max(rect.width, 1);
    var b = bboxOf(g);
    setBox({x: b.x + b.w / 2 - w / 2, y: b.y + b.h / 2 - h / 2, w: w, h: h});
  }
  function fit() {
    var rect = diagram.getBoundingClientRect();
    var scale = Math.min(rect.width / whole.w, rect.height / whole.h);
    if (!(scale < READABLE)) { setBox({x: whole.x, y: whole.y, w: whole.w, h: whole.h}); return; }
    // too big to read whole: as much as fits at a readable size, from the top, centered
    var w = rect.width / READABLE, h = rect.height / READABLE;
    setBox({x: whole.x + Math.max(whole.w - w, 0) / 2, y: whole.y, w: w, h: h});
  }
  function toSvg(x, y) {
    var point = svg.createSVGPoint();
    point.x = x; point.y = y;
    return point.matrixTransform(svg.getScreenCTM().inverse());
  }
  function bboxOf(g) {
    var r = g.getBoundingClientRect();
    var a = toSvg(r.left, r.top), b = toSvg(r.right, r.bottom);
    return {x: a.x, y: a.y, w: b.x - a.x, h: b.y - a.y};
  }
  function centerOn(key, zoom) {
    var g = groups[key] || clusters[key];
    if (!g) return;
    var b = bboxOf(g), rect = diagram.getBoundingClientRect();
    var w = box.w, h = box.h;
    if (zoom) {
      w = Math.max(b.w * 4, 480);
      h = w * rect.height / Math.max(rect.width, 1);
    }
    setBox({x: b.x + b.w / 2 - w / 2, y: b.y + b.h / 2 - h / 2, w: w, h: h});
  }
  diagram.addEventListener("wheel", function (event) {
    event.preventDefault();
    var p = toSvg(event.clientX, event.clientY), k = event.deltaY < 0 ? 0.8 : 1.25;
    setBox({x: p.x - (p.x - box.x) * k, y: p.y - (p.y - box.y) * k, w: box.w * k, h: box.h * k});
  }, {passive: false});
  var drag = null, dragged = false;
  diagram.addEventListener("mousedown", function (event) {
    var rect = diagram.getBoundingClientRect();
    drag = {x: event.clientX, y: event.clientY, box: box, unit: Math.max(box.w / rect.width, box.h / rect.height)};
    dragged = false;
  });
  window.addEventListener("mousemove", function (event) {
    if (!drag) return;
    var dx = event.clientX - drag.x, dy = event.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) { dragged = true; diagram.classList.add("fx-dragging"); }
    if (dragged) setBox({x: drag.box.x - dx * drag.unit, y: drag.box.y - dy * drag.unit, w: drag.box.w, h: drag.box.h});
  });
  window.addEventListener("mouseup", function () { drag = null; diagram.classList.remove("fx-dragging"); });
  document.getElementById("fx-fit").addEventListener("click", fit);
  document.getElementById("fx-toggle-side").addEventListener("click", function (event) {
    var hidden = document.body.classList.toggle("fx-side-hidden");
    event.target.textContent = hidden ? "show table" : "hide table";
    fit();
  });

  // -- selection, side panel, expand and collapse -------------------------------------------
  function clearMarks(cls) {
    svg.querySelectorAll("." + cls).forEach(function (g) { g.classList.remove(cls); });
  }
  function cutKey() {
    var keys = Object.keys(current.nodes), found = null;
    keys.forEach(function (key) {
      var info = current.nodes[key];
      if (found === null && info.reason && info.state === "cut") found = key;
    });
    keys.forEach(function (key) {
      var info = current.nodes[key];
      if (found === null && (info.reason || (info.cuts && info.cuts.length))) found = key;
    });
    return found;
  }
  document.getElementById("fx-goto-cut").addEventListener("click", function () {
    var key = cutKey();
    if (key === null) { panel.replaceChildren(el("p", "No cut in this view.", "fx-hint")); return; }
    select_(key);
    centerOn(key, true);
  });
  var legend = document.getElementById("fx-legend");
  function fillLegend(entries) {  // beside the drawing, not in it: panning and zooming never hide it
    var details = el("details"), list = el("ul");
    details.open = true;
    details.appendChild(el("summary", "legend"));
    entries.forEach(function (entry) {
      var item = el("li"), swatch = el("span", entry.sample || null, "fx-swatch");
      if (entry.fill) {
        swatch.style.background = entry.fill;
        swatch.style.border = (entry.line === "double" ? "3px double " : entry.line === "bold" ? "2px solid " :
                               entry.line === "dashed" ? "1px dashed " : "1px solid ") + entry.border;
      } else {
        swatch.classList.add("fx-wire");
        swatch.style.color = entry.color;
      }
      item.appendChild(swatch);
      item.appendChild(el("span", entry.words));
      list.appendChild(item);
    });
    details.appendChild(list);
    legend.replaceChildren(details);
    legend.hidden = !entries.length;
  }
  function row(list, term, value) {
    if (value === null || value === undefined || value === "" || (Array.isArray(value) && !value.length)) return;
    list.appendChild(el("dt", term));
    list.appendChild(el("dd", Array.isArray(value) ? value.join("; ") : fmt(value)));
  }
  function stateBadge(state) {
    var badge = el("span", state, "fx-state"), look = data.colors[state] || data.colors.inert;
    badge.style.background = look.fill; badge.style.borderColor = look.border; badge.style.color = look.font;
    return badge;
  }
  function known(id) {  // a view id, or the id of the view that draws the same
    return views[id] ? id : (data.aliases[id] || null);
  }
  function target(level) {
    return known("depth" + level) || known("full");
  }
  function select_(key) {
    var info = current.nodes[key];
    clearMarks("fx-selected");
    if (groups[key]) groups[key].classList.add("fx-selected");
    var heading = el("h2", info.title || key);
    heading.appendChild(document.createTextNode(" "));
    heading.appendChild(stateBadge(info.state));
    var list = el("dl");
    row(list, "op", info.op);
    row(list, "node", info.node);
    row(list, "module", info.module ? info.module + (info.cls ? " (" + info.cls + ")" : "") : null);
    row(list, "source", info.source);
    row(list, "reason", info.reason);
    row(list, "shape", info.shape);
    row(list, "dtype", info.dtype);
    row(list, "grad norm", info.norm);
    row(list, "static", info.static);
    row(list, "dynamic", info.dynamic);
    row(list, "diagnosis", info.diagnosis);
    row(list, "cut by", info.cut_by);
    if (info.count > 1) row(list, "folded", info.count + " identical blocks");
    if (info.ops) row(list, "ops", Object.keys(info.ops).map(function (s) { return info.ops[s] + " " + s; }));
    if (info.param_states) row(list, "params", Object.keys(info.param_states).map(function (s) { return info.param_states[s] + " " + s; }));
    if (info.cuts) row(list, "cuts", info.cuts.map(function (c) { return c.op + " @ " + (c.source || "?") + ": " + c.reason; }));
    panel.replaceChildren(heading, list);
    if ((info.kind === "module" || info.kind === "fold") && target(info.level + 1)) {
      var expand = el("button", "expand " + info.title);
      expand.type = "button";
      expand.addEventListener("click", function () { openIn(target(info.level + 1), info.names); });
      panel.appendChild(expand);
    }
  }
  function selectCluster(module) {
    clearMarks("fx-selected");
    clusters[module].classList.add("fx-selected");
    panel.replaceChildren(el("h2", module), el("p", "module drawn open", "fx-hint"));
    var level = current.clusters[module];
    if (level !== undefined && known("depth" + level)) {
      var collapse = el("button", "collapse " + module);
      collapse.type = "button";
      collapse.addEventListener("click", function () { show(known("depth" + level), "module." + module); });
      panel.appendChild(collapse);
    }
  }
  function openIn(id, names) {
    show(id);
    var wanted = {};
    names.forEach(function (n) { wanted[n] = true; });
    var keys = Object.keys(current.nodes);
    for (var i = 0; i < keys.length; i++) {
      if (current.nodes[keys[i]].names.some(function (n) { return wanted[n]; })) { centerOn(keys[i], true); return; }
    }
  }
  diagram.addEventListener("click", function (event) {
    if (dragged) return;
    var g = event.target.closest("g.node, g.cluster");
    if (!g) return;
    var title = g.querySelector("title").textContent;
    if (g.classList.contains("node") && current.nodes[title]) select_(title);
    else if (g.classList.contains("cluster") && clusters[title.slice(8)]) selectCluster(title.slice(8));
  });

  // -- search ------------------------------------------------------------------------------
  function runSearch() {
    var query = search.value.trim().toLowerCase(), hits = [];
    clearMarks("fx-hit");
    if (query) {
      Object.keys(current.nodes).forEach(function (key) {
        var info = current.nodes[key];
        var words = [key, info.title || "", info.module || "", info.op || ""].concat(info.names);
        if (words.some(function (w) { return String(w).toLowerCase().indexOf(query) >= 0; })) {
          hits.push(key);
          if (groups[key]) groups[key].classList.add("fx-hit");
        }
      });
    }
    document.getElementById("fx-search-count").textContent = query ? hits.length + " found" : "";
    return hits;
  }
  search.addEventListener("input", runSearch);
  search.addEventListener("keydown", function (event) {
    if (event.key !== "Enter") return;
    var hits = runSearch();
    if (hits.length) { select_(hits[0]); centerOn(hits[0], true); }
  });

  // -- parameter table and paths -------------------------------------------------------------
  function highlightPath(name) {
    var start = null;
    Object.keys(current.nodes).forEach(function (key) {
      if (start === null && current.nodes[key].params.indexOf(name) >= 0) start = key;
    });
    clearMarks("fx-path");
    svg.classList.remove("fx-dim");
    if (start === null) return null;
    var seen = {}, stack = [start];
    seen[start] = true;
    while (stack.length) {
      var key = stack.pop();
      if (key !== start && current.nodes[key] && current.nodes[key].state === "cut") continue;  // a dry path ends at its cut
      edges.forEach(function (edge) {
        if (edge.source === key && current.nodes[edge.target] && !seen[edge.target]) {
          seen[edge.target] = true;
          stack.push(edge.target);
        }
      });
    }
    svg.classList.add("fx-dim");
    Object.keys(seen).forEach(function (key) { if (groups[key]) groups[key].classList.add("fx-path"); });
    edges.forEach(function (edge) { if (seen[edge.source] && seen[edge.target]) edge.g.classList.add("fx-path"); });
    return start;
  }
  var tbody = document.querySelector("#fx-table tbody");
  function fillTable(rows) {
    tbody.replaceChildren();
    rows.forEach(function (p) {
      var tr = el("tr"), look = data.colors[p.state] || data.colors.inert;
      tr.dataset.name = p.name;
      tr.appendChild(el("td", p.name.replace(/\./g, ".\u200b")));  // long names break after a dot
      tr.appendChild(el("td", p.shape));
      var verdict = el("td", p.static);
      verdict.style.background = look.fill; verdict.style.color = look.font;
      verdict.style.borderLeft = "4px solid " + look.border;
      tr.appendChild(verdict);
      var dynamic = el("td", p.dynamic || "-", p.dynamic_fails ? "fx-dynamic-fail" : null);
      if (p.dynamic_fails) {
        var bad = data.colors.failed;
        dynamic.style.background = bad.fill; dynamic.style.color = bad.font;
      }
      tr.appendChild(dynamic);
      tr.appendChild(el("td", fmt(p.norm), "fx-num"));
      var cuts = el("td", null, "fx-cut-by");  // a file:line stays whole: the cell wraps before it or between sites
      p.cut_by.forEach(function (site, index) {
        var found = site.lastIndexOf(" @ "), at = found < 0 ? 0 : found + 3, last = index === p.cut_by.length - 1;
        if (at) cuts.appendChild(document.createTextNode(site.slice(0, at)));
        var where = el("span", null, "fx-site");  // a long path may break after a "/", never in file:line
        (site.slice(at) + (last ? "" : ";")).split("/").forEach(function (part, i, parts) {
          where.appendChild(document.createTextNode(part + (i < parts.length - 1 ? "/" : "")));
          if (i < parts.length - 1) where.appendChild(document.createElement("wbr"));
        });
        cuts.appendChild(where);
        if (!last) cuts.appendChild(document.createTextNode(" "));
      });
      tr.appendChild(cuts);
      if (p.problem) tr.classList.add("fx-row-fail");
      tr.title = p.cut_by.length ? "cut by " + p.cut_by.join("; ") : p.name;
      tr.addEventListener("click", function () {
        tbody.querySelectorAll(".fx-row-selected").forEach(function (r) { r.classList.remove("fx-row-selected"); });
        tr.classList.add("fx-row-selected");
        var key = highlightPath(p.name);
        if (key !== null) { select_(key); centerOn(key, false); }
      });
      tbody.appendChild(tr);
    });
  }
  var sortKey = null, ascending = true;
  document.querySelectorAll("#fx-table th").forEach(function (th) {
    th.addEventListener("click", function () {
      var key = th.dataset.key;
      ascending = sortKey === key ? !ascending : true;
      sortKey = key;
      document.querySelectorAll("#fx-table th").forEach(function (h) { h.classList.remove("fx-asc", "fx-desc"); });
      th.classList.add(ascending ? "fx-asc" : "fx-desc");
      var rows = data.parameters.slice().sort(function (a, b) {
        var x = a[key], y = b[key];
        if (x === null || x === undefined) return 1;
        if (y === null || y === undefined) return -1;
        var order = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
        return ascending ? order : -order;
      });
      fillTable(rows);
    });
  });

  // parameters that will not learn first, then in the model's order
  fillTable(data.parameters.filter(function (p) { return p.problem; }).concat(
    data.parameters.filter(function (p) { return !p.problem; })));
  show(data.views[0].id);
  openOnCut();
  document.body.dataset.ready = "true";
})();
