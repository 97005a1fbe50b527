"""Liveness-based arena memory planner (``bringup plan``): IR -> ``memory_plan.json``.

Per phase, every activation tensor and every non-empty kernel scratch gets a byte range in one
arena:

- Liveness from op order: a tensor lives from its producer's index to its last reader's index,
  inclusive (a reader of a view counts as a reader of the view's base). Scratch lives for its one
  op. Weights (mmap'd BUMP), the KV cache (state, planned separately) and io tensors (the
  caller's tokens and logits) are not in the arena.
- In place: an op's output shares its input's buffer only when the provider's kernel map declares
  that aliasing (``inplace`` in the IR), the input dies at that op, and both have the same size.
- Offsets: greedy by size with best fit (Pisarchyk & Lee 2020, "Efficient Memory Management for
  Deep Neural Net Inference", the TFLite GreedyBySize strategy): buffers in order of size
  descending, ties by first use, last use, then id (a total order, so the same IR gives the same
  plan byte for byte); each goes into the smallest gap among the buffers whose lifetimes overlap
  its own, or above them all if no gap fits. Sizes are rounded up to ``ALIGN`` = 64 bytes, so
  every offset is a multiple of 64.
- ``check_plan`` verifies a plan independently of the allocator (pairwise: overlapping
  lifetimes -> disjoint byte ranges; alignment; inside the arena).
- The lower bound is the largest total (aligned) size live at one op; no placement can use less.

One arena serves both phases: prefill and decode calls of a context never overlap in time and no
arena buffer is live across a call (every arena tensor is produced and consumed inside its phase's
op list, which the planner verifies), so the arena is ``max(prefill, decode)`` bytes and each
phase's plan is checked to fit in it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from bringup.core import canonjson
from bringup.core import schemas
from bringup.core.errors import BringupError
from bringup.formats import ggml as formats
from bringup.ir import block

ALIGN = formats.ALIGN      # every buffer offset (config/ggml_formats.json alignment)


def align_up(n: int, a: int = ALIGN) -> int:
    """``n`` rounded up to a multiple of ``a`` (bytes)."""
    return (n + a - 1) // a * a


@dataclass
class Buffer:
    """One arena allocation: ``size`` bytes live from op ``first`` to op ``last`` (inclusive)."""
    id: str
    size: int
    first: int
    last: int
    tensors: list[str] = field(default_factory=list)

    @property
    def asize(self) -> int:
        return align_up(self.size)


# ---------------------------------------------------------------- liveness

def tensor_last_use(ir: dict) -> dict[str, int]:
    """Last op index reading each tensor, views folded into their base."""
    last: dict[str, int] = {}
    for name, t in ir["tensors"].items():
        uses = list(t["consumers"])
        if t["producer"] is not None:
            uses.append(t["producer"])
        if uses:
            last[name] = max(uses)
    for name, t in ir["tensors"].items():
        if t["kind"] == "view" and name in last:
            base = t["view"]["base"]
            last[base] = max(last.get(base, -1), last[name])
    # The generated code runs the footer once per requested logits row (bringup.codegen.emit), so
    # in a phase of several tokens what the footer reads from before it stays live until its last
    # op: a footer buffer placed over the last layer's output would overwrite the rows still to
    # come (gemma2's soft-capped logits: logits_raw is an arena buffer after output_norm).
    footer = ir["footer"]
    if footer and ir["dims"]["n_tokens"] > 1:
        end = max(op["index"] for op in footer)
        produced = {t for op in footer for t in op["outputs"].values()}
        for op in footer:
            for tname in op["inputs"].values():
                t = ir["tensors"].get(tname)
                if tname in produced or t is None:
                    continue
                base = t["view"]["base"] if t["kind"] == "view" else tname
                if base in last:
                    last[base] = max(last[base], end)
    return last


def buffers_from_ir(ir: dict) -> tuple[list[Buffer], dict[str, str], list[dict]]:
    """Arena buffers of one phase.

    Returns ``(buffers, tensor -> buffer id, aliases)`` where ``aliases`` lists the in-place
    decisions ``{"op", "output", "input"}`` taken. Raises BringupError for an activation without a
    producer (it could not be live inside the call).
    """
    tensors = ir["tensors"]
    last = tensor_last_use(ir)
    buffers: dict[str, Buffer] = {}
    where: dict[str, str] = {}
    aliases: list[dict] = []
    for name, t in tensors.items():
        if t["kind"] == "activation" and t["producer"] is None:
            raise BringupError(f"activation {name} has no producer in the {ir['phase']} op list")
    for op in block.expand(ir):
        i = op["index"]
        for port, tname in sorted(op["outputs"].items()):
            t = tensors[tname]
            if t["kind"] != "activation":
                continue
            shared = None
            for in_port in op.get("inplace", {}).get(port, []):
                src = op["inputs"].get(in_port)
                if src is None or tensors[src]["kind"] != "activation" or src not in where:
                    continue
                b = buffers[where[src]]
                if last[src] == i and b.last == i and tensors[src]["bytes"] == t["bytes"]:
                    shared = b
                    aliases.append({"op": op["id"], "index": i, "output": tname, "input": src})
                    break
            if shared is None:
                shared = buffers[tname] = Buffer(tname, t["bytes"], i, last.get(tname, i))
            else:
                shared.last = max(shared.last, last.get(tname, i))
                shared.size = max(shared.size, t["bytes"])
            shared.tensors.append(tname)
            where[tname] = shared.id
        for sname, nbytes in sorted(op.get("scratch", {}).items()):
            if nbytes > 0:
                bid = f"{op['id']}.scratch.{sname}"
                buffers[bid] = Buffer(bid, nbytes, i, i, [bid])
                where[bid] = bid
    return list(buffers.values()), where, aliases


# ---------------------------------------------------------------- placement

def _overlap(a: Buffer, b: Buffer) -> bool:
    return a.first <= b.last and b.first <= a.last


def place_greedy_by_size(buffers: Iterable[Buffer]) -> dict[str, int]:
    """Offsets (bytes, multiples of ALIGN) by greedy-by-size best fit; see the module docstring."""
    order = sorted(buffers, key=lambda b: (-b.asize, b.first, b.last, b.id))
    placed: list[tuple[int, Buffer]] = []
    offsets: dict[str, int] = {}
    for b in order:
        live = sorted(((o, p) for o, p in placed if _overlap(p, b)), key=lambda x: (x[0], x[1].id))
        best, best_gap, end = None, None, 0
        for o, p in live:
            gap = o - end
            if gap >= b.asize and (best_gap is None or gap < best_gap):
                best, best_gap = end, gap
            end = max(end, o + p.asize)
        off = end if best is None else best
        offsets[b.id] = off
        placed.append((off, b))
    return offsets


def lower_bound(buffers: Iterable[Buffer]) -> int:
    """Max over op indices of the total aligned size of the buffers live there (bytes)."""
    events: dict[int, int] = {}
    for b in buffers:
        events[b.first] = events.get(b.first, 0) + b.asize
        events[b.last + 1] = events.get(b.last + 1, 0) - b.asize
    cur = best = 0
    for t in sorted(events):
        cur += events[t]
        best = max(best, cur)
    return best


def check_plan(buffers: Iterable[Buffer], offsets: dict[str, int], arena: int, align: int = ALIGN) -> list[str]:
    """Every violation of a plan, found without the allocator: a buffer without an offset, a
    misaligned offset, a buffer outside ``[0, arena)``, or two buffers with overlapping lifetimes
    whose byte ranges ``[offset, offset + size)`` intersect. Empty list = valid."""
    bs = list(buffers)
    errors = []
    for b in bs:
        if b.id not in offsets:
            errors.append(f"{b.id}: no offset")
            continue
        o = offsets[b.id]
        if o < 0 or o % align:
            errors.append(f"{b.id}: offset {o} is not a non-negative multiple of {align}")
        if o + b.size > arena:
            errors.append(f"{b.id}: [{o}, {o + b.size}) exceeds the arena of {arena} bytes")
    bs = [b for b in bs if b.id in offsets]
    bs.sort(key=lambda b: b.first)
    for i, a in enumerate(bs):
        for b in bs[i + 1:]:
            if b.first > a.last:
                break
            oa, ob = offsets[a.id], offsets[b.id]
            if oa < ob + b.size and ob < oa + a.size and a.size and b.size:
                errors.append(f"{a.id} [{oa}, {oa + a.size}) ops {a.first}..{a.last} overlaps "
                              f"{b.id} [{ob}, {ob + b.size}) ops {b.first}..{b.last}")
    return errors


# ---------------------------------------------------------------- plans

def plan_phase(ir: dict) -> dict:
    """The plan of one phase (see docs/ir_format.md, "Memory plan"). Raises BringupError if the
    independent checker finds a violation (an allocator bug; never expected)."""
    buffers, where, aliases = buffers_from_ir(ir)
    offsets = place_greedy_by_size(buffers)
    arena = max((offsets[b.id] + b.asize for b in buffers), default=0)
    errors = check_plan(buffers, offsets, arena)
    if errors:
        raise BringupError(f"memory plan of {ir['phase']} fails its check:\n  " + "\n  ".join(errors[:10]))
    lb = lower_bound(buffers)
    ops = block.expand(ir)
    kv = sum(len(op.get("state", {})) for op in ops if op["op"] == "attention")
    order = sorted(buffers, key=lambda b: (b.first, offsets[b.id], b.id))
    return {
        "arena_bytes": arena,
        "lower_bound_bytes": lb,
        "ratio": round(arena / lb, 6) if lb else 1.0,
        "n_ops": len(ops),
        "copy_ops": sum(1 for op in ops if op["op"] == "copy"),
        "kv_handoffs": kv,
        "buffers": [{"id": b.id, "offset": offsets[b.id], "size": b.size, "first": b.first, "last": b.last,
                     "tensors": list(b.tensors)} for b in order],
        "tensors": {t: {"buffer": bid, "offset": offsets[bid]} for t, bid in sorted(where.items())},
        "aliases": aliases,
        "io": {name: ir["tensors"][name]["bytes"] for name in sorted(ir["io"].values())},
    }


def plan_irs(irs: dict[str, dict]) -> dict:
    """``memory_plan.json`` for ``{"prefill": ir, "decode": ir}``: both phase plans, the one-arena
    decision with its check, and the KV cache (state) sizes. Raises BringupError if the two IRs
    disagree about the state or a phase does not fit the shared arena."""
    missing = {"prefill", "decode"} - set(irs)
    if missing:
        raise BringupError(f"plan needs both phases; missing {sorted(missing)}")
    for key in ("inputs_sha256", "circuit", "target"):
        if irs["prefill"].get(key) != irs["decode"].get(key):
            raise BringupError(f"ir_prefill.json and ir_decode.json differ in {key}: they come from different "
                               "compile runs; run `bringup ir` again")
    phases = {p: plan_phase(irs[p]) for p in ("prefill", "decode")}
    arena = max(ph["arena_bytes"] for ph in phases.values())
    fits = {}
    for p, ph in phases.items():
        bufs = [Buffer(b["id"], b["size"], b["first"], b["last"]) for b in ph["buffers"]]
        fits[p] = not check_plan(bufs, {b["id"]: b["offset"] for b in ph["buffers"]}, arena)
        if not fits[p]:
            raise BringupError(f"{p} plan does not fit the shared arena of {arena} bytes")
    if irs["prefill"]["state"] != irs["decode"]["state"]:
        raise BringupError("prefill and decode IRs declare different KV cache state")
    state = irs["prefill"]["state"]
    return {
        "schema_version": 1,
        "alignment": ALIGN,
        "arena": {
            "decision": "one",
            "bytes": arena,
            "two_arenas_bytes": sum(ph["arena_bytes"] for ph in phases.values()),
            "reason": ("prefill and decode calls of a context never run at the same time and every arena "
                       "buffer is produced and consumed inside one call, so both phases share one arena of "
                       "max(prefill, decode) bytes; each phase's plan is checked to fit in it"),
            "fits": fits,
        },
        "phases": phases,
        "state": {"n_ctx": irs["prefill"]["dims"]["n_ctx"], "bytes": sum(s["bytes"] for s in state),
                  "buffers": [{"name": s["name"], "bytes": s["bytes"], "bytes_per_position": s["bytes_per_position"],
                               "dtype": s["dtype"]} for s in state]},
        "inputs_sha256": {f"ir_{p}": canonjson.sha256(irs[p]) for p in ("prefill", "decode")},
    }


def load_irs(ir_dir: Path) -> dict[str, dict]:
    """Read and schema-validate ``ir_prefill.json`` and ``ir_decode.json`` from ``ir_dir``."""
    out = {}
    for p in ("prefill", "decode"):
        path = Path(ir_dir) / f"ir_{p}.json"
        try:
            ir = canonjson.read(path, "IR")
        except BringupError as e:
            raise BringupError(f"{e} (run `bringup ir` first)") from None
        schemas.validate(ir, "ir", str(path))
        try:   # the schema cannot say that the binding table binds what the block's body names
            block.expand(ir)
        except BringupError as e:
            raise BringupError(f"{path}: {e}") from None
        if ir["phase"] != p:
            raise BringupError(f"{path} holds phase {ir['phase']!r}")
        out[p] = ir
    return out
