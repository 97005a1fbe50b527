"""Commands made of jobs (``bringup plan arena|memory``, ``bringup bench run|native|render``): one
dispatcher, so every such command prints the same usage and exits the same way."""
from __future__ import annotations

import sys
from typing import Callable, Sequence

Job = tuple[Callable[[list[str]], int], str]


def dispatch(prog: str, jobs: dict[str, Job], argv: Sequence[str]) -> int:
    """Run ``prog JOB ...``: ``jobs`` maps a job name to (its ``cli_main(argv) -> int``, one-line
    help). ``-h``/``--help`` prints the usage (exit 0); no job prints it to stderr (exit 2), and an
    unknown job says so (exit 2)."""
    argv = list(argv)
    width = max(map(len, jobs))
    usage = (f"usage: {prog} {{{','.join(jobs)}}} [options]   ({prog} JOB --help)\n\n"
             + "\n".join(f"  {k:<{width}}  {h}" for k, (_, h) in jobs.items()))
    if not argv or argv[0] in ("-h", "--help"):
        print(usage, file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] not in jobs:
        print(f"{prog}: unknown job {argv[0]!r}\n\n{usage}", file=sys.stderr)
        return 2
    return jobs[argv[0]][0](argv[1:])
