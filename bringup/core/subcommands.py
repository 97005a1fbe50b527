"""Shared command-line shapes: every command's parser is a ``Parser`` (a usage error is one line,
``bringup <cmd>: error: ... (bringup <cmd> --help)``, exit 2); commands made of jobs (``bringup
plan arena|memory``, ``bringup bench run|native|render``) have one dispatcher, so every such command
prints the same usage and exits the same way; commands that work on one model's results folder
share one parser head."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, NoReturn, Sequence

from bringup.core.errors import one_line, shown

#: exit code of a usage error (README's table: 2 bad input or usage)
USAGE_EXIT = 2


class Parser(argparse.ArgumentParser):
    """argparse's parser with bringup's usage error: one line on stderr, ``PROG: error: MESSAGE
    (PROG --help)``, escaped by ``one_line`` (a value from the command line may hold control
    characters), exit 2 -- argparse's own is the usage block then the message, two lines or
    more. Sub-parsers (``add_subparsers``) are Parsers too (argparse makes them of the parent's
    class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_EXIT, usage_error(self.prog, message) + "\n")


def usage_error(prog: str, message: str) -> str:
    """The one line of a usage error of ``prog`` (``bringup bench run``), ``message`` escaped."""
    return f"{prog}: error: {one_line(message)} ({prog} --help)"


Job = tuple[Callable[[list[str]], int], str]


def dispatch(prog: str, jobs: dict[str, Job], argv: Sequence[str]) -> int:
    """Run ``prog JOB ...``: ``jobs`` maps a job name to (its ``cli_main(argv) -> int``, one-line
    help). ``-h``/``--help`` prints the usage (exit 0); no job prints it to stderr (exit 2), and an
    unknown job says so (exit 2)."""
    argv = list(argv)
    width = max(map(len, jobs))
    usage = (f"usage: {prog} {{{','.join(jobs)}}} [options]   ({prog} JOB --help)\n\n"
             + "\n".join(f"  {k:<{width}}  {h}" for k, (_, h) in jobs.items()))
    if argv and argv[0] in ("-h", "--help"):
        print(usage)
        return 0
    if not argv or argv[0] not in jobs:
        what = f"unknown job {shown(repr(argv[0]))}" if argv else "no job given"
        print(usage_error(prog, f"{what}; jobs: {', '.join(jobs)}"), file=sys.stderr)
        return USAGE_EXIT
    return jobs[argv[0]][0](argv[1:])


def model_parser(prog: str, description: str, *, results_help: str, out_default: str,
                 gguf: bool = True) -> argparse.ArgumentParser:
    """A parser with the options every per-model stage command takes: ``--model`` (registry name),
    ``--results`` (``results/{model}``, what the stage reads), ``--gguf`` (the pinned GGUF, when
    ``gguf``) and ``--out-dir`` (default ``out_default``, e.g. ``RESULTS/certify``)."""
    ap = Parser(prog=prog, description=description)
    ap.add_argument("--model", required=True, help="the model's registry name")
    ap.add_argument("--results", required=True, type=Path, help=results_help)
    if gguf:
        ap.add_argument("--gguf", required=True, type=Path, help="the pinned GGUF the program was built from")
    ap.add_argument("--out-dir", type=Path, help=f"default: {out_default}")
    return ap
