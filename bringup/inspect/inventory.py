"""What a GGUF needs against what bringup has: the inventory behind ``bringup inspect``.

Reads the GGUF header only (metadata + tensor infos, no tensor data) and runs, one by one, the
checks the pipeline would run later, so that a family brought up for the first time gets every
missing piece named at once instead of one per failed stage:

* architecture -> tensor map (``tensor_maps/{arch}.json``): every tensor mapped or excluded;
* hyper-parameters -> ``config.json`` as convert extracts it;
* circuit (``circuits/{arch}.json``) -> IR of both phases -> one provider per op
  (``kernel_maps/``), the unresolved ops grouped by (op, weight format);
* tokenizer model and pre-tokenizer -> the C tokenizer's support table;
* chat template -> the circuit's chat formats (which one is used, and why);
* the float64 reference oracle (``bringup/parity/oracles/families.py``) -> can parity certify it.

Each check gives a ``Piece``: ``ok`` or the reason it is missing and where the fix goes
(docs/bringing-up-a-family.md). Nothing here writes a file.
"""
from __future__ import annotations

import collections
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bringup.convert.importer import extract_config
from bringup.convert.manifest import load_tensor_map, map_tensors, map_weights, weights_manifest
from bringup.core.errors import BringupError
from bringup.formats import ggml as formats
from bringup.formats import gguf_file
from bringup.formats import tokenizer_json, tokenizer_pack
from bringup.ir import circuits
from bringup.ir import kernel_maps as kernels
from bringup.ir import resolve
from bringup.ir.lower import PHASES, lower
from bringup.parity.oracles import families

GUIDE = "docs/bringing-up-a-family.md"
_LAYER = re.compile(r"^blk\.(\d+)\.(.+)$")


@dataclass
class Piece:
    """One thing the pipeline needs. ``ok`` False means missing; ``fix`` says where it goes."""
    name: str
    ok: bool
    detail: str
    fix: str = ""


@dataclass
class Inventory:
    """The inventory of one GGUF (``as_dict`` is the ``--json`` form)."""
    path: str
    header_sha256: str
    architecture: str
    model_name: str
    hparams: dict[str, Any] = field(default_factory=dict)
    layers: list[dict] = field(default_factory=list)
    tensors_by_role: dict[str, dict[str, int]] = field(default_factory=dict)
    tokenizer: dict[str, Any] = field(default_factory=dict)
    chat: dict[str, Any] = field(default_factory=dict)
    providers: dict[str, str] = field(default_factory=dict)
    pieces: list[Piece] = field(default_factory=list)

    @property
    def missing(self) -> list[Piece]:
        return [p for p in self.pieces if not p.ok]

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "pieces"}
        d["pieces"] = [p.__dict__ for p in self.pieces]
        d["ready"] = not self.missing
        return d


def _str_field(reader, key: str) -> str | None:
    v = gguf_file.field(reader, key)
    return v if isinstance(v, str) else None


def _layer_sequence(tensors: tuple[gguf_file.TensorInfo, ...]) -> tuple[list[dict], dict[str, dict[str, int]]]:
    """Group per-layer tensors into runs of consecutive layers with the same set of roles.

    Returns (runs, by_role): runs ``[{"layers": "0-29", "roles": [role, ...]}]`` in layer order
    (formats may differ from layer to layer: a Q4_K_M file mixes them; ``by_role`` counts them);
    by_role ``{role: {fmt: count}}`` over every tensor (global tensors under their own name).
    """
    per_layer: dict[int, set[str]] = collections.defaultdict(set)
    by_role: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for t in tensors:
        fmt = formats.by_ggml_type(t.ggml_type).name
        m = _LAYER.match(t.name)
        role = m.group(2) if m else t.name
        by_role[role][fmt] += 1
        if m:
            per_layer[int(m.group(1))].add(role)
    runs: list[dict] = []
    for L in sorted(per_layer):
        sig = sorted(per_layer[L])
        if runs and runs[-1]["roles"] == sig and runs[-1]["last"] == L - 1:
            runs[-1]["last"] = L
        else:
            runs.append({"first": L, "last": L, "roles": sig})
    out = [{"layers": f"{r['first']}" if r["first"] == r["last"] else f"{r['first']}-{r['last']}",
            "roles": r["roles"]} for r in runs]
    return out, {k: dict(sorted(v.items())) for k, v in sorted(by_role.items())}


def _tensor_map_piece(arch: str, config: dict | None, tensors) -> Piece:
    try:
        tmap = load_tensor_map(arch)
    except BringupError as e:
        return Piece("tensor map", False, str(e), f"write tensor_maps/{arch}.json ({GUIDE}, step 2)")
    n_layer = (config or {}).get("hparams", {}).get("n_layer") or 0
    mapped, excluded, unaccounted = map_tensors((t.name for t in tensors), tmap, n_layer)
    if unaccounted:
        return Piece("tensor map", False,
                     f"{len(unaccounted)} tensor(s) neither mapped nor excluded: {', '.join(unaccounted[:8])}",
                     f"map or exclude them (with a reason) in tensor_maps/{arch}.json")
    return Piece("tensor map", True, f"tensor_maps/{arch}.json: {len(mapped)} mapped, {len(excluded)} excluded")


def _provider_piece(circuit: circuits.Circuit, config: dict, tensors, sha: str) -> tuple[Piece, dict[str, str]]:
    """Lower both phases and resolve every op; group the ops without exactly one provider."""
    manifest = weights_manifest(config, map_weights(config, tensors), gguf_sha256=sha, extra=[])
    maps = kernels.load_maps()
    by_op: dict[str, list] = collections.defaultdict(list)
    for m in maps.values():
        by_op[m.op].append(m)
    chosen: dict[str, dict[str, str]] = collections.defaultdict(dict)
    unresolved: dict[str, str] = {}
    seen: set[tuple] = set()
    for phase in PHASES:
        ir = lower(circuit, config, manifest, phase, 64, 4096)
        numerics = ir["dims"]["numerics"]
        for op in ir["ops"]:
            wname = next(iter(op.get("weights", {}).values()), None)
            w = ir["tensors"][wname]["dtype"] if wname else None
            key = f"{op['op']} [{w}]" if w else op["op"]
            # layers repeat: resolve each distinct (op, dims, weight format) once per phase
            sig = (phase, key, repr(sorted(op["dims"].items())), repr(op.get("params")), op.get("variant"))
            if sig in seen:
                continue
            seen.add(sig)
            try:
                sel = resolve.resolve_op(op, ir["tensors"], by_op.get(op["op"], []), phase, (), False, numerics)
                chosen[key][phase] = sel["chosen"]
            except BringupError as e:
                unresolved.setdefault(f"{key} ({phase})", str(e).splitlines()[0])
    if unresolved:
        return (Piece("providers", False, f"{len(unresolved)} op kind(s) without exactly one provider: "
                      + "; ".join(f"{k}: {v}" for k, v in sorted(unresolved.items())[:6]),
                      f"add a kernel map (+ scalar C provider) per missing (op, format) ({GUIDE}, step 3)"),
                _by_kind(chosen))
    return (Piece("providers", True, f"{len(chosen)} (op, weight format) kinds, one provider each per phase"),
            _by_kind(chosen))


def _by_kind(chosen: dict[str, dict[str, str]]) -> dict[str, str]:
    """``{kind: provider}``, or ``"prefill: a, decode: b"`` when the phases chose differently."""
    return {k: (next(iter(v.values())) if len(set(v.values())) == 1 else ", ".join(f"{p}: {m}" for p, m in v.items()))
            for k, v in sorted(chosen.items())}


def _tokenizer(reader) -> tuple[dict, Piece]:
    model = _str_field(reader, "tokenizer.ggml.model")
    pre = _str_field(reader, "tokenizer.ggml.pre")
    tokens = gguf_file.field(reader, "tokenizer.ggml.tokens")
    info = {"model": model, "pre": pre, "n_tokens": len(tokens) if isinstance(tokens, list) else None}
    if model is None:
        return info, Piece("tokenizer", False, "the GGUF has no tokenizer.ggml.model", "a GGUF with its vocabulary")
    if model not in tokenizer_pack.MODELS:
        return info, Piece("tokenizer", False, tokenizer_json.unsupported_model(model),
                           "a new tokenizer model in csrc/tokenizer/")
    pre = tokenizer_json.effective_pre(model, pre)
    try:
        tokenizer_pack._pre_id(model, pre)
    except BringupError as e:
        return info, Piece("tokenizer", False, str(e), "a pre-tokenizer in csrc/tokenizer/ and "
                           "PRE_TOKENIZERS in bringup/formats/tokenizer_pack.py")
    return info, Piece("tokenizer", True, f"{model} / pre-tokenizer {pre}")


def _chat(reader, circuit: circuits.Circuit | None) -> tuple[dict, Piece]:
    tmpl = _str_field(reader, "tokenizer.chat_template")
    info: dict[str, Any] = {"template_present": tmpl is not None}
    if tmpl is not None:
        info["template_chars"] = len(tmpl)
        info["template_sha256"] = hashlib.sha256(tmpl.encode()).hexdigest()
    if circuit is None:
        return info, Piece("chat format", False, "no circuit, so no chat formats", "the circuit's contracts.chat")
    try:
        fmt, why = circuits.choose_chat_format(circuit, tmpl)
    except BringupError as e:
        return info, Piece("chat format", False, str(e), f"add a format to circuits/{circuit.name}.json contracts.chat")
    info.update(format=fmt["name"], why=why, own_template=tmpl is not None)
    note = "" if tmpl is not None else " (not the model's own template: the GGUF has none)"
    return info, Piece("chat format", True, f"{fmt['name']}: {why}{note}")


def inspect_gguf(path: str | Path) -> Inventory:
    """The inventory of the GGUF at ``path`` (header only).

    Raises BringupError (exit 2) for a missing file and IntegrityError (exit 3) for an unreadable
    header; everything the pipeline lacks is reported as a missing ``Piece``, not raised.
    """
    header = gguf_file.read_header(path)
    reader = header.reader
    arch = _str_field(reader, "general.architecture") or ""
    inv = Inventory(str(path), header.sha256, arch, _str_field(reader, "general.name") or "")
    inv.layers, inv.tensors_by_role = _layer_sequence(header.tensors)
    config = None
    try:
        config = extract_config(reader, header.sha256, known_only=False)
        inv.hparams = {k: v for k, v in config["hparams"].items() if v is not None}
        inv.pieces.append(Piece("hyper-parameters", True, f"{len(inv.hparams)} read ({arch}.*)"))
    except BringupError as e:
        inv.pieces.append(Piece("hyper-parameters", False, str(e), "bringup/convert/importer.py HPARAM_KEYS"))
    tmap_piece = _tensor_map_piece(arch, config, header.tensors)
    inv.pieces.append(tmap_piece)
    circuit = None
    try:
        circuit = circuits.for_architecture(arch, hparams=config["hparams"] if config else None)
        inv.pieces.append(Piece("circuit", True, f"circuits/{circuit.name}.json"))
    except BringupError as e:
        inv.pieces.append(Piece("circuit", False, str(e), f"write circuits/{arch}.json ({GUIDE}, step 1)"))
    if not header.tensors:
        inv.pieces.append(Piece("weights", False, "the GGUF holds no tensors (a vocabulary-only file): providers "
                                "not checked", "a GGUF with weights, or a generated model on this vocabulary "
                                "(synth:// in config/models.yaml, docs/generated_models.md)"))
    elif circuit is not None and config is not None and tmap_piece.ok:
        try:
            piece, inv.providers = _provider_piece(circuit, config, header.tensors, header.sha256)
        except BringupError as e:
            piece = Piece("providers", False, f"lowering failed: {e}", f"circuits/{arch}.json")
        inv.pieces.append(piece)
    else:
        inv.pieces.append(Piece("providers", False, "not checked: needs the circuit, the hyper-parameters and "
                                "the tensor map first", ""))
    inv.tokenizer, piece = _tokenizer(reader)
    inv.pieces.append(piece)
    inv.chat, piece = _chat(reader, circuit)
    inv.pieces.append(piece)
    if arch in families.FAMILIES:
        inv.pieces.append(Piece("reference oracle", True, f"family {arch!r} in the float64 reference"))
    else:
        inv.pieces.append(Piece("reference oracle", False, f"the float64 reference has no family {arch!r}",
                                f"a Family entry in bringup/parity/oracles/families.py ({GUIDE}, step 4)"))
    return inv
