"""``bringup fetch``: the command line of the fetch stage (argument parsing, the provenance file); resolving
and verifying the GGUF is :mod:`bringup.fetch.sources`."""
from __future__ import annotations

from pathlib import Path

from bringup.core import canonjson
from bringup.fetch.registry import load
from bringup.fetch.sources import fetch_model, provenance
from bringup.core.subcommands import Parser


def cli_main(argv: list[str]) -> int:
    ap = Parser(prog="bringup fetch",
                                 description="Resolve a registry model to a verified local GGUF.")
    ap.add_argument("model", help="registry name (config/models.yaml), e.g. smollm2")
    ap.add_argument("--registry", type=Path, help="registry file (default config/models.yaml)")
    ap.add_argument("--out", type=Path, help="destination GGUF (default resources/models/<model>.gguf)")
    ap.add_argument("--provenance", type=Path, help="also write a provenance JSON here")
    a = ap.parse_args(argv)
    reg = load(a.registry)
    path = fetch_model(a.model, reg, dest=a.out)
    if a.provenance:
        canonjson.write(a.provenance, provenance(a.model, path, reg))
    print(path)
    return 0
