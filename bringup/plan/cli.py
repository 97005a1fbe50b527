"""``bringup plan``: the plan stage's two jobs under one command.

``bringup plan arena``: the liveness arena plan of each phase (``memory_plan.json``) and the IR
report; ``bringup plan memory``: the memory model against a device budget, from the GGUF header
alone (and ``--calibrate``: measure the runtime's overheads with one run of the native CLI).
"""
from __future__ import annotations

from bringup.core import subcommands
from bringup.plan import planner
from bringup.plan.memory import cli as memory_cli

JOBS = {
    "arena": (planner.cli_main, "liveness-based arena memory plan for each phase (+ the IR report)"),
    "memory": (memory_cli.cli_main, "footprint vs a device budget, from the GGUF header alone"),
}


def cli_main(argv: list[str]) -> int:
    """Dispatch ``bringup plan JOB ...``; exit 2 on a missing or unknown job."""
    return subcommands.dispatch("bringup plan", JOBS, argv)
