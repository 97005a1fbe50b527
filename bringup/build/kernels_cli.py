"""``bringup kernels``: the kernel maps and the kernel library, as a tool (not a stage).

``list`` and ``generate`` work on the maps (``bringup.ir.kernel_maps``, ``kernel_map_table``),
``gen-formats`` writes the C format header from the format table (``bringup.formats.ggml``), and
``build`` compiles the kernel library (``bringup.build.kernel_lib``). It lives in the build stage
because that is the last stage it reaches into: upstream packages never import downstream ones.
"""
from __future__ import annotations


from bringup.build.kernel_lib import DEFAULT_FLAGS, build_kernel_library
from bringup.core.paths import KERNEL_MAPS
from bringup.formats import ggml
from bringup.ir import kernel_map_table, kernel_maps
from bringup.core.subcommands import Parser


def cli_main(argv: list[str] | None = None) -> int:
    """``bringup kernels list [--op OP] | build [--out DIR] [--flags ...] | gen-formats [--check] |
    generate [--check]``.

    Returns 0 on success; raises BringupError (the CLI turns it into one line and an exit code).
    """
    ap = Parser(prog="bringup kernels", description="kernel maps and the kernel library")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="validate and list kernel maps")
    ls.add_argument("--op", help="only providers of this op")
    b = sub.add_parser("build", help="compile csrc/kernels into a shared library")
    b.add_argument("--out", default="build/kernels", help="output folder (default build/kernels)")
    b.add_argument("--flags", nargs="+", help=f"compiler flags (default: {' '.join(DEFAULT_FLAGS)})")
    g = sub.add_parser("gen-formats", help="regenerate csrc/include/bu_formats.h")
    g.add_argument("--check", action="store_true", help="fail if the header is not current")
    gm = sub.add_parser("generate", help="regenerate the per-format embed / linear kernel maps from "
                                         "bringup/ir/kernel_map_table.py")
    gm.add_argument("--check", action="store_true", help="fail if a generated map is not current")
    args = ap.parse_args(argv)
    if args.cmd == "list":
        maps = kernel_maps.maps_for_op(args.op) if args.op else sorted(kernel_maps.load_maps().values(),
                                                                       key=lambda m: (m.op, m.id))
        for m in maps:
            s = m.selection
            print(f"{m.op:15s} {m.id:30s} {s['status']:12s} prio={s['priority']:<4d} "
                  f"phases={','.join(s['phases'])} weight={m.weight_dtype or '-'}")
        print(f"{len(maps)} of {len(kernel_maps.load_maps())} maps; sha256 of all maps {kernel_maps.maps_sha256()}")
    elif args.cmd == "generate":
        print(kernel_map_table.generate(KERNEL_MAPS, check=args.check))
    elif args.cmd == "build":
        rec = build_kernel_library(args.out, args.flags)
        print(f"{'reused' if rec.cached else 'built'} {rec.library} (key {rec.key[:16]}, flags {' '.join(rec.flags)})")
    else:
        if args.check:
            ggml.check_c_header()
            print(f"{ggml.C_HEADER} is current")
        else:
            print(ggml.write_c_header())
    return 0
