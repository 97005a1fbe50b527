// The IR report's views (bringup/plan/ir_report.py). Data: the JSON in #ir-data. Every string
// from the data is set with textContent, never innerHTML: model and tensor names stay text.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("ir-data").textContent);
  const S = { view: "dataflow", phase: "prefill", q: "", copies: false };
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
      ["ISA", (c.isa || []).join(", ") || "portable"], ["status", c.status || ""]]);
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
  function memory() {
    const ph = P(), arena = Math.max(ph.summary.arena_bytes, 1), n = ph.summary.n_ops;
    const W = 900, H = 360, L = 60, B = 30, T = 12;
    const s = svg("svg", { width: W + L + 10, height: H + B + T + 10, id: "timeline", viewBox: "0 0 " + (W + L + 10) + " " + (H + B + T + 10) });
    const x = (i) => L + (i / Math.max(n, 1)) * W, y = (b) => T + H - (b / arena) * H;
    s.append(svg("line", { x1: L, y1: T + H, x2: L + W, y2: T + H, stroke: "#444" }), svg("line", { x1: L, y1: T, x2: L, y2: T + H, stroke: "#444" }));
    for (let k = 0; k <= 4; k++) {
      const t = svg("text", { x: 2, y: y((arena * k) / 4) + 4 }); t.textContent = human(Math.round((arena * k) / 4)); s.append(t);
    }
    const xl = svg("text", { x: L + W / 2 - 40, y: T + H + 20 }); xl.textContent = "op index (0.." + (n - 1) + ")"; s.append(xl);
    const q = S.q.toLowerCase();
    for (const b of ph.buffers) {
      const r = svg("rect", { class: "buf " + (b.scratch ? "s" : "t") + (q && b.tensors.some((t) => t.toLowerCase().includes(q)) ? " hl" : ""),
        x: x(b.first), y: y(b.offset + b.size), width: Math.max(x(b.last + 1) - x(b.first), 1), height: Math.max((b.size / arena) * H, 1) });
      const tip = svg("title", {}); tip.textContent = b.id + ": " + human(b.size) + " @ " + human(b.offset) + ", ops " + b.first + ".." + b.last; r.append(tip);
      r.addEventListener("click", () => detail(b.id, table(["", ""], [["offset", human(b.offset) + " (" + b.offset + " B)"], ["size", human(b.size) + " (" + b.size + " B)"],
        ["live", "ops " + b.first + ".." + b.last], ["kind", b.scratch ? "kernel scratch" : "tensor"], ["tensors", b.tensors.join(", ")]])));
      s.append(r);
    }
    const lb = ph.summary.lower_bound_bytes;
    s.append(svg("line", { x1: L, x2: L + W, y1: y(lb), y2: y(lb), stroke: "#2e9d5a", "stroke-dasharray": "4 3" }));
    $("status").textContent = ph.buffers.length + " buffers, arena " + human(ph.summary.arena_bytes);
    return [el("p", { class: "legend" }, el("span", {}, el("i", { class: "sw", style: "background:#4a78b5" }), "tensor"),
      el("span", {}, el("i", { class: "sw", style: "background:#e08a2c" }), "kernel scratch"),
      el("span", {}, el("i", { class: "sw", style: "background:#2e9d5a" }), "lower bound " + human(lb)),
      el("span", {}, S.phase + " arena " + human(ph.summary.arena_bytes) + " (this phase's own scale); shared arena " + human(D.arena.bytes))), s];
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
  function providers() {
    const used = {};
    for (const o of P().ops) used[o.provider] = (used[o.provider] || 0) + 1;
    const kinds = new Map();
    for (const o of P().ops) if (o.rej !== null) { const k = o.op + " → " + o.provider; if (!kinds.has(k)) kinds.set(k, o.rej); }
    $("status").textContent = Object.keys(used).length + " providers";
    return [el("h3", {}, "chosen providers (" + S.phase + ")"),
      table(["provider", "ops", "ISA", "status", "accumulation"], Object.entries(used).sort().map(([p, n]) => el("tr", { class: "prov", on: { click: () => detail(p, contractTable(D.providers[p] || {})) } },
        el("td", {}, el("code", {}, p)), el("td", { class: "num" }, n), el("td", {}, ((D.providers[p] || {}).isa || []).join(", ") || "portable"),
        el("td", {}, (D.providers[p] || {}).status || ""), el("td", {}, (D.providers[p] || {}).accumulation || "")))),
      el("h3", {}, "rejected candidates, once per op kind"),
      ...[...kinds].map(([k, r]) => el("details", {}, el("summary", {}, k + ": " + D.rejsets[r].length + " rejected"),
        table(["candidate", "why not"], D.rejsets[r].map((c) => [c.id, c.reasons.join("; ")]))))];
  }
  const VIEWS = { dataflow, memory, weights, kv: kvcache, providers };

  function render() {
    document.querySelectorAll("#views button").forEach((b) => b.classList.toggle("on", b.dataset.view === S.view));
    document.querySelectorAll("#phases button").forEach((b) => b.classList.toggle("on", b.dataset.phase === S.phase));
    $("view").replaceChildren(...(VIEWS[S.view] || dataflow)());
    const h = "#view=" + S.view + "&phase=" + S.phase + (S.q ? "&q=" + encodeURIComponent(S.q) : "") + (S.copies ? "&copies=1" : "");
    if (location.hash !== h) history.replaceState(null, "", h);
    document.body.dataset.view = S.view; document.body.dataset.ready = "1";
  }
  function fromHash() {
    const p = new URLSearchParams(location.hash.slice(1));
    if (VIEWS[p.get("view")]) S.view = p.get("view");
    if (D.phases[p.get("phase")]) S.phase = p.get("phase");
    S.q = p.get("q") || ""; S.copies = p.get("copies") === "1";
    $("search").value = S.q; $("only-copies").checked = S.copies;
  }
  document.querySelectorAll("#views button").forEach((b) => b.addEventListener("click", () => { S.view = b.dataset.view; render(); }));
  document.querySelectorAll("#phases button").forEach((b) => b.addEventListener("click", () => { S.phase = b.dataset.phase; render(); }));
  $("search").addEventListener("input", (e) => { S.q = e.target.value.trim(); render(); });
  $("only-copies").addEventListener("change", (e) => { S.copies = e.target.checked; render(); });
  fromHash();
  render();
  const first = P().ops.find(matches);
  if (S.q && first) showOp(first);
})();
