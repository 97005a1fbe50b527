"""The static tables of model.c as template context: the weight and KV-cache lists
(``bu_weight_spec`` / ``bu_state_spec``), the per-phase op tables (``bu_op_info``) and the
per-layer table ``LAYERS``.

A block of entries that is the same in every layer but for the layer number is written once, as
a macro of the layer (``LAYER_WEIGHTS(L)``, ``LAYER_STATES(L)``, ``LAYER_OPS(L, ...)``: names are
``"layer." #L ".<role>"``), and the table lists one macro call per such layer; the C array is
the same as one line per entry (same order, same strings, same numbers).
"""
from __future__ import annotations

import collections
from typing import Any

from bringup.codegen.checks import ident
from bringup.codegen.layers import WIDTH, Segments, Table, layer_part, rel_id, wrap
from bringup.codegen.phase import Phase
from bringup.core.errors import BringupError


def _calls(calls: list[str], indent: int = 4) -> list[dict]:
    """Macro calls, as many per line as fit."""
    rows: list[dict] = []
    for c in calls:
        if rows and len(rows[-1]["text"]) + 1 + len(c) <= WIDTH - indent:
            rows[-1]["text"] += " " + c
        else:
            rows.append({"text": c})
    return rows


def _blocks(items: list[dict], fixed: tuple[str, ...], scalars: tuple[tuple[str, str], ...], macro: str) -> dict:
    """A list of named entries as ``{"block", "params", "rows"}``: ``block`` is the most common run
    of one layer's entries (contiguous; roles and ``fixed`` fields), when at least two layers share
    it; a ``scalars`` field that differs between those layers is a macro argument
    (``<role>_<suffix>``); ``rows`` are one macro call per such layer, else the entries."""
    runs: dict[int, list[tuple[int, str, dict]]] = collections.defaultdict(list)
    for i, it in enumerate(items):
        lp = layer_part(it["name"])
        if lp:
            runs[lp[0]].append((i, lp[1], it))

    def structure(run: list[tuple[int, str, dict]]) -> tuple | None:
        if [i for i, _, _ in run] != list(range(run[0][0], run[0][0] + len(run))):
            return None
        return tuple((role, tuple(str(it[f]) for f in fixed)) for _, role, it in run)

    shapes = {L: structure(r) for L, r in runs.items()}
    count = collections.Counter(s for s in shapes.values() if s is not None)
    best = max(count, key=lambda s: count[s], default=None)
    if best is None or count[best] < 2:
        return {"block": [], "params": "", "rows": [{"item": it} for it in items]}
    group = [L for L, s in shapes.items() if s == best]
    params = [(pos, field, f"{ident(role)}_{suffix}") for pos, (role, _) in enumerate(best)
              for field, suffix in scalars if len({runs[L][pos][2][field] for L in group}) > 1]
    block = []
    for pos, (role, _) in enumerate(best):
        it = runs[group[0]][pos][2]
        entry = {"role": role, **{f: it[f] for f in fixed}}
        for field, _ in scalars:
            entry[field] = next((n for p, f, n in params if (p, f) == (pos, field)), f"{it[field]}u")
        block.append(entry)
    starts = {runs[L][0][0]: L for L in group}
    rows, calls, i = [], [], 0
    while i < len(items):
        if i in starts:
            L = starts[i]
            calls.append(f"{macro}({', '.join([str(L)] + [f'{runs[L][p][2][f]}u' for p, f, _ in params])})")
            i += len(best)
            continue
        rows += _calls(calls)
        calls = []
        rows.append({"item": items[i]})
        i += 1
    return {"block": block, "params": ", ".join(["L"] + [n for _, _, n in params]), "rows": rows + _calls(calls)}


def _enum(entries: list[tuple[str, int]]) -> list[str]:
    """Lines of ``enum { A = 1, B = 2 };`` wrapped at WIDTH (without the closing ``};``)."""
    items = [f"{n} = {v}" for n, v in entries]
    return wrap(items, WIDTH - len("enum { ") - 3, WIDTH - 4, last_extra=3) if items else []


def weight_tables(weights: list[dict], roles: dict[str, int]) -> dict:
    """WEIGHTS: ``weight_block`` (LAYER_WEIGHTS), ``weight_rows``, and the enums of the weights
    outside the layers (WEIGHTS index) and of the roles the loop body uses (place in a layer)."""
    blocks = _blocks(weights, ("n_dims", "shape"), (("ggml_type", "type"),), "LAYER_WEIGHTS")
    glob = [(f"W_{ident(w['name'])}", i) for i, w in enumerate(weights) if not layer_part(w["name"])]
    role_enum = sorted(((f"W_{r}", k) for r, k in roles.items()), key=lambda e: e[1])
    clash = {n for n, _ in glob} & {n for n, _ in role_enum}
    if clash:
        raise BringupError(f"weight names and layer weight roles map to the same C names {sorted(clash)}")
    return {"n_weights": len(weights), "weight_block": blocks["block"], "weight_params": blocks["params"],
            "weight_rows": blocks["rows"], "weight_enum": _enum(glob), "weight_roles": _enum(role_enum)}


def state_tables(states: list[dict], roles: dict[str, int]) -> dict:
    """STATES: ``state_block`` (LAYER_STATES), ``state_rows`` and the enum of the roles."""
    blocks = _blocks(states, ("bytes_per_pos",), (), "LAYER_STATES")
    return {"n_states": len(states), "state_block": blocks["block"], "state_rows": blocks["rows"],
            "state_roles": _enum(sorted(((f"S_{r}", k) for r, k in roles.items()), key=lambda e: e[1]))}


def _info(op: dict) -> dict:
    return {"func": op["func"], "circuit_op": op["circuit_op"], "layer": op["layer"], "id": op["id"],
            "dtype": op["obs"]["dtype"], "row_elems": op["obs"]["row_elems"]}


def op_tables(phases: dict[str, Phase], segs: dict[str, Segments], loops: dict[str, dict],
              kernel_cols: dict[tuple[str, int], str]) -> dict:
    """Per phase ``op_rows`` (OPS_<PHASE>: entries and LAYER_OPS calls) and the LAYER_OPS macros
    (``op_macros``: one if both phases' loop bodies describe their ops alike). A body op whose
    kernel is a per-layer column takes the kernel as a macro argument (its name: ``#kernel``)."""
    bodies = {}
    for name, loop in loops.items():
        if not loop["body"]:
            continue
        L0 = loop["body"][0]
        ops = [dict(_info(op), rel=rel_id(op, L0), param=kernel_cols.get((name, j)))
               for j, op in enumerate(segs[name].layers[L0])]
        bodies[name] = ops
    forms = {name: [(None if o["param"] else o["func"], o["param"], o["circuit_op"], o["rel"], o["dtype"],
                     o["row_elems"]) for o in ops] for name, ops in bodies.items()}
    shared = len(forms) == 2 and forms["prefill"] == forms["decode"]
    macros, macro_of = [], {}
    for name, ops in bodies.items():
        if shared and macros:
            macro_of[name] = macros[0]["name"]
            macros[0]["phases"].append(name)
            continue
        mname = "LAYER_OPS" if shared else f"LAYER_OPS_{name.upper()}"
        macro_of[name] = mname
        macros.append({"name": mname, "ops": ops, "phases": [name],
                       "params": ", ".join(["L"] + [o["param"] for o in ops if o["param"]])})
    out = {}
    for name, ph in phases.items():
        seg, loop = segs[name], loops[name]
        rows: list[dict] = [{"item": _info(op)} for op in seg.header]
        calls: list[str] = []
        for L, ops in seg.layers.items():
            if L in loop["body"]:
                args = [str(L)] + [op["func"] for j, op in enumerate(ops) if (name, j) in kernel_cols]
                calls.append(f"{macro_of[name]}({', '.join(args)})")
                continue
            rows += _calls(calls)
            calls = []
            rows += [{"item": _info(op)} for op in ops]
        rows += _calls(calls)
        rows += [{"item": _info(op)} for op in seg.footer]
        out[name] = rows
    return {"op_macros": macros, "op_rows": out}


def layer_table(table: Table, kernel_types: dict[tuple, str]) -> dict:
    """LAYERS: the struct's fields (declaration, comment) and one row of designated initializers per
    layer (wrapped at WIDTH), and the typedefs of the kernel columns' prototypes."""
    cols, rows = [], []
    order = sorted(table.cols, key=lambda n: table.cols[n]["rank"])   # stable: first use within a rank
    for name in order:
        c = table.cols[name]
        comment = c["desc"] + (f" ({', '.join(c['uses'])})" if c["uses"] else "")
        cols.append({"decl": f"{c['ctype']} {name}", "comment": comment})
    width = max((len(c["decl"]) for c in cols), default=0) + 1
    for c in cols:
        c["pad"] = " " * (width - len(c["decl"]))
        c["above"] = 4 + width + 1 + len(c["comment"]) + 6 > WIDTH
    for L in range(table.n):
        items = [f".{name} = {_value(table.cols[name]['values'][L])}" for name in order]
        rows.append(wrap(items, WIDTH - 6, WIDTH - 6, last_extra=2))
    typedefs = [{"name": n, "params": wrap(list(p), WIDTH - len(n) - 16, WIDTH - len(n) - 16, last_extra=2)}
                for p, n in kernel_types.items()]
    return {"layer_cols": cols, "layer_rows": rows, "kernel_typedefs": typedefs}


def _value(v: Any) -> str:
    return "0" if v is None else str(v)
