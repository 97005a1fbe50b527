"""The footprint evaluator: the bytes of a model run, component by component.

The footprint is the sum of six components (bytes, integers throughout):

========================  ===============================================================
``weights``               every GGUF tensor as stored: ``formats`` row bytes x rows (blocks
                          and scales included). Source: the GGUF tensor-info table.
``load_copies``           bytes the runtime copies at load time, from ``LOAD_COPY_RULES``
                          (empty today: the runtime uses every weight in place from the mmap).
``activations``           the planner's arena, max over prefill and decode, planned from the
                          header in-process (IR compiled + planned) or read from a
                          ``memory_plan.json``, + the logits row; without a plan an upper-bound
                          estimate from the hyperparameters, marked ``estimate``.
``workspace``             kernel scratch per kernel family at the widest run: inside the arena
                          when planned (listed, not added); otherwise an estimate, marked so.
``kv_cache``              K and V caches: S x sum over layers of rows x row bytes for the KV
                          dtype; a sliding-window layer holds min(C, window + T - 1) rows when
                          the KV layout ring-buffers it, C rows when it masks a full-length cache.
``runtime_overheads``     code, stacks, tokenizer tables, allocator: calibrated from a measured
                          run of the native CLI (``--calibration``); absent without one.
========================  ===============================================================

A component whose input is missing sizes nothing: it is reported with ``status: "absent"`` and the
whole footprint with ``complete: false``; nothing is filled in by a default.

Formats and formulas: GGML block sizes from ``config/ggml_formats.json`` (ggml-common.h); KV cache
layout from ``docs/ir_format.md`` (token-major ``[n_ctx][n_head_kv][head_dim]`` per layer).
The design is in ``docs/memory_model.md``.
"""
from __future__ import annotations

import dataclasses
import fnmatch
from dataclasses import dataclass, field
from typing import Iterable

from bringup.core.errors import BringupError
from bringup.formats import ggml as formats
from bringup.plan.memory.spec import KV_DTYPES, KVLayer, ModelSpec, RunParams, Weight


def kv_row_bytes(n_head_kv: int, head_dim: int, kv_dtype: str) -> int:
    """Bytes of one position of one layer's K (or V) cache: n_head_kv rows of head_dim elements.

    Each head's vector is blocked on its own (q8_0: 34-byte blocks of 32), so head_dim must be a
    whole number of blocks. Raises BringupError otherwise.
    """
    fmt = formats.by_name(KV_DTYPES[kv_dtype])
    return n_head_kv * fmt.row_bytes(head_dim)


def kv_layer_rows(layer: KVLayer, ctx: int, ring_buffer: bool, chunk: int) -> int:
    """Positions a layer's cache holds per sequence.

    Global layers and masked full-length caches: C. A ring-buffered sliding-window layer:
    min(C, window + chunk - 1), because a prefill chunk of T tokens is written before it is
    attended, and its first query still needs the window - 1 positions before it (the same bound
    llama.cpp uses: n_swa + n_ubatch, src/llama-kv-cache-iswa.cpp). Decode (T = 1) needs the window.
    """
    if layer.window is not None and ring_buffer:
        return min(ctx, layer.window + chunk - 1)
    return ctx


def kv_cache_bytes(layers: Iterable[KVLayer], ctx: int, seqs: int, kv_dtype: str,
                   ring_buffer: bool = True, chunk: int = 1) -> int:
    """Total K+V cache bytes: seqs x sum over layers of rows x (K row + V row) bytes.

    ``chunk`` is the prefill chunk T (it widens ring-buffered window layers, see kv_layer_rows).
    """
    per_seq = 0
    for L in layers:
        rows = kv_layer_rows(L, ctx, ring_buffer, chunk)
        per_seq += rows * (kv_row_bytes(L.n_head_kv, L.head_dim_k, kv_dtype)
                           + kv_row_bytes(L.n_head_kv, L.head_dim_v, kv_dtype))
    return seqs * per_seq


def activation_estimate(hp: dict[str, int | None], tokens: int) -> int:
    """Upper bound of the activation arena when no plan exists (bytes, f32 activations).

    Every distinct activation of one transformer block at ``tokens`` tokens, without reuse:
    3 x n_embd (block input, normed, block output) + Q, K, V, attention output
    (n_head*head_dim + n_head_kv*(head_dim + head_dim_v) + n_head*head_dim_v) + 3 x n_ff (gate,
    up, product), plus one row of logits (n_vocab) and the token ids (I32). Raises BringupError if a
    dimension it needs is absent.
    """
    need = ["n_embd", "n_head", "n_head_kv", "head_dim", "head_dim_v", "n_ff", "n_vocab"]
    missing = [k for k in need if hp.get(k) is None]
    if missing:
        raise BringupError(f"activation estimate needs {', '.join(missing)}")
    per_tok = (3 * hp["n_embd"] + hp["n_head"] * hp["head_dim"] + hp["n_head_kv"] * (hp["head_dim"] + hp["head_dim_v"])
               + hp["n_head"] * hp["head_dim_v"] + 3 * hp["n_ff"])
    return 4 * tokens * per_tok + 4 * hp["n_vocab"] + 4 * tokens


def attention_scratch_estimate(hp: dict[str, int | None], tokens: int, ctx: int) -> int:
    """Scratch bytes of a non-fused attention kernel: one f32 score matrix [n_head][tokens][ctx].
    Raises BringupError when n_head is absent."""
    if hp.get("n_head") is None:
        raise BringupError("attention scratch estimate needs n_head")
    return 4 * hp["n_head"] * tokens * ctx


def load_copy_bytes(weights: Iterable[Weight], rules: Iterable[dict]) -> tuple[int, list[dict]]:
    """Bytes of load-time copies: for each weight matched by a rule, the copy format's bytes.

    A weight matched by two rules is an error (a copy is made once). Returns (bytes, per-copy rows).
    """
    rows = []
    total = 0
    rules = list(rules)
    for w in weights:
        hits = [r for r in rules if fnmatch.fnmatchcase(w.name, r["tensor_glob"]) and w.type_name in r["types"]]
        if len(hits) > 1:
            raise BringupError(f"weight {w.name} matches {len(hits)} load-copy rules: {[r['name'] for r in hits]}")
        if hits:
            b = formats.by_name(hits[0]["copy_as"]).tensor_bytes(w.shape)
            rows.append({"tensor": w.name, "rule": hits[0]["name"], "bytes": b})
            total += b
    return total, rows


@dataclass
class Footprint:
    """The evaluator's answer for one RunParams: components in a fixed order and their total.

    ``total_bytes`` sums the components that count against the budget (weights are left out when
    ``weights_mapped``). ``complete`` is False when a component is absent.
    """
    params: RunParams
    components: list[dict]
    total_bytes: int
    complete: bool
    missing: list[str]
    estimated: list[str]
    kv_layers: list[dict] = field(default_factory=list)


def _experts_note(spec: ModelSpec) -> str:
    """For a mixture-of-experts model, what of the weights are routed experts and what a token
    touches: every expert is mapped and counted in ``weights`` (any token may select any expert,
    so a budget that keeps weights resident must hold them all); one decode token reads
    n_expert_used / n_expert of them. '' for a dense model."""
    n_expert, n_used = spec.hparams.get("n_expert"), spec.hparams.get("n_expert_used")
    experts = sum(w.bytes for w in spec.weights if w.role.endswith("_exps"))
    if not n_expert or not n_used or not experts:
        return ""
    return (f"; of which {experts} bytes are routed experts ({n_expert} per layer, every one mapped and counted; "
            f"a decode token reads {n_used} of them per layer, {experts * n_used // n_expert} bytes)")


def _weight_components(spec: ModelSpec, p: RunParams) -> list[dict]:
    """The weights (not counted when mapped: evictable page cache) and the load-time copies."""
    wbytes = sum(w.bytes for w in spec.weights)
    cbytes, _ = load_copy_bytes(spec.weights, spec.load_copy_rules)
    return [{"name": "weights", "bytes": wbytes, "status": "sized", "counted": not p.weights_mapped,
             "source": f"GGUF tensor infos: {len(spec.weights)} tensors, bytes per config/ggml_formats.json"
                       + ("; mapped: evictable page cache, not counted" if p.weights_mapped else "")
                       + _experts_note(spec)},
            {"name": "load_copies", "bytes": cbytes, "status": "sized", "counted": True,
             "source": f"load-copy rule table ({len(spec.load_copy_rules)} rules)"}]


def _planned_activations(spec: ModelSpec, p: RunParams) -> list[dict]:
    """Activations and workspace from the planner's arena (sized at its own C and T, an estimate
    at others) plus the logits row the runtime holds."""
    hp, arena = spec.hparams, spec.arena
    if hp.get("n_vocab") is None:
        acts = {"name": "activations", "bytes": 0, "status": "absent", "counted": True,
                "source": "absent: n_vocab unknown (sizes the logits buffer beside the arena)"}
    else:
        same_ctx = arena.n_ctx is None or arena.n_ctx == p.ctx
        same_chunk = arena.chunk is None or arena.chunk == p.chunk
        note = "" if same_ctx and same_chunk else (
            f"; planned at C={arena.n_ctx}, T={arena.chunk}, used for C={p.ctx}, T={p.chunk}"
            + (" (an upper bound: kernel scratch grows with C)" if (arena.n_ctx or 0) >= p.ctx
               and same_chunk else ""))
        acts = {"name": "activations", "bytes": arena.arena_bytes + 4 * hp["n_vocab"],
                "status": "sized" if same_ctx and same_chunk else "estimate", "counted": True,
                "source": arena.source + f" + the logits row the runtime holds "
                                         f"(n_vocab {hp['n_vocab']} x 4){note}"}
    ws = sum(arena.scratch_by_family.values())
    return [acts, {"name": "workspace", "bytes": 0, "status": "sized", "counted": True,
                   "source": f"inside the arena: widest scratch per kernel family {arena.scratch_by_family} "
                             f"({ws} bytes) is planned in the activation arena"}]


def _estimated_activations(spec: ModelSpec, p: RunParams) -> list[dict]:
    """Activations and attention workspace estimated from the hyper-parameters (no memory plan);
    absent, with the reason, when a hyper-parameter they need is unknown."""
    hp, chunk = spec.hparams, p.chunk
    comps = []
    try:
        comps.append({"name": "activations", "bytes": activation_estimate(hp, chunk), "status": "estimate",
                      "counted": True,
                      "source": f"estimate, no memory plan ({spec.no_plan_reason}): all activations of one "
                                f"block at T={chunk} tokens, f32, no reuse, + one logits row "
                                "(bringup.plan.memory.footprint.activation_estimate)"})
    except BringupError as e:
        comps.append({"name": "activations", "bytes": 0, "status": "absent", "counted": True,
                      "source": f"absent: {e}"})
    try:
        comps.append({"name": "workspace", "bytes": attention_scratch_estimate(hp, chunk, p.ctx),
                      "status": "estimate", "counted": True,
                      "source": f"estimate, no memory plan: attention family, f32 scores "
                                f"[n_head][T={chunk}][C={p.ctx}] of a non-fused kernel"})
    except BringupError as e:
        comps.append({"name": "workspace", "bytes": 0, "status": "absent", "counted": True,
                      "source": f"absent: {e}"})
    return comps


def _kv_cache(spec: ModelSpec, p: RunParams) -> tuple[dict, list[dict]]:
    """The KV cache component and its per-layer rows (rows, K and V bytes at C, S and the dtype)."""
    if spec.kv_layers is None:
        return {"name": "kv_cache", "bytes": 0, "status": "absent", "counted": True, "source": spec.kv_source}, []
    kvb = kv_cache_bytes(spec.kv_layers, p.ctx, p.seqs, p.kv_dtype, spec.kv_ring_buffer, p.chunk)
    has_window = any(L.window for L in spec.kv_layers)
    layout = (("ring-buffered (window + chunk - 1 rows)" if spec.kv_ring_buffer else "full-length")
              + f" window layers ({spec.kv_layout_source}); ") if has_window else ""
    comp = {"name": "kv_cache", "bytes": kvb, "status": "sized", "counted": True,
            "source": f"{spec.kv_source}; {layout}C={p.ctx}, S={p.seqs}, {p.kv_dtype}"}
    kv_rows = []
    for L in spec.kv_layers:
        rows = kv_layer_rows(L, p.ctx, spec.kv_ring_buffer, p.chunk)
        kb = rows * kv_row_bytes(L.n_head_kv, L.head_dim_k, p.kv_dtype) * p.seqs
        vb = rows * kv_row_bytes(L.n_head_kv, L.head_dim_v, p.kv_dtype) * p.seqs
        kv_rows.append({"layer": L.layer, "window": L.window, "rows": rows, "k_bytes": kb, "v_bytes": vb})
    return comp, kv_rows


def _runtime_overheads(spec: ModelSpec) -> dict:
    if spec.overheads is None:
        return {"name": "runtime_overheads", "bytes": 0, "status": "absent", "counted": True,
                "source": spec.overheads_source}
    return {"name": "runtime_overheads", "bytes": sum(o.bytes for o in spec.overheads), "status": "sized",
            "counted": True, "source": spec.overheads_source,
            "items": [dataclasses.asdict(o) for o in spec.overheads]}


def evaluate(spec: ModelSpec, p: RunParams) -> Footprint:
    """Footprint of ``spec`` at run parameters ``p``; the one function every query goes through.

    Components in the fixed order weights, load_copies, activations, workspace, kv_cache,
    runtime_overheads, each {name, bytes, status (sized | estimate | absent), counted, source}.
    Raises BringupError when a KV row is not a whole number of blocks of the KV dtype.
    """
    comps = _weight_components(spec, p)
    comps += _planned_activations(spec, p) if spec.arena is not None else _estimated_activations(spec, p)
    kv, kv_rows = _kv_cache(spec, p)
    comps += [kv, _runtime_overheads(spec)]
    total = sum(c["bytes"] for c in comps if c["counted"])
    missing = [c["name"] for c in comps if c["status"] == "absent"]
    estimated = [c["name"] for c in comps if c["status"] == "estimate"]
    return Footprint(p, comps, total, not missing, missing, estimated, kv_rows)
