"""Provider resolution: for each IR op, exactly one kernel map (``kernel_maps/*.json``) that implements it.

Candidates are the maps of the op's name. Each is rejected, with every reason recorded, when:
its status is ``disabled`` (or ``experimental`` without ``allow_experimental``); the phase is not in
its ``selection.phases``; it needs an ISA feature the build target lacks; its interface variant
(``rope.neox/1`` -> ``neox``) differs from the op's; a port it requires is unbound or the op binds a
port it does not have; a bound tensor's dtype differs from the port's (weight format, activation
dtype); a dim it takes is missing or violates its ``min``/``max``/``multiple_of``; a param it takes
is missing, or the op carries a param it does not take; a port's shape at the op's dims differs
from the bound tensor's; for a ``linear`` op, its ``quant.activation`` is not what the IR's numerics
contract (``dims.numerics``, from the circuit's ``contracts.numerics.linear_activation`` or
``bringup ir --numerics``) requires for the weight format (:data:`NUMERICS`).

A dispatched provider (a map with ``variants``: one entry point whose ISA level is chosen when the
library loads) that survives absorbs the reference its ``scalar`` level runs bit for bit: that
reference is rejected with this reason, so the dispatched provider is the op's one provider.

Exactly one survivor is selected. Several survivors are allowed only when all are declared
equivalent (same ``selection.equivalence`` group): then the highest priority wins, and a tie at the
top is an error. Zero survivors, survivors from different groups or a priority tie raise
``UnsupportedError`` (exit 4) listing every candidate and why it was rejected. The trace is stored
in the op (``selection``) and shown in the IR report.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from bringup.core.errors import BringupError, UnsupportedError
from bringup.formats import ggml as formats
from bringup.ir.kernel_maps import eval_size

_PORT_SECTIONS = (("inputs", "inputs"), ("weights", "weights"), ("outputs", "outputs"), ("state", "state"))

# Numerics contracts for linear activations: name -> the activation dtype a provider must declare
# (``quant.activation``) for a given weight format (None: the contract defines none). ggml-q8 is
# the weight format's ggml-cpu vec_dot_type, from the format table (config/ggml_formats.json).
NUMERICS = {
    "f32": lambda wdtype: "F32",
    "ggml-q8": lambda wdtype: formats.vec_dot_types().get(wdtype),
}


def _variant(interface: str) -> str | None:
    head = interface.split("/", 1)[0]
    return head.split(".", 1)[1] if "." in head else None


def check_candidate(op: dict, tensors: Mapping[str, dict], m: Any, phase: str, isa: tuple[str, ...],
                    allow_experimental: bool = False, numerics: str = "f32") -> list[str]:
    """Every reason kernel map ``m`` (a ``bringup.ir.kernel_maps.KernelMap``) cannot implement ``op``;
    an empty list means it can. ``numerics`` (a key of :data:`NUMERICS`) constrains ``linear``
    providers' activation dtype (``quant.activation``). Raises BringupError for an unknown
    ``numerics``."""
    if numerics not in NUMERICS:
        raise BringupError(f"unknown numerics contract {numerics!r}; known: {', '.join(sorted(NUMERICS))}")
    dims = dict(op["dims"])
    # shapes are checked at the planned token count; pos at its largest valid value
    values = {**dims, "n_tokens": dims.get("n_tokens", 1)}
    values["pos"] = max(0, dims.get("n_ctx", values["n_tokens"]) - values["n_tokens"])
    return (_numerics_reasons(op, tensors, m.raw, numerics)
            + _selection_reasons(op, m, phase, isa, allow_experimental)
            + _dim_reasons(dims, m.raw) + _param_reasons(op, m.raw)
            + _port_reasons(op, tensors, m.raw, values))


def _numerics_reasons(op: dict, tensors: Mapping[str, dict], raw: dict, numerics: str) -> list[str]:
    """A linear provider must compute with the activation dtype the numerics contract gives its weights."""
    if op["op"] != "linear":
        return []
    wt = tensors[op["weights"]["w"]]["dtype"] if "w" in op.get("weights", {}) else None
    need = NUMERICS[numerics](wt)
    have = raw["quant"]["activation"]
    if need is None:
        return [f"numerics contract {numerics!r} defines no activation dtype for {wt} weights"]
    if have != need:
        return [f"numerics contract {numerics!r} needs {need} activations for {wt} weights; "
                f"this provider computes with {have}"]
    return []


def _selection_reasons(op: dict, m: Any, phase: str, isa: tuple[str, ...], allow_experimental: bool) -> list[str]:
    """The map's selection block (status, phases, ISA) and its interface variant against the op's."""
    sel = m.raw["selection"]
    reasons = []
    if sel["status"] == "disabled":
        reasons.append("status is disabled")
    elif sel["status"] == "experimental" and not allow_experimental:
        reasons.append("status is experimental (not allowed without --allow-experimental)")
    if phase not in sel["phases"]:
        reasons.append(f"phase {phase} not in its phases {sel['phases']}")
    missing_isa = sorted(set(sel["isa"]) - set(isa))
    if missing_isa:
        reasons.append(f"needs ISA {missing_isa}; build target has {sorted(isa) or 'none'}")
    if _variant(m.interface) != op.get("variant"):
        reasons.append(f"interface {m.interface} is variant {_variant(m.interface)!r}; the op needs "
                       f"{op.get('variant')!r}")
    return reasons


def _dim_reasons(dims: dict, raw: dict) -> list[str]:
    """Each dim the provider takes: carried by the op, inside [min, max], a multiple where required."""
    reasons = []
    for name, spec in raw["dims"].items():
        if name not in dims:
            reasons.append(f"takes dim {name!r}, which the op does not carry (op dims: {sorted(dims)})")
            continue
        v = dims[name]
        if v < spec["min"] or ("max" in spec and v > spec["max"]):
            reasons.append(f"dim {name}={v} outside [{spec['min']}, {spec.get('max', 'inf')}]")
        if "multiple_of" in spec and v % spec["multiple_of"]:
            reasons.append(f"dim {name}={v} is not a multiple of {spec['multiple_of']}")
    return reasons


def _param_reasons(op: dict, raw: dict) -> list[str]:
    """The op's params and the provider's, the same names, each of a type the C side takes."""
    reasons = []
    for name, spec in raw["params"].items():
        if name not in op["params"]:
            reasons.append(f"takes param {name!r}, which the op does not carry")
        elif spec["ctype"] == "int64_t" and not (isinstance(op["params"][name], int)
                                                 or float(op["params"][name]).is_integer()):
            reasons.append(f"param {name}={op['params'][name]!r} must be an integer (int64_t)")
        elif isinstance(op["params"][name], str):
            reasons.append(f"param {name}={op['params'][name]!r} is a string; the provider takes {spec['ctype']}")
    for name in sorted(set(op["params"]) - set(raw["params"])):
        reasons.append(f"op carries param {name!r}, which the provider does not take")
    return reasons


def _port_reasons(op: dict, tensors: Mapping[str, dict], raw: dict, values: dict) -> list[str]:
    """Every port of the provider bound by the op (unless optional) to a tensor of its dtype and of
    its shape at ``values``; every port the op binds is one the provider has."""
    reasons = []
    for op_sect, map_sect in _PORT_SECTIONS:
        bound = op.get(op_sect, {})
        ports = raw.get(map_sect, {})
        for port, spec in ports.items():
            if port not in bound:
                if not spec.get("optional"):
                    reasons.append(f"{map_sect} port {port!r} is required but the op binds none")
                continue
            tname = bound[port]
            t = tensors[tname]
            if t["dtype"] != spec["dtype"]:
                reasons.append(f"{map_sect} port {port!r} takes {spec['dtype']}; {tname} is {t['dtype']}")
            try:
                shape = [eval_size(d, values) for d in spec["shape"]]
            except BringupError as e:
                reasons.append(f"{map_sect} port {port!r} shape: {e}")
                continue
            ok = (shape == t["shape"]) if op_sect in ("weights", "state") else (
                math.prod(shape) == math.prod(t["shape"]) and shape[0] == t["shape"][0])
            if not ok:
                reasons.append(f"{map_sect} port {port!r} has shape {shape} at the op's dims; {tname} is {t['shape']}")
        for port in sorted(set(bound) - set(ports)):
            reasons.append(f"the op binds {op_sect} port {port!r}, which the provider does not have")
    return reasons


def resolve_op(op: dict, tensors: Mapping[str, dict], candidates: list[Any], phase: str,
               isa: tuple[str, ...] = (), allow_experimental: bool = False,
               numerics: str = "f32") -> dict:
    """Choose the provider of one op. Returns the ``selection`` record
    ``{"rule", "chosen", "candidates": [{"id", "accepted", "reasons", "priority", "equivalence"}]}``.

    ``candidates`` are the kernel maps of ``op["op"]`` (any order; they are sorted by priority
    descending, then id). Raises UnsupportedError listing every candidate and its reasons when
    zero survive, or several survive that are not one equivalence group with a single top priority.
    """
    cands = sorted(candidates, key=lambda m: (-int(m.selection["priority"]), m.id))
    trace = []
    for m in cands:
        reasons = check_candidate(op, tensors, m, phase, isa, allow_experimental, numerics)
        trace.append({"id": m.id, "accepted": not reasons, "reasons": reasons,
                      "priority": int(m.selection["priority"]), "equivalence": m.selection["equivalence"]})
    _absorb_dispatched_references(cands, trace)
    survivors = [t for t in trace if t["accepted"]]
    where = f"op {op['id']} ({op['op']}, phase {phase})"

    def listing() -> str:
        if not trace:
            return "  (no kernel map implements this op)"
        return "\n".join(f"  {t['id']}: " + ("ACCEPTED" if t["accepted"] else "; ".join(t["reasons"]))
                         for t in trace)

    if not survivors:
        raise UnsupportedError(f"no provider for {where}; candidates:\n{listing()}")
    if len(survivors) == 1:
        rule = "the only candidate that satisfies the op"
    else:
        groups = sorted({t["equivalence"] for t in survivors})
        if len(groups) > 1:
            raise UnsupportedError(f"{len(survivors)} providers for {where} from different equivalence groups "
                                   f"{groups} (not declared equivalent); candidates:\n{listing()}")
        if survivors[0]["priority"] == survivors[1]["priority"]:
            raise UnsupportedError(f"{len(survivors)} equivalent providers for {where} tie at priority "
                                   f"{survivors[0]['priority']}; candidates:\n{listing()}")
        rule = (f"highest priority ({survivors[0]['priority']}) of {len(survivors)} survivors of "
                f"equivalence group {groups[0]!r}")
    chosen = next(m for m in cands if m.id == survivors[0]["id"])
    if chosen.raw.get("variants"):
        rule += ("; a dispatched provider: its ISA level is chosen at load among "
                 + ", ".join(v["level"] for v in chosen.raw["variants"]))
    return {"rule": rule, "chosen": survivors[0]["id"], "candidates": trace}


def _absorb_dispatched_references(cands: list[Any], trace: list[dict]) -> None:
    """A surviving dispatched provider (map ``variants``) whose ``scalar`` level runs a reference
    provider bit for bit (``versus_reference.relation`` bitwise) contains that reference: the
    reference is then rejected with that reason instead of surviving as a second candidate, so
    resolution stays exactly one provider per op. A rejected dispatched provider absorbs nothing."""
    accepted = {t["id"]: t for t in trace if t["accepted"]}
    for m in cands:
        if m.id not in accepted:
            continue
        for v in m.raw.get("variants", []):
            ref = v["versus_reference"]
            if v["level"] == "scalar" and ref["relation"] == "bitwise" and ref["reference"] in accepted:
                t = accepted[ref["reference"]]
                t["accepted"] = False
                t["reasons"] = [f"runs as the scalar ISA level of dispatched provider {m.id} (chosen at load; "
                                "BU_ISA=scalar forces it), which is selected instead"]


def resolve_all(ir: dict, maps: Mapping[str, Any], isa: tuple[str, ...] = (),
                allow_experimental: bool = False) -> None:
    """Resolve every op of ``ir`` in place: sets ``provider``, ``selection``, ``inplace`` (output
    port -> input ports the map lets share its buffer) and ``scratch`` (name -> bytes at the op's
    planned dims; zero-byte scratch is kept so codegen passes NULL, 0). Linear providers are
    filtered by the IR's numerics contract ``ir["dims"]["numerics"]`` (every IR ``bringup.ir`` writes
    has one); a hand-built IR without ``dims`` resolves under ``"f32"``, the contract of the
    providers that existed before numerics contracts."""
    by_op: dict[str, list[Any]] = {}
    for m in maps.values():
        by_op.setdefault(m.op, []).append(m)
    for op in ir["ops"]:
        sel = resolve_op(op, ir["tensors"], by_op.get(op["op"], []), ir["phase"], isa, allow_experimental,
                         ir["dims"]["numerics"] if "dims" in ir else "f32")
        m = maps[sel["chosen"]]
        op["provider"] = m.id
        op["selection"] = sel
        inplace: dict[str, list[str]] = {}
        for a in m.raw.get("aliasing", []):
            if a["output"] in op["outputs"] and a["input"] in op["inputs"]:
                inplace.setdefault(a["output"], []).append(a["input"])
        op["inplace"] = {k: sorted(v) for k, v in sorted(inplace.items())}
        values = {**op["dims"], "n_tokens": op["dims"].get("n_tokens", 1)}
        values["pos"] = max(0, op["dims"].get("n_ctx", values["n_tokens"]) - values["n_tokens"])
        op["scratch"] = {k: int(v) for k, v in sorted(m.scratch_bytes(values).items())}
