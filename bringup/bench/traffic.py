"""Bytes a decode step reads from memory, from the decode IR (``ir/ir_decode.json``): the memory
model of the bench's effective-bandwidth figure.

One decode step (one token at position ``pos``, ``pos`` tokens already cached) reads:
- every weight tensor an op of the decode IR names, once (a tied head reads ``tok_embd`` whole),
  except the embedding lookup, which reads one row (``bytes / n_vocab``) of its table;
- for every attention op, the K and V cache rows it attends over: ``min(pos + 1, window)``
  positions (``window`` = the op's ``params.window``; none or 0 = full causal) times the state
  tensor's ``bytes_per_position`` (the KV cache's dtype, F32 in our runtime).
- for a routed feed-forward (``moe_ffn``: mixture of experts), the stacked expert tensors'
  ``n_used / n_expert`` share: a token reads only its selected experts' rows (csrc/kernels/bu_moe.c
  never touches the others), so the count is the active experts', not every expert's
  (:func:`moe_note` says so in the bench's caveats);
Activations (a few KiB per token) and the logits row are not counted: the figure is a lower bound
on the traffic, so the share of DRAM bandwidth it gives is a lower bound too.

``bytes_per_position`` of llama.cpp's F16 cache is half of our F32 one; :func:`decode_bytes`
takes ``kv_bytes_scale`` for that.
"""
from __future__ import annotations

from typing import Any

from bringup.core.errors import BringupError
from bringup.ir import block


def weight_bytes(ir: dict[str, Any]) -> dict[str, int]:
    """``{"weights": bytes of every weight read in full, "embed_row": bytes of the embedding row,
    "tensors": how many weight tensors are counted}`` for one decode step of ``ir`` (an
    ir_decode.json document). Raises BringupError when an op names a weight the tensor table lacks."""
    tensors = ir["tensors"]
    full: set[str] = set()
    active: dict[str, int] = {}   # stacked expert tensor -> bytes of the experts one token reads
    row = 0
    for op in block.expand(ir):
        for name in op.get("weights", {}).values():
            t = tensors.get(name)
            if t is None or t.get("kind") != "weight":
                raise BringupError(f"decode IR op {op['id']} names weight {name!r}, which is not in its tensor table")
            if op["op"] == "embed":
                row = max(row, t["bytes"] // t["shape"][0])
            elif op["op"] == "moe_ffn":
                n_expert, n_used = op["dims"]["n_expert"], op["dims"]["n_used"]
                active[name] = t["bytes"] // n_expert * n_used   # whole experts: bytes divide by n_expert
            else:
                full.add(name)
    return {"weights": sum(tensors[n]["bytes"] for n in full) + sum(active.values()), "embed_row": row,
            "tensors": len(full) + len(active)}


def moe_note(ir: dict[str, Any]) -> str | None:
    """The bench caveat of a decode IR with routed experts (None without): how the bytes per
    token count them."""
    ops = [op for op in block.expand(ir) if op["op"] == "moe_ffn"]
    if not ops:
        return None
    d = ops[0]["dims"]
    stored = sum(ir["tensors"][n]["bytes"] for op in ops for n in op["weights"].values())
    return (f"Mixture of experts: the bytes per token count the {d['n_used']} active experts of {d['n_expert']} "
            f"per layer ({len(ops)} routed layers; {stored * d['n_used'] // d['n_expert']:,} of the {stored:,} "
            "expert-weight bytes), since decode reads only the selected experts' rows; every expert stays mapped.")


def kv_layers(ir: dict[str, Any]) -> list[tuple[int, int | None]]:
    """``[(bytes per cached position read, K + V, window or None)]``, one per attention op."""
    state = {s["name"]: s for s in ir.get("state", [])}
    out = []
    for op in block.expand(ir):
        if op["op"] != "attention":
            continue
        per = 0
        for name in op.get("state", {}).values():
            if name not in state:
                raise BringupError(f"decode IR op {op['id']} names state {name!r}, which is not in its state table")
            per += int(state[name]["bytes_per_position"])
        window = (op.get("params") or {}).get("window") or None
        out.append((per, int(window) if window else None))
    return out


def decode_bytes(ir: dict[str, Any], first_pos: int, n_steps: int, kv_bytes_scale: float = 1.0) -> dict[str, float]:
    """Mean bytes read per decode step over ``n_steps`` steps at positions ``first_pos``,
    ``first_pos + 1``, ...: ``{"weights", "kv", "total"}`` (bytes per token). ``kv_bytes_scale``
    scales the KV part (0.5: an F16 cache where the IR's is F32). Raises BringupError for
    ``n_steps`` < 1 or a negative position."""
    if n_steps < 1 or first_pos < 0:
        raise BringupError(f"decode_bytes: need n_steps >= 1 and first_pos >= 0 (got {n_steps}, {first_pos})")
    w = weight_bytes(ir)
    layers = kv_layers(ir)
    kv = 0.0
    for pos in range(first_pos, first_pos + n_steps):
        kv += sum(per * min(pos + 1, win or pos + 1) for per, win in layers)
    kv = kv / n_steps * kv_bytes_scale
    weights = float(w["weights"] + w["embed_row"])
    return {"weights": weights, "kv": kv, "total": weights + kv}
