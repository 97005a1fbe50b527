"""Alternatives when a run does not fit: each one change to the run or the model, evaluated by the
same ``evaluate``, with the bytes it saves and whether the run then fits; ranked.
"""
from __future__ import annotations

import dataclasses
import math

from bringup.formats import ggml as formats
from bringup.plan.memory.budget import Budget
from bringup.plan.memory.footprint import evaluate
from bringup.plan.memory.search import longest_context, most_sequences
from bringup.plan.memory.spec import KV_DTYPES, ModelSpec, RunParams


# A capped search answer is a lower bound: the note of its alternative says so.
_CAPPED_NOTE = " (at least: the search stopped at its cap)"

# Candidate formats for "a smaller quantization of the same model", smallest bits per weight
# last. Only 2-D weights are re-quantized (norms and biases stay F32, as llama-quantize does).
REQUANT_CANDIDATES = ("Q8_0", "Q6_K", "Q5_0", "Q4_K", "Q4_0", "Q3_K", "Q2_K")


def requantized(spec: ModelSpec, target: str) -> tuple[ModelSpec, int, int]:
    """``spec`` with every 2-D weight stored at more bytes per weight than ``target`` re-quantized.

    A tensor whose row (ne0) is not a whole number of ``target`` blocks keeps its format (counted
    in the second return value); the third is the number of tensors changed.
    """
    fmt = formats.by_name(target)
    bpw_t = fmt.block_bytes / fmt.block_elems
    out, kept, changed = [], 0, 0
    for w in spec.weights:
        src = formats.by_name(w.type_name)
        if len(w.shape) >= 2 and src.block_bytes / src.block_elems > bpw_t:
            if w.shape[0] % fmt.block_elems:
                kept += 1
                out.append(w)
                continue
            out.append(dataclasses.replace(w, type_name=target, bytes=fmt.tensor_bytes(w.shape)))
            changed += 1
        else:
            out.append(w)
    return dataclasses.replace(spec, weights=tuple(out)), kept, changed


def alternatives(spec: ModelSpec, p: RunParams, budget: Budget) -> list[dict]:
    """Ways to make the run fit, each with the bytes it saves, ranked.

    Ranking: alternatives that make the run fit first, then by bytes saved (most first), then by
    name. Each is evaluated by ``evaluate`` with one change applied. Returns
    [{rank, name, change, total_bytes, bytes_saved, fits, note}] (schema ``memory_model``
    ``alternatives``); empty when nothing applies.
    """
    base = evaluate(spec, p).total_bytes
    alts: list[dict] = []

    def add(name: str, change: str, total: int, note: str):
        alts.append({"name": name, "change": change, "total_bytes": total, "bytes_saved": base - total,
                     "fits": budget.fits(total), "note": note})

    order = list(KV_DTYPES)
    for d in order[order.index(p.kv_dtype) + 1:]:
        add(f"kv_{d}", f"KV cache {p.kv_dtype} -> {d}", evaluate(spec, dataclasses.replace(p, kv_dtype=d)).total_bytes,
            "needs attention kernels that read this KV dtype")
    lc = longest_context(spec, p, budget)
    if lc["ctx"] is not None and lc["ctx"] < p.ctx:
        add("shorter_context", f"context {p.ctx} -> {lc['ctx']}", lc["total_bytes"],
            "the longest context that fits at this many sequences"
            + (_CAPPED_NOTE if lc["capped"] else ""))
    if p.seqs > 1:
        ms = most_sequences(spec, p, budget)
        if ms["seqs"] is not None and ms["seqs"] < p.seqs:
            add("fewer_sequences", f"sequences {p.seqs} -> {ms['seqs']}", ms["total_bytes"],
                "the most sequences that fit at this context"
                + (_CAPPED_NOTE if ms["capped"] else ""))
    if not p.weights_mapped:
        add("mapped_weights", "count weights as mapped, evictable page cache",
            evaluate(spec, dataclasses.replace(p, weights_mapped=True)).total_bytes,
            "the BUMP is already mmap'd read-only; under pressure its pages are dropped and re-read "
            "(major page faults, slower decode)")
    if spec.kv_layers and not spec.kv_ring_buffer and any(L.window for L in spec.kv_layers):
        add("ring_buffer_window_layers", "sliding-window layers keep only their window",
            evaluate(dataclasses.replace(spec, kv_ring_buffer=True), p).total_bytes,
            "needs a ring-buffered KV layout in the runtime and attention kernel")
    cur_bpw = _weights_bpw(spec)
    for t in REQUANT_CANDIDATES:
        f = formats.by_name(t)
        if f.block_bytes / f.block_elems >= cur_bpw:
            continue
        s2, kept, changed = requantized(spec, t)
        if changed == 0:
            continue
        add(f"requantize_{t.lower()}", f"re-quantize 2-D weights to {t}", evaluate(s2, p).total_bytes,
            f"{changed} tensors re-quantized, {kept} kept (row not a multiple of {f.block_elems}); "
            "needs the checkpoint re-quantized and kernels for the format; quality not checked")
    alts.sort(key=lambda a: (not a["fits"], -a["bytes_saved"], a["name"]))
    for i, a in enumerate(alts, 1):
        a["rank"] = i
    return alts


def _weights_bpw(spec: ModelSpec) -> float:
    """Mean bytes per weight of the 2-D weights (the ones a re-quantization changes)."""
    n = b = 0
    for w in spec.weights:
        if len(w.shape) >= 2:
            n += math.prod(w.shape)
            b += w.bytes
    return b / n if n else 0.0
