"""``bringup plan``: the plan stage's two jobs under one command.

``bringup plan arena``: the liveness arena plan of each phase (``memory_plan.json``) and the IR
report; ``bringup plan memory``: the memory model against a device budget, from the GGUF header
alone (and ``--calibrate``: measure the runtime's overheads with one run of the native CLI).
"""
from __future__ import annotations

from pathlib import Path

from bringup.core import canonjson, schemas, subcommands
from bringup.core.errors import BringupError
from bringup.plan import ir_report
from bringup.plan.planner import load_irs, plan_irs
from bringup.plan.memory import cli as memory_cli
from bringup.core.subcommands import Parser


def arena_main(argv: list[str] | None = None) -> int:
    """``bringup plan arena``: write memory_plan.json and print arena / lower bound per phase."""
    ap = Parser(
        prog="bringup plan arena",
        description="Liveness-based arena memory plan (greedy by size, best fit, 64-byte alignment) for the "
                    "prefill and decode IR; one arena of max(prefill, decode) bytes serves both.")
    ap.add_argument("--ir-dir", required=True, type=Path, help="folder with ir_prefill.json and ir_decode.json")
    ap.add_argument("--out", required=True, type=Path, help="memory_plan.json to write")
    ap.add_argument("--report", type=Path, help="also (re)write the HTML IR report, with the plan, here")
    ap.add_argument("--model", default="", help="the model's name, for the report's title (default: its architecture)")
    ap.add_argument("--build", type=Path, help="a built program's folder (results/M/build): the report's providers "
                    "view adds its runtime ISA dispatch (one run of bringup-run --json)")
    args = ap.parse_args(argv)
    if args.build and not args.report:
        raise BringupError("--build only adds to the report: give --report too")
    irs = load_irs(args.ir_dir)
    plan = plan_irs(irs)
    schemas.validate(plan, "memory_plan", "memory plan")
    if args.report:
        dispatch = ir_report.dispatch_of(args.build) if args.build else None
        ir_report.write(args.report, irs, plan, args.model, dispatch)
    canonjson.write(args.out, plan)
    for p, ph in plan["phases"].items():
        print(f"[plan] {p}: arena {ph['arena_bytes']} B / lower bound {ph['lower_bound_bytes']} B "
              f"= {ph['ratio']:.4f}; {len(ph['buffers'])} buffers, {len(ph['aliases'])} in place, "
              f"{ph['copy_ops']} copy ops, {ph['kv_handoffs']} KV hand-offs")
    a = plan["arena"]
    print(f"[plan] one arena of {a['bytes']} B serves both phases (two would take {a['two_arenas_bytes']} B); "
          f"KV cache {plan['state']['bytes']} B at n_ctx {plan['state']['n_ctx']} -> {args.out}")
    return 0


JOBS = {
    "arena": (arena_main, "liveness-based arena memory plan for each phase (+ the IR report)"),
    "memory": (memory_cli.cli_main, "footprint vs a device budget, from the GGUF header alone"),
}


def cli_main(argv: list[str]) -> int:
    """Dispatch ``bringup plan JOB ...``; exit 2 on a missing or unknown job."""
    return subcommands.dispatch("bringup plan", JOBS, argv)
