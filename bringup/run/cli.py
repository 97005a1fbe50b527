"""``bringup run --model NAME [bringup-run options]``, ``bringup chat --model NAME [...]`` and
``bringup serve --model NAME [...]``.

All three replace this process (``os.execv``) with ``results/NAME/build/bringup-run -m
results/NAME/build`` plus the remaining arguments (``chat`` adds ``-i``, ``serve`` adds ``--server``:
the HTTP server is bringup-run's, no model runs in Python), so the terminal, Ctrl-C, SIGTERM
and the exit code are bringup-run's own (its options and exit codes: ``bringup-run --help``,
docs/runtime.md). Arguments after ``--`` are passed on verbatim, even ones that look like this
command's own.

Errors (one line, before anything runs): an unknown model name (exit 2, the registry's names
listed), ``--model`` twice or ``-m`` among the passed arguments (exit 2: the model is chosen by
NAME), a model that is not built (exit 7, naming the snakemake command that builds it).
"""
from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from pathlib import Path

from bringup.core.errors import BringupError, IncompleteError
from bringup.core.paths import RESULTS
from bringup.fetch import registry
from bringup.core.subcommands import Parser

#: What the workflow's build stage leaves in results/NAME/build (rules/build.smk).
BUILT = ("bringup-run", "libmodel.so")


#: bringup-run's flag for each command, and what the command does
MODES = {"run": ([], "run"), "chat": (["-i"], "chat on the terminal with"),
         "serve": (["--server"], "serve over HTTP (OpenAI-compatible, on 127.0.0.1:8080 unless --host/--port) with")}


def _parser(cmd: str) -> argparse.ArgumentParser:
    flags, what = MODES[cmd]
    ap = Parser(
        prog=f"bringup {cmd}", allow_abbrev=False,
        usage=f"bringup {cmd} --model NAME [--results-dir DIR] [--dry-run] [bringup-run options] [-- ...]",
        description=what + " the native program the workflow built for model NAME: results/NAME/build/bringup-run "
                    "-m results/NAME/build" + "".join(" " + f for f in flags) + ", with the remaining arguments",
        epilog="Every other option goes to bringup-run (-p, -f, -n, -t, -c, -s, --temp, --top-k, --top-p, --min-p, "
               "--repeat-penalty, --repeat-last-n, --json, -v, --host, --port, ...): see `bringup-run --help` or "
               "docs/runtime.md. Arguments after -- are passed on verbatim.")
    ap.add_argument("--model", required=True, metavar="NAME", help="model name of the registry (config/models.yaml)")
    ap.add_argument("--results-dir", type=Path, default=RESULTS, metavar="DIR",
                    help="the workflow's results folder (default: results/ of this checkout)")
    ap.add_argument("--dry-run", action="store_true", help="print the bringup-run command line instead of running it")
    return ap


def command(argv: list[str], chat: bool, serve: bool = False) -> tuple[list[str], bool]:
    """The bringup-run command line for ``bringup run``/``chat``/``serve`` arguments ``argv``, and
    whether --dry-run was given.

    Raises BringupError (exit 2) for an unknown model or arguments that choose files, and
    IncompleteError (exit 7) when results/NAME/build lacks bringup-run or libmodel.so.
    """
    cut = argv.index("--") if "--" in argv else len(argv)
    if sum(x == "--model" or x.startswith("--model=") for x in argv[:cut]) > 1:
        raise BringupError("--model given more than once (bringup-run -m is set to the model's build)")
    mode = "serve" if serve else "chat" if chat else "run"
    a, rest = _parser(mode).parse_known_args(argv[:cut])
    registry.load().model(a.model)   # an unknown name: BringupError listing the known ones
    for x in rest:
        if x in ("-m", "--model") or x.startswith("--model="):
            raise BringupError(f"{x}: the model is chosen by --model NAME here (bringup-run -m is set to its build)")
    build = a.results_dir / a.model / "build"
    for name in BUILT:
        if not (build / name).is_file():
            raise IncompleteError(f"model {a.model} is not built ({build / name} is missing): run "
                                  f"`snakemake build --config model={a.model}`")
    cmd = [str(build / "bringup-run"), "-m", str(build), *MODES[mode][0], *rest, *argv[cut + 1:]]
    return cmd, a.dry_run


def main(argv: list[str], chat: bool, serve: bool = False) -> int:
    """Run (exec) bringup-run for ``argv``; with --dry-run print its command line and return 0."""
    cmd, dry_run = command(argv, chat, serve)
    if dry_run:
        print(shlex.join(cmd))
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    # Python ignores SIGPIPE and an exec keeps ignored signals: give bringup-run the default back
    # (as subprocess's restore_signals does), so `bringup run ... | head` ends it
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.execv(cmd[0], cmd)   # replaces this process: bringup-run's terminal handling and exit code
    return 0   # not reached


def cli_main(argv: list[str]) -> int:
    return main(argv, chat=False)
