"""The activation arena for the footprint: read from the plan stage's ``memory_plan.json`` or planned
in-process from the GGUF header (weights manifest -> IR -> planner), and the op-node table.

Formats: ``memory_plan.json`` and the IR as in docs/ir_format.md. The in-process path uses the
stages' own code: ``bringup.convert.manifest`` (the manifest from the tensor-info table),
``bringup.ir.lower.compile_ir`` and ``bringup.plan.planner.plan_irs``.
"""
from __future__ import annotations

import dataclasses
import re

from bringup.convert.manifest import map_weights, weights_manifest
from bringup.core.errors import BringupError
from bringup.ir import block
from bringup.ir import lower as ir
from bringup.plan import planner
from bringup.plan.memory.spec import KV_DTYPES, ArenaPlan, ModelHeader, ModelSpec, RunParams


def arena_from_plan(plan: dict, source: str) -> ArenaPlan:
    """ArenaPlan from a ``memory_plan.json`` (docs/ir_format.md): arena bytes, widest scratch.

    Scratch buffers are named ``<op id>.scratch.<name>``; the family is the op id without its
    ``layer.<L>.`` prefix. Raises BringupError if the plan lacks the arena.
    """
    try:
        arena_bytes = int(plan["arena"]["bytes"])
    except (KeyError, TypeError, ValueError):
        raise BringupError(f"{source}: memory plan has no arena.bytes") from None
    fam: dict[str, int] = {}
    for ph in plan.get("phases", {}).values():
        for b in ph.get("buffers", []):
            m = re.match(r"^(?:layer\.\d+\.|header\.|footer\.)?(.+?)\.scratch\.(.+)$", str(b.get("id", "")))
            if m:
                key = f"{m.group(1)}.{m.group(2)}"
                fam[key] = max(fam.get(key, 0), int(b["size"]))
    phases = plan.get("phases", {})
    state = plan.get("state", {})
    return ArenaPlan(arena_bytes, state.get("n_ctx"), None, dict(sorted(fam.items())),
                     f"planner arena from {source}: {arena_bytes} bytes = max over phases "
                     f"{ {k: v.get('arena_bytes') for k, v in sorted(phases.items())} } "
                     f"(planned at n_ctx={state.get('n_ctx')})")


def check_kv_dtype(kv_dtype: str, dtypes: list[str], source: str) -> None:
    """Refuse (BringupError, exit 2) a footprint asked for KV dtype ``kv_dtype`` (a key of KV_DTYPES)
    of a program whose IR or plan (``source``) stores its KV cache as ``dtypes`` (the state tensors'
    dtypes; an older plan without them: nothing to check). The model never silently sizes another
    cache than the program allocates: pass the IR's type (``bringup ir --kv-type``)."""
    have = sorted(set(dtypes))
    if have and have != [KV_DTYPES[kv_dtype]]:
        names = {v: k for k, v in KV_DTYPES.items()}
        raise BringupError(f"--kv-dtype {kv_dtype} but {source} stores the KV cache as "
                           f"{'/'.join(names.get(d, d) for d in have)}; pass --kv-dtype "
                           f"{'/'.join(names.get(d, d) for d in have)} (or rebuild with bringup ir --kv-type {kv_dtype})")


def manifest_from_header(header: ModelHeader) -> dict:
    """weights_manifest.json as the convert stage would write it, from the tensor infos alone.

    The same builder as convert (``bringup.convert.manifest``); ``extra`` is empty (the tokenizer
    blob and chat format are not weights the IR binds) and ``gguf_sha256`` is the header hash.
    Raises IntegrityError for an unaccounted tensor, as convert does.
    """
    wmap = map_weights(header.config, header.gguf.tensors)
    return weights_manifest(header.config, wmap, gguf_sha256=header.header_sha256, extra=[])


def nodes_from_ir(irs: dict[str, dict]) -> list[dict]:
    """Per op node of the circuit, per layer: provider, weight bytes (each weight at its first
    use), activation bytes written (prefill), scratch (widest phase) and KV state bytes."""
    pre, dec = irs["prefill"], irs["decode"]
    dec_scratch = {op["id"]: sum(op.get("scratch", {}).values()) for op in block.expand(dec)}
    state_bytes = {s["name"]: s["bytes"] for s in pre["state"]}
    seen: set[str] = set()
    rows = []
    for op in block.expand(pre):
        wb = 0
        for t in op.get("weights", {}).values():
            if t not in seen:
                seen.add(t)
                wb += pre["tensors"][t]["bytes"]
        rows.append({"node": op["circuit_op"], "layer": op["layer"], "op": op["op"], "provider": op["provider"],
                     "weight_bytes": wb,
                     "activation_bytes": sum(pre["tensors"][t]["bytes"] for t in op["outputs"].values()),
                     "scratch_bytes": max(sum(op.get("scratch", {}).values()), dec_scratch.get(op["id"], 0)),
                     "state_bytes": sum(state_bytes.get(s, 0) for s in op.get("state", {}).values())})
    return rows


def plan_in_process(header: ModelHeader, ctx: int, chunk: int,
                    kv_dtype: str = "f32") -> tuple[ArenaPlan, dict[str, dict]]:
    """Compile the IR (``bringup.ir.lower.compile_ir``) and plan it (``bringup.plan.planner.plan_irs``)
    from the header alone, at context ``ctx`` and prefill chunk ``chunk``, with the KV cache type
    ``kv_dtype`` when the IR has providers for it (``bringup.ir.lower.KV_TYPES``); another type (q8_0)
    is planned with the f32 cache, and the source says so: the arena holds no KV cache, so only the
    attention scratch could differ.

    Returns the ArenaPlan (max over phases, scratch included) and the IRs. Raises whatever the
    compiler raises (UnsupportedError for no circuit or provider).
    """
    kv_type = kv_dtype if kv_dtype in ir.KV_TYPES else "f32"
    irs = ir.compile_ir(header.config, manifest_from_header(header), chunk=chunk, n_ctx=ctx, kv_type=kv_type)
    plan = planner.plan_irs(irs)
    a = arena_from_plan(plan, "in-process plan")
    return dataclasses.replace(
        a, chunk=chunk, nodes=tuple(nodes_from_ir(irs)), nodes_source="IR compiled in-process from the header",
        source=(f"planner arena (bringup.plan.planner.plan_irs on the IR compiled in-process from the header "
                f"at C={ctx}, T={chunk}, KV cache {kv_type}"
                f"{'' if kv_type == kv_dtype else f' (no attention provider for {kv_dtype})'}): "
                f"{a.arena_bytes} bytes = max(prefill "
                f"{plan['phases']['prefill']['arena_bytes']}, decode {plan['phases']['decode']['arena_bytes']}), "
                "kernel scratch included")), irs


def with_planned_arena(spec: ModelSpec, header: ModelHeader, p: RunParams, *, required: bool) -> ModelSpec:
    """``spec`` with the arena planned in-process at (p.ctx, p.chunk) and a re-planner for other
    contexts (``spec.arena_at``, memoized per context). When planning is impossible: raise the
    compiler's or planner's BringupError if ``required``, else keep the estimate and record the
    reason in ``spec.no_plan_reason`` (it reaches the activation component's source)."""
    cache: dict[int, ArenaPlan] = {}

    def arena_at(ctx: int) -> ArenaPlan:
        if ctx not in cache:
            cache[ctx] = plan_in_process(header, ctx, p.chunk, p.kv_dtype)[0]
        return cache[ctx]

    try:
        arena = arena_at(p.ctx)
    except BringupError as e:
        if required:
            raise
        return dataclasses.replace(spec, no_plan_reason=f"{type(e).__name__}: {str(e).splitlines()[0]}")
    return dataclasses.replace(spec, arena=arena, arena_at=arena_at)
