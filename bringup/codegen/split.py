"""How the work of one kernel call is cut over the runtime's threads (docs/runtime.md, "Threads").

The generated forward pass runs on every thread at once; each thread does its share of every op
and the runtime puts a barrier between ops (bu_op_done). The share is a contiguous range
``[b, e)`` of items (``bu_split``), and the thread calls the op's own kernel on that range: its
pointers moved to item ``b``, its count set to ``e - b``. Every output element is computed by the
same kernel code from the same inputs in the same order as in one whole call, so any thread
count gives bit-identical results. What an item is depends on the kernel's interface:

- ``linear/1``: output rows when the call has one token (``bu_linear_rows``), else token rows
  (``bu_linear_tiles``); the runtime does the cut (the kernel calling convention is unchanged).
- elementwise (add, swiglu, geglu, scale, softcap, copy): elements of the flat ``[n_tokens * n]``
  array, cut in 16-element (64-byte) units; the kernel is called as one row of ``e - b``.
- per-token rows (rmsnorm, embed, argmax): token rows.
- rmsnorm_heads: head vectors (``n_tokens * n_heads`` rows of ``head_dim``).
- RoPE: token rows (position ``pos + b``), or heads when the call has one token.
- a kernel that takes ``runtime:head_begin`` / ``runtime:head_end`` (attention.f32.fast): query heads;
  the kernel gets the whole call's pointers and computes heads ``[b, e)`` (it appends the KV rows
  of its heads' groups and reads this call's keys from its inputs, so ranges never race).
- anything else (attention.f32.scalar): one thread (thread 0) runs the whole call; the others wait at
  the barrier. The op's comment in model.c says which cut it has.
"""
from __future__ import annotations

import math

from bringup.codegen.checks import integer
from bringup.core.errors import BringupError

ELEMENTWISE = {"add/1", "swiglu/1", "geglu/1", "scale/1", "softcap/1", "copy/1"}
TOKEN_ROWS = {"rmsnorm/1", "embed/1", "argmax/1"}
HEAD_ROWS = {"rmsnorm_heads/1"}
ROPE = {"rope.normal/1", "rope.neox/1"}
ELEM_ALIGN = 16   # elements per unit of an elementwise cut: one 64-byte cache line of fp32


def _unit(tensors: dict, n_vocab: int, a: dict, name: str | None, per: str, what: str) -> int:
    """Bytes from one item to the next of pointer argument ``a`` (tensor ``name``): a token row
    (``per="row"``) or an element (``per="elem"``)."""
    k = a["k"]
    if k == "tokens":
        return 4
    if k in ("logits", "logits0"):
        return 4 if per == "elem" else 4 * n_vocab
    t = tensors[name]
    shape = [integer(d, f"{what} shape", 1) for d in t["shape"]]
    nbytes = integer(t["bytes"], f"{what} bytes", 1)
    if per == "elem":
        if nbytes % math.prod(shape):
            raise BringupError(f"{what}: {name} is {nbytes} bytes for {math.prod(shape)} elements")
        return nbytes // math.prod(shape)
    if "row_bytes" in a:
        return a["row_bytes"]
    return nbytes // shape[0]


def split_of(op: dict, call: list[str], args: list[dict], tensors: dict, n_vocab: int, one_token: bool,
             iface: str, what: str) -> dict:
    """The cut of one non-linear op (module doc): ``{"kind": "serial"}`` or ``{"kind": "range", "n":
    C expression of the item count, "align": items per unit, "cut": what an item is, "shift": [bytes per item, 0 = not
    moved, per argument], "repl": {argument index: C expression}, "scratch": [argument indices]}``.
    ``call`` / ``args``: the kernel map's call list and its rendered arguments (bringup.codegen.phase)."""
    srcs = [s.partition(":") for s in call]
    idx = {(kind, port): i for i, (kind, _, port) in enumerate(srcs)}
    ntok_i = idx.get(("runtime", "n_tokens"))
    if ntok_i is None:
        return {"kind": "serial"}
    ntok = "x->n_tokens" if args[ntok_i]["k"] == "rt" else str(args[ntok_i]["value"])

    def dim(port: str) -> tuple[int, int]:
        i = idx.get(("dim", port))
        if i is None or args[i]["k"] != "int":
            raise BringupError(f"{what}: {iface} has no integer dim {port!r} to cut by")
        return i, args[i]["value"]

    def pointers(per: str, unit: int | None = None) -> list[int]:
        out = []
        for (kind, _, port), a in zip(srcs, args):
            if kind in ("activation", "output"):
                table = op["inputs"] if kind == "activation" else op["outputs"]
                out.append(unit if unit is not None else _unit(tensors, n_vocab, a, table[port], per, what))
            else:
                out.append(0)
        return out

    scratch = [i for i, (kind, _, _) in enumerate(srcs) if kind == "scratch" and args[i]["k"] != "null"]
    if iface in ELEMENTWISE:
        n_i, n = dim("n")
        return {"kind": "range", "n": f"{ntok} * {n}", "align": ELEM_ALIGN, "cut": "elements", "shift": pointers("elem"),
                "repl": {ntok_i: "1", n_i: "e - b"}, "scratch": scratch}
    if iface in TOKEN_ROWS:
        return {"kind": "range", "n": ntok, "align": 1, "cut": "tokens", "shift": pointers("row"),
                "repl": {ntok_i: "e - b"},
                "scratch": scratch}
    if iface in HEAD_ROWS:
        h_i, n_heads = dim("n_heads")
        _, head_dim = dim("head_dim")
        return {"kind": "range", "n": f"{ntok} * {n_heads}", "align": 1, "cut": "head vectors",
                "shift": pointers("row", 4 * head_dim),
                "repl": {ntok_i: "e - b", h_i: "1"}, "scratch": scratch}
    if iface in ROPE:
        h_i, n_heads = dim("n_heads")
        _, head_dim = dim("head_dim")
        if one_token:
            return {"kind": "range", "n": str(n_heads), "align": 1, "cut": "heads", "shift": pointers("row", 4 * head_dim),
                    "repl": {h_i: "e - b"}, "scratch": scratch}
        pos_i = idx.get(("runtime", "pos"))
        if pos_i is None:
            raise BringupError(f"{what}: {iface} takes no runtime:pos")
        return {"kind": "range", "n": ntok, "align": 1, "cut": "tokens", "shift": pointers("row"),
                "repl": {ntok_i: "e - b", pos_i: "x->pos + b"}, "scratch": scratch}
    if ("runtime", "head_begin") in idx and ("runtime", "head_end") in idx:
        # the kernel computes query heads [b, e) of the whole call (attention.f32.fast); nothing moves
        _, n_head = dim("n_head")
        return {"kind": "range", "n": str(n_head), "align": 1, "cut": "heads", "shift": [0] * len(args),
                "repl": {idx[("runtime", "head_begin")]: "b", idx[("runtime", "head_end")]: "e"},
                "scratch": scratch}
    return {"kind": "serial"}


# -- where the barrier between two ops can go --

def _touches(op: dict, tensors: dict) -> tuple[list[tuple], list[tuple], list[tuple]]:
    """(reads, writes, scratch) of one op as (resource, lo, hi) intervals: arena bytes (a view
    counts as its whole base tensor), KV-cache buffers by index (read and written), the logits.
    Planned scratch is apart: only thread 0 uses it (the others have their own), so two ops'
    scratch never conflict across threads."""
    reads, writes, scratch = [], [], []
    for kind, a in zip(op["srcs"], op["args"]):
        if a["k"] == "arena":
            size = a["bytes"] if "bytes" in a else tensors[a["tensor"]]["bytes"]
            r = ("arena", a["off"], a["off"] + size)
        elif a["k"] == "state":
            r = ("state", a["index"], a["index"] + 1)
        elif a["k"] in ("logits", "logits0"):
            r = ("logits", 0, 1)
        else:
            continue
        {"scratch": scratch, "output": writes, "state": writes}.get(kind, reads).append(r)
        if kind == "state":
            reads.append(r)
    return reads, writes, scratch


def _overlap(xs: list[tuple], ys: list[tuple]) -> bool:
    return any(a[0] == b[0] and a[1] < b[2] and b[1] < a[2] for a in xs for b in ys)


def no_barrier_after(ops: list[dict], tensors: dict) -> set[int]:
    """Indices i of ``ops`` (one straight run of code, in order) after which no barrier is needed:
    op i+1 neither reads memory that an op since the last barrier writes, nor writes memory such
    an op reads or writes (whatever the threads' shares, no thread can see another's unfinished
    work). The last op of the run always ends with a barrier."""
    out: set[int] = set()
    g_r: list[tuple] = []
    g_w: list[tuple] = []
    g_s: list[tuple] = []
    for i, op in enumerate(ops):
        r, w, sc = _touches(op, tensors)
        g_r, g_w, g_s = g_r + r, g_w + w, g_s + sc
        if i + 1 == len(ops):
            break
        nr, nw, ns = _touches(ops[i + 1], tensors)
        if _overlap(nr, g_w + g_s) or _overlap(nw, g_r + g_w + g_s) or _overlap(ns, g_r + g_w):
            g_r, g_w, g_s = [], [], []
        else:
            out.add(i)
    return out
