"""``bringup codegen``: the command line of the codegen stage (argument parsing, the printed summary of
which layers share the loop body); the emitter itself is :mod:`bringup.codegen.emit`."""
from __future__ import annotations


from bringup.codegen.layers import ranges
from bringup.codegen.emit import write
from bringup.core.subcommands import Parser


def cli_main(argv: list[str]) -> int:
    """``bringup codegen``: write model.c / model.h, then say which layers the loop body runs (the
    IR's block; one line per phase). Returns 0; errors propagate (module doc)."""
    ap = Parser(prog="bringup codegen", description="emit the model's C from IR + plan + kernel maps")
    ap.add_argument("--ir-dir", required=True, help="folder with ir_prefill.json and ir_decode.json")
    ap.add_argument("--plan", required=True, help="memory_plan.json")
    ap.add_argument("--out-dir", required=True, help="folder for model.c and model.h")
    ap.add_argument("--manifest", help="weights_manifest.json, for the BUMP payload SHA-256 when the IR "
                                       "does not carry it (checked against the IR's inputs_sha256)")
    a = ap.parse_args(argv)
    gen = write(a.ir_dir, a.plan, a.out_dir, a.manifest)
    n_lines = gen.texts["model.c"].count("\n")
    print(f"[codegen] {a.out_dir}/model.c ({n_lines} lines), {a.out_dir}/model.h")
    for phase, loop in gen.loops.items():
        print(f"[codegen] {phase}: layers {ranges(loop['body'])} share one loop body (the IR's block)")
    return 0
