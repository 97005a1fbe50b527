"""The IR report: one self-contained, interactive HTML file per model (no network).

Per phase: the dataflow grouped by layer (each op with its provider, numerics contract, buffers
with offsets and sizes), the rejected candidates of each op kind listed once, a memory timeline on
the phase's own scale with kernel scratch visible, the weights and the KV cache as views of their
own, copies and in-place hand-offs highlighted, search and filter, details on click. Template:
``reports/ir_report.html.j2``; script and style: ``reports/ir_report.{js,css}``, inlined.

Safety: the data reaches the page as one JSON document inside ``<script type="application/json">``
with ``<``, ``>`` and ``&`` escaped as ``\\u003c`` etc., and the script only ever sets
``textContent`` (never ``innerHTML``) from it, so a hostile tensor or model name stays text. The
same IR and plan give the same bytes (no date, sorted keys).

The URL fragment selects a state, so a headless browser can check a view without clicking:
``#view=dataflow&phase=decode&q=attn_q`` (views: dataflow, memory, weights, kv, providers).
"""
from __future__ import annotations

import json
from pathlib import Path

import jinja2

from bringup.core.atomic import write_text
from bringup.core.paths import REPORTS
from bringup.ir import kernel_maps as kernels

PHASES = ("prefill", "decode")


def _contract(m) -> dict:
    """The part of a kernel map a reader of the report needs: what the provider promises."""
    c = m.raw.get("contract", {})
    return {"description": m.raw.get("description", ""), "storage": c.get("storage", {}),
            "compute": c.get("compute", ""), "accumulation": c.get("accumulation", ""),
            "reduction_order": c.get("reduction_order", ""), "rounding": c.get("rounding", []),
            "formula": c.get("formula", ""), "source": c.get("source", ""),
            "sources": m.raw.get("impl", {}).get("sources", []), "isa": m.selection.get("isa", []),
            "status": m.selection.get("status", "")}


def _phase_data(ir: dict, ph: dict, rejsets: dict[str, int]) -> dict:
    """Ops, buffers and tensor placements of one phase, compact; ``rejsets`` interns the
    rejected-candidate lists (one entry per distinct list, shared by both phases)."""
    ops = []
    for op in ir["ops"]:
        rejected = [{"id": c["id"], "reasons": c["reasons"]} for c in op["selection"]["candidates"] if not c["accepted"]]
        key = json.dumps(rejected, sort_keys=True)
        rej = rejsets.setdefault(key, len(rejsets)) if rejected else None
        ops.append({"i": op["index"], "id": op["id"], "op": op["op"], "variant": op.get("variant"),
                    "layer": op.get("layer"), "provider": op["provider"], "rule": op["selection"]["rule"],
                    "rej": rej, "reads": sorted({**op["inputs"], **op["weights"]}.items()),
                    "writes": sorted(op["outputs"].items()), "state": sorted(op["state"].items()),
                    "dims": op["dims"], "params": op["params"], "scratch": op.get("scratch", {}),
                    "inplace": op.get("inplace", {}), "copy": op["op"] == "copy"})
    tensors = {n: {"kind": t["kind"], "dtype": t["dtype"], "shape": t["shape"], "bytes": t.get("bytes"),
                   **ph["tensors"].get(n, {})} for n, t in ir["tensors"].items() if t["kind"] != "weight"}
    buffers = [{**b, "scratch": ".scratch." in b["id"]} for b in ph["buffers"]]
    return {"n_tokens": ir["dims"]["n_tokens"], "logits": ir["logits"], "ops": ops, "buffers": buffers,
            "tensors": tensors, "aliases": ph["aliases"],
            "summary": {k: ph[k] for k in ("arena_bytes", "lower_bound_bytes", "ratio", "copy_ops", "kv_handoffs",
                                           "n_ops")}}


def report_data(irs: dict[str, dict], plan: dict, model_name: str = "", maps: dict | None = None) -> dict:
    """Everything the page shows, as one JSON-able dict (the page's single data source)."""
    maps = kernels.load_maps() if maps is None else maps
    rejsets: dict[str, int] = {}
    phases = {p: _phase_data(irs[p], plan["phases"][p], rejsets) for p in PHASES}
    chosen = sorted({op["provider"] for p in PHASES for op in irs[p]["ops"]})
    ir0 = irs["prefill"]
    weights = [{"name": n, "dtype": t["dtype"], "shape": t["shape"], "bytes": t["bytes"]}
               for n, t in sorted(ir0["tensors"].items()) if t["kind"] == "weight"]
    return {
        "model": model_name or ir0["architecture"], "architecture": ir0["architecture"], "circuit": ir0["circuit"],
        "target": ir0["target"], "values": [[k, ir0["dims"][k], ir0["values_source"].get(k, "")] for k in sorted(ir0["dims"])],
        "arena": plan["arena"], "state": _state(ir0, plan), "alignment": plan["alignment"],
        "weights": weights, "excluded": ir0["weights"]["excluded"],
        "providers": {pid: _contract(maps[pid]) for pid in chosen if pid in maps},
        "rejsets": [json.loads(k) for k, _ in sorted(rejsets.items(), key=lambda kv: kv[1])],
        "phases": phases,
    }


def _state(ir: dict, plan: dict) -> dict:
    """The plan's KV cache buffers, each with its dtype and how the attention op stores into it: a
    copy of the call's fp32 K/V rows, or a conversion (every copy and conversion is visible)."""
    dtype = {st["name"]: st["dtype"] for st in ir["state"]}
    writer = {name: op["provider"] for op in ir["ops"] for name in op["state"].values()}
    bufs = []
    for b in plan["state"]["buffers"]:
        dt, prov = dtype.get(b["name"], "?"), writer.get(b["name"], "?")
        store = (f"copy of the call's fp32 rows ({prov})" if dt == "F32" else
                 f"conversion fp32 -> {dt}, round to nearest even, on store ({prov}); read back widened exactly")
        bufs.append({**b, "dtype": dt, "store": store})
    return {**plan["state"], "buffers": bufs}


def _json_for_script(obj) -> str:
    # inside <script>, only "</" could end the element; escaping < > & covers it and HTML comments
    s = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render(irs: dict[str, dict], plan: dict, model_name: str = "", maps: dict | None = None) -> str:
    """The report's HTML text for both phases' IR and the memory plan (deterministic bytes)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(REPORTS)), autoescape=True,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    data = report_data(irs, plan, model_name, maps)
    return env.get_template("ir_report.html.j2").render(
        d=data, data_json=_json_for_script(data),
        script=(REPORTS / "ir_report.js").read_text(), style=(REPORTS / "ir_report.css").read_text())


def write(path: str | Path, irs: dict[str, dict], plan: dict, model_name: str = "") -> None:
    """Render and write the report atomically to ``path``."""
    write_text(path, render(irs, plan, model_name))
