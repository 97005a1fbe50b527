"""`bringup <command>`: one entry point; each command lives in the module that does the work.

Exit codes: 0 ok, 1 internal error (a bug: traceback shown), 2 bad input or usage, 3 integrity
(hash mismatch, corrupt file), 4 unsupported (architecture, quant type, no provider), 5 resource
unavailable (network, missing dependency), 6 a gate failed (parity, certification, budget).
"""
from __future__ import annotations

import importlib
import sys

from .errors import BringupError

# command -> (module, one-line help). Modules expose cli_main(argv) -> int.
COMMANDS = {
    "fetch": ("bringup.fetch", "resolve a registry model to a verified local GGUF"),
    "convert": ("bringup.convert", "GGUF -> weights.bump + manifest + config.json + tokenizer.json"),
    "kernels": ("bringup.kernels", "list kernel maps, build the kernel library"),
    "compile": ("bringup.ir", "lower the circuit to the prefill/decode IR, resolve providers"),
    "plan": ("bringup.planner", "liveness-based arena memory plan for each phase"),
    "plan-memory": ("bringup.memory_model", "footprint vs a device budget, from the GGUF header alone"),
    "codegen": ("bringup.codegen", "emit the model's C from IR + plan + kernel maps"),
    "build": ("bringup.build", "compile libmodel.so and the bringup-run CLI"),
    "parity": ("bringup.parity", "compare the native program with llama.cpp"),
    "xray": ("bringup.xray", "find the first layer and op where our hidden states leave the reference"),
    "certify": ("bringup.certify", "write the certification report"),
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
