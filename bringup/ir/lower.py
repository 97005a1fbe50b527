"""IR lowering: circuit + config.json + weights_manifest.json -> ``ir_prefill.json`` / ``ir_decode.json``.

The circuit's header ops are emitted once, its block once per layer, its footer once; every dim and
param expression is evaluated against the model's hyper-parameters (docs/ir_format.md). Each op
then gets exactly one provider (``bringup.ir.resolve``). The result is the complete input of codegen
besides the memory plan and the kernel maps: ops in execution order with tensors by port, dims,
params, state bindings (KV cache per layer), layer, circuit op, provider and selection trace.

Checks, each a clear ``BringupError``: unknown architecture (exit 4), unknown op / port in a
circuit, an expression over a null hyper-parameter, a dimension outside ``[1, 2^31-1]`` or a byte
count above ``2^53`` (size arithmetic overflow), a weight bound by the circuit but missing from the
BUMP, a BUMP weight that no op binds (unused), a weight whose shape or dtype does not match its
port, a tensor written but never read, no provider or two providers (exit 4).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bringup.core import canonjson
from bringup.ir import block, circuits
from bringup.ir import kernel_maps as kernels
from bringup.ir import resolve
from bringup.formats import ggml as formats
from bringup.core import schemas
from bringup.core.c_defines import KERNELS_HEADER, c_define
from bringup.core.errors import BringupError

PHASES = ("prefill", "decode")
DIM_MAX = c_define(KERNELS_HEADER, "BU_DIM_MAX")   # the C kernels' limit, read from their header
BYTES_MAX = 2**53            # byte counts stay exact in every JSON reader (IEEE double mantissa)
DTYPE_BYTES = {"F32": 4, "I32": 4, "F16": 2}
# KV cache element types (``bringup ir --kv-type``): name -> the dtype of every KV cache state tensor.
# f32 is the default and leaves the IR as it was before the option existed; f16 (llama.cpp's default
# cache type) makes the attention ops' state F16, which only the attention.f16.* providers accept.
KV_TYPES = {"f32": "F32", "f16": "F16"}
# Keys docs/architecture.md lists for config.json that a converter may leave out entirely; they
# enter expressions as null (absent), exactly like a key present with value null.
OPTIONAL_CONFIG_KEYS = ("rope_theta_local",)
# Op params that select the provider interface variant (``rope.neox/1``) instead of being passed to C.
VARIANT_PARAMS = {"rope": "layout"}


class SizeOverflowError(BringupError):
    """A dimension or byte count outside what the kernels and the plan can represent."""


def _check_dim(value: Any, what: str, expr: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not value.is_integer()):
        raise BringupError(f"{what} = {expr!r} evaluates to {value!r}, not an integer")
    v = int(value)
    if v < 1 or v > DIM_MAX:
        raise SizeOverflowError(f"{what} = {expr!r} = {v} is outside [1, {DIM_MAX}] "
                                   "(BU_DIM_MAX: dimensions must fit int32)")
    return v


def _nbytes(shape: list[int], dtype: str, what: str) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    b = n * DTYPE_BYTES[dtype]
    if b > BYTES_MAX:
        raise SizeOverflowError(f"{what}: shape {shape} x {DTYPE_BYTES[dtype]} bytes = {b} bytes "
                                   f"exceeds 2^53; the size arithmetic would overflow")
    return b


def namespace(circuit: circuits.Circuit, config: dict, n_tokens: int, n_logits: int,
              n_ctx: int) -> tuple[dict[str, Any], dict[str, str]]:
    """Values every expression of ``circuit`` may use, and where each came from.

    Config hyper-parameters (``config:<key>``), the phase values ``n_tokens`` / ``n_logits`` /
    ``n_ctx`` (``flag``/``phase``), then the circuit constants in declaration order
    (``circuit:<name> (<source>)``). Raises BringupError when a constant cannot be evaluated.
    """
    hp = config["hparams"]
    ns: dict[str, Any] = {}
    src: dict[str, str] = {}
    for k in OPTIONAL_CONFIG_KEYS:
        ns[k], src[k] = None, f"config:{k} (absent from config.json)"
    for k, v in hp.items():
        ns[k] = v
        src[k] = f"config:{k} ({config.get('sources', {}).get(k, 'no source recorded')})"
    ns["n_tokens"], src["n_tokens"] = n_tokens, "phase: tokens per call (prefill: --chunk; decode: 1)"
    ns["n_logits"], src["n_logits"] = n_logits, "phase: tokens whose logits are computed (--prefill-logits)"
    ns["n_ctx"], src["n_ctx"] = n_ctx, "flag: --ctx (KV cache positions)"
    for name, spec in circuit.data["constants"].items():
        if name in ns:
            raise BringupError(f"circuit {circuit.name}: constant {name!r} shadows a config value")
        ns[name] = spec["value"] if "value" in spec else _eval(spec["expr"], ns, f"constant {name}", circuit)
        src[name] = f"circuit:{name} ({spec['source']})"
    att = circuit.data["contracts"]["attention"]
    ns["rope_layout"], src["rope_layout"] = att["rope_layout"], "circuit: contracts.attention.rope_layout"
    num = circuit.data["contracts"]["numerics"]
    ns["numerics"] = num["linear_activation"]
    src["numerics"] = f"circuit: contracts.numerics.linear_activation ({num['source']})"
    return ns, src


def _eval(expr: str, ns: dict[str, Any], what: str, circuit: circuits.Circuit) -> Any:
    try:
        return circuits.evaluate(expr, ns)
    except circuits.ExprError as e:
        raise BringupError(f"circuit {circuit.name}: {what}: {e}") from None


def _manifest_weights(manifest: dict) -> dict[str, dict]:
    out = {}
    for t in manifest["tensors"]:
        if t["name"] in out:
            raise BringupError(f"weights manifest lists {t['name']!r} twice")
        out[t["name"]] = t
    return out


def kv_cache_dtype(ir_doc: dict) -> str | None:
    """The one element type of an IR's KV cache (``state`` tensors): a value of :data:`KV_TYPES`,
    or None for an IR without state. Raises BringupError when the state tensors differ in type
    (one cache type per model)."""
    dtypes = sorted({s["dtype"] for s in ir_doc.get("state", [])})
    if len(dtypes) > 1:
        raise BringupError(f"the IR's KV cache tensors have several dtypes {dtypes}; one type per model")
    return dtypes[0] if dtypes else None


def _shape(dims: dict[str, int], port_shape: list[str]) -> list[int]:
    """A port's shape (outermost first) from the op's evaluated dims."""
    return [dims[s] for s in port_shape]


def _phase_sizes(phase: str, chunk: int, n_ctx: int, logits: str) -> tuple[int, int]:
    """(tokens per call, rows of logits) of ``phase``; BringupError for an unknown phase or logits
    mode, a size outside [1, BU_DIM_MAX], or a chunk longer than the KV cache."""
    if phase not in PHASES:
        raise BringupError(f"unknown phase {phase!r}; phases: {', '.join(PHASES)}")
    if logits not in ("last", "all"):
        raise BringupError(f"--prefill-logits must be 'last' or 'all', not {logits!r}")
    n_tokens = chunk if phase == "prefill" else 1
    _check_dim(n_tokens, "tokens per call (--chunk)", str(n_tokens))
    _check_dim(n_ctx, "KV cache length (--ctx)", str(n_ctx))
    if n_tokens > n_ctx:
        raise BringupError(f"--chunk {n_tokens} exceeds --ctx {n_ctx}")
    return n_tokens, 1 if logits == "last" else n_tokens


def _tied_embeddings(config: dict, manifest: dict) -> bool:
    """Whether the output projection reuses the token embedding; the config and the manifest must agree."""
    tied = bool(config["tied_embeddings"])
    if tied and manifest.get("tied", {}).get("output") not in (None, "tok_embd"):
        raise BringupError(f"manifest ties output to {manifest['tied']['output']!r}; expected tok_embd")
    if tied != bool(manifest.get("tied")):
        raise BringupError(f"config.tied_embeddings={tied} but the manifest's tied map is {manifest.get('tied')!r}")
    return tied


class _Expansion:
    """One phase's IR under construction: tensors by name, ops in execution order and the KV cache
    state, filled section by section (the header, each layer's block, the footer)."""

    def __init__(self, circuit: circuits.Circuit, weights: dict[str, dict], *, tied: bool, kv_type: str,
                 n_ctx: int, n_tokens: int, n_logits: int) -> None:
        self.circuit, self.weights, self.tied, self.kv_type = circuit, weights, tied, kv_type
        self.n_ctx, self.n_tokens, self.n_logits = n_ctx, n_tokens, n_logits
        self.tensors: dict[str, dict] = {}
        self.ops: list[dict] = []
        self.state: list[dict] = []
        self.tensors["tokens"] = {"kind": "io", "dtype": "I32", "shape": [n_tokens],
                                  "bytes": _nbytes([n_tokens], "I32", "tokens"), "producer": None, "consumers": []}

    def bind_weight(self, name: str, expect_shape: list[int], expect_dtype: str, where: str) -> str:
        """The weight tensor ``name`` (added on first use) after checking it against the op's port."""
        w = self.weights.get(name)
        if w is None:
            raise BringupError(f"{where}: weight {name!r} is missing from the BUMP (weights manifest); "
                               f"the circuit {self.circuit.name} needs it")
        shape = list(reversed(w["shape"]))   # GGUF ne0-first -> outermost-first
        if shape != expect_shape:
            raise BringupError(f"{where}: weight {name!r} has shape {shape} (outermost first), the op "
                               f"expects {expect_shape}")
        if expect_dtype != "weight" and w["dtype"] != expect_dtype:
            raise BringupError(f"{where}: weight {name!r} is {w['dtype']}, the op needs {expect_dtype}")
        fmt = formats.by_name(w["dtype"])
        nbytes = fmt.tensor_bytes(w["shape"])
        if nbytes != w["bytes"]:
            raise BringupError(f"weight {name!r}: manifest says {w['bytes']} bytes, {w['dtype']} "
                               f"{w['shape']} is {nbytes}")
        if name not in self.tensors:
            self.tensors[name] = {"kind": "weight", "dtype": w["dtype"], "shape": shape, "bytes": nbytes,
                                  "weight": {"name": name, "ggml_type": fmt.ggml_type},
                                  "producer": None, "consumers": []}
        return name

    def section(self, section: str, layer: int | None, env: dict[str, Any], refs: dict[str, str],
                prefix: str) -> str:
        """Emit every op of ``section``; returns the tensor that is the section's output."""
        sec = self.circuit.data[section]
        for op in sec["ops"]:
            self.emit(section, op, layer, env, refs, prefix)
        if sec["output"] == "$last":
            if not self.ops:
                raise BringupError(f"circuit {self.circuit.name}: {section} emitted no op")
            return next(iter(self.ops[-1]["outputs"].values()))
        return refs[sec["output"]]

    def emit(self, section: str, op: dict, layer: int | None, env: dict[str, Any], refs: dict[str, str],
             prefix: str) -> None:
        """One circuit op as one IR op (unless its ``when`` is false): dims and params evaluated,
        every port bound to a checked tensor, its outputs added under ``prefix``."""
        loc = f"{prefix}{op['id']} ({self.circuit.name} {section}/{op['id']})"
        if "when" in op and not _eval(op["when"], env, f"{loc} when", self.circuit):
            return
        spec = circuits.OPS[op["op"]]
        dims, params = self._op_values(op, env, loc)
        tokens = self._token_rows(op, loc)
        variant = None
        if op["op"] in VARIANT_PARAMS:
            variant = params.pop(VARIANT_PARAMS[op["op"]])
        rec: dict[str, Any] = {"index": len(self.ops), "id": f"{prefix}{op['id']}", "op": op["op"],
                               "circuit_op": f"{section}/{op['id']}", "layer": layer,
                               "inputs": {}, "weights": {}, "outputs": {}, "state": {},
                               "dims": dims, "params": params, "variant": variant, "tokens": tokens}
        self._bind_inputs(op, spec, rec, refs, loc)
        self._bind_weights(op, spec, rec, loc)
        self._bind_state(op, spec, rec, loc)
        self._bind_outputs(op, spec, rec, refs, prefix, loc)
        self.ops.append(rec)

    def _op_values(self, op: dict, env: dict[str, Any], loc: str) -> tuple[dict[str, int], dict[str, Any]]:
        """The op's dims (each checked in [1, BU_DIM_MAX]) and params (finite, not null)."""
        dims = {}
        for d, expr in op["dims"].items():
            dims[d] = _check_dim(_eval(expr, env, f"{loc} dim {d}", self.circuit), f"{loc} dim {d}", expr)
        params = {}
        for p, expr in op.get("params", {}).items():
            v = _eval(expr, env, f"{loc} param {p}", self.circuit)
            if isinstance(v, float) and not math.isfinite(v):
                raise BringupError(f"{loc} param {p} = {expr!r} is not finite ({v})")
            if v is None:
                raise BringupError(f"{loc} param {p} = {expr!r} is null")
            params[p] = v
        return dims, params

    def _token_rows(self, op: dict, loc: str) -> str:
        """Which rows the op processes at run time: all of the call's tokens ("call"), or only the
        last one ("last")."""
        tok_expr = op["dims"]["n_tokens"].strip()
        if tok_expr == "n_tokens" or (tok_expr == "n_logits" and self.n_logits == self.n_tokens):
            return "call"
        if tok_expr == "n_logits":
            return "last"
        raise BringupError(f"{loc}: dim n_tokens must be 'n_tokens' or 'n_logits', not {tok_expr!r}")

    def _bind_inputs(self, op: dict, spec: dict, rec: dict, refs: dict[str, str], loc: str) -> None:
        for port, ref in op["inputs"].items():
            tname = refs.get(ref)
            t = self.tensors.get(tname) if tname else None
            if t is None:
                raise BringupError(f"{loc}: input {port} reads {ref!r}, which no earlier op wrote")
            want_shape, want_dtype = spec["inputs"][port]
            want = _shape(rec["dims"], want_shape)
            if t["dtype"] != want_dtype:
                raise BringupError(f"{loc}: input {port} is {tname} ({t['dtype']}), the op needs {want_dtype}")
            if math.prod(t["shape"]) != math.prod(want) or t["shape"][0] != want[0]:
                raise BringupError(f"{loc}: input {port} is {tname} with shape {t['shape']}, the op "
                                   f"reads {want} (dims {rec['dims']})")
            rec["inputs"][port] = tname
            t["consumers"].append(rec["index"])

    def _bind_weights(self, op: dict, spec: dict, rec: dict, loc: str) -> None:
        all_w = {**spec.get("weights", {}), **spec.get("optional_weights", {})}
        layer = rec["layer"]
        for port, ref in op.get("weights", {}).items():
            if isinstance(ref, dict):
                role = ref["tied"] if self.tied else ref["role"]
            else:
                role = ref
            name = f"layer.{layer}.{role}" if layer is not None else role
            want_shape, want_dtype = all_w[port]
            tname = self.bind_weight(name, _shape(rec["dims"], want_shape), want_dtype, loc)
            rec["weights"][port] = tname
            self.tensors[tname]["consumers"].append(rec["index"])

    def _bind_state(self, op: dict, spec: dict, rec: dict, loc: str) -> None:
        """The op's KV cache ports: one state tensor per layer and name, of the --kv-type element type."""
        layer = rec["layer"]
        for port, sname in op.get("state", {}).items():
            full = f"layer.{layer}.{sname}" if layer is not None else sname
            want_shape, want_dtype = spec["state"][port]
            want_dtype = KV_TYPES[self.kv_type] if want_dtype == "F32" else want_dtype
            shape = _shape(rec["dims"], want_shape)
            if full not in self.tensors:
                per_pos = _nbytes(shape[1:], want_dtype, full)
                total = _nbytes(shape, want_dtype, f"{full} (KV cache at --ctx {self.n_ctx})")
                self.state.append({"name": full, "layer": layer, "dtype": want_dtype, "shape": shape,
                                   "bytes_per_position": per_pos, "bytes": total})
                self.tensors[full] = {"kind": "state", "dtype": want_dtype, "shape": shape, "bytes": total,
                                      "state": full, "producer": None, "consumers": []}
            elif self.tensors[full]["shape"] != shape:
                raise BringupError(f"{loc}: state {full} used with shapes {self.tensors[full]['shape']} and {shape}")
            rec["state"][port] = full
            self.tensors[full]["consumers"].append(rec["index"])

    def _bind_outputs(self, op: dict, spec: dict, rec: dict, refs: dict[str, str], prefix: str, loc: str) -> None:
        for port, out in op["outputs"].items():
            tname = f"{prefix}{out}"
            if tname in self.tensors:
                raise BringupError(f"{loc}: output {port} writes {tname!r}, which already exists")
            want_shape, want_dtype = spec["outputs"][port]
            shape = _shape(rec["dims"], want_shape)
            self.tensors[tname] = {"kind": "activation", "dtype": want_dtype, "shape": shape,
                                   "bytes": _nbytes(shape, want_dtype, tname), "producer": rec["index"],
                                   "consumers": []}
            rec["outputs"][port] = tname
            refs[out] = tname

    def last_rows(self, x: str) -> str:
        """The footer's input: ``x`` itself, or a view of its last ``n_logits`` rows when only the
        last token's logits are computed."""
        base = self.tensors[x]
        if self.n_logits == base["shape"][0]:
            return x
        row_bytes = base["bytes"] // base["shape"][0]
        view = "footer.x_last"
        self.tensors[view] = {"kind": "view", "dtype": base["dtype"], "shape": [self.n_logits, *base["shape"][1:]],
                              "bytes": row_bytes * self.n_logits, "producer": None, "consumers": [],
                              "view": {"base": x, "row": "last", "rows": self.n_logits, "row_bytes": row_bytes}}
        return view

    def name_logits(self, out: str) -> None:
        """The footer's result ``out`` is the caller's logits buffer: renamed ``logits``, kind io."""
        t = self.tensors.pop(out)
        t["kind"] = "io"
        self.tensors["logits"] = t
        if t["consumers"]:
            raise BringupError(f"circuit {self.circuit.name}: the footer's result {out} is read by an op; "
                               "it must be the last result")
        for op in self.ops:
            for port, name in op["outputs"].items():
                if name == out:
                    op["outputs"][port] = "logits"

    def check_every_result_read(self) -> None:
        """Every activation written must be read (an unread result is a circuit bug)."""
        for name, t in self.tensors.items():
            if t["kind"] == "activation" and not t["consumers"] and not _has_view_reader(self.tensors, name):
                raise BringupError(f"tensor {name} is written by op {self.ops[t['producer']]['id']} but never read")


def _weights_record(tensors: dict, weights: dict[str, dict], manifest: dict, circuit: circuits.Circuit) -> dict:
    """The IR's ``weights``: the bound ones, and the GGUF's tensors left out with the reason;
    BringupError when a BUMP weight is bound by no op."""
    bound = sorted(n for n, t in tensors.items() if t["kind"] == "weight")
    unused = sorted(set(weights) - set(bound))
    if unused:
        raise BringupError(f"{len(unused)} weight(s) in the BUMP are bound by no op of circuit "
                           f"{circuit.name}: {', '.join(unused[:12])}{' ...' if len(unused) > 12 else ''}")
    excluded = [{"name": e["gguf_name"], "reason": f"excluded by import: {e['reason']}"}
                for e in manifest.get("excluded", [])]
    excluded += [{"name": e["name"], "reason": f"not a weight: {e.get('reason', '')}"}
                 for e in manifest.get("extra", [])]
    return {"bound": bound, "excluded": sorted(excluded, key=lambda e: e["name"])}


def lower(circuit: circuits.Circuit, config: dict, manifest: dict, phase: str, chunk: int,
          n_ctx: int, logits: str = "last", kv_type: str = "f32") -> dict:
    """Expand ``circuit`` for one phase into the IR of docs/ir_format.md, without providers.

    ``phase`` ``"prefill"`` plans ``chunk`` tokens per call, ``"decode"`` one; ``logits`` is
    ``"last"`` (logits of the last token only) or ``"all"``; ``n_ctx`` is the KV cache length;
    ``kv_type`` (a key of :data:`KV_TYPES`) the element type of every KV cache state tensor.
    Returns the IR dict as lowered: the op list ``ops`` unrolled (``ops[i]["provider"]`` not yet
    set) and ``lowered_layers[L] = {"inputs", "values"}`` (what layer L's block read, its layer
    values), which ``compile_ir`` folds into the IR's ``block`` (bringup.ir.block). Raises BringupError for any of the
    problems listed in the module docstring.
    """
    n_tokens, n_logits = _phase_sizes(phase, chunk, n_ctx, logits)
    ns, values_source = namespace(circuit, config, n_tokens, n_logits, n_ctx)
    weights = _manifest_weights(manifest)
    ex = _Expansion(circuit, weights, tied=_tied_embeddings(config, manifest), kv_type=kv_type, n_ctx=n_ctx,
                    n_tokens=n_tokens, n_logits=n_logits)
    x = ex.section("header", None, ns, {"$tokens": "tokens"}, "header.")
    layers = []
    for L in range(int(ns["n_layer"])):
        env = dict(ns, L=L)
        for name, spec in circuit.data["layer_values"].items():
            env[name] = _eval(spec["expr"], env, f"layer {L} value {name}", circuit)
        layers.append({"inputs": {"$in": x, "$tokens": "tokens"},
                       "values": {name: env[name] for name in circuit.data["layer_values"]}})
        x = ex.section("block", L, env, dict(layers[-1]["inputs"]), f"layer.{L}.")
    for name, spec in circuit.data["layer_values"].items():
        values_source[name] = f"circuit: per-layer {name} = {spec['expr']} ({spec['source']})"
    x_logits = ex.last_rows(x)
    out = ex.section("footer", None, ns, {"$tokens": "tokens", "$in": x, "$in_logits": x_logits}, "footer.")
    ex.name_logits(out)
    ex.check_every_result_read()
    weights_record = _weights_record(ex.tensors, weights, manifest, circuit)
    values = {k: v for k, v in ns.items() if v is not None and not isinstance(v, bool)}
    return {
        "schema_version": 2,
        "phase": phase,
        "circuit": {"name": circuit.name, "sha256": circuit.sha256},
        "architecture": config["architecture"],
        "dims": values,
        "values_source": {**{k: values_source[k] for k in values},
                          **{k: values_source[k] for k in circuit.data["layer_values"]}},
        "logits": logits,
        "io": {"tokens": "tokens", "logits": "logits"},
        "tensors": ex.tensors,
        "state": ex.state,
        "ops": ex.ops,
        "lowered_layers": layers,
        "weights": weights_record,
    }


def _has_view_reader(tensors: dict, name: str) -> bool:
    return any(t.get("view", {}).get("base") == name and t["consumers"] for t in tensors.values())


def _folded(ir: dict, circuit: circuits.Circuit) -> dict:
    """The lowered, resolved IR with its layers as one block (bringup.ir.block.fold); the expansion
    of the block must give back exactly the ops lowering emitted (else a BringupError: a bug)."""
    ops = ir["ops"]
    out = block.fold(ir, circuit, ir.pop("lowered_layers"))
    if block.expand(out) != ops:
        raise BringupError(f"circuit {circuit.name}: the IR block does not expand to the lowered ops")
    return out


def compile_ir(config: dict, manifest: dict, *, chunk: int = 64, n_ctx: int = 4096, logits: str = "last",
               isa: tuple[str, ...] = (), allow_experimental: bool = False,
               circuits_dir: Path | None = None, maps_dir: Path | None = None,
               numerics: str | None = None, kv_type: str = "f32") -> dict[str, dict]:
    """Both phases' IR, providers resolved: ``{"prefill": ir, "decode": ir}``.

    ``numerics`` (``"ggml-q8"`` or ``"f32"``, ``bringup.ir.resolve.NUMERICS``) overrides the circuit's
    ``contracts.numerics.linear_activation``; the IR records the value in ``dims.numerics`` and its
    origin in ``values_source.numerics``. An unknown name is a BringupError.

    ``kv_type`` (:data:`KV_TYPES`) is the KV cache element type: every state tensor gets its dtype,
    so the attention provider must take that cache (``state`` port dtype). ``"f32"`` (the default)
    adds nothing else to the IR; any other type is recorded in ``dims.kv_type`` and
    ``values_source.kv_type``. An unknown name is a BringupError.

    Validates config.json and the manifest against their schemas first, picks the circuit from
    ``config["architecture"]`` (UnsupportedError if none), lowers, resolves every op's provider
    (UnsupportedError listing the candidates if zero or several survive) and validates the result
    against ``ir.schema.json``.
    """
    schemas.validate(config, "config", "config.json")
    schemas.validate(manifest, "weights_manifest", "weights_manifest.json")
    if manifest["architecture"] != config["architecture"]:
        raise BringupError(f"manifest is for {manifest['architecture']!r}, config for {config['architecture']!r}")
    circuit = circuits.for_architecture(config["architecture"], circuits_dir or circuits.CIRCUITS,
                                      hparams=config["hparams"])
    maps = kernels.load_maps(maps_dir)
    if numerics is not None and numerics not in resolve.NUMERICS:
        raise BringupError(f"--numerics {numerics!r}: known contracts are {', '.join(sorted(resolve.NUMERICS))}")
    if kv_type not in KV_TYPES:
        raise BringupError(f"--kv-type {kv_type!r}: known KV cache types are {', '.join(KV_TYPES)}")
    inputs_sha = {"config": canonjson.sha256(config), "weights_manifest": canonjson.sha256(manifest),
                  "kernel_maps": kernels.maps_sha256(maps_dir)}
    out = {}
    for phase in PHASES:
        ir = lower(circuit, config, manifest, phase, chunk, n_ctx, logits if phase == "prefill" else "last", kv_type)
        if kv_type != "f32":
            ir["dims"]["kv_type"] = kv_type
            ir["values_source"]["kv_type"] = (f"flag: --kv-type {kv_type} (KV cache elements {KV_TYPES[kv_type]}; "
                                              "the attention op converts each call's fp32 K/V rows on store)")
        if numerics is not None:
            ir["values_source"]["numerics"] = (f"flag: --numerics (circuit declares "
                                               f"{ir['dims']['numerics']!r})")
            ir["dims"]["numerics"] = numerics
        resolve.resolve_all(ir, maps, isa=tuple(isa), allow_experimental=allow_experimental)
        ir = _folded(ir, circuit)
        ir["inputs_sha256"] = inputs_sha
        ir["target"] = {"isa": sorted(isa), "allow_experimental": allow_experimental}
        schemas.validate(ir, "ir", f"IR ({phase})")
        out[phase] = ir
    return out
