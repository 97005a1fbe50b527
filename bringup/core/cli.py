"""`bringup <command>`: one entry point; command X is stage X, in package ``bringup/X/``.

Exit codes: 0 ok, 1 internal error (a bug: traceback shown), 2 bad input or usage, 3 integrity
(hash mismatch, corrupt file), 4 unsupported (architecture, quant type, no provider), 5 resource
unavailable (network, missing dependency, disk full), 6 a gate failed (parity, certification,
budget), 7 a result is missing (`bringup regression`: a model's pipeline crashed, so it has no
certification), 130 interrupted (SIGINT), 143 terminated (SIGTERM). Every error is one line.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import threading

from bringup.core import stamp
from bringup.core.errors import BringupError, from_os_error, one_line

# command -> (module, one-line help). Modules expose cli_main(argv) -> int.
COMMANDS = {
    "fetch": ("bringup.fetch.cli", "resolve a registry model to a verified local GGUF"),
    "convert": ("bringup.convert.cli", "GGUF -> weights.bump + manifest + config.json + tokenizer.json"),
    "inspect": ("bringup.inspect.cli", "a GGUF's inventory against what bringup has, each missing piece named"),
    "kernels": ("bringup.build.kernels_cli", "list kernel maps, build the kernel library"),
    "ir": ("bringup.ir.cli", "lower the circuit to the prefill/decode IR, resolve providers"),
    "plan": ("bringup.plan.cli", "arena plan per phase (plan arena); memory model vs a device budget (plan memory)"),
    "codegen": ("bringup.codegen.cli", "emit the model's C from IR + plan + kernel maps"),
    "build": ("bringup.build.cli", "compile libmodel.so and the bringup-run CLI"),
    "parity": ("bringup.parity.cli", "compare the native program with llama.cpp"),
    "xray": ("bringup.parity.xray_cli", "find the first layer and op where our hidden states leave the reference"),
    "certify": ("bringup.certify.cli", "write the certification report"),
    "bench": ("bringup.bench.cli", "llama-bench-style speed vs llama.cpp, DRAM bandwidth, decode's share of it"),
    "export": ("bringup.export.cli", "a certified program as a relocatable bundle + deterministic .tar.gz"),
    "verify": ("bringup.export.verify_cli", "check a bundle: hashes, CPU, a bare-folder run reproducing its tokens"),
    "verify-results": ("bringup.certify.evidence_cli", "check a copied results folder against this checkout by its "
                       "recorded hashes; --touch then marks it up to date for Snakemake"),
    "regression": ("bringup.regression.cli", "summarize every model's certification, diff against the previous night"),
    "run": ("bringup.run.cli", "run the native program built for a model (bringup-run -m results/NAME/build)"),
    "chat": ("bringup.run.chat", "chat on the terminal with the native program built for a model"),
    "serve": ("bringup.run.serve", "serve the native program built for a model over HTTP (OpenAI-compatible; "
              "bringup-run --server)"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return ("usage: bringup <command> [options]   (bringup <command> --help for its options)\n\n"
            "commands:\n" + "\n".join(lines) + "\n\n" + __doc__.split("\n\n", 1)[1])


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        return _reader_gone()


def _reader_gone() -> int:
    """stdout's reader went away (``bringup --help | head -1``): nothing is wrong with the command or
    its input, so no message; exit 141 (128 + SIGPIPE) as a shell tool would, and point stdout at
    /dev/null so the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 141


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if _asks_version(argv):
        print(version_line())
        return 0
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd not in COMMANDS:
        print(f"bringup: error: unknown command {one_line(repr(cmd))}; commands: {', '.join(COMMANDS)} "
              "(bringup --help describes them)", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[cmd][0])
    try:
        with _terminate_as_exception():
            return int(module.cli_main(rest) or 0)
    except BringupError as e:
        return _fail(cmd, str(e), e.exit_code)
    except BrokenPipeError:
        return _reader_gone()
    except OSError as e:  # the machine's doing (disk full, read-only, missing path), not a bug
        err = from_os_error(e)
        return _fail(cmd, str(err), err.exit_code)
    except KeyboardInterrupt:
        return _fail(cmd, "interrupted", 130)
    except Terminated:
        return _fail(cmd, "terminated (SIGTERM)", 143)


def _asks_version(argv: list[str]) -> bool:
    """``bringup --version`` or ``bringup <command> [...] --version``: every command answers it, in
    one place. Words after ``--`` are another program's (``bringup serve ... -- --version``)."""
    words = argv[: argv.index("--")] if "--" in argv else argv
    return "--version" in words[:1] or (bool(words) and words[0] in COMMANDS and "--version" in words[1:])


def version_line() -> str:
    """``bringup <version>`` and the checkout's commit (``+dirty`` when it differs from it)."""
    c = stamp.git_commit()
    return f"bringup {stamp.version()} (commit {c['sha'][:12]}{'+dirty' if c['dirty'] else ''})"


def _fail(cmd: str, message: str, code: int) -> int:
    """Print the one line of a failed command (control characters escaped) and return ``code``."""
    print(f"bringup {cmd}: error: {one_line(message)}", file=sys.stderr)
    return code


class Terminated(BaseException):
    """SIGTERM arrived: unwinds like KeyboardInterrupt, so atomic writers remove their temp files."""


@contextlib.contextmanager
def _terminate_as_exception():
    """Turn SIGTERM into ``Terminated`` while a command runs (main thread only: Python delivers
    signals there), so a stage stopped by Snakemake or a batch system leaves nothing partial."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum, frame):
        raise Terminated()

    old = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


if __name__ == "__main__":
    sys.exit(main())
