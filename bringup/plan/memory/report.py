"""The memory model's outputs: ``memory_model.json`` (schema ``memory_model``, canonical JSON) for
one query, and the same as a readable Markdown page (tables built with pandas ``to_markdown``).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable

import pandas as pd

from bringup.core.schemas import validate
from bringup.plan.memory.alternatives import alternatives
from bringup.plan.memory.budget import Budget
from bringup.plan.memory.experts import experts_record
from bringup.plan.memory.footprint import evaluate
from bringup.plan.memory.search import longest_context, most_sequences, smallest_budget
from bringup.plan.memory.spec import SCHEMA_VERSION, ModelSpec, RunParams


def _weights_by_role(spec: ModelSpec) -> list[dict]:
    groups: dict[str, dict] = {}
    for w in spec.weights:
        g = groups.setdefault(w.role, {"node": w.role, "layers": set(), "types": set(), "tensors": 0, "bytes": 0})
        if w.layer is not None:
            g["layers"].add(w.layer)
        g["types"].add(w.type_name)
        g["tensors"] += 1
        g["bytes"] += w.bytes
    return [{"node": g["node"], "layers": len(g["layers"]), "types": sorted(g["types"]), "tensors": g["tensors"],
             "bytes": g["bytes"]} for g in sorted(groups.values(), key=lambda g: (-g["bytes"], g["node"]))]


def summed_nodes(nodes: Iterable[dict]) -> list[dict]:
    """Op nodes summed over the layers that instantiate them (scratch: the widest instance)."""
    out: dict[str, dict] = {}
    for n in nodes:
        g = out.setdefault(n["node"], {"node": n["node"], "op": n["op"], "layers": 0, "providers": set(),
                                       "weight_bytes": 0, "activation_bytes": 0, "scratch_bytes": 0,
                                       "state_bytes": 0})
        g["layers"] += n["layer"] is not None
        g["providers"].add(n["provider"])
        for k in ("weight_bytes", "activation_bytes", "state_bytes"):
            g[k] += n[k]
        g["scratch_bytes"] = max(g["scratch_bytes"], n["scratch_bytes"])
    return [dict(g, providers=sorted(g["providers"])) for g in out.values()]


def build_report(spec: ModelSpec, p: RunParams, budget: Budget | None, *, per_node: bool = False,
                 inputs: dict | None = None, headroom_for_min: float | None = None) -> dict:
    """The memory_model.json document (schema ``memory_model``) for one query: the footprint of
    ``spec`` at ``p``, and with a ``budget`` the verdict, the inverse queries and (when it does not
    fit) the alternatives. ``per_node`` adds every op node per layer and every weight tensor;
    ``inputs`` names the input hashes; ``headroom_for_min`` is the headroom the smallest-budget
    query assumes without a budget (default 0). Raises BringupError when the document breaks the
    schema or a search finds the footprint not monotonic."""
    fp = evaluate(spec, p)
    rep: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "model": {"architecture": spec.architecture, "name": spec.name, "header_sha256": spec.header_sha256,
                  "tensor_count": len(spec.weights), "hparams": spec.hparams, "hparam_sources": spec.sources},
        "inputs": inputs or {},
        "params": dataclasses.asdict(p),
        "components": fp.components,
        "total_bytes": fp.total_bytes,
        "complete": fp.complete,
        "missing": fp.missing,
        "estimated": fp.estimated,
        "kv_cache": {"layout": "ring-buffered window layers" if spec.kv_ring_buffer else "full-length caches",
                     "layout_source": spec.kv_layout_source, "source": spec.kv_source, "layers": fp.kv_layers},
        "weights": {"by_node": _weights_by_role(spec),
                    "by_type": {t: sum(w.bytes for w in spec.weights if w.type_name == t)
                                for t in sorted({w.type_name for w in spec.weights})}},
    }
    if spec.arena is not None and spec.arena.nodes:
        rep["nodes"] = {"source": f"{spec.arena.nodes_source} at C={spec.arena.n_ctx}, T={spec.arena.chunk}; prefill "
                                  "activations, widest scratch of the two phases, each weight at its first use",
                        "summed": summed_nodes(spec.arena.nodes)}
        if per_node:
            rep["nodes"]["per_layer"] = list(spec.arena.nodes)
    else:
        rep["nodes"] = None
    if per_node:
        rep["weights"]["tensors"] = [{"name": w.name, "layer": w.layer, "role": w.role, "type": w.type_name,
                                      "shape": list(w.shape), "bytes": w.bytes} for w in spec.weights]
    h = budget.headroom_fraction if budget else (headroom_for_min if headroom_for_min is not None else 0.0)
    queries: dict[str, Any] = {"smallest_budget": smallest_budget(spec, p, h)}
    if budget is not None:
        fits = budget.fits(fp.total_bytes)
        rep["budget"] = {"source": budget.source, "budget_bytes": budget.budget_bytes,
                         "headroom_fraction": budget.headroom_fraction, "headroom_source": budget.headroom_source,
                         "usable_bytes": budget.usable_bytes, "fits": fits,
                         "margin_bytes": budget.usable_bytes - fp.total_bytes,
                         "verdict": ("fits" if fits and fp.complete else
                                     "fits_lower_bound_only" if fits else "does_not_fit")}
        queries["longest_context"] = longest_context(spec, p, budget)
        queries["most_sequences"] = most_sequences(spec, p, budget)
        rep["alternatives"] = [] if fits else alternatives(spec, p, budget)
    else:
        rep["budget"] = None
        rep["alternatives"] = []
    rep["queries"] = queries
    rep["experts"] = experts_record(spec, p, budget)
    validate(rep, "memory_model", "memory_model.json")
    return rep


def _mib(b: int | None) -> str:
    return "" if b is None else f"{b / 2**20:.2f}"


def _md_table(df) -> str:
    """``df.to_markdown`` with cell text made inert: pipes escaped, newlines flattened."""
    safe = df.copy()
    for col in safe.columns:
        if safe[col].dtype == object or str(safe[col].dtype).startswith("str"):
            safe[col] = safe[col].map(lambda v: v.replace("|", "\\|").replace("\n", " ") if isinstance(v, str) else v)
    return safe.to_markdown(index=False)


def _search_answer(value: int | None, capped: bool) -> str:
    """A search answer as the table shows it: a capped search gives a lower bound, not the boundary."""
    return f">= {value} (search cap)" if capped else str(value)


def sections(rep: dict) -> list[dict[str, Any]]:
    """The readable page of a memory_model.json document as data, one section per heading, each
    ``{"title": str, "text": [plain sentences], "table": pandas.DataFrame | None}`` (the first
    section is the page's title). :func:`render_markdown` writes them as Markdown; the
    certification page writes the same sections as HTML tables (``DataFrame.to_html``)."""
    m, p = rep["model"], rep["params"]
    out = [{"title": f"Memory model: {m['architecture']} ({m['tensor_count']} tensors)", "table": None,
            "text": [f"Header SHA-256 {m['header_sha256']}. Context C={p['ctx']}, sequences S={p['seqs']}, "
                     f"KV dtype {p['kv_dtype']}, prefill chunk T={p['chunk']}"
                     + (", weights mapped (not counted)" if p["weights_mapped"] else "") + "."]}]
    comp = pd.DataFrame([{"component": c["name"], "bytes": c["bytes"], "MiB": _mib(c["bytes"]),
                          "status": c["status"] + ("" if c["counted"] else " (not counted)"),
                          "source": c["source"]} for c in rep["components"]])
    total = pd.DataFrame([{"component": "total", "bytes": rep["total_bytes"], "MiB": _mib(rep["total_bytes"]),
                           "status": "complete" if rep["complete"] else "INCOMPLETE: " + ", ".join(rep["missing"]),
                           "source": ("estimated: " + ", ".join(rep["estimated"])) if rep["estimated"] else ""}])
    out.append({"title": "Footprint", "text": [], "table": pd.concat([comp, total], ignore_index=True)})
    b = rep.get("budget")
    if b:
        out.append({"title": "Budget", "table": None, "text": [
            f"{b['source']}",
            f"Usable {b['usable_bytes']} bytes ({_mib(b['usable_bytes'])} MiB) = budget {b['budget_bytes']} "
            f"x (1 - headroom {b['headroom_fraction']}). Verdict: {b['verdict']} (margin {b['margin_bytes']} bytes)."]})
    q = rep["queries"]
    rows = [{"query": "smallest budget for (C, S)", "answer": f"{q['smallest_budget']['budget_bytes']} bytes "
                                                              f"({_mib(q['smallest_budget']['budget_bytes'])} MiB)"}]
    if "longest_context" in q:
        lc, ms = q["longest_context"], q["most_sequences"]
        rows.append({"query": f"longest context at S={p['seqs']}", "answer": _search_answer(lc["ctx"], lc["capped"])})
        rows.append({"query": f"most sequences at C={p['ctx']}", "answer": _search_answer(ms["seqs"], ms["capped"])})
    out.append({"title": "Queries", "text": [], "table": pd.DataFrame(rows)})
    if rep["alternatives"]:
        alt = pd.DataFrame([{"rank": a["rank"], "alternative": a["change"], "bytes saved": a["bytes_saved"],
                             "MiB saved": _mib(a["bytes_saved"]), "fits": "yes" if a["fits"] else "no",
                             "note": a["note"]} for a in rep["alternatives"]])
        out.append({"title": "Alternatives (does not fit)", "text": [], "table": alt})
    kv = rep["kv_cache"]
    if kv["layers"]:
        df = pd.DataFrame(kv["layers"])
        df["kind"] = df["window"].map(lambda w: "global" if pd.isna(w) else f"window {int(w)}")
        g = df.groupby("kind", sort=True).agg(layers=("layer", "count"), rows=("rows", "max"),
                                              k_bytes=("k_bytes", "sum"), v_bytes=("v_bytes", "sum")).reset_index()
        out.append({"title": "KV cache", "text": [f"{kv['layout']} ({kv['layout_source']})."], "table": g})
    if rep.get("nodes"):
        nd = pd.DataFrame([{"node": n["node"], "op": n["op"], "layers": n["layers"],
                            "provider": " ".join(n["providers"]), "weight bytes": n["weight_bytes"],
                            "activation bytes": n["activation_bytes"], "scratch bytes": n["scratch_bytes"],
                            "KV bytes": n["state_bytes"]} for n in rep["nodes"]["summed"]])
        out.append({"title": "Op nodes (summed over layers)", "text": [rep["nodes"]["source"] + "."], "table": nd})
    ex = rep.get("experts")
    if ex:
        fit = ex["experts_resident_per_layer"]
        out.append({"title": "Routed experts", "table": None, "text": [
            f"{ex['n_expert']} experts per layer in {ex['layers']} layers, {ex['n_expert_used']} per token: "
            f"{ex['bytes']} bytes ({_mib(ex['bytes'])} MiB), {ex['expert_bytes']} bytes per expert per layer; "
            f"a decode token reads {ex['decode_token_bytes']} bytes of them.",
            f"Mapped: {ex['mapped']}.", f"Resident: {ex['resident']}.", f"Counted: {ex['counted']}."]
            + ([] if fit is None else [f"The budget holds {fit} of {ex['n_expert']} experts per layer resident beside "
                                       "everything else; a token selecting another reads it back from the file."])})
    w = pd.DataFrame([{"node": r["node"], "layers": r["layers"], "types": " ".join(r["types"]),
                       "tensors": r["tensors"], "bytes": r["bytes"], "MiB": _mib(r["bytes"])}
                      for r in rep["weights"]["by_node"]])
    out.append({"title": "Weights by node (summed over layers)", "text": [], "table": w})
    return out


def render_markdown(rep: dict) -> str:
    """A readable Markdown page of a memory_model.json document (:func:`sections`; tables by pandas)."""
    parts = []
    for i, sec in enumerate(sections(rep)):
        parts += [("# " if i == 0 else "## ") + sec["title"], ""]
        for t in sec["text"]:
            parts += [t, ""]
        if sec["table"] is not None:
            parts += [_md_table(sec["table"]), ""]
    return "\n".join(parts)
