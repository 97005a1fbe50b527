"""``bringup xray``: the command line of X-ray (argument parsing and checks, the tolerance from a parity
profile, a dump from the native CLI when none is given); the comparison is :mod:`bringup.parity.xray`."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Sequence

from bringup.core import canonjson
from bringup.core.errors import BringupError, GateError
from bringup.core.native import NativeProgram
from bringup.core import argtypes
from bringup.core.schemas import validate
from bringup.parity.oracles.reference import NumpyReference
from bringup.parity.xray import activation_contract, dump_from_cli, kv_cache_dtype, load_dump, xray_against_reference
from bringup.core.subcommands import Parser


def cli_main(argv: Sequence[str] | None = None) -> int:
    """``bringup xray``: compare our program's hidden states with the numpy reference.

    Writes xray.json; prints the one-line verdict. Exit 0 (the result is data), or 6 with
    ``--strict`` when a checkpoint diverges.
    """
    ap = Parser(prog="bringup xray")
    ap.add_argument("--gguf", required=True, type=Path)
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--dump", type=Path, help="an existing --dump-hidden directory")
    ap.add_argument("--cli", type=Path)
    ap.add_argument("--lib", type=Path)
    ap.add_argument("--weights", type=Path)
    ap.add_argument("--rel-tol", type=float, help="per-op relative error tolerance")
    ap.add_argument("--profile", type=Path, help="a parity profile: its xray.rel_tol is the tolerance")
    ap.add_argument("--ir", type=Path, help="the program's ir_prefill.json: activation contract per op")
    ap.add_argument("--activations", choices=("ggml-q8", "f32"),
                    help="the program's numerics contract by name (instead of --ir)")
    ap.add_argument("--threads", type=argtypes.threads, default=2)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--strict", action="store_true")
    a = ap.parse_args(argv)
    try:
        tokens = [int(t) for t in a.tokens.split(",") if t.strip()]
    except ValueError:
        raise BringupError(f"--tokens: not a comma-separated list of integers: {a.tokens!r}") from None
    if not (a.dump or (a.cli and a.lib and a.weights)):
        raise BringupError("bringup xray needs --dump DIR, or --cli, --lib and --weights")
    if (a.rel_tol is None) == (a.profile is None):
        raise BringupError("bringup xray needs exactly one of --rel-tol X and --profile P")
    if a.profile is not None:
        profile = canonjson.read(a.profile, "parity profile")
        validate(profile, "parity_profile", str(a.profile))
        a.rel_tol = profile["xray"]["rel_tol"]
    if not a.rel_tol > 0:
        raise BringupError(f"--rel-tol must be positive, not {a.rel_tol}")
    if (a.ir is None) == (a.activations is None):
        raise BringupError("bringup xray needs exactly one of --ir IR_PREFILL and --activations NAME")
    acts, kv = a.activations, "F32"
    if a.ir is not None:
        ir_doc = canonjson.read(a.ir, "prefill IR")
        validate(ir_doc, "ir", str(a.ir))
        acts, kv = activation_contract(ir_doc), kv_cache_dtype(ir_doc)
    if a.dump:
        ours = load_dump(a.dump)
    else:
        with tempfile.TemporaryDirectory(prefix="bringup-xray-") as d:
            ours = dump_from_cli(NativeProgram(a.cli, a.lib, a.weights, threads=a.threads), tokens, Path(d))
    res = xray_against_reference(NumpyReference(a.gguf), tokens, ours, a.rel_tol, acts, kv)
    canonjson.write(a.out, res)
    print(res["summary"])
    if a.strict and res["first_divergent"] is not None:
        raise GateError(res["summary"])
    return 0
