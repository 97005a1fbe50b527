"""C expressions for the structured arguments of bringup.codegen.phase, and the text pieces of one
kernel call (comment, wrapped call, observer hook) the model.c template lays out.

Two forms: code outside the layer loop (header, footer) names every
tensor by its full name and every weight / KV buffer by its index; the loop body names what is
the same in every looped layer once and reads what differs from the layer's ``LAYERS`` row
(bringup.codegen.layers). Every expression is made of checked names and numbers only.
"""
from __future__ import annotations

from bringup.codegen.checks import IDENT_RE, check, ident
from bringup.codegen.layers import RANKS, WIDTH, Offsets, Table, body_name, layer_part, rel_id, wrap
from bringup.core.errors import BringupError

RESERVED = ("w", "s", "op")   # LAYERS columns with a fixed meaning (the W/S macros, the op index)


def _first_index(names: list[str]) -> dict[int, int]:
    """Layer -> index of the layer's first entry in ``names`` (canonical ``layer.<L>.*`` names)."""
    out: dict[int, int] = {}
    for i, n in enumerate(names):
        lp = layer_part(n)
        if lp:
            out.setdefault(lp[0], i)
    return out


class Renderer:
    """C expressions over the shared weight and state lists and the per-layer table ``table``.
    ``roles["W" | "S"]``: role -> place of that role among a looped layer's weights / KV buffers,
    for the ``W_<role>`` / ``S_<role>`` enums."""

    def __init__(self, weights: list[dict], states: list[dict], table: Table):
        self.table = table
        self.first = {"W": _first_index([w["name"] for w in weights]),
                      "S": _first_index([s["name"] for s in states])}
        self.global_weights = {w["name"]: i for i, w in enumerate(weights) if not layer_part(w["name"])}
        self.roles: dict[str, dict[str, int]] = {"W": {}, "S": {}}
        self.kernel_types: dict[tuple, str] = {}    # C prototype (argument types) -> its typedef name
        self.kernel_cols: dict[tuple[str, int], str] = {}   # (phase, body op) -> its kernel column

    # -- outside the loop --
    def fixed_arg(self, a: dict, offs: Offsets) -> str:
        """The C expression of argument ``a`` (bringup.codegen.phase) in code outside the loop body:
        tensors by their full-name offset (registered in ``offs``), weights and KV buffers by index
        (a weight outside the layers by its ``W_<name>`` enum)."""
        k = a["k"]
        if k == "arena":
            c = offs.fixed(a["tensor"], a["off"])
            return f"A({c})" if "row" not in a else f"ROW({c}, {a['row']}, {a['row_bytes']})"
        if k == "weight":
            if a["name"] in self.global_weights:
                return f"x->weights[W_{ident(a['name'])}]"
            return f"x->weights[{a['index']}]"
        if k == "state":
            return f"x->state[{a['index']}]"
        return _plain(a)

    # -- the loop body: one argument across the looped layers --
    def body_arg(self, vals: dict[int, dict], offs: Offsets, use: str, rank: int = RANKS["number"],
                 desc: str | None = None) -> str:
        """The C expression of one argument of a loop-body op, from its value in every looped layer
        (``vals[L]``): what is the same in every layer is written once, what differs is read from a
        ``LAYERS`` column (``rank``, ``desc``: its place and comment; ``use``: the op, for the comment)."""
        a0 = next(iter(vals.values()))
        k = a0["k"]
        phase = offs.phase
        if k in ("arena", "weight", "state") and len({a.get("tensor", a.get("name")) for a in vals.values()}) == 1:
            return self.fixed_arg(a0, offs)   # one tensor for every layer (e.g. a weight they share)
        if k == "arena":
            name = body_name({L: a["tensor"] for L, a in vals.items()})
            offsets = {L: a["off"] for L, a in vals.items()}
            row = a0.get("row")
            if len(set(offsets.values())) == 1:
                c = offs.body(name, a0["off"])
                return f"A({c})" if row is None else f"ROW({c}, {row}, {a0['row_bytes']})"
            col = self.table.column("off_" + ident(name), "size_t", offsets, f"{phase} offset of {name}", use,
                                    phase, RANKS["offset"])
            return f"ARENA(ly->{col})" if row is None else f"ARENA(ly->{col} + (size_t)({row}) * {a0['row_bytes']}u)"
        if k in ("weight", "state"):
            return self._indexed(k, vals, use, phase)
        if k in ("int", "float"):
            values = {L: a["value"] for L, a in vals.items()}
            if len(set(values.values())) == 1:
                return _plain(a0)
            port = a0["port"]
            # a number of a float parameter stays a double in the table and is rounded at the call, as
            # its literal would be: (float) of the double
            col = self.table.column("p_" + port if port in RESERVED else port, a0["ctype"] if k == "int" else "double",
                                    values, desc or f"{a0['src']} {port}", use, phase, rank)
            return f"(float)ly->{col}" if a0["ctype"] == "float" else f"ly->{col}"
        return _plain(a0)   # runtime values, io, NULL: part of the layer's shape, the same in every layer

    def _indexed(self, k: str, vals: dict[int, dict], use: str, phase: str) -> str:
        """A weight (``W``) or KV buffer (``S``): ``W(role)`` when every looped layer holds it as
        ``layer.<L>.<role>`` at the same place after its first one; else a column of indices."""
        kind, array, what = ("W", "x->weights", "weight") if k == "weight" else ("S", "x->state", "KV-cache buffer")
        first = self.first[kind]
        parts = {L: layer_part(a["name"]) for L, a in vals.items()}
        places = {a["index"] - first.get(L, 0) for L, a in vals.items()}
        roles = {p[1] if p and p[0] == L else None for L, p in parts.items()}
        if len(places) == 1 and len(roles) == 1 and None not in roles:
            role, place = ident(roles.pop()), places.pop()
            if self.roles[kind].setdefault(role, place) == place:
                col = self.table.column(kind.lower(), "int32_t", dict(first), f"index in {array} of the first "
                                        f"{what} of the layer, {kind}(role) adds {kind}_role", None, phase,
                                        RANKS["index"])
                if col != kind.lower():
                    raise BringupError(f"per-layer column {kind.lower()} is taken")
                return f"{kind}({role})"
        port = next(iter(vals.values())).get("port", k)
        col = self.table.column(f"{kind.lower()}_{port}", "int32_t", {L: a["index"] for L, a in vals.items()},
                                f"index in {array}", use, phase, RANKS["index"])
        return f"{array}[ly->{col}]"

    # -- one kernel call --
    def call(self, op: dict, func: str, w_type: str, args: list[str], obs: str, op_ref: str, comment: str,
             indent: int) -> dict:
        """``{"comment", "pre": the BU_SPLIT line or "", "call": [lines, without indent and the
        closing ");"], "done": OP_DONE args}``. The thread's share (bringup.codegen.split): a
        ``range`` op calls its kernel on items [b, e) (pointers moved, counts replaced), a
        ``serial`` op on thread 0 only, a ``runtime`` op (linear) through bu_linear_rows/tiles."""
        sp, pre, close = op["split"], "", ""
        if op["rows"]:
            head, items = f"rc = {op['rows']['fn']}(", ["x", func, w_type, *args]
        elif sp["kind"] == "range":
            pre = f"BU_SPLIT({sp['n']}, {sp['align']})"
            items = [sp["repl"][i] if i in sp["repl"] else
                     f"AT({a}, b, {sp['shift'][i]})" if sp["shift"][i] else
                     f"WS({a})" if i in sp["scratch"] else a for i, a in enumerate(args)]
            head, close = f"rc = IN_RANGE({func}(", ")"
        else:
            head, items, close = f"rc = ON_THREAD0({func}(", args, ")"
        pad = len(head) if WIDTH - indent - len(head) >= 48 else 8
        rows = wrap(items, WIDTH - indent - len(head), WIDTH - indent - pad, last_extra=2 + len(close))
        rows[-1] += close
        cut = {"runtime": "by output rows" if op["rows"] and op["rows"]["fn"] == "bu_linear_rows" else "by tokens",
               "serial": "on one thread"}.get(sp["kind"]) or "by " + sp["cut"]
        return {"comment": f"{comment}, {cut}", "pre": pre, "done_macro": "OP_DONE" if op["barrier"] else "OP_NEXT",
                "call": [head + rows[0]] + [" " * pad + r for r in rows[1:]],
                "done": f"{op_ref}, {obs}, {op['obs']['row0']}, {op['obs']['n_rows']}"}

    def fixed_op(self, op: dict, offs: Offsets, indent: int) -> dict:
        """One op of the header or the footer: indices and full names."""
        args = [self.fixed_arg(a, offs) for a in _call_args(op)]
        comment = f"op {op['index']}: {op['id']} - circuit op {op['circuit_op']}, provider {op['provider']}"
        w_type = str(op["rows"]["w_type"]) if op["rows"] else ""
        return self.call(op, op["func"], w_type, args, self.fixed_arg(op["obs"]["data"], offs), str(op["index"]),
                         comment, indent)

    def body_op(self, j: int, layer_ops: dict[int, list[dict]], offs: Offsets, indent: int) -> dict:
        """Op ``j`` of the loop body, from op ``j`` of every looped layer (``layer_ops[L]``)."""
        ops = {L: o[j] for L, o in layer_ops.items()}
        L0, op = next(iter(ops.items()))
        rel = rel_id(op, L0)
        use = rel or op["id"]
        args = [self.body_arg({L: _call_args(o)[i] for L, o in ops.items()}, offs, use)
                for i in range(len(_call_args(op)))]
        obs = self.body_arg({L: o["obs"]["data"] for L, o in ops.items()}, offs, use)
        func, provider = op["func"], f"provider {op['provider']}"
        if len({o["func"] for o in ops.values()}) > 1:
            funcs = {L: o["func"] for L, o in ops.items()}
            col = self.table.column(ident(use) + "_kernel", self._kernel_type(op), funcs, "kernel", use, offs.phase,
                                    RANKS["kernel"])
            self.kernel_cols[(offs.phase, j)] = col
            func, provider = f"ly->{col}", f"provider per layer (LAYERS {col})"
        w_type = ""
        if op["rows"]:
            w_type = self.body_arg({L: {"k": "int", "src": "rows", "port": ident(use) + "_wtype", "ctype": "int32_t",
                                        "value": o["rows"]["w_type"]}
                                    for L, o in ops.items()}, offs, use, RANKS["kernel"], "GGML type of the weight")
        comment = f"layer.l.{rel} - circuit op {op['circuit_op']}, {provider}"
        return self.call(op, func, w_type, args, obs, "ly->op" + (f" + {j}" if j else ""), comment, indent)

    def _kernel_type(self, op: dict) -> str:
        """The typedef name of the op's kernel prototype (named after its kernel-map interface)."""
        proto = tuple(op["ctypes"])
        if proto not in self.kernel_types:
            base = check(IDENT_RE, ident(op["iface"].replace("/", "_")) + "_fn", "kernel interface")
            taken = set(self.kernel_types.values())
            self.kernel_types[proto] = next(n for n in [base] + [f"{base}{i}" for i in range(2, 1000)]
                                            if n not in taken)
        return self.kernel_types[proto]


def _call_args(op: dict) -> list[dict]:
    """The arguments the C call takes: bu_linear_rows drops runtime:n_tokens (phase.LINEAR_ROWS_CALL)."""
    return op["rows"]["args"] if op["rows"] else op["args"]


def _plain(a: dict) -> str:
    k = a["k"]
    if k == "int":
        return str(a["value"])
    if k == "float":   # the double's literal, rounded to float as the unrolled code's cast did
        return f"(float){a['value']}" if a["ctype"] == "float" else a["value"]
    if k == "rt":
        return f"x->{a['field']}"
    if k == "tokens":
        return "x->tokens"
    if k == "logits0":
        return "x->logits"
    if k == "logits":
        return f"x->logits + (size_t)(r - first) * {a['row_floats']}u"
    if k == "null":
        return "NULL"
    raise BringupError(f"an argument of kind {k!r} cannot be rendered")
