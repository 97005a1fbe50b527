"""``bringup plan``: the plan stage's two jobs under one command.

``bringup plan arena``: the liveness arena plan of each phase (``memory_plan.json``) and the IR
report; ``bringup plan memory``: the memory model against a device budget, from the GGUF header
alone (and ``--calibrate``: measure the runtime's overheads with one run of the native CLI).
"""
from __future__ import annotations

import sys

from bringup.plan import planner
from bringup.plan.memory import cli as memory_cli

JOBS = {
    "arena": (planner.cli_main, "liveness-based arena memory plan for each phase (+ the IR report)"),
    "memory": (memory_cli.cli_main, "footprint vs a device budget, from the GGUF header alone"),
}


def cli_main(argv: list[str]) -> int:
    """Dispatch ``bringup plan JOB ...``; exit 2 on a missing or unknown job."""
    usage = ("usage: bringup plan {arena,memory} [options]   (bringup plan JOB --help)\n\n"
             + "\n".join(f"  {k:<7} {h}" for k, (_, h) in JOBS.items()))
    if not argv or argv[0] in ("-h", "--help"):
        print(usage, file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] not in JOBS:
        print(f"bringup plan: unknown job {argv[0]!r}\n\n{usage}", file=sys.stderr)
        return 2
    return JOBS[argv[0]][0](argv[1:])
