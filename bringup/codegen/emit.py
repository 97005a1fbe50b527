"""Codegen stage: IR (both phases) + memory plan + kernel maps -> the model's C (``model.c``,
``model.h``), rendered by jinja2 from ``bringup/codegen/templates/``.

What is generated (docs/runtime.md):

- ``model.h``: the plan's numbers as constants (arena bytes, chunk, one byte offset per planned
  tensor and scratch buffer of each phase).
- ``model.c``: the canonical weight list (BUMP name, GGML type, GGUF-order shape) and the expected
  payload SHA-256 the runtime checks at open; the KV-cache state list; and per phase one function
  with one kernel call per IR op, in IR order, each preceded by a comment naming the IR op, the
  circuit op and the layer. The function fills ``bu_model_descriptor`` (csrc/runtime/bu_runtime.h).

Every C argument comes from the op's kernel map ``call`` list: ``activation:/output:`` -> a pointer
into the arena at the planned offset (or the caller's ``tokens`` / ``logits`` for io tensors, or a
row of the base tensor for views), ``weight:`` -> the weight pointer looked up by name at open,
``state:`` -> the KV buffer, ``dim:`` -> the op's integer, ``param:`` -> the op's number,
``scratch:/scratch_cap:`` -> planned arena scratch and its size, ``runtime:pos/n_tokens`` -> the
call's values. ``dim:n_ctx`` is the context length chosen at open (at most the planned ``n_ctx``:
the runtime refuses more), so one library serves any ``--ctx`` up to the plan's.

Logits: the prefill IR computes the last token's logits through a one-row view of the last
layer's output (``row: "last"``). The ops downstream of that view (the "logits tail": final norm,
head, soft-cap) are emitted inside a loop over rows, so the same code gives the last row (default)
or every row (``bu_prefill_all_logits``, teacher-forced logits for parity) with the same kernels and
the same planned one-row buffers.

Safety: nothing read from the model reaches the C text except numbers and names that match a
strict pattern (``NAME_RE`` etc.); every interpolated value is checked again by the template
environment's ``finalize`` hook. Same inputs -> byte-identical output (no time, no paths, ordered
iteration only).

Errors: BringupError (exit 2) for inconsistent inputs (a tensor without a planned offset, a
name that fails its pattern, a plan that does not fit), UnsupportedError (exit 4) for IR features
this generator does not emit (e.g. ``logits: "all"``).
"""
from __future__ import annotations

import argparse
import math
import re
from pathlib import Path
from typing import Any

import jinja2

from bringup.core import canonjson
from bringup.ir import kernel_maps as kernels
from bringup.core.atomic import write_text
from bringup.core.errors import BringupError, UnsupportedError

RUNTIME_ABI_VERSION = 3      # BU_RT_ABI_VERSION in csrc/runtime/bu_runtime.h
ALIGN = 64
NAME_RE = re.compile(r"^[A-Za-z0-9_.]{1,95}$")          # BUMP / tensor / state names
FUNC_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")  # C function names
CIRCUIT_OP_RE = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_./-]{0,127}$")
SHA_RE = re.compile(r"^[0-9a-f]{64}$")
CTYPE_RE = re.compile(r"^(const )?(float|double|int8_t|int32_t|int64_t|uint8_t|size_t|void)( \*)?$")
# Anything the template interpolates must match this (defence in depth behind the checks above):
# no quote, backslash, newline, '#', or comment opener/closer.
_SAFE_RE = re.compile(r"^[A-Za-z0-9_.,:/ ()+\-\[\]*<>=]*$")
# linear/1 ops with one token (decode, and the per-row logits tail) run through bu_linear_rows,
# which splits the output rows over the runtime's threads; it takes exactly this call list, minus
# runtime:n_tokens (always 1 there).
LINEAR_ROWS_CALL = ["activation:x", "weight:w", "weight:bias", "output:y", "runtime:n_tokens", "dim:n_in",
                    "dim:n_out", "scratch:row", "scratch_cap:row"]
BUMP_DIMS = ("n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "head_dim_v", "n_ff", "n_vocab",
             "n_ctx_train")
TEMPLATES = Path(__file__).resolve().parent / "templates"


def _check(pattern: re.Pattern, value: Any, what: str) -> str:
    if not isinstance(value, str) or not pattern.match(value):
        raise BringupError(f"{what} {value!r} does not match {pattern.pattern}; refusing to put it in C source")
    return value


def _int(value: Any, what: str, lo: int = 0, hi: int = 2**62) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise BringupError(f"{what} = {value!r} is not an integer in [{lo}, {hi}]")
    return value


def c_float(value: Any, what: str) -> str:
    """C literal of a finite number: Python's shortest round-trip double repr (``repr``), which the
    C compiler reads back to the same double; the template casts it to the kernel's type."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BringupError(f"{what} = {value!r} is not a number")
    v = float(value)
    if not math.isfinite(v):
        raise BringupError(f"{what} = {v!r} is not finite")
    r = repr(v)
    return r if ("." in r or "e" in r) else r + ".0"


def _ident(name: str) -> str:
    return name.replace(".", "_")


def _check_values(value: Any, where: str = "context") -> None:
    """Every string the templates may interpolate, checked against ``_SAFE_RE`` (and no comment
    opener/closer): the last line of defence behind the per-field patterns."""
    if isinstance(value, dict):
        for k, v in value.items():
            _check_values(k, where)
            _check_values(v, f"{where}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_values(v, f"{where}[{i}]")
    elif isinstance(value, str):
        if not _SAFE_RE.match(value) or "/*" in value or "*/" in value or "//" in value:
            raise BringupError(f"{where} = {value!r} contains characters not allowed in generated C")
    elif value is None or isinstance(value, (bool, int, float)):
        pass
    else:
        raise BringupError(f"{where}: a {type(value).__name__} cannot be rendered into C")


def environment() -> jinja2.Environment:
    """The jinja2 environment of the C templates: strict undefined, no autoescape (C, not HTML)."""
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                              autoescape=False, keep_trailing_newline=True, trim_blocks=True,
                              lstrip_blocks=True)


class _Phase:
    """The C-ready description of one phase: offsets, op calls (structured args), tail split."""

    def __init__(self, ir: dict, plan_phase: dict, maps: dict, weights: dict, states: dict, arena: int):
        self.ir, self.plan, self.maps = ir, plan_phase, maps
        self.name = ir["phase"]
        self.weights, self.states = weights, states   # shared: BUMP name -> index, state name -> index
        self.arena = arena
        self.offsets: dict[str, tuple[str, int]] = {}   # tensor/scratch name -> (C macro, offset)
        self.buffers = {b["id"]: b for b in plan_phase["buffers"]}
        self.thread_ws = 0   # largest scratch of an op run through bu_linear_rows
        self.tensors = ir["tensors"]
        self.n_vocab = _int(ir["dims"]["n_vocab"], "n_vocab", 1)
        self.tail = self._tail()
        self.ops = [self._op(op) for op in ir["ops"]]

    def context(self) -> dict:
        return {"name": self.name, "ops": self.ops, "tail": bool(self.tail), "thread_ws": self.thread_ws,
                "offsets": [{"macro": m, "name": n, "offset": o} for n, (m, o) in self.offsets.items()]}

    # -- planned offsets --
    def _offset(self, name: str, nbytes: int) -> str:
        if name in self.offsets:
            return self.offsets[name][0]
        _check(NAME_RE, name, "tensor name")
        rec = self.plan["tensors"].get(name)
        if rec is None:
            raise BringupError(f"{self.name}: tensor {name} has no offset in the memory plan")
        off = _int(rec["offset"], f"{self.name} offset of {name}")
        if off % ALIGN:
            raise BringupError(f"{self.name}: planned offset {off} of {name} is not {ALIGN}-aligned")
        buf = self.buffers.get(rec.get("buffer"))
        if buf is None or not buf["offset"] <= off or off + nbytes > buf["offset"] + buf["size"]:
            raise BringupError(f"{self.name}: tensor {name} ({nbytes} bytes at {off}) is not inside its planned "
                               f"buffer {rec.get('buffer')!r}")
        if off + nbytes > self.arena:
            raise BringupError(f"{self.name}: {name} at [{off}, {off + nbytes}) does not fit the "
                               f"planned arena of {self.arena} bytes")
        macro = f"BU_{self.name.upper()}_OFF_{_ident(name)}"
        if any(m == macro for m, _ in self.offsets.values()):
            raise BringupError(f"{self.name}: tensor names {name!r} and another map to the same C name {macro}")
        self.offsets[name] = (macro, off)
        return macro

    # -- logits tail: ops downstream of a "last"-row view --
    def _tail(self) -> set[int]:
        views = {n for n, t in self.tensors.items() if t["kind"] == "view" and t["view"]["row"] == "last"}
        if self.ir.get("logits", "last") != "last":
            raise UnsupportedError(f"{self.name} IR computes logits '{self.ir['logits']}': codegen needs "
                                   "--prefill-logits last (every-row logits come from the generated tail "
                                   "loop, bu_prefill_all_logits)")
        if not views:
            # no view: the footer already runs on every row of the call, which is only the same as
            # "last" when a call has one token (decode, or a prefill chunk of 1)
            if self.ir["dims"]["n_tokens"] != 1:
                raise UnsupportedError(f"{self.name} IR has no last-row view but {self.ir['dims']['n_tokens']} "
                                       "tokens per call")
            return set()
        if len(views) != 1:
            raise UnsupportedError(f"{self.name} IR has {len(views)} last-row views; codegen expects at most "
                                   "one (the footer's input)")
        reached, tail = set(views), set()
        for op in self.ir["ops"]:
            if any(t in reached for t in op["inputs"].values()):
                tail.add(op["index"])
                reached.update(op["outputs"].values())
        first = min(tail) if tail else len(self.ir["ops"])
        if sorted(tail) != list(range(first, len(self.ir["ops"]))):
            raise UnsupportedError(f"{self.name}: the ops after the last-row view are not the final ops "
                                   f"of the IR ({sorted(tail)})")
        view = self.tensors[next(iter(views))]
        if view["view"]["rows"] != 1:
            raise UnsupportedError(f"{self.name}: last-row view of {view['view']['rows']} rows (expected 1)")
        if "logits" not in reached:
            raise BringupError(f"{self.name}: the logits are not computed from the last-row view")
        return tail

    # -- one C argument --
    def _tensor_arg(self, name: str, ctype: str, in_tail: bool, what: str) -> dict:
        t = self.tensors.get(name)
        if t is None:
            raise BringupError(f"{what}: tensor {name!r} is not in the IR tensor table")
        kind = t["kind"]
        if kind == "activation":
            return {"k": "arena", "ctype": ctype, "off": self._offset(name, t["bytes"])}
        if kind == "view":
            v = t["view"]
            base = self.tensors[v["base"]]
            if base["kind"] != "activation":
                raise UnsupportedError(f"{what}: view {name} of a {base['kind']} tensor")
            row = v["row"]
            if row == "last":
                row_expr = "r" if in_tail else "x->n_tokens - 1"
            elif row == "pos":
                row_expr = "x->pos"
            else:
                row_expr = str(_int(row, f"view {name} row"))
            return {"k": "arena", "ctype": ctype, "off": self._offset(v["base"], base["bytes"]),
                    "row": row_expr, "row_bytes": _int(v["row_bytes"], f"view {name} row_bytes", 1)}
        if kind == "io":
            if name == self.ir["io"]["tokens"]:
                return {"k": "tokens", "ctype": ctype}
            if name == self.ir["io"]["logits"]:
                rows = t["shape"][0]
                if t["shape"] != [1, self.n_vocab] or rows != 1:
                    raise UnsupportedError(f"{what}: logits shape {t['shape']}, expected [1, {self.n_vocab}]")
                if not in_tail:
                    return {"k": "logits0", "ctype": ctype}
                return {"k": "logits", "ctype": ctype, "row_floats": self.n_vocab}
            raise BringupError(f"{what}: io tensor {name!r} is neither the tokens nor the logits")
        if kind == "weight":
            return {"k": "weight", "ctype": ctype, "index": self.weights[t["weight"]["name"]]}
        raise BringupError(f"{what}: tensor {name} of kind {kind} cannot be passed here")

    def _op(self, op: dict) -> dict:
        idx = op["index"]
        what = f"{self.name} op {idx} ({op['id']})"
        m = self.maps.get(op["provider"])
        if m is None:
            raise BringupError(f"{what}: provider {op['provider']!r} has no kernel map")
        func = _check(FUNC_RE, m.function, f"{what} kernel function")
        params = kernels.parse_params(m.declaration)
        call = m.call
        if len(params) != len(call):
            raise BringupError(f"{what}: {m.id} declares {len(params)} C arguments, its call lists {len(call)}")
        in_tail = idx in self.tail
        map_params = m.raw.get("params", {})
        map_weights = m.raw.get("weights", {})
        args = []
        for (ctype, cname), src in zip(params, call):
            _check(CTYPE_RE, ctype, f"{what} C type of {cname}")
            kind, _, port = src.partition(":")
            loc = f"{what} argument {cname} ({src})"
            if kind in ("activation", "output"):
                table = op["inputs"] if kind == "activation" else op["outputs"]
                if port not in table:
                    raise BringupError(f"{loc}: the op has no {kind} port {port!r}")
                args.append(self._tensor_arg(table[port], ctype, in_tail, loc))
            elif kind == "weight":
                if port in op["weights"]:
                    args.append(self._tensor_arg(op["weights"][port], ctype, in_tail, loc))
                elif map_weights.get(port, {}).get("optional"):
                    args.append({"k": "null", "ctype": ctype})
                else:
                    raise BringupError(f"{loc}: required weight {port!r} is not bound by the op")
            elif kind == "state":
                if port not in op["state"]:
                    raise BringupError(f"{loc}: the op binds no state {port!r}")
                args.append({"k": "state", "ctype": ctype, "index": self.states[op["state"][port]]})
            elif kind == "dim":
                if port == "n_ctx":
                    args.append({"k": "rt", "ctype": ctype, "field": "n_ctx"})
                else:
                    args.append({"k": "int", "ctype": ctype, "value": _int(op["dims"].get(port), f"{loc} value")})
            elif kind == "runtime":
                if port == "n_tokens" and in_tail:
                    # the tail runs row by row: its ops see the view's row count (1)
                    args.append({"k": "int", "ctype": ctype, "value": _int(op["dims"].get("n_tokens"), loc, 1, 1)})
                elif port in ("n_tokens", "pos", "n_ctx"):
                    args.append({"k": "rt", "ctype": ctype, "field": port})
                else:
                    raise UnsupportedError(f"{loc}: unknown runtime value {port!r}")
            elif kind == "param":
                v = op["params"].get(port, map_params.get(port, {}).get("none_value"))
                if v is None:
                    raise BringupError(f"{loc}: the op has no value for param {port!r}")
                pctype = map_params.get(port, {}).get("ctype", ctype)
                if pctype in ("float", "double"):
                    args.append({"k": "float", "ctype": ctype, "value": c_float(v, loc)})
                else:
                    args.append({"k": "int", "ctype": ctype, "value": _int(v, loc, -2**62)})
            elif kind in ("scratch", "scratch_cap"):
                nbytes = _int(op.get("scratch", {}).get(port, 0), f"{loc} bytes")
                if nbytes == 0:
                    args.append({"k": "null", "ctype": ctype} if kind == "scratch" else
                                {"k": "int", "ctype": ctype, "value": 0})
                elif kind == "scratch":
                    args.append({"k": "arena", "ctype": ctype,
                                 "off": self._offset(f"{op['id']}.scratch.{port}", nbytes)})
                else:
                    args.append({"k": "int", "ctype": ctype, "value": nbytes})
            else:
                raise UnsupportedError(f"{loc}: unknown call source kind {kind!r}")
        rows = None
        one_token = in_tail or (self.name == "decode" and self.ir["dims"]["n_tokens"] == 1)
        if one_token and m.raw.get("interface") == "linear/1" and call == LINEAR_ROWS_CALL:
            wt = self.tensors[op["weights"]["w"]]
            rows = {"w_type": _int(wt["weight"]["ggml_type"], f"{what} weight type"),
                    "args": args[:4] + args[5:]}
            self.thread_ws = max(self.thread_ws, _int(op.get("scratch", {}).get("row", 0), f"{what} scratch"))
        layer = op.get("layer")
        return {"index": idx, "rows": rows, "obs": self._observation(op, in_tail, what), "id": _check(NAME_RE, op["id"], f"{what} id"), "func": func,
                "provider": _check(NAME_RE, m.id, f"{what} provider"),
                "circuit_op": _check(CIRCUIT_OP_RE, op["circuit_op"], f"{what} circuit_op"),
                "layer": -1 if layer is None else _int(layer, f"{what} layer"), "args": args, "tail": in_tail}


    def _observation(self, op: dict, in_tail: bool, what: str) -> dict:
        """How the generated code reports this op's output to an observer (bu_observation): the
        output's first row (same address expression as the kernel's argument), the rows the call
        wrote (tail: the loop's row r; else every row of the call), dtype and elements per row."""
        if len(op["outputs"]) != 1:
            raise UnsupportedError(f"{what}: {len(op['outputs'])} outputs; observations name an op's one output")
        name = next(iter(op["outputs"].values()))
        t = self.tensors.get(name)
        if t is None:
            raise BringupError(f"{what}: output {name!r} is not in the IR tensor table")
        dtype = {"F32": "BU_OBS_F32", "I32": "BU_OBS_I32"}.get(t["dtype"])
        if dtype is None:
            raise UnsupportedError(f"{what}: output {name} has dtype {t['dtype']}; observations carry F32 or I32")
        shape = [_int(d, f"{what} output shape", 1) for d in t["shape"]]
        planned_rows = 1 if in_tail else _int(self.ir["dims"]["n_tokens"], "n_tokens", 1)
        if shape[0] != planned_rows:
            raise BringupError(f"{what}: output {name} has {shape[0]} rows, the op writes {planned_rows} per call")
        row_elems = math.prod(shape[1:]) if len(shape) > 1 else 1
        return {"data": self._tensor_arg(name, "const void *", in_tail, f"{what} observed output"),
                "row0": "r" if in_tail else "0", "n_rows": "1" if in_tail else "x->n_tokens",
                "dtype": dtype, "row_elems": row_elems}


def _weight_list(irs: list[dict]) -> list[dict]:
    out: dict[str, dict] = {}
    for ir in irs:
        for name, t in ir["tensors"].items():
            if t["kind"] != "weight":
                continue
            bname = _check(NAME_RE, t["weight"]["name"], "weight name")
            shape = [_int(d, f"{bname} shape", 1) for d in reversed(t["shape"])]  # GGUF order
            if not 1 <= len(shape) <= 4:
                raise BringupError(f"weight {bname}: {len(shape)} dims (BUMP holds 1 to 4)")
            rec = {"name": bname, "ggml_type": _int(t["weight"]["ggml_type"], f"{bname} type"),
                   "n_dims": len(shape), "shape": shape + [1] * (4 - len(shape))}
            if out.setdefault(bname, rec) != rec:
                raise BringupError(f"weight {bname} differs between phases: {out[bname]} vs {rec}")
    return sorted(out.values(), key=lambda w: w["name"])


def generate(ir_prefill: dict, ir_decode: dict, plan: dict, maps: dict | None = None,
             payload_sha256: str | None = None) -> dict[str, str]:
    """The generated sources ``{"model.c": text, "model.h": text}``.

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
    _check(SHA_RE, sha, "payload SHA-256")
    if ir_prefill["state"] != ir_decode["state"]:
        raise BringupError("prefill and decode IR declare different KV-cache state")
    states = []
    for i, s in enumerate(ir_prefill["state"]):
        states.append({"name": _check(NAME_RE, s["name"], "state name"), "index": i,
                       "bytes_per_pos": _int(s["bytes_per_position"], f"{s['name']} bytes_per_position", 1)})
    state_index = {s["name"]: s["index"] for s in states}
    weights = _weight_list([ir_prefill, ir_decode])
    weight_index = {w["name"]: i for i, w in enumerate(weights)}
    arena = _int(plan["arena"]["bytes"], "plan arena bytes")
    n_ctx_plan = _int(plan["state"]["n_ctx"], "plan state n_ctx", 1, 2**31 - 1)
    for ir in (ir_prefill, ir_decode):
        if ir["dims"].get("n_ctx") != n_ctx_plan:
            raise BringupError(f"{ir['phase']} IR has n_ctx {ir['dims'].get('n_ctx')}, the plan {n_ctx_plan}")
    phases = {}
    for ir in (ir_prefill, ir_decode):
        pp = plan["phases"][ir["phase"]]
        if _int(pp["arena_bytes"], "phase arena bytes") > arena:
            raise BringupError(f"{ir['phase']} plan needs {pp['arena_bytes']} bytes, the arena has {arena}")
        phases[ir["phase"]] = _Phase(ir, pp, maps, weight_index, state_index, arena)
    # an hparam absent from the GGUF is absent from the IR dims and 0 in the BUMP header (bump.write)
    dims = {k: _int(ir_prefill["dims"].get(k) or 0, f"dims.{k}", 0, 2**32 - 1) for k in BUMP_DIMS}
    ctx = {
        "abi_version": RUNTIME_ABI_VERSION,
        "payload_sha256": sha,
        "sources": {k: v for k, v in sorted({
            "ir_prefill": canonjson.sha256(ir_prefill), "ir_decode": canonjson.sha256(ir_decode),
            "memory_plan": canonjson.sha256(plan)}.items())},
        "circuit": _check(NAME_RE, ir_prefill["circuit"]["name"], "circuit name"),
        "dims": [dims[k] for k in BUMP_DIMS], "dim_names": list(BUMP_DIMS),
        "weights": weights, "states": states, "arena": arena, "n_ctx_plan": n_ctx_plan,
        "chunk": _int(ir_prefill["dims"]["n_tokens"], "prefill n_tokens", 1, 2**31 - 1),
        "n_vocab": dims["n_vocab"],
        "phases": [phases["prefill"].context(), phases["decode"].context()],
        "thread_ws_bytes": max(phases["prefill"].thread_ws, phases["decode"].thread_ws),
    }
    _check_values(ctx)
    env = environment()
    return {name: env.get_template(f"{name}.j2").render(**ctx) for name in ("model.h", "model.c")}




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
          manifest_path: str | Path | None = None) -> dict[str, str]:
    """Read the IR and the plan, generate, write ``model.c`` and ``model.h`` atomically into
    ``out_dir``. Returns the generated texts."""
    ir_dir = Path(ir_dir)
    irp = canonjson.read(ir_dir / "ir_prefill.json", "prefill IR")
    ird = canonjson.read(ir_dir / "ir_decode.json", "decode IR")
    plan = canonjson.read(Path(plan_path), "memory plan")
    sha = None
    if manifest_path is not None:
        sha = payload_sha_from_manifest(canonjson.read(Path(manifest_path), "weights manifest"), irp)
    texts = generate(irp, ird, plan, payload_sha256=sha)
    for name, text in texts.items():
        write_text(Path(out_dir) / name, text)
    return texts


def cli_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="bringup codegen", description="emit the model's C from IR + plan + kernel maps")
    ap.add_argument("--ir-dir", required=True, help="folder with ir_prefill.json and ir_decode.json")
    ap.add_argument("--plan", required=True, help="memory_plan.json")
    ap.add_argument("--out-dir", required=True, help="folder for model.c and model.h")
    ap.add_argument("--manifest", help="weights_manifest.json, for the BUMP payload SHA-256 when the IR "
                                       "does not carry it (checked against the IR's inputs_sha256)")
    a = ap.parse_args(argv)
    texts = write(a.ir_dir, a.plan, a.out_dir, a.manifest)
    n_calls = texts["model.c"].count("\n    rc = ")
    print(f"[codegen] {a.out_dir}/model.c ({n_calls} kernel calls), {a.out_dir}/model.h")
    return 0
