"""The import adapter: GGUF -> weights.bump + weights_manifest.json + config.json + tokenizer.json.

Tensor names are mapped by per-architecture data (tensor_maps/{arch}.json) and the manifest is
built from the tensor-info table (``bringup.convert.manifest``, shared with ``bringup plan
memory``). Every GGUF tensor is mapped or excluded with a recorded reason; an unaccounted tensor
fails the conversion. Quantized bytes are copied unchanged. The architecture comes from
`general.architecture`.
"""
from __future__ import annotations

import math
from pathlib import Path

import gguf
import numpy as np

from bringup.convert.manifest import map_weights, supported_architectures, weights_manifest
from bringup.core import canonjson
from bringup.core import schemas
from bringup.core.atomic import atomic_dir
from bringup.core.errors import BringupError, IntegrityError, UnsupportedError
from bringup.core.hashing import sha256_bytes, sha256_file
from bringup.core.progress import Progress
from bringup.formats import bump
from bringup.formats import chat
from bringup.formats import ggml as formats
from bringup.formats import tokenizer_json
from bringup.formats import tokenizer_pack
from bringup.formats.gguf_file import field, open_gguf, tensor_infos
from bringup.formats.gguf_types import typed_field
from bringup.ir import circuits
from bringup.ir import lower as ir_lower

#: the files of one conversion (``atomic_dir``: they appear together), and --plan-only's file
OUTPUTS = ("weights.bump", "weights_manifest.json", "config.json", "tokenizer.json")
PLAN_FILE = "conversion_plan.json"


# hparam -> GGUF key suffix after "<arch>.". Absent keys become None with source "absent".
HPARAM_KEYS = {
    "n_layer": "block_count",
    "n_embd": "embedding_length",
    "n_head": "attention.head_count",
    "n_head_kv": "attention.head_count_kv",
    "head_dim": "attention.key_length",
    "head_dim_v": "attention.value_length",
    "n_ff": "feed_forward_length",
    "n_vocab": "vocab_size",
    "n_ctx_train": "context_length",
    "rope_theta": "rope.freq_base",
    "rope_dim": "rope.dimension_count",
    "norm_eps": "attention.layer_norm_rms_epsilon",
    "sliding_window": "attention.sliding_window",
    "attn_logit_softcap": "attn_logit_softcapping",
    "final_logit_softcap": "final_logit_softcapping",
    "rope_scaling_type": "rope.scaling.type",
}
# Mixture-of-experts hparams: written to config.json only when the GGUF has expert_count, so a
# dense model's config (and every artifact hashed from it) is unchanged.
MOE_HPARAM_KEYS = {
    "n_expert": "expert_count",
    "n_expert_used": "expert_used_count",
    "n_ff_exp": "expert_feed_forward_length",
}
#: most experts per layer accepted (llama.cpp's LLAMA_MAX_EXPERTS is 512)
MAX_EXPERTS = 512
# the GGUF value type each hparam must be stored as (bringup.formats.gguf_types: never converted)
HPARAM_KIND = {k: "float" for k in ("rope_theta", "norm_eps", "attn_logit_softcap", "final_logit_softcap")} | \
    {"rope_scaling_type": "str"}


def extract_config(reader: gguf.GGUFReader, gguf_sha: str, known_only: bool = True) -> dict:
    """config.json: every hyper-parameter later stages need, each with the GGUF key it came from.

    ``reader`` is a full (``open_gguf``) or header-only (``gguf_file.read_header(...).reader``)
    reader: only metadata and tensor names are read. ``gguf_sha`` is recorded as ``gguf_sha256``.
    Raises IntegrityError without ``general.architecture``, UnsupportedError for an architecture
    that is not a string or (``known_only``; ``bringup inspect`` reads the hyper-parameters of a
    new architecture too) has no tensor map, per-layer hyper-parameter lists or RoPE scaling,
    BringupError for a hyper-parameter stored with another GGUF type than its own
    (``HPARAM_KIND``, integer for the rest) and when the result breaks the config schema.
    """
    arch = _architecture(reader, known_only)
    hp, src = {}, {}
    for k, suffix in HPARAM_KEYS.items():
        key = f"{arch}.{suffix}"
        v = typed_field(reader, key, HPARAM_KIND.get(k, "int"))
        if isinstance(v, list):
            raise UnsupportedError(f"{key} is a per-layer list; bringup supports one value per model")
        hp[k], src[k] = v, (key if v is not None else "absent")
    _moe_hparams(reader, arch, hp, src)
    tokens = field(reader, "tokenizer.ggml.tokens")
    if hp["n_vocab"] is None and tokens is not None:
        hp["n_vocab"], src["n_vocab"] = len(tokens), "derived: len(tokenizer.ggml.tokens)"
    if hp["n_head_kv"] is None and hp["n_head"] is not None:
        hp["n_head_kv"], src["n_head_kv"] = hp["n_head"], "derived: n_head (no GQA key: llama.cpp convention)"
    for k in ("head_dim", "head_dim_v"):
        if hp[k] is None and hp["n_embd"] and hp["n_head"]:
            hp[k], src[k] = hp["n_embd"] // hp["n_head"], "derived: n_embd / n_head"
    if hp["rope_dim"] is None and hp["head_dim"]:
        hp["rope_dim"], src["rope_dim"] = hp["head_dim"], "derived: head_dim (full rotary)"
    for k in ("rope_theta", "norm_eps", "attn_logit_softcap", "final_logit_softcap"):
        if hp[k] is not None:
            hp[k] = float(np.float32(hp[k]))  # stored as f32 in GGUF; keep that exact value
            # a softcap of 0 is "none" to some writers; a RoPE base or epsilon must be positive
            if not math.isfinite(hp[k]) or hp[k] < 0 or (hp[k] == 0 and k in ("rope_theta", "norm_eps")):
                raise IntegrityError(f"{src[k]} is {hp[k]!r}; it must be a finite positive number")
    if hp["rope_scaling_type"] not in (None, "none"):
        raise UnsupportedError(f"RoPE scaling {hp['rope_scaling_type']!r} ({arch}.rope.scaling.type) is not supported")
    hp.pop("rope_scaling_type")
    src.pop("rope_scaling_type")
    if not isinstance(hp["n_layer"], int) or isinstance(hp["n_layer"], bool):
        # every later step counts layers: without it the tensor names cannot even be mapped
        raise IntegrityError(f"{arch}.block_count is {hp['n_layer']!r}; the GGUF must state its layer count")
    infos = tensor_infos(reader)
    names = {t.name for t in infos}
    cfg = {
        "schema_version": 1,
        "architecture": arch,
        "name": typed_field(reader, "general.name", "str") or "",
        "hparams": hp,
        "sources": src,
        "tied_embeddings": "output.weight" not in names,
        "gguf_sha256": gguf_sha,
        "tensor_count": len(infos),
        "file_type": typed_field(reader, "general.file_type", "int"),
    }
    schemas.validate(cfg, "config", what="config.json extracted from the GGUF")
    return cfg


def _moe_hparams(reader: gguf.GGUFReader, arch: str, hp: dict, src: dict) -> None:
    """Add n_expert, n_expert_used and n_ff_exp to ``hp``/``src`` when ``<arch>.expert_count``
    exists (integers, as llama.cpp reads them). Raises IntegrityError for an expert count outside
    [1, MAX_EXPERTS], experts per token outside [1, n_expert], or a missing per-token count, and
    for a nonzero experts-per-token count or expert width without an expert count (llama.cpp asserts
    n_expert_used == 0 when n_expert is 0)."""
    n_expert = typed_field(reader, f"{arch}.{MOE_HPARAM_KEYS['n_expert']}", "int")
    if n_expert is None:
        for k in ("n_expert_used", "n_ff_exp"):
            key = f"{arch}.{MOE_HPARAM_KEYS[k]}"
            v = typed_field(reader, key, "int")
            if v not in (None, 0):
                raise IntegrityError(f"{key} is {v!r} but {arch}.expert_count is absent (a dense model has no "
                                     "experts to use)")
        return
    for k, suffix in MOE_HPARAM_KEYS.items():
        key = f"{arch}.{suffix}"
        v = typed_field(reader, key, "int")
        if isinstance(v, list):
            raise UnsupportedError(f"{key} is a per-layer list; bringup supports one value per model")
        hp[k], src[k] = v, (key if v is not None else "absent")
    if not 1 <= n_expert <= MAX_EXPERTS:
        raise IntegrityError(f"{arch}.expert_count is {n_expert}; it must be in [1, {MAX_EXPERTS}]")
    used = hp["n_expert_used"]
    if used is None or not 1 <= used <= n_expert:
        raise IntegrityError(f"{arch}.expert_used_count is {used!r}; it must be in [1, expert_count {n_expert}]")
    if hp["n_ff_exp"] is None:
        hp["n_ff_exp"], src["n_ff_exp"] = hp["n_ff"], "derived: feed_forward_length (no expert_feed_forward_length)"
    if hp["n_ff_exp"] is None or not 1 <= hp["n_ff_exp"] <= 1048576:
        raise IntegrityError(f"{src['n_ff_exp']} is {hp['n_ff_exp']!r}; it must be in [1, 1048576]")


def _architecture(reader: gguf.GGUFReader, known_only: bool) -> str:
    """``general.architecture``, checked to be a STRING (and with ``known_only`` to name an
    architecture with a tensor map) before any ``<arch>.*`` key is looked up: an unknown one is
    exit 4, not a missing key."""
    f = reader.fields.get("general.architecture")
    if f is None:
        raise IntegrityError("GGUF has no general.architecture")
    if list(f.types) != [gguf.GGUFValueType.STRING]:
        stored = " of ".join(gguf.GGUFValueType(t).name for t in f.types)
        raise UnsupportedError(f"general.architecture is stored as {stored}, not as a STRING naming an "
                               f"architecture; supported: {', '.join(supported_architectures())}")
    arch = field(reader, "general.architecture")
    if known_only and arch not in supported_architectures():
        raise UnsupportedError(f"unknown architecture {arch!r} (general.architecture); supported: "
                               f"{', '.join(supported_architectures())}")
    return arch


def _check_shapes(cfg: dict, tensors: list[bump.TensorSource]) -> None:
    """Reject absurd or inconsistent dimensions before anything is written."""
    hp = cfg["hparams"]
    for k in ("n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff", "n_vocab"):
        if not hp.get(k):
            raise IntegrityError(f"hyper-parameter {k} is missing or zero ({cfg['sources'].get(k)})")
    if hp["n_head"] % hp["n_head_kv"]:
        raise IntegrityError(f"n_head {hp['n_head']} is not a multiple of n_head_kv {hp['n_head_kv']}")
    want = {"tok_embd": (hp["n_embd"], hp["n_vocab"]), "output": (hp["n_embd"], hp["n_vocab"])}
    for L in range(hp["n_layer"]):
        want[f"layer.{L}.wq"] = (hp["n_embd"], hp["n_head"] * hp["head_dim"])
        want[f"layer.{L}.wk"] = (hp["n_embd"], hp["n_head_kv"] * hp["head_dim"])
        want[f"layer.{L}.wv"] = (hp["n_embd"], hp["n_head_kv"] * hp["head_dim_v"])
        want[f"layer.{L}.wo"] = (hp["n_head"] * hp["head_dim_v"], hp["n_embd"])
        if "n_expert" in hp:  # stacked experts, GGUF order: ne0 = row length, ne2 = expert
            e, f = hp["n_expert"], hp["n_ff_exp"]
            want[f"layer.{L}.ffn_router"] = (hp["n_embd"], e)
            want[f"layer.{L}.w_gate_exps"] = want[f"layer.{L}.w_up_exps"] = (hp["n_embd"], f, e)
            want[f"layer.{L}.w_down_exps"] = (f, hp["n_embd"], e)
    for t in tensors:
        w = want.get(t.name)
        if w is not None and tuple(t.shape) != w:
            raise IntegrityError(f"{t.name}: shape {list(t.shape)} does not match the hyper-parameters "
                                 f"(expected {list(w)})")


_ROUTED_FFN = {"ffn_router": "ffn_gate_inp", "w_gate_exps": "ffn_gate_exps", "w_up_exps": "ffn_up_exps",
               "w_down_exps": "ffn_down_exps"}
_DENSE_FFN = {"w_gate": "ffn_gate", "w_up": "ffn_up", "w_down": "ffn_down"}


def _check_ffn_kind(cfg: dict, names: set[str]) -> None:
    """Every layer's FFN is what ``<arch>.expert_count`` says, as llama.cpp's loaders create it
    (src/models/llama.cpp: n_expert == 0 -> ffn_{gate,up,down}, else ffn_gate_inp and the stacked
    ffn_{gate,up,down}_exps): routed in every layer with an expert count, dense in every layer
    without. ``names`` are the canonical names of the mapped tensors. Raises IntegrityError naming
    the first layer that contradicts the metadata (the circuit is chosen by that metadata, so a
    contradiction would otherwise run the wrong FFN or leave tensors unread)."""
    hp, arch = cfg["hparams"], cfg["architecture"]
    for L in range(hp["n_layer"]):
        routed = [g for c, g in _ROUTED_FFN.items() if f"layer.{L}.{c}" in names]
        dense = [g for c, g in _DENSE_FFN.items() if f"layer.{L}.{c}" in names]
        if "n_expert" in hp and (dense or len(routed) < len(_ROUTED_FFN)):
            lacks = [g for g in _ROUTED_FFN.values() if g not in routed]
            raise IntegrityError(f"{arch}.expert_count is {hp['n_expert']} (a routed FFN in every layer), but layer {L} "
                                 + (f"has the dense {', '.join(dense)}" if dense else f"lacks {', '.join(lacks)}"))
        if "n_expert" not in hp and routed:
            raise IntegrityError(f"layer {L} has the routed {', '.join(routed)} but {arch}.expert_count is absent "
                                 "(without it the FFN is dense)")


def _row_bytes(row: dict, data_of: dict) -> np.ndarray:
    """The GGUF bytes of manifest row ``row`` (uint8, a view): the whole tensor, or for a part of a
    split tensor its rows ``[first * row_bytes, end * row_bytes)``. Raises IntegrityError when the
    GGUF tensor's byte count is not what its type and shape need."""
    t = data_of[row["gguf_name"]]
    fmt = formats.by_name(row["dtype"])
    shape = [int(d) for d in t.shape]
    if fmt.tensor_bytes(shape) != int(t.n_bytes):
        raise IntegrityError(f"{t.name}: {t.n_bytes} bytes in the GGUF, {fmt.name} {shape} needs "
                             f"{fmt.tensor_bytes(shape)}")
    data = np.ascontiguousarray(t.data).view(np.uint8).reshape(-1)
    if "rows" not in row:
        return data
    r0, r1 = row["rows"]
    return data[r0 * fmt.row_bytes(shape[0]):r1 * fmt.row_bytes(shape[0])]


def plan_conversion(gguf_path: Path) -> dict:
    """Read the GGUF (header only) and return the full conversion plan; nothing is written.

    Returns {"config", "tokenizer", "manifest", "sources": [bump.TensorSource], "reader"}.
    Raises IntegrityError / UnsupportedError for a corrupt file, an unknown architecture or quant
    type, an unaccounted tensor, or absurd dimensions.
    """
    gguf_sha = sha256_file(gguf_path, "GGUF file")
    reader = open_gguf(gguf_path)
    cfg = extract_config(reader, gguf_sha)
    wmap = map_weights(cfg, tensor_infos(reader))
    data_of = {t.name: t for t in reader.tensors}
    sources = [bump.TensorSource(row["name"], row["dtype"], tuple(row["shape"]), _row_bytes(row, data_of))
               for row in wmap.rows]
    _check_shapes(cfg, sources)
    _check_ffn_kind(cfg, {row["name"] for row in wmap.rows})
    tok = tokenizer_json.from_gguf(reader)
    if len(tok["tokens"]) != cfg["hparams"]["n_vocab"]:
        raise IntegrityError(f"inconsistent vocabulary sizes: tokenizer.ggml.tokens lists {len(tok['tokens'])} "
                             f"tokens, the model has {cfg['hparams']['n_vocab']} ({cfg['sources']['n_vocab']}, "
                             "the rows of token_embd)")
    tokenizer_pack.check_decodable(tok)
    blob = tokenizer_pack.pack(tok)
    sources.append(bump.TensorSource("tokenizer.blob", "I8", (len(blob),), np.frombuffer(blob, np.uint8)))
    extra = [{"name": "tokenizer.blob", "dtype": "I8", "bytes": len(blob),
              "reason": "packed tokenizer for the native CLI (bringup.formats.tokenizer_pack)"}]
    # The chat format is circuit data, chosen by what the GGUF's template says (never by running it).
    circuit = circuits.for_architecture(cfg["architecture"], hparams=cfg["hparams"])
    try:
        fmt, why = circuits.choose_chat_format(circuit, tok["chat_template"])
    except UnsupportedError as e:
        extra.append({"name": "chat.format", "dtype": "I8", "bytes": 0,
                      "reason": f"absent: {e}; --chat is refused for this model"})
    else:
        chat_blob = chat.pack_chat_format(fmt)
        sources.append(bump.TensorSource("chat.format", "I8", (len(chat_blob),), np.frombuffer(chat_blob, np.uint8)))
        extra.append({"name": "chat.format", "dtype": "I8", "bytes": len(chat_blob),
                      "reason": f"chat format {fmt['name']!r} of circuit {circuit.name}: {why}"})
    manifest = weights_manifest(cfg, wmap, gguf_sha256=gguf_sha, extra=extra)
    _check_circuit_weights(circuit, cfg, manifest)
    return {"config": cfg, "tokenizer": tok, "manifest": manifest, "sources": sources, "reader": reader}


def _check_circuit_weights(circuit: circuits.Circuit, cfg: dict, manifest: dict) -> None:
    """Lower both phases (1 token, 1 position: the weights do not depend on either) so that a
    tensor the circuit needs but the GGUF lacks, or one of the wrong shape or type, fails the
    conversion (IntegrityError, exit 3) instead of the ir stage one step later."""
    for phase in ir_lower.PHASES:
        try:
            ir_lower.lower(circuit, cfg, manifest, phase, 1, 1)
        except UnsupportedError:
            raise
        except BringupError as e:
            raise IntegrityError(f"the GGUF does not fit circuit {circuit.name}: {e}") from None


def convert(gguf_path: Path, out_dir: Path) -> dict:
    """Write OUTPUTS (weights.bump, weights_manifest.json, config.json, tokenizer.json) into
    ``out_dir`` as one set: they are written into a temporary sibling folder that replaces
    ``out_dir`` in one rename (``atomic_dir``), so a failed or interrupted conversion leaves the
    previous set whole. ``out_dir`` may hold only those files (and PLAN_FILE, dropped). Returns the
    manifest (with bump hashes)."""
    plan = plan_conversion(gguf_path)
    cfg, tok, manifest = plan["config"], plan["tokenizer"], plan["manifest"]
    with atomic_dir(out_dir, (*OUTPUTS, PLAN_FILE), "convert output folder") as tmp:
        canonjson.write(tmp / "tokenizer.json", tok)
        meta = {"format": "bump", "version": bump.VERSION, "config": cfg,
                "manifest_sha256": canonjson.sha256(manifest), "tokenizer_sha256": canonjson.sha256(tok),
                "source": {"gguf_sha256": cfg["gguf_sha256"]}}
        with Progress("convert", "tensor written", len(plan["sources"]), unit="tensor") as prog:
            hashes = bump.write(tmp / "weights.bump", plan["sources"], meta, cfg["hparams"], on_tensor=prog.step)
        manifest = {**manifest, "bump": hashes}
        canonjson.write(tmp / "weights_manifest.json", manifest)
        canonjson.write(tmp / "config.json", cfg)
    return manifest


def verify(gguf_path: Path, bump_path: Path) -> dict:
    """Check every tensor's bytes in BUMP against the GGUF (a split part against its rows), and,
    for every quant type present, that gguf.quants.dequantize gives equal values from both
    (checked on the smallest tensor of each type, and on the smallest split part of each type
    against rows [first, end) of its whole dequantized GGUF tensor). Raises IntegrityError on any
    difference."""
    reader = open_gguf(gguf_path)
    cfg = extract_config(reader, sha256_file(gguf_path))
    data_of = {t.name: t for t in reader.tensors}
    smallest: dict[tuple[str, bool], dict] = {}
    checked = 0
    rows = map_weights(cfg, tensor_infos(reader)).rows
    with bump.BumpFile(bump_path) as bf, Progress("convert", "tensor verified", len(rows), unit="tensor") as prog:
        for row in rows:
            name = row["name"]
            if name not in bf.tensors:
                raise IntegrityError(f"{name} ({row['gguf_name']}) is missing from {bump_path}")
            src = _row_bytes(row, data_of)
            got = np.frombuffer(bf.tensor_bytes(name), np.uint8)
            if src.nbytes != got.nbytes or sha256_bytes(src.tobytes()) != sha256_bytes(got.tobytes()):
                raise IntegrityError(f"{name}: BUMP bytes differ from GGUF tensor {row['gguf_name']}")
            checked += 1
            prog.step(name)
            key = (row["dtype"], "rows" in row)
            if key not in smallest or row["bytes"] < smallest[key]["bytes"]:
                smallest[key] = row
        per_type = {}
        for (qt, part), row in sorted(smallest.items()):
            t = data_of[row["gguf_name"]]
            a = np.asarray(gguf.quants.dequantize(np.ascontiguousarray(t.data), t.tensor_type), np.float32)
            n_rows = row["shape"][1] if len(row["shape"]) > 1 else 1
            raw = np.frombuffer(bf.tensor_bytes(row["name"]), np.uint8).reshape(n_rows, -1)
            b = np.asarray(gguf.quants.dequantize(raw, t.tensor_type), np.float32).reshape(n_rows, -1)
            if part:
                a = a[row["rows"][0]:row["rows"][1]]
            if not np.array_equal(a.reshape(b.shape), b):
                raise IntegrityError(f"{row['name']}: dequantized {qt} values differ between BUMP and GGUF")
            per_type[f"{qt} (split part)" if part else qt] = {"tensor": row["name"], "elements": int(b.size)}
    return {"tensors_checked": checked, "dequantized": per_type, "ok": True}
