"""Codegen stage: IR (both phases) + memory plan + kernel maps -> the model's C (``model.c``,
``model.h``), rendered by jinja2 from ``bringup/codegen/templates/``.

What is generated (docs/runtime.md, "Generated code"):

- ``model.h``: the plan's numbers as constants (arena bytes, chunk, number of layers, and per
  phase one byte offset per tensor or scratch buffer the code names).
- ``model.c``: the canonical weight list (BUMP name, GGML type, GGUF-order shape) and the expected
  payload SHA-256 the runtime checks at open; the KV-cache state list; the per-layer table
  ``LAYERS``; and per phase one forward function, like llama2.c's ``forward()``: the header ops,
  ONE loop over the layers whose body is the IR's block, emitted once (bringup.codegen.layers:
  what differs between layers is table data), the footer, and the logits tail once per requested row. Every kernel call is
  preceded by a comment naming the IR op, circuit op and provider and followed by ``OP_DONE``:
  the kernel-status check and the observer hook. The function fills ``bu_model_descriptor``
  (csrc/runtime/bu_model_abi.h); the kernel calls, their arguments and their order are the IR's.

Arguments: bringup.codegen.phase (from the kernel maps' call lists). Safety: nothing read from the
model reaches the C text except numbers and names that match a strict pattern
(bringup.codegen.checks); every interpolated value is checked again before rendering. Same inputs
-> byte-identical output (no time, no paths, ordered iteration only).

Errors: BringupError (exit 2) for inconsistent inputs, UnsupportedError (exit 4) for IR features
this generator does not emit (bringup.codegen.phase).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import jinja2

from bringup.codegen import tables
from bringup.codegen.checks import NAME_RE, SHA_RE, check, check_values, integer
from bringup.codegen.layers import RANKS, Offsets, Segments, Table, check_block, ranges
from bringup.codegen.phase import Phase
from bringup.codegen.render import Renderer
from bringup.codegen.split import no_barrier_after
from bringup.core import canonjson
from bringup.core.atomic import atomic_dir, write_text
from bringup.core.c_defines import RUNTIME_HEADER, c_define
from bringup.core.errors import BringupError
from bringup.core.progress import Progress
from bringup.ir import kernel_maps as kernels
from bringup.ir.lower import kv_cache_dtype

RUNTIME_ABI_VERSION = c_define(RUNTIME_HEADER, "BU_RT_ABI_VERSION")   # the one source: the runtime's header
BUMP_DIMS = ("n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "head_dim_v", "n_ff", "n_vocab",
             "n_ctx_train")
TEMPLATES = Path(__file__).resolve().parent / "templates"
INDENT, LOOP_INDENT = 4, 8   # columns of the function body and of the loop body


@dataclass
class Generated:
    """The generated texts and, per phase, the layers the loop body runs: ``loops[phase] = {"body": [L]}``."""
    texts: dict[str, str]
    loops: dict[str, dict]


def environment() -> jinja2.Environment:
    """The jinja2 environment of the C templates: strict undefined, no autoescape (C, not HTML)."""
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                              autoescape=False, keep_trailing_newline=True, trim_blocks=True,
                              lstrip_blocks=True)


def _weight_list(irs: list[dict]) -> list[dict]:
    out: dict[str, dict] = {}
    for ir in irs:
        for name, t in ir["tensors"].items():
            if t["kind"] != "weight":
                continue
            bname = check(NAME_RE, t["weight"]["name"], "weight name")
            shape = [integer(d, f"{bname} shape", 1) for d in reversed(t["shape"])]  # GGUF order
            if not 1 <= len(shape) <= 4:
                raise BringupError(f"weight {bname}: {len(shape)} dims (BUMP holds 1 to 4)")
            rec = {"name": bname, "ggml_type": integer(t["weight"]["ggml_type"], f"{bname} type"),
                   "n_dims": len(shape), "shape": shape + [1] * (4 - len(shape))}
            if out.setdefault(bname, rec) != rec:
                raise BringupError(f"weight {bname} differs between phases: {out[bname]} vs {rec}")
    return sorted(out.values(), key=lambda w: w["name"])


def _kv_dtype(ir: dict, plan: dict) -> str:
    """The one element type of every KV cache buffer (``"F32"``, ``"F16"``; ``"none"`` without state),
    which the runtime reports (bu_kv_dtype). BringupError when the IR's buffers differ in type or the
    plan (when it records the types) disagrees with the IR."""
    dtype = kv_cache_dtype(ir)
    planned = sorted({b["dtype"] for b in plan["state"]["buffers"] if "dtype" in b})
    if planned and planned != [dtype]:
        raise BringupError(f"the plan's KV cache is {planned}, the IR's {dtype}: plan again from this IR")
    return check(NAME_RE, dtype, "KV cache dtype") if dtype else "none"


def _phase_code(ph: Phase, seg: Segments, body: list[int], rend: Renderer, offs: Offsets) -> dict:
    """The template context of one forward function. Code outside the loop is rendered first, so
    that its full-name offsets are taken before the loop body names its own."""
    fixed = rend.fixed_op
    _mark_barriers(ph, seg, body)
    code = {"name": ph.name, "n_ops": len(ph.ops), "thread_ws": ph.thread_ws,
            "header": [fixed(op, offs, INDENT) for op in seg.header],
            "footer": [fixed(op, offs, INDENT) for op in seg.footer if not op["tail"]],
            "tail": [fixed(op, offs, LOOP_INDENT) for op in seg.footer if op["tail"]],
            "has_tail": bool(ph.tail),
            "loop": bool(body), "body": [], "body_layers": ranges(body)}
    if body:
        rend.table.column("op", "int32_t", {L: ops[0]["index"] for L, ops in seg.layers.items()},
                          "index of the first op of the layer", f"OPS_{ph.name.upper()}", ph.name, RANKS["index"])
        looped = {L: seg.layers[L] for L in body}
        code["body"] = [rend.body_op(j, looped, offs, LOOP_INDENT) for j in range(len(looped[body[0]]))]
    code["fixed_offsets"], code["body_offsets"] = offs.macros("fixed"), offs.macros("body")
    return code


def _mark_barriers(ph: Phase, seg: Segments, body: list[int]) -> None:
    """Set ``op["barrier"]`` (bringup.codegen.split.no_barrier_after) on every op of the phase, per
    straight run of code: the header, the loop body (an op goes without a barrier only if it may
    in every layer), the footer; the logits tail keeps every barrier."""
    runs = [seg.header, seg.footer]
    for ops in runs:
        free = no_barrier_after([op for op in ops if not op["tail"]], ph.tensors)
        for i, op in enumerate(op for op in ops if not op["tail"]):
            op["barrier"] = i not in free
        for op in ops:
            op.setdefault("barrier", True)
    if body:
        free_sets = [no_barrier_after(seg.layers[L], ph.tensors) for L in body]
        for j in range(len(seg.layers[body[0]])):
            for L in body:
                seg.layers[L][j]["barrier"] = not all(j in f for f in free_sets)


def emit_sources(ir_prefill: dict, ir_decode: dict, plan: dict, maps: dict | None = None,
                 payload_sha256: str | None = None) -> Generated:
    """The generated sources and the loop report (``Generated``).

    ``payload_sha256``: hex SHA-256 of the BUMP payload these weights have; taken from the IR
    (``weights.payload_sha256``) when not given. Raises BringupError / UnsupportedError (module doc).
    """
    maps = kernels.load_maps() if maps is None else maps
    for ir, phase in ((ir_prefill, "prefill"), (ir_decode, "decode")):
        if ir.get("phase") != phase:
            raise BringupError(f"expected the {phase} IR, got phase {ir.get('phase')!r}")
    sha = payload_sha256 or ir_prefill.get("weights", {}).get("payload_sha256")
    if sha is None:
        raise BringupError("the payload SHA-256 of the weights is in neither the IR (weights.payload_sha256) "
                           "nor the arguments (--manifest)")
    check(SHA_RE, sha, "payload SHA-256")
    if ir_prefill["state"] != ir_decode["state"]:
        raise BringupError("prefill and decode IR declare different KV-cache state")
    states = []
    for i, s in enumerate(ir_prefill["state"]):
        states.append({"name": check(NAME_RE, s["name"], "state name"), "index": i,
                       "bytes_per_pos": integer(s["bytes_per_position"], f"{s['name']} bytes_per_position", 1)})
    kv_dtype = _kv_dtype(ir_prefill, plan)
    weights = _weight_list([ir_prefill, ir_decode])
    arena = integer(plan["arena"]["bytes"], "plan arena bytes")
    n_ctx_plan = integer(plan["state"]["n_ctx"], "plan state n_ctx", 1, 2**31 - 1)
    for ir in (ir_prefill, ir_decode):
        if ir["dims"].get("n_ctx") != n_ctx_plan:
            raise BringupError(f"{ir['phase']} IR has n_ctx {ir['dims'].get('n_ctx')}, the plan {n_ctx_plan}")
    phases, segs = {}, {}
    for ir in (ir_prefill, ir_decode):
        pp = plan["phases"][ir["phase"]]
        if integer(pp["arena_bytes"], "phase arena bytes") > arena:
            raise BringupError(f"{ir['phase']} plan needs {pp['arena_bytes']} bytes, the arena has {arena}")
        phases[ir["phase"]] = Phase(ir, pp, maps, {w["name"]: i for i, w in enumerate(weights)},
                                    {s["name"]: s["index"] for s in states}, arena)
        segs[ir["phase"]] = Segments(phases[ir["phase"]])
    n_layer = len(segs["prefill"].layers)
    if len(segs["decode"].layers) != n_layer:
        raise BringupError(f"prefill IR has {n_layer} layers, decode {len(segs['decode'].layers)}")
    rend = Renderer(weights, states, Table(n_layer))
    code, loops = [], {}
    prog = Progress("codegen", "phase or file", 4, unit="part")
    for name in ("prefill", "decode"):
        body = check_block(segs[name], name)
        loops[name] = {"body": body}
        code.append(_phase_code(phases[name], segs[name], body, rend, Offsets(name)))
        prog.step(f"{name} phase emitted")
    # an hparam absent from the GGUF is absent from the IR dims and 0 in the BUMP header (bump.write)
    dims = {k: integer(ir_prefill["dims"].get(k) or 0, f"dims.{k}", 0, 2**32 - 1) for k in BUMP_DIMS}
    ctx = {
        "abi_version": RUNTIME_ABI_VERSION,
        "payload_sha256": sha,
        "kv_dtype": kv_dtype,
        "sources": {k: v for k, v in sorted({
            "ir_prefill": canonjson.sha256(ir_prefill), "ir_decode": canonjson.sha256(ir_decode),
            "memory_plan": canonjson.sha256(plan)}.items())},
        "circuit": check(NAME_RE, ir_prefill["circuit"]["name"], "circuit name"),
        "dims": [dims[k] for k in BUMP_DIMS], "dim_names": list(BUMP_DIMS),
        "arena": arena, "n_ctx_plan": n_ctx_plan, "n_layer": n_layer,
        "chunk": integer(ir_prefill["dims"]["n_tokens"], "prefill n_tokens", 1, 2**31 - 1),
        "n_vocab": dims["n_vocab"],
        "phases": code,
        "thread_ws_bytes": max(phases["prefill"].thread_ws, phases["decode"].thread_ws),
        **tables.weight_tables(weights, rend.roles["W"]),
        **tables.state_tables(states, rend.roles["S"]),
        **tables.op_tables(phases, segs, loops, rend.kernel_cols),
        **tables.layer_table(rend.table, rend.kernel_types),
    }
    check_values(ctx)
    env = environment()
    texts = {}
    for name in ("model.h", "model.c"):
        texts[name] = env.get_template(f"{name}.j2").render(**ctx)
        prog.step(f"{name} rendered")
    prog.close()
    return Generated(texts, loops)


def generate(ir_prefill: dict, ir_decode: dict, plan: dict, maps: dict | None = None,
             payload_sha256: str | None = None) -> dict[str, str]:
    """The generated sources ``{"model.c": text, "model.h": text}`` (``emit_sources``)."""
    return emit_sources(ir_prefill, ir_decode, plan, maps, payload_sha256).texts


def payload_sha_from_manifest(manifest: dict, ir: dict) -> str:
    """The BUMP payload hash recorded by convert in the manifest, after checking that this is the
    manifest the IR was compiled from (its canonical hash is in ``ir.inputs_sha256``)."""
    want = ir.get("inputs_sha256", {}).get("weights_manifest")
    got = canonjson.sha256(manifest)
    if want != got:
        raise BringupError(f"weights manifest hash {got} is not the one the IR was compiled from ({want})")
    try:
        return manifest["bump"]["payload_sha256"]
    except KeyError:
        raise BringupError("weights manifest has no bump.payload_sha256 (written by `bringup convert`)") from None


def write(ir_dir: str | Path, plan_path: str | Path, out_dir: str | Path,
          manifest_path: str | Path | None = None) -> Generated:
    """Read the IR and the plan, generate, write ``model.c`` and ``model.h`` into ``out_dir`` as
    one set (``atomic_dir``: an interrupted or failed run leaves the previous pair whole). Returns
    what was generated. Raises BringupError (exit 2) when ``out_dir`` holds other files."""
    ir_dir = Path(ir_dir)
    irp = canonjson.read(ir_dir / "ir_prefill.json", "prefill IR")
    ird = canonjson.read(ir_dir / "ir_decode.json", "decode IR")
    plan = canonjson.read(Path(plan_path), "memory plan")
    sha = None
    if manifest_path is not None:
        sha = payload_sha_from_manifest(canonjson.read(Path(manifest_path), "weights manifest"), irp)
    gen = emit_sources(irp, ird, plan, payload_sha256=sha)
    with atomic_dir(out_dir, gen.texts, "codegen output folder") as tmp:
        for name, text in gen.texts.items():
            write_text(tmp / name, text)
    return gen
