"""One phase of the IR (prefill or decode) as codegen sees it: every op with its kernel, and every
C argument as structured data (where it comes from and its checked value), before any C is
written.

Every C argument comes from the op's kernel map ``call`` list (docs/kernels.md): ``activation:`` /
``output:`` -> an arena tensor at its planned offset (or the caller's ``tokens`` / ``logits`` for
io tensors, or a row of the base tensor for views), ``weight:`` -> a weight by its index in the
canonical weight list, ``state:`` -> a KV buffer by its index in the IR state list, ``dim:`` ->
the op's integer, ``param:`` -> the op's number, ``scratch:/scratch_cap:`` -> planned arena scratch
and its size, ``runtime:pos/n_tokens`` -> the call's values, ``runtime:head_begin/head_end`` -> 0
and the op's ``n_head`` (a whole call; a thread's share is cut by bringup.codegen.split).
``dim:n_ctx`` is the context length chosen at open (at most the planned ``n_ctx``: the runtime refuses more).

Logits: the prefill IR computes the last token's logits through a one-row view of the last
layer's output (``row: "last"``). The ops downstream of that view (the "logits tail": final norm,
head, soft-cap) run inside a loop over rows, so the same code gives the last row (default) or
every row (``bu_prefill_all_logits``) with the same kernels and the same planned one-row buffers.

Errors: BringupError (exit 2) for inconsistent inputs (a tensor without a planned offset, a name
that fails its pattern, a plan that does not fit), UnsupportedError (exit 4) for IR features this
generator does not emit (e.g. ``logits: "all"``).
"""
from __future__ import annotations

import math

from bringup.codegen.checks import (ALIGN, CIRCUIT_OP_RE, CTYPE_RE, FUNC_RE, IDENT_RE, NAME_RE, c_float, check,
                                    integer)
from bringup.codegen.split import split_of
from bringup.core.errors import BringupError, UnsupportedError
from bringup.ir import block
from bringup.ir import kernel_maps as kernels

# linear/1 ops with one token (decode, and the per-row logits tail) run through bu_linear_rows,
# which splits the output rows over the runtime's threads; it takes exactly this call list, minus
# runtime:n_tokens (always 1 there). Many-token linear/1 ops (prefill) run through
# bu_linear_tiles, which takes the whole list and splits the token rows (bringup.codegen.split).
LINEAR_ROWS_CALL = ["activation:x", "weight:w", "weight:bias", "output:y", "runtime:n_tokens", "dim:n_in",
                    "dim:n_out", "scratch:{}", "scratch_cap:{}"]


def linear_rows_scratch(call: list[str]) -> str | None:
    """The name of the one scratch buffer of a linear/1 call that has bu_linear_rows' argument list
    (LINEAR_ROWS_CALL, any scratch name), else None: such a call is cut over threads by the runtime."""
    if len(call) != len(LINEAR_ROWS_CALL) or not call[-1].startswith("scratch_cap:"):
        return None
    name = call[-1].partition(":")[2]
    return name if call == [c.format(name) for c in LINEAR_ROWS_CALL] else None


class Phase:
    """The C-ready description of one phase. ``ops[i]``: ``index``, ``id``, ``layer`` (-1: none),
    ``func``, ``provider``, ``circuit_op``, ``tail`` (runs per logits row), ``args`` (one dict per C
    argument, key ``k``: ``arena`` (``tensor``, ``off`` bytes, views also ``row``, ``row_bytes``),
    ``weight`` / ``state`` (``index``, ``name``), ``int`` / ``float`` (``value``: int or the C
    literal of a double, ``port``, ``src``: call source kind, ``ctype``: declared C type),
    ``tokens``, ``logits`` (``row_floats``), ``logits0``, ``null``, ``rt`` (``field``)),
    ``rows`` (None, or the bu_linear_rows / bu_linear_tiles form: ``fn``, ``w_type`` and ``args``),
    ``split`` (how the call is cut over threads, bringup.codegen.split; ``{"kind": "runtime"}`` for
    ``rows``) and ``obs`` (what the observer gets: ``data`` (an argument dict), ``row0``,
    ``n_rows``, ``dtype``, ``row_elems``)."""

    def __init__(self, ir: dict, plan_phase: dict, maps: dict, weights: dict, states: dict, arena: int):
        self.ir, self.plan, self.maps = ir, plan_phase, maps
        self.name = ir["phase"]
        self.weights, self.states = weights, states   # shared: BUMP name -> index, state name -> index
        self.arena = arena
        self.buffers = {b["id"]: b for b in plan_phase["buffers"]}
        self.thread_ws = 0   # largest scratch of an op whose work is cut over threads
        self.tensors = ir["tensors"]
        self.n_vocab = integer(ir["dims"]["n_vocab"], "n_vocab", 1)
        self.n_tokens = integer(ir["dims"]["n_tokens"], "n_tokens", 1)
        self.ir_ops = block.expand(ir)   # the op list in execution order
        self.tail = self._tail()
        self.ops = [self._op(op) for op in self.ir_ops]

    # -- planned offsets --
    def _offset(self, name: str, nbytes: int) -> int:
        """The planned byte offset of tensor ``name`` (``nbytes`` long), checked: aligned, inside its
        planned buffer, inside the arena."""
        check(NAME_RE, name, "tensor name")
        rec = self.plan["tensors"].get(name)
        if rec is None:
            raise BringupError(f"{self.name}: tensor {name} has no offset in the memory plan")
        off = integer(rec["offset"], f"{self.name} offset of {name}")
        if off % ALIGN:
            raise BringupError(f"{self.name}: planned offset {off} of {name} is not {ALIGN}-aligned")
        buf = self.buffers.get(rec.get("buffer"))
        if buf is None or not buf["offset"] <= off or off + nbytes > buf["offset"] + buf["size"]:
            raise BringupError(f"{self.name}: tensor {name} ({nbytes} bytes at {off}) is not inside its planned "
                               f"buffer {rec.get('buffer')!r}")
        if off + nbytes > self.arena:
            raise BringupError(f"{self.name}: {name} at [{off}, {off + nbytes}) does not fit the "
                               f"planned arena of {self.arena} bytes")
        return off

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
            if self.n_tokens != 1:
                raise UnsupportedError(f"{self.name} IR has no last-row view but {self.n_tokens} tokens per call")
            return set()
        if len(views) != 1:
            raise UnsupportedError(f"{self.name} IR has {len(views)} last-row views; codegen expects at most "
                                   "one (the footer's input)")
        reached, tail = set(views), set()
        for op in self.ir_ops:
            if any(t in reached for t in op["inputs"].values()):
                tail.add(op["index"])
                reached.update(op["outputs"].values())
        first = min(tail) if tail else len(self.ir_ops)
        if sorted(tail) != list(range(first, len(self.ir_ops))):
            raise UnsupportedError(f"{self.name}: the ops after the last-row view are not the final ops "
                                   f"of the IR ({sorted(tail)})")
        view = self.tensors[next(iter(views))]
        if view["view"]["rows"] != 1:
            raise UnsupportedError(f"{self.name}: last-row view of {view['view']['rows']} rows (expected 1)")
        if "logits" not in reached:
            raise BringupError(f"{self.name}: the logits are not computed from the last-row view")
        return tail

    # -- one C argument --
    def _tensor_arg(self, name: str, in_tail: bool, what: str) -> dict:
        t = self.tensors.get(name)
        if t is None:
            raise BringupError(f"{what}: tensor {name!r} is not in the IR tensor table")
        kind = t["kind"]
        if kind == "activation":
            return {"k": "arena", "tensor": name, "off": self._offset(name, t["bytes"])}
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
                row_expr = str(integer(row, f"view {name} row"))
            return {"k": "arena", "tensor": v["base"], "off": self._offset(v["base"], base["bytes"]),
                    "row": row_expr, "row_bytes": integer(v["row_bytes"], f"view {name} row_bytes", 1)}
        if kind == "io":
            if name == self.ir["io"]["tokens"]:
                return {"k": "tokens"}
            if name == self.ir["io"]["logits"]:
                if t["shape"] != [1, self.n_vocab]:
                    raise UnsupportedError(f"{what}: logits shape {t['shape']}, expected [1, {self.n_vocab}]")
                return {"k": "logits", "row_floats": self.n_vocab} if in_tail else {"k": "logits0"}
            raise BringupError(f"{what}: io tensor {name!r} is neither the tokens nor the logits")
        if kind == "weight":
            wname = t["weight"]["name"]
            return {"k": "weight", "index": self.weights[wname], "name": wname}
        raise BringupError(f"{what}: tensor {name} of kind {kind} cannot be passed here")

    def _arg(self, op: dict, src: str, ctype: str, m: kernels.KernelMap, in_tail: bool, loc: str) -> dict:
        kind, _, port = src.partition(":")
        if kind in ("activation", "output"):
            table = op["inputs"] if kind == "activation" else op["outputs"]
            if port not in table:
                raise BringupError(f"{loc}: the op has no {kind} port {port!r}")
            return self._tensor_arg(table[port], in_tail, loc)
        if kind == "weight":
            if port in op["weights"]:
                return dict(self._tensor_arg(op["weights"][port], in_tail, loc), port=check(IDENT_RE, port, loc))
            if m.raw.get("weights", {}).get(port, {}).get("optional"):
                return {"k": "null"}
            raise BringupError(f"{loc}: required weight {port!r} is not bound by the op")
        if kind == "state":
            if port not in op["state"]:
                raise BringupError(f"{loc}: the op binds no state {port!r}")
            sname = op["state"][port]
            return {"k": "state", "index": self.states[sname], "name": sname, "port": check(IDENT_RE, port, loc)}
        if kind == "dim":
            if port == "n_ctx":
                return {"k": "rt", "field": "n_ctx"}
            return {"k": "int", "src": kind, "port": check(IDENT_RE, port, f"{loc} port"),
                    "value": integer(op["dims"].get(port), f"{loc} value")}
        if kind == "runtime":
            if port == "n_tokens" and in_tail:
                # the tail runs row by row: its ops see the view's row count (1)
                return {"k": "int", "src": kind, "port": port, "value": integer(op["dims"].get("n_tokens"), loc, 1, 1)}
            if port in ("n_tokens", "pos", "n_ctx"):
                return {"k": "rt", "field": port}
            if port in kernels.RUNTIME_RANGE:   # a whole call: every head (split.py cuts the range)
                value = 0 if port == "head_begin" else integer(op["dims"].get("n_head"), f"{loc} n_head")
                return {"k": "int", "src": kind, "port": port, "value": value}
            raise UnsupportedError(f"{loc}: unknown runtime value {port!r}")
        if kind == "param":
            map_params = m.raw.get("params", {})
            v = op["params"].get(port, map_params.get(port, {}).get("none_value"))
            if v is None:
                raise BringupError(f"{loc}: the op has no value for param {port!r}")
            check(IDENT_RE, port, f"{loc} port")
            if map_params.get(port, {}).get("ctype", ctype) in ("float", "double"):
                return {"k": "float", "src": kind, "port": port, "value": c_float(v, loc)}
            return {"k": "int", "src": kind, "port": port, "value": integer(v, loc, -2**62)}
        if kind in ("scratch", "scratch_cap"):
            nbytes = integer(op.get("scratch", {}).get(port, 0), f"{loc} bytes")
            if kind == "scratch_cap":
                return {"k": "int", "src": kind, "port": check(IDENT_RE, port, f"{loc} port") + "_bytes",
                        "value": nbytes}
            if nbytes == 0:
                return {"k": "null"}
            name = f"{op['id']}.scratch.{port}"
            return {"k": "arena", "tensor": name, "off": self._offset(name, nbytes), "bytes": nbytes}
        raise UnsupportedError(f"{loc}: unknown call source kind {kind!r}")

    def _op(self, op: dict) -> dict:
        idx = op["index"]
        what = f"{self.name} op {idx} ({op['id']})"
        m = self.maps.get(op["provider"])
        if m is None:
            raise BringupError(f"{what}: provider {op['provider']!r} has no kernel map")
        func = check(FUNC_RE, m.function, f"{what} kernel function")
        params = kernels.parse_params(m.declaration)
        call = m.call
        if len(params) != len(call):
            raise BringupError(f"{what}: {m.id} declares {len(params)} C arguments, its call lists {len(call)}")
        in_tail = idx in self.tail
        args = []
        for (ctype, cname), src in zip(params, call):
            check(CTYPE_RE, ctype, f"{what} C type of {cname}")
            arg = self._arg(op, src, ctype, m, in_tail, f"{what} argument {cname} ({src})")
            if arg["k"] in ("int", "float"):
                arg["ctype"] = ctype   # the declared C type: the kernel's prototype converts to it
            args.append(arg)
        rows = None
        one_token = in_tail or (self.name == "decode" and self.n_tokens == 1)
        iface = str(m.raw.get("interface", "kernel"))
        rows_scratch = linear_rows_scratch(call) if iface == "linear/1" else None
        if rows_scratch is not None:
            wt = self.tensors[op["weights"]["w"]]
            rows = {"w_type": integer(wt["weight"]["ggml_type"], f"{what} weight type"),
                    "fn": "bu_linear_rows" if one_token else "bu_linear_tiles",
                    "args": args[:4] + args[5:] if one_token else args}
            split = {"kind": "runtime"}
            self.thread_ws = max(self.thread_ws, integer(op.get("scratch", {}).get(rows_scratch, 0), f"{what} scratch"))
        else:
            split = split_of(op, call, args, self.tensors, self.n_vocab, one_token, iface, what)
            if split["kind"] == "range":
                self.thread_ws = max([self.thread_ws] + [args[i]["bytes"] for i in split["scratch"]])
        layer = op.get("layer")
        return {"index": idx, "rows": rows, "split": split, "obs": self._observation(op, in_tail, what),
                "id": check(NAME_RE, op["id"], f"{what} id"), "func": func,
                "provider": check(NAME_RE, m.id, f"{what} provider"),
                "circuit_op": check(CIRCUIT_OP_RE, op["circuit_op"], f"{what} circuit_op"),
                "layer": -1 if layer is None else integer(layer, f"{what} layer"), "args": args, "tail": in_tail,
                "ctypes": [ctype for ctype, _ in params], "iface": iface,
                "srcs": [src.partition(":")[0] for src in call]}

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
        shape = [integer(d, f"{what} output shape", 1) for d in t["shape"]]
        planned_rows = 1 if in_tail else self.n_tokens
        if shape[0] != planned_rows:
            raise BringupError(f"{what}: output {name} has {shape[0]} rows, the op writes {planned_rows} per call")
        row_elems = math.prod(shape[1:]) if len(shape) > 1 else 1
        return {"data": self._tensor_arg(name, in_tail, f"{what} observed output"),
                "row0": "r" if in_tail else "0", "n_rows": "1" if in_tail else "x->n_tokens",
                "dtype": dtype, "row_elems": row_elems}
