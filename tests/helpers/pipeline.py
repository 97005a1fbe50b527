"""A tiny synthetic llama taken through the whole pipeline in-process: a GGUF written with random
weights -> convert -> ir -> plan -> codegen (-> build), in a temporary folder; ``tiny_pipeline()``
is built once per test session (and per seed / chat format) and shared by the tests of several
stages."""
from __future__ import annotations

import functools
import json
import subprocess
import tempfile
from pathlib import Path

import gguf
import numpy as np

from bringup.build import program as build
from bringup.codegen import emit as codegen
from bringup.convert import importer as convert
from bringup.core import canonjson
from bringup.formats import bump, chat
from bringup.ir import lower as ir
from bringup.plan import planner

# A llama with every dimension small but every feature used: GQA (4 query heads on 2 KV heads),
# several layers, tied embeddings, Q8_0 matrices and F32 norms.
TINY = dict(n_layer=2, n_embd=64, n_head=4, n_head_kv=2, n_ff=96, n_ctx_train=256, rope_theta=10000.0,
            eps=1e-5)

CHUNK, N_CTX = 4, 64

def _byte_tokens() -> list[str]:
    """GPT-2's byte-to-unicode alphabet (Radford et al. 2019, encoder.py bytes_to_unicode)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]

def write_tiny_gguf(path: Path, seed: int = 0) -> Path:
    """A valid llama GGUF with a byte-level BPE tokenizer (256 byte tokens, 2 merges, 2 specials)."""
    rng = np.random.default_rng(seed)
    t = TINY
    tokens = _byte_tokens() + ["Ġt", "Ġth", "<|endoftext|>", "<|im_end|>"]
    n_vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_block_count(t["n_layer"])
    w.add_context_length(t["n_ctx_train"])
    w.add_embedding_length(t["n_embd"])
    w.add_feed_forward_length(t["n_ff"])
    w.add_head_count(t["n_head"])
    w.add_head_count_kv(t["n_head_kv"])
    w.add_rope_freq_base(t["rope_theta"])
    w.add_layer_norm_rms_eps(t["eps"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([1] * 258 + [3, 3])
    w.add_token_merges(["Ġ t", "Ġt h"])
    w.add_bos_token_id(n_vocab - 2)
    w.add_eos_token_id(n_vocab - 1)
    w.add_add_bos_token(False)

    def q8(name, shape_out_in, scale=0.2):
        a = (rng.standard_normal(shape_out_in) * scale).astype(np.float32)
        qa = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor(name, qa, raw_shape=qa.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    def f32(name, n):
        w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32))

    E, hd = t["n_embd"], t["n_embd"] // t["n_head"]
    q8("token_embd.weight", (n_vocab, E), 1.0)
    for L in range(t["n_layer"]):
        f32(f"blk.{L}.attn_norm.weight", E)
        q8(f"blk.{L}.attn_q.weight", (t["n_head"] * hd, E))
        q8(f"blk.{L}.attn_k.weight", (t["n_head_kv"] * hd, E))
        q8(f"blk.{L}.attn_v.weight", (t["n_head_kv"] * hd, E))
        q8(f"blk.{L}.attn_output.weight", (E, t["n_head"] * hd))
        f32(f"blk.{L}.ffn_norm.weight", E)
        q8(f"blk.{L}.ffn_gate.weight", (t["n_ff"], E))
        q8(f"blk.{L}.ffn_up.weight", (t["n_ff"], E))
        q8(f"blk.{L}.ffn_down.weight", (E, t["n_ff"]))
    f32("output_norm.weight", E)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path

def run_pipeline(root: Path, gguf_path: Path, build_it: bool = True, **ir_options) -> dict[str, Path]:
    """convert -> compile -> plan -> codegen (-> build) into root; returns the artifact paths.
    ``ir_options`` go to ``compile_ir`` (e.g. ``kv_type="f16"``)."""
    cdir, idir, pdir, gdir, bdir = (root / s for s in ("convert", "ir", "plan", "codegen", "build"))
    convert.convert(gguf_path, cdir)
    cfg = json.loads((cdir / "config.json").read_text())
    man = json.loads((cdir / "weights_manifest.json").read_text())
    irs = ir.compile_ir(cfg, man, chunk=CHUNK, n_ctx=N_CTX, **ir_options)
    for phase, doc in irs.items():
        canonjson.write(idir / f"ir_{phase}.json", doc)
    canonjson.write(pdir / "memory_plan.json", planner.plan_irs(irs))
    codegen.write(idir, pdir / "memory_plan.json", gdir, cdir / "weights_manifest.json")
    out = {"gguf": gguf_path, "bump": cdir / "weights.bump", "codegen": gdir, "ir": idir,
           "plan": pdir / "memory_plan.json", "manifest": cdir / "weights_manifest.json", "build": bdir}
    if build_it:
        build.build(gdir, bdir)
        out.update(lib=bdir / "libmodel.so", cli=bdir / "bringup-run", provenance=bdir / "provenance.json")
    return out

# a circuit chat-format entry short enough for the tiny model's context (its vocabulary has no
# <|im_start|>); "render" is bringup.formats.chat's CHAT_FORMAT_SCHEMA data, which the CLI implements
CHAT = {"name": "tiny", "stop_strings": ["<|im_end|>"],
        "render": {"roles": {"system": {"prefix": "S:", "suffix": "<|im_end|>"},
                             "user": {"prefix": "U:", "suffix": "<|im_end|>"},
                             "assistant": {"prefix": "A:", "suffix": "<|im_end|>"}},
                   "generation_prompt": "A:", "default_system": "hi", "system": "turn", "system_separator": "",
                   "trim_content": False}}

def tiny_pipeline(seed: int = 0, chat: bool = False) -> dict[str, Path]:
    """The tiny model, built once per session (and per seed). chat=True adds a ``chat.format``
    tensor (``CHAT``) to the BUMP the way the convert stage is to do it (chat.pack_chat_format)."""
    return _tiny(seed, json.dumps(CHAT, sort_keys=True) if chat else None)

def tiny_chat_pipeline(fmt: dict) -> dict[str, Path]:
    """The tiny model (seed 0) with the chat format ``fmt`` in its weights file."""
    return _tiny(0, json.dumps(fmt, sort_keys=True))

@functools.lru_cache(maxsize=None)
def _tiny(seed: int, chat_json: str | None) -> dict[str, Path]:
    root = Path(tempfile.mkdtemp(prefix=f"bu_tiny{seed}{'c' if chat_json else ''}_"))
    gguf_path = write_tiny_gguf(root / "tiny.gguf", seed)
    if chat_json is None:
        return run_pipeline(root, gguf_path)
    orig = convert.plan_conversion

    def with_chat(path):
        plan = orig(path)
        blob = chat.pack_chat_format(json.loads(chat_json))
        plan["sources"].append(bump.TensorSource("chat.format", "I8", (len(blob),), np.frombuffer(blob, np.uint8)))
        plan["manifest"]["extra"].append({"name": "chat.format", "dtype": "I8", "bytes": len(blob),
                                          "reason": "chat format for the CLI"})
        return plan

    convert.plan_conversion = with_chat
    try:
        return run_pipeline(root, gguf_path)
    finally:
        convert.plan_conversion = orig


def teacher_forced_logits(p: dict[str, Path], toks: list[int], n_vocab: int, out: Path):
    """Our program's logits at every position of ``toks`` (``--all-logits``), float32 [len(toks), n_vocab];
    ``p`` is what :func:`run_pipeline` returned (with the build), ``out`` a scratch file."""
    r = subprocess.run([p["cli"], p["lib"], p["bump"], "--prompt-tokens", ",".join(map(str, toks)),
                        "--all-logits", out, "--max-tokens", "0"], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return np.fromfile(out, dtype="<f4").reshape(len(toks), n_vocab)
