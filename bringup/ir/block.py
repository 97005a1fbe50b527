"""The IR's layer loop: the circuit's block stated once, with a binding table per layer, and the
one expansion back to the op list in execution order (docs/ir_format.md, "Block").

An IR file holds ``header`` (ops run once before the layers), ``block`` and ``footer`` (ops run
once after). ``block = {"n_layer", "ops", "layers"}``: ``ops`` are the circuit's block ops once,
named within the layer; ``layers[L]`` binds what the body names to layer L:

- ``inputs``: the block's inputs (``$in``: the residual stream the layer reads, the header's
  output for layer 0 and layer L-1's output after; ``$tokens``);
- ``weights`` / ``state``: role -> the layer's weight / KV cache tensor;
- ``values``: the circuit's ``layer_values`` (gemma3: ``is_swa``, ``window``, ``theta_l``) and,
  under ``<op id>.<port>``, any other dim or param that differs between layers; a body op's dim or
  param that differs between layers is ``{"layer_value": name}``;
- ``resolved``: op id -> ``{"provider", "selection", "inplace", "scratch"}`` for the ops whose
  resolution differs between layers (in its selection trace, ``layer.{L}.`` stands for the
  layer's prefix, as in the body op's) (a Q4_K_M layer whose weight is Q6_K binds another linear
  provider); such a body op carries none of these four fields, every other body op carries them.

A tensor a body op names is ``$<input>`` (a block input), or a name within the layer: tensor
``layer.<L>.<name>``. ``expand`` is the only way back to the op list: the planner's liveness, the
IR report, X-ray, codegen and every other reader of ops call it. ``fold`` builds the block from
the op list lowering emitted layer by layer, and refuses a layer that is not the block.

Errors: BringupError (exit 2), one line, for a block that is not one (fold) or a block whose
binding table does not bind what its body names (expand).
"""
from __future__ import annotations

import copy
from typing import Any

from bringup.core.errors import BringupError

RESOLUTION = ("provider", "selection", "inplace", "scratch")   # set by bringup.ir.resolve, per op
NUMBERS = ("dims", "params")
# In a body op's selection trace, this stands for the layer's name prefix ``layer.<L>.`` (a reason
# names the layer's tensor: "layer.3.wq is Q4_1"), so that layers with one resolution share it.
LAYER_PREFIX = "layer.{L}."


def _strings(obj: Any, old: str, new: str) -> Any:
    """``obj`` (JSON) with ``old`` replaced by ``new`` in every string."""
    if isinstance(obj, str):
        return obj.replace(old, new)
    if isinstance(obj, list):
        return [_strings(v, old, new) for v in obj]
    if isinstance(obj, dict):
        return {k: _strings(v, old, new) for k, v in obj.items()}
    return obj


def _local(name: str, L: int) -> str | None:
    prefix = f"layer.{L}."
    return name[len(prefix):] if name.startswith(prefix) else None


def _ref(tname: str, L: int, inputs: dict[str, str], where: str) -> str:
    """What a body op calls tensor ``tname`` of layer L: a block input ``$x`` or a name within the layer."""
    for key, bound in inputs.items():
        if bound == tname:
            return key
    rel = _local(tname, L)
    if rel is None:
        raise BringupError(f"{where} reads {tname}, which is neither the layer's nor a block input")
    return rel


def _template(op: dict, L: int, inputs: dict[str, str]) -> dict:
    """Layer L's op as a body op: ids, tensors, weights and KV buffers named within the layer."""
    where = f"block op {op['id']}"
    rel = _local(op["id"], L)
    if rel is None or op["layer"] != L:
        raise BringupError(f"{where} is not an op of layer {L}")
    body = {"id": rel, "op": op["op"], "circuit_op": op["circuit_op"],
            "inputs": {p: _ref(t, L, inputs, where) for p, t in op["inputs"].items()},
            "weights": {p: _ref(t, L, {}, where) for p, t in op["weights"].items()},
            "outputs": {p: _ref(t, L, {}, where) for p, t in op["outputs"].items()},
            "state": {p: _ref(t, L, {}, where) for p, t in op["state"].items()}}
    for k in ("dims", "params", "variant", "tokens") + RESOLUTION:
        if k in op:
            body[k] = copy.deepcopy(op[k])
    if "selection" in body:
        body["selection"] = _strings(body["selection"], f"layer.{L}.", LAYER_PREFIX)
    return body


def _layer_value_name(circuit: Any, rel: str, section: str, port: str) -> str:
    """The binding-table name of a per-layer dim or param: the circuit's layer value when the op's
    expression is exactly one, else ``<op id>.<port>``."""
    for cop in circuit.data["block"]["ops"]:
        if cop["id"] == rel:
            expr = str(cop.get(section, {}).get(port, "")).strip()
            if expr in circuit.data["layer_values"]:
                return expr
    return f"{rel}.{port}"


def fold(ir: dict, circuit: Any, layers: list[dict]) -> dict:
    """The IR with its op list ``ir["ops"]`` (as lowered and resolved: header, layers 0..n-1 in
    order, footer) replaced by ``header``, ``block`` and ``footer``. ``layers[L]``: ``{"inputs",
    "values"}`` of layer L as lowering bound them. BringupError (one line) when a layer's ops are
    not the block's: another op sequence, another tensor, weight or KV buffer pattern."""
    ops = ir["ops"]
    n = len(layers)
    header = [op for op in ops if op["layer"] is None and op["id"].startswith("header.")]
    footer = [op for op in ops if op["layer"] is None and not op["id"].startswith("header.")]
    per = [[op for op in ops if op["layer"] == L] for L in range(n)]
    if n and ops != header + [op for p in per for op in p] + footer:
        raise BringupError("lowered ops are not header, layers 0..n-1 in order, footer")
    body: list[dict] = []
    bindings = [{"layer": L, "inputs": dict(layers[L]["inputs"]), "weights": {}, "state": {},
                 "values": dict(layers[L]["values"])} for L in range(n)]
    for j in range(len(per[0]) if n else 0):
        tmpl = [_template(per[L][j], L, layers[L]["inputs"]) if j < len(per[L]) else None for L in range(n)]
        body.append(_merge(tmpl, circuit, bindings))
        for L in range(n):
            for p, role in body[-1]["weights"].items():
                bindings[L]["weights"][role] = per[L][j]["weights"][p]
            for p, role in body[-1]["state"].items():
                bindings[L]["state"][role] = per[L][j]["state"][p]
    for L in range(n):
        if len(per[L]) != len(body):
            raise BringupError(f"layer {L} has {len(per[L])} ops, the block {len(body)}")
        if not bindings[L].get("resolved"):
            bindings[L].pop("resolved", None)
    out = {k: v for k, v in ir.items() if k != "ops"}
    out.update(header=header, block={"n_layer": n, "ops": body, "layers": bindings}, footer=footer)
    return out


def _merge(tmpl: list[dict | None], circuit: Any, bindings: list[dict]) -> dict:
    """One body op from op j of every layer: what every layer has alike stays in the op, numbers
    that differ go to the layers' ``values``, a resolution that differs to their ``resolved``."""
    first = tmpl[0]
    for L, t in enumerate(tmpl):
        if t is None:
            raise BringupError(f"layer {L} has fewer ops than the block (no op {first['id']})")
        for k in ("id", "op", "circuit_op", "inputs", "weights", "outputs", "state", "variant", "tokens"):
            if t.get(k) != first.get(k):
                raise BringupError(f"layer {L} op {t['id']}: {k} {t.get(k)!r} differs from layer 0's "
                                   f"{first.get(k)!r}; a block is the same ops in every layer")
    body = {k: v for k, v in first.items() if k not in RESOLUTION}
    for section in NUMBERS:
        for port in first[section]:
            vals = [t[section].get(port) for t in tmpl]
            if any(v != vals[0] or type(v) is not type(vals[0]) for v in vals):
                name = _layer_value_name(circuit, first["id"], section, port)
                body[section][port] = {"layer_value": name}
                for b, v in zip(bindings, vals):
                    if b["values"].setdefault(name, v) != v:
                        raise BringupError(f"layer {b['layer']} value {name}: {b['values'][name]!r} and {v!r}")
    res = [{k: t[k] for k in RESOLUTION if k in t} for t in tmpl]
    if all(r == res[0] for r in res):
        body.update(res[0])
    else:
        for b, r in zip(bindings, res):
            b.setdefault("resolved", {})[first["id"]] = r
    return body


def _bind(body: dict, b: dict, L: int) -> dict:
    """Body op ``body`` as layer L's op (without index), from layer L's binding ``b``."""
    where = f"block op {body['id']} in layer {L}"

    def bound(table: str, key: str) -> str:
        got = b.get(table, {}).get(key)
        if got is None:
            raise BringupError(f"{where}: the layer binds no {table[:-1] if table != 'state' else 'state'} {key!r}")
        return got

    def tensor(ref: str) -> str:
        return bound("inputs", ref) if ref.startswith("$") else f"layer.{L}.{ref}"

    op: dict[str, Any] = {"id": f"layer.{L}.{body['id']}", "op": body["op"], "circuit_op": body["circuit_op"],
                          "layer": L, "inputs": {p: tensor(r) for p, r in body["inputs"].items()},
                          "weights": {p: bound("weights", r) for p, r in body["weights"].items()},
                          "outputs": {p: tensor(r) for p, r in body["outputs"].items()},
                          "state": {p: bound("state", r) for p, r in body["state"].items()}}
    for section in NUMBERS:
        op[section] = {p: bound("values", v["layer_value"]) if isinstance(v, dict) else v
                       for p, v in body[section].items()}
    op["variant"], op["tokens"] = body["variant"], body["tokens"]
    res = b.get("resolved", {}).get(body["id"])
    if (res is None) == ("provider" not in body):
        raise BringupError(f"{where}: the provider is {'in neither' if res is None else 'in both'} "
                           "the body op and the layer's resolved table")
    res = copy.deepcopy(res if res is not None else {k: body[k] for k in RESOLUTION})
    res["selection"] = _strings(res["selection"], LAYER_PREFIX, f"layer.{L}.")
    op.update(res)
    return op


def expand(ir: dict) -> list[dict]:
    """The ops of IR ``ir`` in execution order, each as docs/ir_format.md "Ops" describes it (index,
    full tensor names, ``layer``): the header, the block once per layer, the footer. Fresh dicts:
    the caller may change them. BringupError (one line) for a block whose ``layers`` are not
    ``n_layer`` bindings 0..n-1, a body name no binding defines, or an index out of sequence."""
    blk = ir["block"]
    n = blk["n_layer"]
    if [b.get("layer") for b in blk["layers"]] != list(range(n)):
        raise BringupError(f"IR block: n_layer is {n} but the binding table lists layers "
                           f"{[b.get('layer') for b in blk['layers']]}")
    ops = [copy.deepcopy(op) for op in ir["header"]]
    for L, b in enumerate(blk["layers"]):
        for body in blk["ops"]:
            ops.append({"index": len(ops), **_bind(body, b, L)})
    ops += [copy.deepcopy(op) for op in ir["footer"]]
    for i, op in enumerate(ops):
        if op["index"] != i:
            raise BringupError(f"IR op {op['id']} has index {op['index']}, its place in the expanded op list is {i}")
    return ops
