"""``bringup ir``: the command line of the IR stage (argument parsing, the training-context check,
writing both phases' IR atomically); the lowering itself is :mod:`bringup.ir.lower`."""
from __future__ import annotations

from pathlib import Path

from bringup.core import canonjson
from bringup.core.atomic import atomic_dir, write_text
from bringup.core.errors import BringupError
from bringup.ir import block
from bringup.ir.lower import KV_TYPES, PHASES, compile_ir
from bringup.core.subcommands import Parser


def _ctx_beyond_training(config: dict, n_ctx: int, allowed: bool) -> str:
    """'' when ``n_ctx`` is within the model's training context (or the GGUF states none), the
    note recorded in the IR when it is above and ``allowed``; BringupError (exit 2) otherwise:
    positions past the training context give output the model was never trained for."""
    train = (config.get("hparams") or {}).get("n_ctx_train")
    if not isinstance(train, int) or isinstance(n_ctx, bool) or n_ctx <= train:
        return ""
    if not allowed:
        raise BringupError(f"--ctx {n_ctx} exceeds the model's training context {train} "
                           f"({config.get('sources', {}).get('n_ctx_train', 'n_ctx_train')}); use --ctx <= {train} "
                           "or pass --allow-ctx-beyond-training to accept it on record")
    return f"above the training context {train}: --allow-ctx-beyond-training"


def cli_main(argv: list[str] | None = None) -> int:
    """``bringup ir``: write ir_prefill.json and ir_decode.json. (The HTML IR report needs the memory
    plan, so the plan stage writes it: ``bringup plan arena --report``.)"""
    ap = Parser(
        prog="bringup ir",
        description="Lower the model's circuit (chosen from config.json's architecture) into the prefill and "
                    "decode IR (docs/ir_format.md), with one kernel provider per op.")
    for flag, what in (("--config", "config.json written by `bringup convert`"),
                       ("--manifest", "weights_manifest.json written by `bringup convert`"),
                       ("--out-dir", "folder for ir_prefill.json and ir_decode.json")):
        ap.add_argument(flag, required=True, type=Path, help=what)
    ap.add_argument("--chunk", type=int, default=64,
                    help="prefill tokens per call the plan is sized for (default 64)")
    ap.add_argument("--ctx", type=int, default=4096,
                    help="KV cache length in positions (default 4096; recorded in the IR)")
    ap.add_argument("--allow-ctx-beyond-training", action="store_true",
                    help="accept --ctx above the model's training context (config.json n_ctx_train); "
                         "recorded in the IR's values_source.n_ctx")
    ap.add_argument("--prefill-logits", choices=("last", "all"), default="last",
                    help="compute prefill logits for the last token only (default) or for every token")
    ap.add_argument("--isa", default="",
                    help="comma-separated ISA features of the build target providers may use "
                         "(sse4.2,avx,avx2,fma,f16c,avx512f); default: none (portable scalar providers)")
    ap.add_argument("--allow-experimental", action="store_true",
                    help="let providers whose map status is 'experimental' be selected")
    ap.add_argument("--kv-type", choices=tuple(KV_TYPES), default="f32",
                    help="KV cache element type: f32 (default) or f16 (IEEE half, round to nearest even on store, "
                         "as llama.cpp's default cache); recorded in the IR (state dtypes, values_source.kv_type)")
    ap.add_argument("--numerics", choices=("ggml-q8", "f32"), default=None,
                    help="numerics contract of linear activations, overriding the circuit's "
                         "contracts.numerics.linear_activation: ggml-q8 (quantized like llama.cpp's CPU backend) "
                         "or f32 (fp32 activations); recorded in the IR's values_source")
    args = ap.parse_args(argv)
    isa = tuple(sorted({s.strip() for s in args.isa.split(",") if s.strip()}))
    config = canonjson.read(args.config, "config.json")
    manifest = canonjson.read(args.manifest, "weights manifest")
    beyond = _ctx_beyond_training(config, args.ctx, args.allow_ctx_beyond_training)
    irs = compile_ir(config, manifest, chunk=args.chunk, n_ctx=args.ctx, logits=args.prefill_logits,
                     isa=isa, allow_experimental=args.allow_experimental, numerics=args.numerics,
                     kv_type=args.kv_type)
    for ir in irs.values():
        if beyond:
            ir["values_source"]["n_ctx"] += f"; {beyond}"
    # both phases appear together or not at all: an old pair survives a failed rerun
    with atomic_dir(args.out_dir, [f"ir_{p}.json" for p in PHASES], "ir output folder") as tmp:
        for phase, ir in irs.items():
            write_text(tmp / f"ir_{phase}.json", canonjson.dumps(ir))
    for phase, ir in irs.items():
        ops = block.expand(ir)
        n_copy = sum(1 for o in ops if o["op"] == "copy")
        print(f"[compile] {phase}: {len(ops)} ops, {len(ir['tensors'])} tensors, "
              f"{len(ir['weights']['bound'])} weights bound, {n_copy} copy ops -> {args.out_dir / f'ir_{phase}.json'}")
    return 0
