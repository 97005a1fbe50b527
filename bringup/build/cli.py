"""``bringup build``: the command line of the build stage (argument parsing, the printed result); the
compile and link is :mod:`bringup.build.program` (``bringup kernels`` is :mod:`bringup.build.kernels_cli`)."""
from __future__ import annotations


from bringup.build.program import build
from bringup.core.subcommands import Parser


def cli_main(argv: list[str]) -> int:
    ap = Parser(prog="bringup build",
                                 description="compile libmodel.so and the bringup-run CLI")
    ap.add_argument("--codegen-dir", required=True, help="folder with model.c and model.h")
    ap.add_argument("--out-dir", required=True, help="folder for libmodel.so, bringup-run, provenance.json")
    ap.add_argument("--ir", action="append", default=[], metavar="IR_JSON",
                    help="the model's ir_prefill.json / ir_decode.json (repeat): link only the kernel files of "
                         "their providers (kernel maps' impl.sources); without --ir every kernel file is linked")
    ap.add_argument("--sanitize", default="",
                    help="comma-separated sanitizers to instrument both binaries with: address (ASan), "
                         "undefined (UBSan); for tests and debugging, recorded in provenance.json")
    a = ap.parse_args(argv)
    prov = build(a.codegen_dir, a.out_dir, [s for s in a.sanitize.split(",") if s], a.ir)
    print(f"built {a.out_dir}/libmodel.so ({prov['artifacts']['libmodel.so'][:12]}) and "
          f"{a.out_dir}/bringup-run ({prov['artifacts']['bringup-run'][:12]})")
    return 0
