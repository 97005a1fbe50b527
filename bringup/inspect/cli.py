"""``bringup inspect GGUF``: print the model's inventory against what bringup has.

Exit status: 0 when the inventory could be taken (missing pieces are listed, not an error), or,
with ``--check``, 4 (unsupported) when a piece is missing; 2 / 3 for a missing or unreadable file.
"""
from __future__ import annotations

import sys
from pathlib import Path

from bringup.core import canonjson
from bringup.core.errors import one_line, shown
from bringup.inspect.inventory import GUIDE, Inventory, inspect_gguf
from bringup.core.subcommands import Parser


def _fmt_hparams(hp: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in hp.items())


def render_text(inv: Inventory) -> str:
    """The human-readable inventory (what ``bringup inspect`` prints). Every string from the GGUF
    or the command line is shown escaped (``shown``) and every line is passed through ``one_line``
    as well, so a tensor, role or token-model name holding a newline or ESC can neither start a
    line of its own (a forged ``[ok]``) nor reach the terminal."""
    out = [f"{shown(inv.path)}: architecture {shown(repr(inv.architecture))}, name {shown(repr(inv.model_name))}",
           f"  header sha256 {inv.header_sha256}",
           f"  hyper-parameters: {_fmt_hparams(inv.hparams) or '(none read)'}", "", "layer sequence:"]
    for run in inv.layers:
        out.append(f"  layers {run['layers']}: " + ", ".join(run["roles"]))
    out += ["", "tensors by role and format:"]
    for role, fmts in inv.tensors_by_role.items():
        out.append(f"  {role:<28} " + ", ".join(f"{f} x{n}" for f, n in fmts.items()))
    tok = inv.tokenizer
    out += ["", f"tokenizer: model {shown(tok.get('model'))}, pre-tokenizer {shown(tok.get('pre'))}, {tok.get('n_tokens')} tokens"]
    chat = inv.chat
    if chat.get("template_present"):
        out.append(f"chat template: {chat['template_chars']} chars, sha256 {chat['template_sha256'][:16]}")
    else:
        out.append("chat template: none in the GGUF")
    if inv.providers:
        out += ["", "providers (op [weight format] -> kernel map):"]
        out += [f"  {k:<20} {v}" for k, v in inv.providers.items()]
    out += ["", "what bringup has:"]
    for p in inv.pieces:
        out.append(f"  [{'ok' if p.ok else 'MISSING'}] {p.name}: {p.detail}")
        if not p.ok and p.fix:
            out.append(f"      -> {p.fix}")
    n = len(inv.missing)
    out += ["", "ready: every piece is there; `snakemake certify --config model=<registry name>` next" if not n
            else f"not ready: {n} missing piece(s); the guide is {GUIDE}"]
    return "\n".join(one_line(line) for line in out)


def cli_main(argv: list[str] | None = None) -> int:
    ap = Parser(
        prog="bringup inspect",
        description="Read a GGUF's header (no tensor data) and print its inventory: architecture, "
                    "hyper-parameters, layer sequence, tensors by role and format, tokenizer, chat template; "
                    "then what bringup has for it (tensor map, circuit, one provider per op, tokenizer support, "
                    "chat format, reference oracle), naming each missing piece and where it goes.")
    ap.add_argument("gguf", type=Path, help="the GGUF file (only its header is read)")
    ap.add_argument("--json", action="store_true", help="print the inventory as JSON instead of text")
    ap.add_argument("--check", action="store_true",
                    help="exit 4 (unsupported) when a piece is missing, 0 when the model is ready")
    args = ap.parse_args(argv)
    inv = inspect_gguf(args.gguf)
    sys.stdout.write((canonjson.dumps(inv.as_dict()) if args.json else render_text(inv)) + "\n")
    return 4 if args.check and inv.missing else 0
