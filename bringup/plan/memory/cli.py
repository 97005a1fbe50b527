"""``bringup plan memory``: the footprint of a model run from the GGUF header alone (no tensor data
is read), against a device budget; inverse queries and ranked alternatives when it does not fit;
``--calibrate`` measures the runtime's overheads with one run of the native CLI.

Exit codes: 0 ok, 2 bad input, 3 corrupt GGUF header, 4 unsupported model, 6 with
``--fail-if-not-fit`` when the run does not fit. Design: docs/memory_model.md.
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from bringup.core import canonjson
from bringup.core.atomic import write_text
from bringup.core.errors import BringupError, GateError
from bringup.core.hashing import sha256_file
from bringup.core.schemas import validate
from bringup.plan import planner
from bringup.plan.memory.arena import arena_from_plan, check_kv_dtype, nodes_from_ir, with_planned_arena
from bringup.plan.memory.budget import Budget, device_budget, load_devices, parse_bytes
from bringup.plan.memory.calibration import calibrate, calibration_prompt, overheads_from_calibration, run_native
from bringup.plan.memory.report import build_report, render_markdown
from bringup.plan.memory.spec import KV_DTYPES, ModelSpec, RunParams, read_model_header, spec_from_header
from bringup.core.subcommands import Parser


def _parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="bringup plan memory",
        description="Footprint of a model run from the GGUF header alone (no tensor data is read), "
                    "against a device budget; inverse queries and ranked alternatives when it does not fit.")
    ap.add_argument("--gguf", required=True, help="GGUF file (only its header is read)")
    ap.add_argument("--ctx", type=int, required=True, help="context length C (positions per sequence)")
    ap.add_argument("--seqs", type=int, default=1, help="sequences S, each with its own KV cache (default 1)")
    ap.add_argument("--kv-dtype", choices=sorted(KV_DTYPES), required=True,
                    help="KV cache element type; with --memory-plan / --ir-dir it must be the one the IR stores "
                         "(bringup ir --kv-type), else exit 2")
    ap.add_argument("--chunk", type=int, required=True,
                    help="prefill chunk T in tokens (bringup ir --chunk; sizes the activation estimate)")
    ap.add_argument("--swa-kv", choices=["window", "full"], default=None,
                    help="sliding-window layers keep only their window (ring buffer) or a full-length cache; "
                         "default: as the circuit's kv_layout says")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--device", help="device profile name from config/devices.yaml")
    g.add_argument("--budget", help="explicit budget, bytes or with a unit (e.g. 2GiB, 500MB)")
    ap.add_argument("--headroom", type=float, default=None,
                    help="fraction of --budget kept free (required with --budget; a device has its own)")
    ap.add_argument("--devices", default=None, help="device profiles file (default config/devices.yaml)")
    ap.add_argument("--memory-plan", default=None,
                    help="use this memory_plan.json (bringup plan) for the activation arena instead of planning")
    ap.add_argument("--ir-dir", default=None,
                    help="with --memory-plan: the IR it was planned from (ir_prefill/decode.json), for the op-node table")
    ap.add_argument("--activations", choices=["auto", "plan", "estimate"], default="auto",
                    help="plan: compile the IR and plan the arena in-process from the header (fails if the "
                         "circuit or a provider is missing); estimate: hyperparameter upper bound; auto "
                         "(default): plan, or estimate when planning is impossible, recording why")
    ap.add_argument("--calibration", default=None, help="runtime calibration JSON (runtime overheads)")
    ap.add_argument("--per-node", action="store_true", help="also list every op node per layer and every weight tensor")
    c = ap.add_argument_group("calibration (measure runtime overheads with the native CLI instead of planning)")
    c.add_argument("--calibrate", metavar="OUT_JSON", default=None,
                   help="run bringup-run at --ctx and write a runtime calibration record here")
    c.add_argument("--bringup-run", default=None, help="the native CLI (results/{model}/build/bringup-run)")
    c.add_argument("--libmodel", default=None, help="its model library (results/{model}/build/libmodel.so)")
    c.add_argument("--weights", default=None, help="the BUMP weights (results/{model}/convert/weights.bump)")
    ap.add_argument("--fail-if-not-fit", action="store_true", help="exit 6 when the run does not fit the budget")
    ap.add_argument("--out", default=None, help="write memory_model.json here")
    ap.add_argument("--md", default=None, help="write the Markdown table here")
    return ap


def _cli_calibrate(a: argparse.Namespace, spec: ModelSpec, p: RunParams) -> int:
    missing = [f for f in ("bringup_run", "libmodel", "weights") if not getattr(a, f)]
    if missing:
        raise BringupError("--calibrate needs " + ", ".join("--" + m.replace("_", "-") for m in missing))
    if p.seqs != 1:
        raise BringupError("--calibrate measures one sequence (the CLI runs one); use --seqs 1")
    if spec.arena is None:
        raise BringupError(f"--calibrate needs the planned arena (no plan: {spec.no_plan_reason})")
    n = min(64, max(1, p.ctx // 2))
    run = run_native(a.bringup_run, a.libmodel, a.weights, ctx=p.ctx,
                     prompt_tokens=calibration_prompt(spec.hparams["n_vocab"], n), max_tokens=4)
    cal = calibrate(spec, [{"ctx": p.ctx, "seqs": 1, "kv_dtype": p.kv_dtype, "chunk": p.chunk,
                            "peak_rss_bytes": run["peak_rss_bytes"]}],
                    binary_sha256=sha256_file(a.bringup_run), library_sha256=sha256_file(a.libmodel),
                    command=[Path(run["command"][0]).name, *(Path(x).name for x in run["command"][1:3]),
                             *run["command"][3:]])
    canonjson.write(a.calibrate, cal)
    ov = cal["overheads"][0]["bytes"]
    print(f"calibration: peak RSS {cal['points'][0]['peak_rss_bytes']} - predicted "
          f"{cal['points'][0]['predicted_bytes']} -> runtime overhead {ov} bytes ({ov / 2**20:.1f} MiB); "
          f"wrote {a.calibrate}")
    return 0


def cli_main(argv: list[str]) -> int:
    """``bringup plan memory``: see ``--help``. Exit 0, 2 bad input, 6 with --fail-if-not-fit."""
    a = _parser().parse_args(argv)
    budget = None
    if a.device:
        if a.headroom is not None:
            raise BringupError("--headroom applies to --budget; a device profile carries its own headroom")
        budget = device_budget(a.device, load_devices(a.devices) if a.devices else None)
    elif a.budget:
        if a.headroom is None:
            raise BringupError("--budget needs --headroom (fraction kept free, e.g. 0.1)")
        if not 0 <= a.headroom < 1:
            raise BringupError(f"--headroom must be in [0, 1), got {a.headroom}")
        budget = Budget(f"--budget {a.budget}", parse_bytes(a.budget), a.headroom, "--headroom")
    p = RunParams(a.ctx, a.seqs, a.kv_dtype, a.chunk)
    header = read_model_header(a.gguf)
    inputs: dict[str, Any] = {"gguf_header_sha256": header.header_sha256}
    ring = None if a.swa_kv is None else a.swa_kv == "window"
    spec = spec_from_header(header, kv_ring_buffer=ring)
    if spec.circuit_sha256:
        inputs["circuit_sha256"] = spec.circuit_sha256
    if a.memory_plan:
        if a.activations == "estimate":
            raise BringupError("--memory-plan and --activations estimate contradict each other")
        plan = canonjson.read(a.memory_plan, "memory plan")
        validate(plan, "memory_plan", a.memory_plan)
        check_kv_dtype(a.kv_dtype, [b["dtype"] for b in plan["state"]["buffers"] if "dtype" in b], a.memory_plan)
        arena = arena_from_plan(plan, Path(a.memory_plan).name)
        if a.ir_dir:
            irs = planner.load_irs(Path(a.ir_dir))
            if plan["inputs_sha256"] != {f"ir_{k}": canonjson.sha256(v) for k, v in irs.items()}:
                raise BringupError(f"{a.memory_plan} was not planned from the IR in {a.ir_dir} (inputs_sha256 differ)")
            check_kv_dtype(a.kv_dtype, [s["dtype"] for s in irs["prefill"]["state"]], f"the IR in {a.ir_dir}")
            arena = dataclasses.replace(arena, chunk=irs["prefill"]["dims"]["n_tokens"],
                                        nodes=tuple(nodes_from_ir(irs)), nodes_source=f"IR from {Path(a.ir_dir).name}/")
        spec = dataclasses.replace(spec, arena=arena)
        inputs["memory_plan_sha256"] = sha256_file(a.memory_plan)
    elif a.ir_dir:
        raise BringupError("--ir-dir goes with --memory-plan (without it the IR is compiled in-process)")
    elif a.activations != "estimate":
        spec = with_planned_arena(spec, header, p, required=a.activations == "plan")
    if a.calibration:
        cal = canonjson.read(a.calibration, "calibration")
        ovs, src = overheads_from_calibration(cal, Path(a.calibration).name)
        if cal["model_header_sha256"] != header.header_sha256:
            raise BringupError(f"{a.calibration} was measured on another model (header "
                               f"{cal['model_header_sha256'][:12]} != {header.header_sha256[:12]})")
        spec = dataclasses.replace(spec, overheads=ovs, overheads_source=src)
        inputs["calibration_sha256"] = sha256_file(a.calibration)
    if a.calibrate:
        return _cli_calibrate(a, spec, p)
    rep = build_report(spec, p, budget, per_node=a.per_node, inputs=inputs,
                       headroom_for_min=a.headroom if a.headroom is not None else 0.0)
    if a.out:
        canonjson.write(a.out, rep)
    md = render_markdown(rep)
    if a.md:
        write_text(a.md, md)
    total = rep["total_bytes"]
    line = (f"{spec.architecture}: {total} bytes ({total / 2**20:.1f} MiB) at C={p.ctx} S={p.seqs} {p.kv_dtype}"
            + ("" if rep["complete"] else f" [INCOMPLETE: {', '.join(rep['missing'])} absent]")
            + (f" [estimated: {', '.join(rep['estimated'])}]" if rep["estimated"] else ""))
    if budget:
        line += f"; {rep['budget']['verdict']} in {budget.usable_bytes} usable bytes"
    print(line)
    if not a.out and not a.md:
        print(md)
    if a.fail_if_not_fit and budget and not rep["budget"]["fits"]:
        raise GateError(f"does not fit: {total} > {budget.usable_bytes} usable bytes")
    return 0
