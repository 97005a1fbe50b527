"""The layer loop of the generated code: the IR's block (bringup.ir.block) is the loop body, and
for it what is the same in every layer (a literal or a named offset) and what differs (a field of
the per-layer table ``LAYERS``).

Every layer of the IR's block runs in the one loop body (``check_block`` refuses a layer whose
provider would need another call form). Within the body, a value equal in every layer is written
once (a literal, or a named offset ``BU_<PHASE>_OFF_<name>`` in model.h, named by the tensor's
name within the layer, ``prev_`` for the previous layer's); a value that differs becomes a
``LAYERS`` field: a number (gemma3's RoPE base and attention window, the block's layer values),
an offset, or the kernel itself when layers bind different providers of one prototype (a weight
stored in another GGML type in some layers, as Q4_K_M files do: the block's ``resolved``).
Weights and KV buffers are addressed from the layer's first one when every layer holds them in
the same order (``W(role)`` = ``x->weights[ly->w + W_<role>]``, ``S(role)`` likewise), like
llama2.c's ``w->wq + l * dim * dim``.
"""
from __future__ import annotations

import collections
import re
from typing import Any

from bringup.codegen.checks import IDENT_RE, NAME_RE, check, ident
from bringup.codegen.phase import Phase
from bringup.core.errors import BringupError, UnsupportedError

LAYER_RE = re.compile(r"^layer\.(\d+)\.(.+)$")
WIDTH = 119   # columns a line of generated C may use (house rule: lines under 120)
RANKS = {"index": 0, "number": 1, "offset": 2, "kernel": 3}   # order of the LAYERS fields


def layer_part(name: str) -> tuple[int, str] | None:
    """``(L, rest)`` of a canonical per-layer name ``layer.<L>.<rest>``, else None."""
    m = LAYER_RE.match(name)
    return (int(m.group(1)), m.group(2)) if m else None


def wrap(items: list[str], first: int, rest: int, last_extra: int = 0) -> list[str]:
    """``items`` joined by ``", "`` into rows of at most ``first`` (row 0) / ``rest`` columns; every
    row but the last ends with ``","``, and the last leaves ``last_extra`` columns free. A last row
    of one short item takes the item before it along, for readability."""
    def width(row: list[str], last: bool) -> int:
        return len(", ".join(row)) + (last_extra if last else 1)

    rows: list[list[str]] = [[]]
    for i, item in enumerate(items):
        room = first if len(rows) == 1 else rest
        if rows[-1] and width(rows[-1] + [item], i == len(items) - 1) > room:
            rows.append([])
        rows[-1].append(item)
    if len(rows) > 1 and len(rows[-1]) == 1 and len(rows[-1][0]) < 12 and len(rows[-2]) > 1 and \
            width(rows[-2][-1:] + rows[-1], True) <= rest:
        rows[-1].insert(0, rows[-2].pop())
    return [", ".join(r) + ("," if i < len(rows) - 1 else "") for i, r in enumerate(rows)]


def ranges(layers: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``; ``"none"`` for no layer."""
    out, run = [], []
    for L in layers:
        if run and L != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(L)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out) or "none"


class Segments:
    """A phase's ops as the IR states them (bringup.ir.block): ``header`` (before the layers),
    ``layers[L]`` (the block's ops bound to layer L, L = 0..n-1) and ``footer`` (after; holds the
    logits tail). UnsupportedError when an op of a layer is downstream of the last-row view."""

    def __init__(self, ph: Phase):
        n_header, blk = len(ph.ir["header"]), ph.ir["block"]
        n_body = len(blk["ops"])
        self.header: list[dict] = ph.ops[:n_header]
        self.layers: dict[int, list[dict]] = {L: ph.ops[n_header + L * n_body: n_header + (L + 1) * n_body]
                                              for L in range(blk["n_layer"])}
        self.footer: list[dict] = ph.ops[n_header + blk["n_layer"] * n_body:]
        if any(op["tail"] for ops in self.layers.values() for op in ops):
            raise UnsupportedError(f"{ph.name}: an op of a layer is downstream of the last-row view")


def _arg_form(a: dict) -> tuple:
    k = a["k"]
    if k == "arena":
        return ("arena", a.get("row"), a.get("row_bytes"))
    if k in ("weight", "state"):
        return (k,)
    if k in ("int", "float"):
        return (k, a["port"])
    return tuple(sorted(a.items()))


def rel_id(op: dict, L: int) -> str | None:
    """The id of op ``op`` of layer ``L`` within the layer (``layer.<L>.`` stripped), else None."""
    prefix = f"layer.{L}."
    return op["id"][len(prefix):] if op["id"].startswith(prefix) else None


def _call_form(op: dict) -> tuple:
    """What one call of the loop body fixes for every layer: the kernel's C prototype, the
    bu_linear_rows form, the thread split and each argument's kind (the numbers, and the kernel
    itself among kernels of one prototype, are per-layer table data)."""
    obs = op["obs"]
    return (tuple(op["ctypes"]), op["rows"] is not None, repr(sorted(op["split"].items())),
            tuple(_arg_form(a) for a in op["args"]),
            (_arg_form(obs["data"]), obs["row0"], obs["n_rows"], obs["dtype"], obs["row_elems"]))


def check_block(seg: Segments, phase: str) -> list[int]:
    """The layers of the IR's block, every one run by the one loop body: UnsupportedError (one line)
    when a layer's op calls its kernel in another form than layer 0's (a provider of another C
    prototype or argument list bound to one layer: the loop body has one call per block op)."""
    for L, ops in seg.layers.items():
        for a, b in zip(ops, seg.layers[0]):
            if _call_form(a) != _call_form(b):
                raise UnsupportedError(f"{phase}: block op {rel_id(a, L)} of layer {L} calls provider {a['provider']} "
                                       f"in another form than layer 0's {b['provider']} (C prototype, thread split "
                                       "or argument kinds); one loop body needs one call form per block op")
    return list(seg.layers)


class Table:
    """``LAYERS``: one row per layer, one column per value that differs between looped layers.
    A value is None where a layer does not use the column; two uses share a column
    when they agree wherever both are defined."""

    def __init__(self, n_layer: int):
        self.n = n_layer
        self.cols: dict[str, dict] = {}

    def column(self, name: str, ctype: str, values: dict[int, Any], desc: str, use: str | None,
               suffix: str, rank: int) -> str:
        """The C field holding ``values`` (layer -> value; a missing layer is None), named ``name``,
        or ``name_<suffix>`` / ``name_<i>`` when ``name`` already holds other values. ``desc`` says what
        the column is (its first use), ``use`` where it is used (the C comment lists every use);
        ``rank`` orders the fields (RANKS)."""
        check(IDENT_RE, name, "per-layer column")
        full = [values.get(L) for L in range(self.n)]
        for cname in [name, f"{name}_{suffix}"] + [f"{name}_{i}" for i in range(2, 1000)]:
            col = self.cols.get(cname)
            if col is None:
                self.cols[cname] = {"ctype": ctype, "values": full, "desc": desc, "uses": [use] if use else [],
                                    "rank": rank}
                return cname
            if col["ctype"] == ctype and all(a is None or b is None or a == b for a, b in zip(col["values"], full)):
                col["values"] = [b if a is None else a for a, b in zip(col["values"], full)]
                if use and use not in col["uses"]:
                    col["uses"].append(use)
                return cname
        raise BringupError(f"per-layer column {name}: too many different value lists")


class Offsets:
    """The named byte offsets of one phase (model.h ``BU_<PHASE>_OFF_<name>``): tensors used
    outside the loop body by their full name, loop-body constants by their name within the layer."""

    def __init__(self, phase: str):
        self.phase = phase
        self.names: dict[str, tuple[Any, int, str]] = {}   # C name -> (key, offset, section)

    def fixed(self, tensor: str, off: int) -> str:
        """The C name of ``tensor`` at byte offset ``off`` outside the loop body: its full name with
        dots as ``_``. BringupError if another tensor already has that C name."""
        cname = ident(check(NAME_RE, tensor, "tensor name"))
        got = self.names.setdefault(cname, (tensor, off, "fixed"))
        if got[0] != tensor:
            raise BringupError(f"{self.phase}: tensor names {tensor!r} and {got[0]!r} map to the same C name "
                               f"BU_{self.phase.upper()}_OFF_{cname}")
        return cname

    def body(self, name: str, off: int) -> str:
        """The C name of the loop-body offset ``off`` of the tensor named ``name`` within the layer
        (``body_name``); a name another offset already holds gets ``_2``, ``_3``..."""
        base = ident(check(NAME_RE, name, "tensor name"))
        for i in range(1, 1000):
            cname = base if i == 1 else f"{base}_{i}"
            got = self.names.setdefault(cname, (("body", name, off), off, "body"))
            if got[0] == ("body", name, off):
                return cname
        raise BringupError(f"{self.phase}: too many loop-body offsets named {name}")

    def macros(self, section: str) -> list[dict]:
        """model.h's ``{"macro", "offset"}`` of one section (``"fixed"`` or ``"body"``), in first-use order."""
        return [{"macro": f"BU_{self.phase.upper()}_OFF_{c}", "offset": off}
                for c, (_, off, sec) in self.names.items() if sec == section]


def body_name(tensors: dict[int, str]) -> str:
    """The name of a loop-body tensor across layers (``tensors[L]``: its full name in layer L):
    ``<rest>`` for layer L's own ``layer.L.<rest>``, ``prev_<rest>`` for layer L-1's; the most common
    of these (ties: the first layer's), and the first layer's full name only when no layer has one
    (layer 0 reads ``header.x`` where the others read ``prev_x_out``)."""
    rel, full = [], []
    for L, t in sorted(tensors.items()):
        lp = layer_part(t)
        if lp and lp[0] == L:
            rel.append(lp[1])
        elif lp and lp[0] == L - 1:
            rel.append("prev_" + lp[1])
        else:
            full.append(t)
    if not rel:
        return full[0]
    count = collections.Counter(rel)
    return max(rel, key=lambda c: (count[c], -rel.index(c)))
