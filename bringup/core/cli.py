"""`bringup <command>`: one entry point; command X is stage X, in package ``bringup/X/``.

Exit codes: 0 ok, 1 internal error (a bug: traceback shown), 2 bad input or usage, 3 integrity
(hash mismatch, corrupt file), 4 unsupported (architecture, quant type, no provider), 5 resource
unavailable (network, missing dependency), 6 a gate failed (parity, certification, budget), 7 a
result is missing (`bringup regression`: a model's pipeline crashed, so it has no certification).
"""
from __future__ import annotations

import importlib
import sys

from bringup.core.errors import BringupError

# command -> (module, one-line help). Modules expose cli_main(argv) -> int.
COMMANDS = {
    "fetch": ("bringup.fetch.sources", "resolve a registry model to a verified local GGUF"),
    "convert": ("bringup.convert.importer", "GGUF -> weights.bump + manifest + config.json + tokenizer.json"),
    "kernels": ("bringup.build.kernels_cli", "list kernel maps, build the kernel library"),
    "ir": ("bringup.ir.lower", "lower the circuit to the prefill/decode IR, resolve providers"),
    "plan": ("bringup.plan.cli", "arena plan per phase (plan arena); memory model vs a device budget (plan memory)"),
    "codegen": ("bringup.codegen.emit", "emit the model's C from IR + plan + kernel maps"),
    "build": ("bringup.build.program", "compile libmodel.so and the bringup-run CLI"),
    "parity": ("bringup.parity.run", "compare the native program with llama.cpp"),
    "xray": ("bringup.parity.xray", "find the first layer and op where our hidden states leave the reference"),
    "certify": ("bringup.certify.report", "write the certification report"),
    "regression": ("bringup.regression.cli", "summarize every model's certification, diff against the previous night"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return ("usage: bringup <command> [options]   (bringup <command> --help for its options)\n\n"
            "commands:\n" + "\n".join(lines) + "\n\n" + __doc__.split("\n\n", 1)[1])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd not in COMMANDS:
        print(f"bringup: unknown command {cmd!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[cmd][0])
    try:
        return int(module.cli_main(rest) or 0)
    except BringupError as e:
        print(f"bringup {cmd}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"bringup {cmd}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
