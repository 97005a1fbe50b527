"""``bringup convert``: the command line of the convert stage (argument parsing, the printed plan and
summary); the conversion itself is :mod:`bringup.convert.importer`."""
from __future__ import annotations

import sys
from pathlib import Path

from bringup.core import canonjson
from bringup.core.errors import IntegrityError, shown
from bringup.formats.gguf_file import field, open_gguf
from bringup.convert.importer import PLAN_FILE, convert, plan_conversion, verify
from bringup.core.subcommands import Parser


def _print_plan(plan: dict, out) -> None:
    m = plan["manifest"]
    # names come from the GGUF: shown escaped (a name holding "\n[ok]" or ESC cannot forge a line)
    print(f"architecture {shown(m['architecture'])}  gguf sha256 {m['gguf_sha256']}", file=out)
    print(f"{'gguf tensor':<36} {'-> bump name':<26} {'dtype':<6} {'shape':<18} {'bytes':>12}", file=out)
    for r in m["tensors"]:
        print(f"{shown(r['gguf_name']):<36} {shown(r['name']):<26} {r['dtype']:<6} {str(r['shape']):<18} "
              f"{r['bytes']:>12}", file=out)
    for e in m["excluded"]:
        print(f"{shown(e['gguf_name']):<36} excluded: {shown(e['reason'])}", file=out)
    c = m["counts"]
    print(f"mapped {c['mapped']} / excluded {c['excluded']} / unaccounted {c['unaccounted']} of "
          f"{c['gguf']} GGUF tensors; weight bytes {m['weight_bytes']}; tied {m['tied'] or 'none'}", file=out)


def cli_main(argv: list[str]) -> int:
    ap = Parser(
        prog="bringup convert",
        description="Convert a GGUF into weights.bump + weights_manifest.json + config.json + tokenizer.json.")
    ap.add_argument("gguf", type=Path, help="input GGUF file")
    ap.add_argument("--out-dir", type=Path, required=True, help="output folder (results/<model>/convert)")
    ap.add_argument("--expect-arch", help="fail unless general.architecture equals this (from the registry)")
    ap.add_argument("--plan-only", action="store_true",
                    help="print and write the conversion plan (conversion_plan.json) without writing weights")
    ap.add_argument("--verify", action="store_true",
                    help="after converting, check every tensor against the GGUF and dequantize each quant type")
    a = ap.parse_args(argv)
    if a.plan_only:
        plan = plan_conversion(a.gguf)
        _print_plan(plan, sys.stdout)
        canonjson.write(a.out_dir / PLAN_FILE,
                        {"config": plan["config"], "manifest": plan["manifest"]})
        return 0
    if a.expect_arch:
        arch = field(open_gguf(a.gguf), "general.architecture")
        if arch != a.expect_arch:
            raise IntegrityError(f"{a.gguf}: general.architecture is {arch!r}, the registry expects {a.expect_arch!r}")
    print(f"[convert] {shown(a.gguf)} -> {shown(a.out_dir)}", file=sys.stderr)
    m = convert(a.gguf, a.out_dir)
    c = m["counts"]
    print(f"[convert] mapped {c['mapped']} excluded {c['excluded']} unaccounted {c['unaccounted']} of "
          f"{c['gguf']}; bump {m['bump']['file_size']} bytes, payload sha256 {m['bump']['payload_sha256']}",
          file=sys.stderr)
    if a.verify:
        v = verify(a.gguf, a.out_dir / "weights.bump")
        print(f"[convert] verify: {v['tensors_checked']} tensors byte-identical; dequantized equal for "
              f"{', '.join(v['dequantized'])}", file=sys.stderr)
    return 0
