"""The import adapter: GGUF -> weights.bump + weights_manifest.json + config.json + tokenizer.json.

Tensor names are mapped by per-architecture data (tensor_maps/{arch}.json) and the manifest is
built from the tensor-info table (``bringup.convert.manifest``, shared with ``bringup plan
memory``). Every GGUF tensor is mapped or excluded with a recorded reason; an unaccounted tensor
fails the conversion. Quantized bytes are copied unchanged. The architecture comes from
`general.architecture`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gguf
import numpy as np

from bringup.convert.manifest import load_tensor_map, map_tensors, map_weights, weights_manifest
from bringup.core import canonjson
from bringup.core import schemas
from bringup.core.errors import IntegrityError, UnsupportedError
from bringup.core.hashing import sha256_bytes, sha256_file
from bringup.formats import bump
from bringup.formats import chat
from bringup.formats import tokenizer_json
from bringup.formats import tokenizer_pack
from bringup.formats.gguf_file import field, open_gguf, tensor_infos
from bringup.ir import circuits


# hparam -> (GGUF key suffix after "<arch>.", kind). Absent keys become None with source "absent".
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


def extract_config(reader: gguf.GGUFReader, gguf_sha: str) -> dict:
    """config.json: every hyper-parameter later stages need, each with the GGUF key it came from.

    ``reader`` is a full (``open_gguf``) or header-only (``gguf_file.read_header(...).reader``)
    reader: only metadata and tensor names are read. ``gguf_sha`` is recorded as ``gguf_sha256``.
    Raises IntegrityError without ``general.architecture``, UnsupportedError for per-layer
    hyper-parameter lists or RoPE scaling, BringupError when the result breaks the config schema.
    """
    arch = field(reader, "general.architecture")
    if not isinstance(arch, str):
        raise IntegrityError("GGUF has no general.architecture")
    hp, src = {}, {}
    for k, suffix in HPARAM_KEYS.items():
        key = f"{arch}.{suffix}"
        v = field(reader, key)
        if isinstance(v, list):
            raise UnsupportedError(f"{key} is a per-layer list; bringup supports one value per model")
        hp[k], src[k] = v, (key if v is not None else "absent")
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
    if hp["rope_scaling_type"] not in (None, "none"):
        raise UnsupportedError(f"RoPE scaling {hp['rope_scaling_type']!r} ({arch}.rope.scaling.type) is not supported")
    hp.pop("rope_scaling_type")
    src.pop("rope_scaling_type")
    infos = tensor_infos(reader)
    names = {t.name for t in infos}
    cfg = {
        "schema_version": 1,
        "architecture": arch,
        "name": str(field(reader, "general.name") or ""),
        "hparams": hp,
        "sources": src,
        "tied_embeddings": "output.weight" not in names,
        "gguf_sha256": gguf_sha,
        "tensor_count": len(infos),
        "file_type": field(reader, "general.file_type"),
    }
    schemas.validate(cfg, "config", what="config.json extracted from the GGUF")
    return cfg


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
    for t in tensors:
        w = want.get(t.name)
        if w is not None and tuple(t.shape) != w:
            raise IntegrityError(f"{t.name}: shape {list(t.shape)} does not match the hyper-parameters "
                                 f"(expected {list(w)})")


def plan_conversion(gguf_path: Path) -> dict:
    """Read the GGUF (header only) and return the full conversion plan; nothing is written.

    Returns {"config", "tokenizer", "manifest", "sources": [bump.TensorSource], "reader"}.
    Raises IntegrityError / UnsupportedError for a corrupt file, an unknown architecture or quant
    type, an unaccounted tensor, or absurd dimensions.
    """
    gguf_sha = sha256_file(gguf_path)
    reader = open_gguf(gguf_path)
    cfg = extract_config(reader, gguf_sha)
    wmap = map_weights(cfg, tensor_infos(reader))
    data_of = {t.name: t for t in reader.tensors}
    sources = []
    for row in wmap.rows:
        t = data_of[row["gguf_name"]]
        if row["bytes"] != int(t.n_bytes):
            raise IntegrityError(f"{t.name}: {t.n_bytes} bytes in the GGUF, {row['dtype']} {row['shape']} needs "
                                 f"{row['bytes']}")
        data = np.ascontiguousarray(t.data).view(np.uint8).reshape(-1)
        sources.append(bump.TensorSource(row["name"], row["dtype"], tuple(row["shape"]), data))
    _check_shapes(cfg, sources)
    tok = tokenizer_json.from_gguf(reader)
    blob = tokenizer_pack.pack(tok)
    sources.append(bump.TensorSource("tokenizer.blob", "I8", (len(blob),), np.frombuffer(blob, np.uint8)))
    extra = [{"name": "tokenizer.blob", "dtype": "I8", "bytes": len(blob),
              "reason": "packed tokenizer for the native CLI (bringup.tokenizer_pack)"}]
    # The chat format is circuit data, chosen by what the GGUF's template says (never by running it).
    circuit = circuits.for_architecture(cfg["architecture"])
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
    return {"config": cfg, "tokenizer": tok, "manifest": manifest, "sources": sources, "reader": reader}


def convert(gguf_path: Path, out_dir: Path) -> dict:
    """Write weights.bump, weights_manifest.json, config.json and tokenizer.json into ``out_dir``.

    Each file is written atomically; on any failure the files already written by this call are
    removed, so a failed conversion leaves nothing behind. Returns the manifest (with bump hashes).
    """
    plan = plan_conversion(gguf_path)
    cfg, tok, manifest = plan["config"], plan["tokenizer"], plan["manifest"]
    outs = {k: out_dir / f for k, f in (("bump", "weights.bump"), ("manifest", "weights_manifest.json"),
                                         ("config", "config.json"), ("tokenizer", "tokenizer.json"))}
    written: list[Path] = []
    try:
        canonjson.write(outs["tokenizer"], tok)
        written.append(outs["tokenizer"])
        meta = {"format": "bump", "version": bump.VERSION, "config": cfg,
                "manifest_sha256": canonjson.sha256(manifest), "tokenizer_sha256": canonjson.sha256(tok),
                "source": {"gguf_sha256": cfg["gguf_sha256"]}}
        written.append(outs["bump"])
        hashes = bump.write(outs["bump"], plan["sources"], meta, cfg["hparams"])
        manifest = {**manifest, "bump": hashes}
        canonjson.write(outs["manifest"], manifest)
        written.append(outs["manifest"])
        canonjson.write(outs["config"], cfg)
        written.append(outs["config"])
    except BaseException:
        for p in written:
            p.unlink(missing_ok=True)
        raise
    return manifest


def verify(gguf_path: Path, bump_path: Path) -> dict:
    """Check every tensor's bytes in BUMP against the GGUF, and, for every quant type present,
    that gguf.quants.dequantize gives equal values from both (checked on the smallest tensor of
    each type, bytes equal for all). Raises IntegrityError on any difference."""
    reader = open_gguf(gguf_path)
    cfg = extract_config(reader, sha256_file(gguf_path))
    mapped, _, _ = map_tensors([t.name for t in reader.tensors], load_tensor_map(cfg["architecture"]),
                               cfg["hparams"]["n_layer"])
    smallest: dict[str, object] = {}
    checked = 0
    with bump.BumpFile(bump_path) as bf:
        for t in reader.tensors:
            if t.name not in mapped:
                continue
            name = mapped[t.name]
            if name not in bf.tensors:
                raise IntegrityError(f"{name} ({t.name}) is missing from {bump_path}")
            src = np.ascontiguousarray(t.data).view(np.uint8).reshape(-1)
            got = np.frombuffer(bf.tensor_bytes(name), np.uint8)
            if src.nbytes != got.nbytes or sha256_bytes(src.tobytes()) != sha256_bytes(got.tobytes()):
                raise IntegrityError(f"{name}: BUMP bytes differ from GGUF tensor {t.name}")
            checked += 1
            qt = t.tensor_type.name
            if qt not in smallest or t.n_bytes < smallest[qt].n_bytes:
                smallest[qt] = t
        per_type = {}
        for qt, t in sorted(smallest.items()):
            name = mapped[t.name]
            shape = tuple(int(d) for d in reversed(t.shape))
            a = gguf.quants.dequantize(np.ascontiguousarray(t.data), t.tensor_type)
            raw = np.frombuffer(bf.tensor_bytes(name), np.uint8).reshape(np.ascontiguousarray(t.data).view(np.uint8).shape)
            b = gguf.quants.dequantize(raw, t.tensor_type)
            if not np.array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32)):
                raise IntegrityError(f"{name}: dequantized {qt} values differ between BUMP and GGUF")
            per_type[qt] = {"tensor": name, "elements": int(np.prod(shape))}
    return {"tensors_checked": checked, "dequantized": per_type, "ok": True}


def _print_plan(plan: dict, out) -> None:
    m = plan["manifest"]
    print(f"architecture {m['architecture']}  gguf sha256 {m['gguf_sha256']}", file=out)
    print(f"{'gguf tensor':<36} {'-> bump name':<26} {'dtype':<6} {'shape':<18} {'bytes':>12}", file=out)
    for r in m["tensors"]:
        print(f"{r['gguf_name']:<36} {r['name']:<26} {r['dtype']:<6} {str(r['shape']):<18} {r['bytes']:>12}",
              file=out)
    for e in m["excluded"]:
        print(f"{e['gguf_name']:<36} excluded: {e['reason']}", file=out)
    c = m["counts"]
    print(f"mapped {c['mapped']} / excluded {c['excluded']} / unaccounted {c['unaccounted']} of "
          f"{c['gguf']} GGUF tensors; weight bytes {m['weight_bytes']}; tied {m['tied'] or 'none'}", file=out)


def cli_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
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
        canonjson.write(a.out_dir / "conversion_plan.json",
                        {"config": plan["config"], "manifest": plan["manifest"]})
        return 0
    if a.expect_arch:
        arch = field(open_gguf(a.gguf), "general.architecture")
        if arch != a.expect_arch:
            raise IntegrityError(f"{a.gguf}: general.architecture is {arch!r}, the registry expects {a.expect_arch!r}")
    print(f"[convert] {a.gguf} -> {a.out_dir}", file=sys.stderr)
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
