"""The IR report: one self-contained, interactive HTML file per model (no network).

Per phase: the layer loop as the IR states it (the block's ops once, the per-layer binding
table's values and providers), the dataflow grouped by layer (each op with its provider, numerics contract, buffers
with offsets and sizes), the rejected candidates of each op kind listed once, a memory timeline on
the phase's own scale with kernel scratch visible, the weights and the KV cache as views of their
own, copies and in-place hand-offs highlighted, search and filter, details on click. Template:
``reports/ir_report.html.j2``; script and style: ``reports/ir_report.{js,css}``, inlined.

Safety: the data reaches the page as one JSON document inside ``<script type="application/json">``
with ``<``, ``>`` and ``&`` escaped as ``\\u003c`` etc., and the script only ever sets
``textContent`` (never ``innerHTML``) from it, so a hostile tensor or model name stays text. The
same IR and plan give the same bytes (no date, sorted keys).

The providers view says what the program will run on the host that writes the report: each
provider's ISA levels (its kernel map's variants) and which of them the host's CPU features allow,
the level its dispatch picks by default, and, when a built program is given (``--build``), the
runtime's own account (``bringup-run --json``'s ``isa_dispatch``: the level each class of linear
call was measured to run faster at).

The URL fragment selects a state, so a headless browser can check a view without clicking:
``#view=dataflow&phase=decode&q=attn_q`` (views: dataflow, graph, memory, weights, kv,
providers; ``layer=N`` for the graph, ``ops=LO-HI`` for the memory timeline's range).
"""
from __future__ import annotations

import json
from pathlib import Path

import jinja2
import jinja2.sandbox

from bringup.core.atomic import write_text
from bringup.core.errors import BringupError
from bringup.core.native import run_command, stderr_tail
from bringup.core.paths import REPORTS
from bringup.core import isa
from bringup.ir import block
from bringup.ir import kernel_maps as kernels

PHASES = ("prefill", "decode")


def _contract(m) -> dict:
    """The part of a kernel map a reader of the report needs: what the provider promises."""
    c = m.raw.get("contract", {})
    return {"description": m.raw.get("description", ""), "storage": c.get("storage", {}),
            "compute": c.get("compute", ""), "accumulation": c.get("accumulation", ""),
            "reduction_order": c.get("reduction_order", ""), "rounding": c.get("rounding", []),
            "formula": c.get("formula", ""), "source": c.get("source", ""),
            "sources": m.raw.get("impl", {}).get("sources", []), "isa": m.selection.get("isa", []),
            "status": m.selection.get("status", ""),
            "levels": [{"level": v["level"], "cpu_features": v.get("cpu_features", [])} for v in m.raw.get("variants", [])]}


def runs_here(contract: dict, op: str, host: set[str] | None) -> str:
    """What a provider runs on a host with cpuinfo flags ``host`` (None: unknown), in words: its
    one C version when it has no ISA levels, else the highest level whose CPU features the host
    has (the runtime's default, csrc/kernels/bu_cpu.c), and for a linear provider with both avx2
    and avx512 allowed, the per-class measurement between them (docs/kernels.md)."""
    levels = contract.get("levels", [])
    if not levels:
        return "its one C version (no ISA levels)"
    if host is None:
        return "unknown (the host's CPU features were not read)"
    ok = [lv["level"] for lv in levels if set(lv["cpu_features"]) <= host]
    if not ok:
        return "none: the host lacks every level's CPU features"
    if op == "linear" and {"avx2", "avx512"} <= set(ok):
        return "avx2 or avx512, measured per class of call (same bits)"
    return ok[-1]


def _phase_data(ir: dict, ph: dict, rejsets: dict[str, int]) -> dict:
    """Ops, buffers and tensor placements of one phase, compact; ``rejsets`` interns the
    rejected-candidate lists (one entry per distinct list, shared by both phases)."""
    ops = []
    for op in block.expand(ir):
        rejected = [{"id": c["id"], "reasons": c["reasons"]} for c in op["selection"]["candidates"] if not c["accepted"]]
        key = json.dumps(rejected, sort_keys=True)
        rej = rejsets.setdefault(key, len(rejsets)) if rejected else None
        ops.append({"i": op["index"], "id": op["id"], "op": op["op"], "variant": op.get("variant"),
                    "layer": op.get("layer"), "provider": op["provider"], "rule": op["selection"]["rule"],
                    "rej": rej, "reads": sorted({**op["inputs"], **op["weights"]}.items()),
                    "writes": sorted(op["outputs"].items()), "state": sorted(op["state"].items()),
                    "dims": op["dims"], "params": op["params"], "scratch": op.get("scratch", {}),
                    "inplace": op.get("inplace", {}), "copy": op["op"] == "copy"})
    tensors = {n: {"kind": t["kind"], "dtype": t["dtype"], "shape": t["shape"], "bytes": t.get("bytes"),
                   **ph["tensors"].get(n, {})} for n, t in ir["tensors"].items() if t["kind"] != "weight"}
    buffers = [{**b, "scratch": ".scratch." in b["id"]} for b in ph["buffers"]]
    return {"n_tokens": ir["dims"]["n_tokens"], "logits": ir["logits"], "ops": ops, "buffers": buffers,
            "tensors": tensors, "aliases": ph["aliases"],
            "summary": {k: ph[k] for k in ("arena_bytes", "lower_bound_bytes", "ratio", "copy_ops", "kv_handoffs",
                                           "n_ops")}}


def report_data(irs: dict[str, dict], plan: dict, model_name: str = "", maps: dict | None = None,
                host: set[str] | None = None, dispatch: dict | None = None) -> dict:
    """Everything the page shows, as one JSON-able dict (the page's single data source). ``host``:
    the cpuinfo flags of the host the program will run on (None: not read); ``dispatch``: a built
    program's ``isa_dispatch`` (bringup-run --json), or None."""
    maps = kernels.load_maps() if maps is None else maps
    rejsets: dict[str, int] = {}
    phases = {p: _phase_data(irs[p], plan["phases"][p], rejsets) for p in PHASES}
    chosen = sorted({op["provider"] for p in PHASES for op in block.expand(irs[p])})
    ir0 = irs["prefill"]
    weights = [{"name": n, "dtype": t["dtype"], "shape": t["shape"], "bytes": t["bytes"]}
               for n, t in sorted(ir0["tensors"].items()) if t["kind"] == "weight"]
    return {
        "model": model_name or ir0["architecture"], "architecture": ir0["architecture"], "circuit": ir0["circuit"],
        "target": ir0["target"], "values": [[k, ir0["dims"][k], ir0["values_source"].get(k, "")] for k in sorted(ir0["dims"])],
        "arena": plan["arena"], "state": _state(ir0, plan), "alignment": plan["alignment"],
        "weights": weights, "excluded": ir0["weights"]["excluded"],
        "providers": _providers(irs, maps, chosen, host),
        "host": {"flags_read": host is not None, "levels": _host_levels(maps, host)},
        "dispatch": dispatch,
        "rejsets": [json.loads(k) for k, _ in sorted(rejsets.items(), key=lambda kv: kv[1])],
        "phases": phases,
        "loop": {p: _loop(irs[p]) for p in PHASES},
    }


def _loop(ir: dict) -> dict:
    """The IR's layer loop as the IR states it (bringup.ir.block): the body's ops once (provider,
    or "per layer"), and per layer what its binding gives that differs between layers: the layer
    values and the providers of the ops resolved per layer."""
    blk = ir["block"]
    per_layer = sorted({k for b in blk["layers"] for k in b.get("resolved", {})})
    names = sorted({k for b in blk["layers"] for k in b["values"]})
    varying = [k for k in names if len({repr(b["values"].get(k)) for b in blk["layers"]}) > 1]
    return {"n_layer": blk["n_layer"], "n_header": len(ir["header"]), "n_footer": len(ir["footer"]),
            "body": [{"id": op["id"], "op": op["op"], "circuit_op": op["circuit_op"],
                      "provider": op.get("provider", "per layer")} for op in blk["ops"]],
            "constant": {k: blk["layers"][0]["values"][k] for k in names if k not in varying} if blk["layers"] else {},
            "columns": varying + [f"{k} provider" for k in per_layer],
            "rows": [[b["layer"]] + [b["values"].get(k) for k in varying]
                     + [b["resolved"][k]["provider"] for k in per_layer] for b in blk["layers"]]}


def _providers(irs: dict[str, dict], maps: dict, chosen: list[str], host: set[str] | None) -> dict:
    """Each chosen provider's contract, with ``here``: what it runs on ``host`` (runs_here)."""
    kind = {op["provider"]: op["op"] for p in PHASES for op in block.expand(irs[p])}
    out = {}
    for pid in chosen:
        if pid in maps:
            c = _contract(maps[pid])
            out[pid] = {**c, "here": runs_here(c, kind[pid], host)}
    return out


def _host_levels(maps: dict, host: set[str] | None) -> list[str]:
    """The ISA levels of any kernel map whose CPU features ``host`` has, lowest first."""
    if host is None:
        return []
    seen: dict[str, None] = {}
    for m in maps.values():
        for v in m.raw.get("variants", []):
            if set(v.get("cpu_features", [])) <= host:
                seen.setdefault(v["level"], None)
    order = ["scalar", "avx2", "avx512"]
    return sorted(seen, key=lambda lv: (order.index(lv) if lv in order else len(order), lv))


def _state(ir: dict, plan: dict) -> dict:
    """The plan's KV cache buffers, each with its dtype and how the attention op stores into it: a
    copy of the call's fp32 K/V rows, or a conversion (every copy and conversion is visible)."""
    dtype = {st["name"]: st["dtype"] for st in ir["state"]}
    writer = {name: op["provider"] for op in block.expand(ir) for name in op["state"].values()}
    bufs = []
    for b in plan["state"]["buffers"]:
        dt, prov = dtype.get(b["name"], "?"), writer.get(b["name"], "?")
        store = (f"copy of the call's fp32 rows ({prov})" if dt == "F32" else
                 f"conversion fp32 -> {dt}, round to nearest even, on store ({prov}); read back widened exactly")
        bufs.append({**b, "dtype": dt, "store": store})
    return {**plan["state"], "buffers": bufs}


def _json_for_script(obj) -> str:
    # inside <script>, only "</" could end the element; escaping < > & covers it and HTML comments
    s = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render(irs: dict[str, dict], plan: dict, model_name: str = "", maps: dict | None = None,
           host: set[str] | None = None, dispatch: dict | None = None) -> str:
    """The report's HTML text for both phases' IR and the memory plan (the same inputs give the
    same bytes). ``host``, ``dispatch``: as report_data."""
    # sandboxed: the template reads the data it is given and calls nothing else
    env = jinja2.sandbox.SandboxedEnvironment(loader=jinja2.FileSystemLoader(str(REPORTS)), autoescape=True,
                                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    data = report_data(irs, plan, model_name, maps, host, dispatch)
    return env.get_template("ir_report.html.j2").render(
        d=data, data_json=_json_for_script(data),
        script=(REPORTS / "ir_report.js").read_text(), style=(REPORTS / "ir_report.css").read_text())


def write(path: str | Path, irs: dict[str, dict], plan: dict, model_name: str = "",
          dispatch: dict | None = None) -> None:
    """Render and write the report atomically to ``path``, for this host (its /proc/cpuinfo
    flags; a host without them gets "unknown", said on the page) and ``dispatch`` (report_data)."""
    try:
        host = isa.host_flags()
    except BringupError:
        host = None
    write_text(path, render(irs, plan, model_name, host=host, dispatch=dispatch))


#: The prompt the built program runs once for its dispatch account: long enough (about 60 tokens)
#: that prefill's classes are measured too, and 24 generated tokens for decode's.
DISPATCH_PROMPT = ("The lighthouse keeper climbed the spiral stairs every evening, counting the steps "
                   "aloud, and wrote the weather, the ships and the colour of the sea into a small book.")


def dispatch_of(build: Path, timeout_s: float = 120.0) -> dict:
    """The runtime ISA dispatch of the program built in ``build`` (``bringup-run -m BUILD`` once,
    ``--json``): its ``isa_dispatch`` object. Raises BringupError (exit 2) when the program cannot
    run or its answer holds no such object (an older build)."""
    cli = Path(build) / "bringup-run"
    p = run_command([cli, "-m", build, "-p", DISPATCH_PROMPT, "-n", "24", "--no-stop", "--json"],
                    timeout_s=timeout_s, what=f"the built program {cli}")
    if p.returncode != 0:
        raise BringupError(f"{cli} exited with {p.returncode}: {stderr_tail(p.stderr)}")
    try:
        doc = json.loads(p.stdout)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BringupError(f"{cli} --json did not print JSON") from None
    d = doc.get("isa_dispatch") if isinstance(doc, dict) else None
    if not isinstance(d, dict) or not isinstance(d.get("classes"), list):
        raise BringupError(f"{cli} --json has no isa_dispatch object (a build older than dispatch by measurement)")
    return d
