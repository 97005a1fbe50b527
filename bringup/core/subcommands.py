"""Shared command-line shapes: commands made of jobs (``bringup plan arena|memory``, ``bringup bench
run|native|render``) have one dispatcher, so every such command prints the same usage and exits the
same way; commands that work on one model's results folder share one parser head."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
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


def model_parser(prog: str, description: str, *, results_help: str, out_default: str,
                 gguf: bool = True) -> argparse.ArgumentParser:
    """A parser with the options every per-model stage command takes: ``--model`` (registry name),
    ``--results`` (``results/{model}``, what the stage reads), ``--gguf`` (the pinned GGUF, when
    ``gguf``) and ``--out-dir`` (default ``out_default``, e.g. ``RESULTS/certify``)."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--model", required=True, help="the model's registry name")
    ap.add_argument("--results", required=True, type=Path, help=results_help)
    if gguf:
        ap.add_argument("--gguf", required=True, type=Path, help="the pinned GGUF the program was built from")
    ap.add_argument("--out-dir", type=Path, help=f"default: {out_default}")
    return ap
