// The IR report's views (bringup/plan/ir_report.py). Data: the JSON in #ir-data. Every string
// from the data is set with textContent, never innerHTML: model and tensor names stay text.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("ir-data").textContent);
  const S = { view: "dataflow", phase: "prefill", q: "", copies: false, layer: 0, lo: null, hi: null };
  const $ = (id) => document.getElementById(id);
  const SVGNS = "http://www.w3.org/2000/svg";

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k === "on") for (const [ev, f] of Object.entries(v)) e.addEventListener(ev, f);
      else e.setAttribute(k, v);
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
    return e;
  }
  function svg(tag, attrs) { const e = document.createElementNS(SVGNS, tag); for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v); return e; }
  function human(b) {
    if (b === null || b === undefined) return "";
    if (b < 1024) return b + " B";
    if (b < 1048576) return (b / 1024).toFixed(1) + " KiB";
    if (b < 1073741824) return (b / 1048576).toFixed(2) + " MiB";
    return (b / 1073741824).toFixed(2) + " GiB";
  }
  function table(head, rows, cls) {
    const t = el("table", { class: cls || "" });
    t.append(el("tr", {}, ...head.map((h) => el("th", {}, h))));
    for (const r of rows) t.append(r instanceof Node ? r : el("tr", {}, ...r.map((c) => el("td", typeof c === "number" ? { class: "num" } : {}, c))));
    return t;
  }
  const kv = (obj) => Object.entries(obj || {}).map(([k, v]) => k + "=" + (typeof v === "number" && !Number.isInteger(v) ? v.toPrecision(9) : v)).join(", ");
  const P = () => D.phases[S.phase];

  // ---------------------------------------------------------------- details panel
  function detail(title, ...parts) { const d = $("detail"); d.replaceChildren(el("h3", {}, title), ...parts); }
  function tensorRow(port, name) {
    const t = P().tensors[name];
    const w = D.weights.find((x) => x.name === name);
    if (w) return [port, name, "weight " + w.dtype, "[" + w.shape.join(", ") + "]", "BUMP (mmap)", human(w.bytes)];
    if (!t) return [port, name, "", "", "", ""];
    const where = t.buffer ? t.buffer + " @ " + human(t.offset) : (t.kind === "state" ? "KV cache" : t.kind);
    return [port, name, t.kind + " " + t.dtype, "[" + t.shape.join(", ") + "]", where, human(t.bytes)];
  }
  function showOp(op) {
    document.querySelectorAll("tr.op.sel").forEach((r) => r.classList.remove("sel"));
    const row = document.querySelector('tr.op[data-i="' + op.i + '"]'); if (row) row.classList.add("sel");
    const c = D.providers[op.provider] || {};
    const parts = [
      el("p", {}, el("b", {}, op.op + (op.variant ? " (" + op.variant + ")" : "")), " #" + op.i + (op.layer !== null ? ", layer " + op.layer : "")),
      el("p", {}, "provider ", el("code", {}, op.provider), ": ", op.rule),
      el("h3", {}, "buffers"),
      table(["port", "tensor", "kind", "shape", "where", "size"],
        [...op.reads.map(([p, n]) => tensorRow("in " + p, n)), ...op.writes.map(([p, n]) => tensorRow("out " + p, n)),
         ...op.state.map(([p, n]) => tensorRow("state " + p, n)),
         ...Object.entries(op.scratch).map(([k, b]) => ["scratch " + k, op.id + ".scratch." + k, "kernel workspace", "", "arena", human(b)])]),
    ];
    if (Object.keys(op.inplace).length) parts.push(el("p", {}, "in place: " + Object.entries(op.inplace).map(([o, i]) => o + " shares " + i.join(", ")).join("; ")));
    parts.push(el("p", {}, "dims: " + kv(op.dims)), el("p", {}, "params: " + (kv(op.params) || "none")));
    parts.push(el("h3", {}, "numerics contract"), contractTable(c));
    if (op.rej !== null) {
      parts.push(el("h3", {}, "rejected candidates"),
        table(["candidate", "why not"], D.rejsets[op.rej].map((r) => [r.id, r.reasons.join("; ")])));
    }
    detail(op.id, ...parts);
  }
  function contractTable(c) {
    return table(["", ""], [["description", c.description || ""], ["storage", kv(c.storage)], ["compute", c.compute || ""],
      ["accumulation", c.accumulation || ""], ["reduction order", c.reduction_order || ""], ["rounding", (c.rounding || []).join(" | ")],
      ["formula", c.formula || ""], ["source", c.source || ""], ["C sources", (c.sources || []).join(", ")],
      ["ISA levels", levelsCell(c)], ["runs here", c.here || ""], ["status", c.status || ""]]);
  }

  // ---------------------------------------------------------------- views
  function matches(op) {
    if (S.copies && !(op.copy || op.state.length || Object.keys(op.inplace).length)) return false;
    if (!S.q) return true;
    const q = S.q.toLowerCase();
    return [op.id, op.op, op.provider, ...op.reads.map((r) => r[1]), ...op.writes.map((r) => r[1])].some((s) => s.toLowerCase().includes(q));
  }
  function dataflow() {
    const groups = new Map();
    let shown = 0;
    for (const op of P().ops) {
      if (!matches(op)) continue;
      const g = op.layer === null ? (op.i === 0 || op.id.startsWith("header") ? "header" : "footer") : "layer " + op.layer;
      if (!groups.has(g)) groups.set(g, []);
      groups.get(g).push(op); shown++;
    }
    const out = [];
    const open = S.q !== "" || S.copies || groups.size <= 3;
    for (const [g, ops] of groups) {
      const rows = ops.map((op) => {
        const badges = [];
        if (op.copy) badges.push(el("span", { class: "badge copy" }, "copy"));
        if (Object.keys(op.inplace).length) badges.push(el("span", { class: "badge inplace" }, "in place"));
        if (op.state.length) badges.push(el("span", { class: "badge state" }, "KV " + op.state.map((s) => s[0]).join("/")));
        return el("tr", { class: "op" + (op.copy ? " copy" : "") + (op.state.length ? " handoff" : ""), "data-i": op.i, "data-id": op.id,
          on: { click: () => showOp(op) } },
          el("td", { class: "num" }, op.i), el("td", {}, op.id, ...badges), el("td", {}, op.op),
          el("td", {}, el("code", {}, op.provider)), el("td", {}, op.writes.map((w) => w[1]).join(", ")),
          el("td", { class: "num" }, human(op.writes.reduce((a, w) => a + ((P().tensors[w[1]] || {}).bytes || 0), 0))));
      });
      const d = el("details", { class: "layer", "data-group": g }, el("summary", {}, g + " (" + ops.length + " ops)"),
        table(["#", "op id", "op", "provider", "writes", "out size"], rows));
      if (open) d.open = true;
      out.push(d);
    }
    $("status").textContent = shown + " of " + P().ops.length + " ops shown";
    return [el("p", { class: "hint" }, "Ops in execution order, grouped by layer. Orange: copy ops; green edge: ops that read or write the KV cache; badges mark in-place outputs. Click an op for its provider, contract, buffers and the candidates it rejected."), ...out];
  }
  // The memory timeline over ops lo..hi (S.lo, S.hi; default every op): buffers as rectangles
  // (offset up, lifetime across), a mark where each layer begins, zoom by re-drawing a narrower
  // range (labels stay legible), from the buttons, the layer picker or the wheel.
  function memory() {
    const ph = P(), arena = Math.max(ph.summary.arena_bytes, 1), n = ph.summary.n_ops;
    const lo = S.lo === null ? 0 : Math.max(0, S.lo), hi = S.hi === null ? n - 1 : Math.min(n - 1, S.hi), span = Math.max(hi - lo + 1, 1);
    const W = 900, H = 360, L = 60, B = 30, T = 24;
    const s = svg("svg", { width: "100%", id: "timeline", viewBox: "0 0 " + (W + L + 10) + " " + (H + B + T + 10), style: "max-width:" + (W + L + 10) + "px" });
    const x = (i) => L + ((i - lo) / span) * W, y = (b) => T + H - (b / arena) * H;
    s.append(svg("line", { x1: L, y1: T + H, x2: L + W, y2: T + H, stroke: "#444" }), svg("line", { x1: L, y1: T, x2: L, y2: T + H, stroke: "#444" }));
    for (let k = 0; k <= 4; k++) {
      const t = svg("text", { x: 2, y: y((arena * k) / 4) + 4 }); t.textContent = human(Math.round((arena * k) / 4)); s.append(t);
    }
    const xl = svg("text", { x: L + W / 2 - 40, y: T + H + 20 }); xl.textContent = "op index (" + lo + ".." + hi + " of 0.." + (n - 1) + ")"; s.append(xl);
    // layer marks: where each layer's first op is
    const starts = new Map();
    for (const o of ph.ops) if (o.layer !== null && !starts.has(o.layer)) starts.set(o.layer, o.i);
    let lastLabel = -1e9;
    for (const [l, i] of starts) {
      if (i < lo || i > hi) continue;
      s.append(svg("line", { class: "layer-mark", x1: x(i), x2: x(i), y1: T - 4, y2: T + H, stroke: "#999", "stroke-dasharray": "2 3" }));
      if (x(i) - lastLabel >= 22) { const t = svg("text", { x: x(i) + 2, y: T - 8, class: "layer-label" }); t.textContent = "L" + l; s.append(t); lastLabel = x(i); }
    }
    const q = S.q.toLowerCase();
    let shown = 0;
    for (const b of ph.buffers) {
      if (b.last < lo || b.first > hi) continue;
      shown++;
      const x0 = x(Math.max(b.first, lo)), x1 = x(Math.min(b.last, hi) + 1);
      const r = svg("rect", { class: "buf " + (b.scratch ? "s" : "t") + (q && b.tensors.some((t) => t.toLowerCase().includes(q)) ? " hl" : ""),
        x: x0, y: y(b.offset + b.size), width: Math.max(x1 - x0, 1), height: Math.max((b.size / arena) * H, 1) });
      const tip = svg("title", {}); tip.textContent = b.id + ": " + human(b.size) + " @ " + human(b.offset) + ", ops " + b.first + ".." + b.last; r.append(tip);
      r.addEventListener("click", () => detail(b.id, table(["", ""], [["offset", human(b.offset) + " (" + b.offset + " B)"], ["size", human(b.size) + " (" + b.size + " B)"],
        ["live", "ops " + b.first + ".." + b.last], ["kind", b.scratch ? "kernel scratch" : "tensor"], ["tensors", b.tensors.join(", ")]])));
      s.append(r);
    }
    const lb = ph.summary.lower_bound_bytes;
    s.append(svg("line", { x1: L, x2: L + W, y1: y(lb), y2: y(lb), stroke: "#2e9d5a", "stroke-dasharray": "4 3" }));
    const setRange = (a, b) => { S.lo = Math.max(0, Math.round(a)); S.hi = Math.min(n - 1, Math.round(b)); if (S.lo === 0 && S.hi === n - 1) S.lo = S.hi = null; render(); };
    const around = (c, f) => { const half = Math.max(span * f / 2, 4); setRange(c - half, c + half); };
    s.addEventListener("wheel", (e) => {
      e.preventDefault(); const r = s.getBoundingClientRect();
      const c = lo + ((e.clientX - r.left) / r.width * (W + L + 10) - L) / W * span; around(c, e.deltaY > 0 ? 1.5 : 1 / 1.5);
    }, { passive: false });
    const pick = layerPicker((l) => { S.layer = l; const a = starts.get(l), b = starts.has(l + 1) ? starts.get(l + 1) - 1 : a + 20; setRange(a - 1, b + 1); }, "a layer…");
    $("status").textContent = shown + " of " + ph.buffers.length + " buffers in ops " + lo + ".." + hi + ", arena " + human(ph.summary.arena_bytes);
    return [el("p", { class: "legend" }, el("span", {}, el("i", { class: "sw", style: "background:#4a78b5" }), "tensor"),
      el("span", {}, el("i", { class: "sw", style: "background:#e08a2c" }), "kernel scratch"),
      el("span", {}, el("i", { class: "sw", style: "background:#2e9d5a" }), "lower bound " + human(lb)),
      el("span", {}, "L<n>: where layer n begins"),
      el("span", {}, S.phase + " arena " + human(ph.summary.arena_bytes) + " (this phase's own scale); shared arena " + human(D.arena.bytes))),
      el("p", { class: "zoom" }, el("button", { on: { click: () => around((lo + hi) / 2, 1 / 2) } }, "zoom in"),
        el("button", { on: { click: () => around((lo + hi) / 2, 2) } }, "zoom out"),
        el("button", { on: { click: () => setRange(0, n - 1) } }, "all ops"), " show ", pick,
        el("span", { class: "hint" }, " (or the mouse wheel over the timeline)")), s];
  }
  function weights() {
    const q = S.q.toLowerCase();
    const ws = D.weights.filter((w) => !q || w.name.toLowerCase().includes(q) || w.dtype.toLowerCase().includes(q));
    const by = {};
    for (const w of D.weights) { by[w.dtype] = by[w.dtype] || [0, 0]; by[w.dtype][0]++; by[w.dtype][1] += w.bytes; }
    $("status").textContent = ws.length + " of " + D.weights.length + " weights shown";
    return [el("h3", {}, "by format"), table(["format", "tensors", "bytes"], Object.entries(by).sort().map(([k, v]) => [k, v[0], human(v[1])])),
      el("h3", {}, "tensors (BUMP, memory-mapped, read in place)"),
      table(["name", "format", "shape", "size"], ws.map((w) => el("tr", { class: "w", on: { click: () => detail(w.name, table(["", ""], [["format", w.dtype], ["shape", "[" + w.shape.join(", ") + "]"], ["bytes", w.bytes],
        ["read by", P().ops.filter((o) => o.reads.some((r) => r[1] === w.name)).map((o) => o.id).join(", ")]])) } },
        el("td", {}, w.name), el("td", {}, w.dtype), el("td", {}, "[" + w.shape.join(", ") + "]"), el("td", { class: "num" }, human(w.bytes))))),
      D.excluded.length ? table(["not bound", "reason"], D.excluded.map((e) => [e.name, e.reason])) : ""];
  }
  function kvcache() {
    const st = D.state;
    $("status").textContent = st.buffers.length + " KV buffers, " + human(st.bytes) + " at n_ctx " + st.n_ctx;
    return [el("p", {}, "Persistent state outside the arena: " + human(st.bytes) + " at n_ctx " + st.n_ctx + " (" + st.buffers.length + " buffers)."),
      table(["buffer", "dtype", "store", "bytes per position", "bytes at n_ctx", "written/read by (" + S.phase + ")"], st.buffers.map((b) => [b.name, b.dtype, b.store, b.bytes_per_position, human(b.bytes),
        P().ops.filter((o) => o.state.some((s) => s[1] === b.name)).map((o) => o.id).join(", ")]))];
  }
  // What the program will run here: each provider's ISA levels (a check where this host has the
  // level's CPU features), the level its dispatch picks by default, and the built program's own
  // account (bringup-run --json's isa_dispatch) when the report was given one.
  function levelsCell(c) {
    const ls = c.levels || [];
    if (!ls.length) return "portable C only";
    const host = D.host.flags_read ? new Set(D.host.levels) : null;
    return ls.map((l) => l.level + (host === null ? "" : host.has(l.level) ? "\u00a0✓" : "\u00a0✗")).join(", ");   // a level and its mark never apart
  }
  function dispatchTable() {
    const d = D.dispatch;
    if (!d) return [el("p", { class: "hint" }, "No built program was given (bringup plan arena --build results/<model>/build): the levels above are what it can choose from on this host; the runtime's per-class choice is in bringup-run --json's isa_dispatch.")];
    const cls = Array.isArray(d.classes) ? d.classes : [];
    return [el("h3", {}, "runtime ISA dispatch of the built program (bringup-run --json)"),
      el("p", {}, "default level " + String(d.default) + "; " + String(d.how)),
      table(["format", "activations", "n_in", "phase", "threads", "level", "why"], cls.map((c) => [String(c.format), String(c.activations), String(c.n_in), String(c.phase),
        String(c.threads), c.level === null ? "still calibrating" : String(c.level), String(c.why)]))];
  }
  function providers() {
    const used = {};
    for (const o of P().ops) used[o.provider] = (used[o.provider] || 0) + 1;
    const kinds = new Map();
    for (const o of P().ops) if (o.rej !== null) { const k = o.op + " → " + o.provider; if (!kinds.has(k)) kinds.set(k, o.rej); }
    $("status").textContent = Object.keys(used).length + " providers";
    const c = (p) => D.providers[p] || {};
    return [el("h3", {}, "chosen providers (" + S.phase + ")"),
      el("p", { class: "hint" }, D.host.flags_read ? "✓: this host has the level's CPU features (" + D.host.levels.join(", ") + ")." : "This host's CPU features could not be read."),
      table(["provider", "ops", "ISA levels", "runs here", "status", "accumulation"], Object.entries(used).sort().map(([p, n]) => el("tr", { class: "prov", on: { click: () => detail(p, contractTable(c(p))) } },
        el("td", {}, el("code", {}, p)), el("td", { class: "num" }, n), el("td", {}, levelsCell(c(p))), el("td", {}, c(p).here || ""),
        el("td", {}, c(p).status || ""), el("td", {}, c(p).accumulation || "")))),
      ...dispatchTable(),
      el("h3", {}, "rejected candidates, once per op kind"),
      ...[...kinds].map(([k, r]) => el("details", {}, el("summary", {}, k + ": " + D.rejsets[r].length + " rejected"),
        table(["candidate", "why not"], D.rejsets[r].map((c) => [c.id, c.reasons.join("; ")]))))];
  }
  // ---------------------------------------------------------------- zoom (wheel, drag, buttons)
  // An SVG's viewBox is its window on the drawing: the wheel zooms around the cursor, a drag pans,
  // the buttons zoom around the centre or reset. Nothing is redrawn: text stays where it is.
  function zoomable(s, w, h) {
    let vb = [0, 0, w, h];
    const set = () => s.setAttribute("viewBox", vb.map((v) => v.toFixed(1)).join(" "));
    const zoom = (f, cx, cy) => {
      const nw = Math.min(Math.max(vb[2] * f, w / 40), w * 4), nh = nw * h / w;
      vb = [cx - (cx - vb[0]) * nw / vb[2], cy - (cy - vb[1]) * nh / vb[3], nw, nh]; set();
    };
    const toUser = (e) => { const r = s.getBoundingClientRect(); return [vb[0] + (e.clientX - r.left) / r.width * vb[2], vb[1] + (e.clientY - r.top) / r.height * vb[3]]; };
    s.addEventListener("wheel", (e) => { e.preventDefault(); const [x, y] = toUser(e); zoom(e.deltaY > 0 ? 1.2 : 1 / 1.2, x, y); }, { passive: false });
    let drag = null;
    s.addEventListener("pointerdown", (e) => { drag = [e.clientX, e.clientY, vb[0], vb[1]]; });
    s.addEventListener("pointermove", (e) => {
      if (!drag) return; const r = s.getBoundingClientRect();
      vb[0] = drag[2] - (e.clientX - drag[0]) / r.width * vb[2]; vb[1] = drag[3] - (e.clientY - drag[1]) / r.height * vb[3]; set();
    });
    ["pointerup", "pointerleave"].forEach((ev) => s.addEventListener(ev, () => { drag = null; }));
    set();
    return el("span", { class: "zoom" },
      el("button", { on: { click: () => zoom(1 / 1.5, vb[0] + vb[2] / 2, vb[1] + vb[3] / 2) } }, "zoom in"),
      el("button", { on: { click: () => zoom(1.5, vb[0] + vb[2] / 2, vb[1] + vb[3] / 2) } }, "zoom out"),
      el("button", { on: { click: () => { vb = [0, 0, w, h]; set(); } } }, "reset"),
      el("span", { class: "hint" }, " or the mouse wheel; drag to pan"));
  }
  const layers = () => [...new Set(P().ops.map((o) => o.layer).filter((l) => l !== null))].sort((a, b) => a - b);
  function layerPicker(onPick, prompt) {
    const sel = el("select", { id: "layer", on: { change: (e) => { if (e.target.value !== "") onPick(Number(e.target.value)); } } },
      ...(prompt ? [el("option", { value: "" }, prompt)] : []), ...layers().map((l) => el("option", { value: l }, "layer " + l)));
    sel.value = prompt ? "" : String(S.layer);
    return sel;
  }

  // ---------------------------------------------------------------- dataflow as a graph
  // One layer: ops (boxes) in execution order, the tensors they write (their buffers) beside
  // them, weights on the left, the KV cache on the right. An edge goes from each tensor to every
  // op that reads it; tensors from before the layer enter at the top.
  function graph() {
    const ls = layers();
    if (!ls.includes(S.layer)) S.layer = ls.length ? ls[0] : 0;
    const ops = P().ops.filter((o) => o.layer === S.layer);
    const RH = 46, OX = 300, TX = 560, WX = 60, KX = 14, W = 760, top = 70;
    const H = top + ops.length * RH + 30;
    const s = svg("svg", { id: "graph", width: "100%", style: "max-width:" + W * 1.4 + "px" });   // height: the viewBox's aspect
    const where = new Map();   // tensor -> [x, y] of its node
    const row = (i) => top + i * RH;
    const short = (n) => n.startsWith("layer." + S.layer + ".") ? n.slice(("layer." + S.layer + ".").length) : n;
    const node = (cls, x, y, w, label, tip, click) => {
      const g = svg("g", { class: "node " + cls }), r = svg("rect", { x: x, y: y - 13, width: w, height: 26, rx: cls === "op" ? 3 : 12 });
      const t = svg("text", { x: x + w / 2, y: y + 4, "text-anchor": "middle" }); t.textContent = label;
      const ti = svg("title", {}); ti.textContent = tip;
      g.append(r, t, ti); if (click) g.addEventListener("click", click); s.append(g); return g;
    };
    const edge = (x1, y1, x2, y2, cls) => {
      const mx = (x1 + x2) / 2;
      s.append(svg("path", { class: "edge " + (cls || ""), d: "M" + x1 + "," + y1 + " C" + mx + "," + y1 + " " + mx + "," + y2 + " " + x2 + "," + y2, "marker-end": "url(#arrow)" }));
    };
    const defs = svg("defs", {}), m = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 6, markerHeight: 6, orient: "auto" });
    m.append(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#666" })); defs.append(m); s.append(defs);
    // tensors written inside the layer, and those that enter it from before
    ops.forEach((op, i) => op.writes.forEach(([, n], k) => where.set(n, [TX + k * 10, row(i)])));
    const outside = [...new Set(ops.flatMap((o) => o.reads.map((r) => r[1])).filter((n) => !where.has(n) && !D.weights.some((w) => w.name === n)))];
    outside.forEach((n, k) => {
      where.set(n, [TX + k * 190, 24]);
      node("tensor outside", TX + k * 190 - 80, 24, 180, short(n), n + ": written before this layer");
    });
    ops.forEach((op, i) => {
      const y = row(i), cls = "op" + (op.copy ? " copy" : "") + (op.state.length ? " kv" : "");
      node(cls, OX - 110, y, 220, op.op + (op.variant ? " " + op.variant : "") + " · " + short(op.id), op.id + " (" + op.provider + ")", () => showOp(op));
      for (const [, n] of op.reads) {
        const w = D.weights.find((x) => x.name === n);
        if (w) { node("weight", WX, y, 120, short(n), n + ": " + w.dtype + " [" + w.shape.join(", ") + "], " + human(w.bytes) + " (BUMP, mmap)"); edge(WX + 120, y, OX - 110, y); continue; }
        const p = where.get(n); if (p) edge(p[0] - 80, p[1] + 4, OX + 110, y - 7, "read");
      }
      op.writes.forEach(([, n]) => {
        const t = P().tensors[n] || {}, inpl = Object.keys(op.inplace).length > 0;
        node("tensor" + (inpl ? " inplace" : "") + (op.copy ? " copy" : ""), TX - 80, y, 160, short(n) + (inpl ? " (in place)" : ""),
          n + ": " + (t.dtype || "") + " [" + (t.shape || []).join(", ") + "], " + human(t.bytes) + (t.buffer ? " in " + t.buffer + " @ " + human(t.offset) : ""));
        edge(OX + 110, y + 7, TX - 80, y + 4, "write");
      });
      op.state.forEach(([port, n], k) => {
        const b = (D.state.buffers || []).find((x) => x.name === n) || {};
        // in the weights' column (attention has no weights): persistent state, read and written
        node("kvcache", KX, y - 14 + k * 28, 150, short(n) + " (KV)", n + ": KV cache, " + (b.dtype || "") + ", " + human(b.bytes) + " at n_ctx " + D.state.n_ctx + "; " + (b.store || ""));
        edge(OX - 110, y, KX + 150, y - 14 + k * 28, "kv");
      });
    });
    $("status").textContent = "layer " + S.layer + ": " + ops.length + " ops";
    const controls = el("p", { class: "legend" }, layerPicker((l) => { S.layer = l; render(); }), " ", zoomable(s, W, H));
    return [el("p", { class: "hint" }, "One layer's dataflow: ops (boxes, in execution order), the tensors they write and the arena buffers behind them (rounded), weights (grey, memory-mapped), the KV cache (purple); orange: copies; green: outputs written in place over an input. Hover for sizes and buffers, click an op for its details."),
      controls, s];
  }
  const VIEWS = { dataflow, graph, memory, weights, kv: kvcache, providers };

  function render() {
    document.querySelectorAll("#views button").forEach((b) => b.classList.toggle("on", b.dataset.view === S.view));
    document.querySelectorAll("#phases button").forEach((b) => b.classList.toggle("on", b.dataset.phase === S.phase));
    $("view").replaceChildren(...(VIEWS[S.view] || dataflow)());
    const h = "#view=" + S.view + "&phase=" + S.phase + (S.q ? "&q=" + encodeURIComponent(S.q) : "") + (S.copies ? "&copies=1" : "") +
      (S.view === "graph" ? "&layer=" + S.layer : "") + (S.view === "memory" && S.lo !== null ? "&ops=" + S.lo + "-" + S.hi : "");
    if (location.hash !== h) history.replaceState(null, "", h);
    document.body.dataset.view = S.view; document.body.dataset.ready = "1";
  }
  function fromHash() {
    const p = new URLSearchParams(location.hash.slice(1));
    if (VIEWS[p.get("view")]) S.view = p.get("view");
    if (D.phases[p.get("phase")]) S.phase = p.get("phase");
    S.q = p.get("q") || ""; S.copies = p.get("copies") === "1";
    if (/^\d+$/.test(p.get("layer") || "")) S.layer = Number(p.get("layer"));
    const r = /^(\d+)-(\d+)$/.exec(p.get("ops") || "");
    if (r && Number(r[1]) <= Number(r[2])) { S.lo = Number(r[1]); S.hi = Number(r[2]); }
    $("search").value = S.q; $("only-copies").checked = S.copies;
  }
  document.querySelectorAll("#views button").forEach((b) => b.addEventListener("click", () => { S.view = b.dataset.view; render(); }));
  document.querySelectorAll("#phases button").forEach((b) => b.addEventListener("click", () => { S.phase = b.dataset.phase; S.lo = S.hi = null; render(); }));
  $("search").addEventListener("input", (e) => { S.q = e.target.value.trim(); render(); });
  $("only-copies").addEventListener("change", (e) => { S.copies = e.target.checked; render(); });
  fromHash();
  render();
  const first = P().ops.find(matches);
  if (S.q && first) showOp(first);
})();
