"""Seed inputs of the fuzzing campaigns (tests/fuzz/run.py --write-seeds), made from real artifacts
by the project's own writers, never by hand:

- ``bump``: the weights.bump of a tiny synthetic llama converted by ``bringup.convert`` (F32 and
  Q8_0 weights, tokenizer blob, chat format), and a BUMP of one small tensor per block format
  written by ``bringup.formats.bump.write``;
- ``tok_load``: packed tokenizer blobs (``bringup.formats.tokenizer_pack.pack``) of a tiny
  byte-level BPE vocabulary with merges and control tokens, and of a tiny SentencePiece one with
  ``<0xXX>`` byte fallback, both read from GGUFs written by gguf.GGUFWriter;
- ``server_request``: bringup-run --server requests (json.dumps of OpenAI chat and completion
  bodies, with and without their HTTP head) and JSON edge cases (escapes, surrogate pairs, numbers);
- ``tok_encode_*``: texts (mode byte 0..3, then UTF-8; see csrc/fuzz/fuzz_tok_encode.c) and
  token-id lists (mode byte 0x80/0x81).
"""
from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path

import gguf
import numpy as np

from bringup.convert import importer
from bringup.formats import bump, gguf_file, tokenizer_json, tokenizer_pack
from bringup.formats import ggml
from bringup.core import canonjson
from bringup.core.paths import ROOT
from bringup.formats.chat import pack_chat_format
from tests.synth import write_tiny_llama

TEXTS = [
    "Hello world", " Hello World!", "The quick brown fox jumps over the lazy dog. 1234567890",
    "  \t\n\n  indented\r\n", "def f(x):\n    return x ** 2  # 😀\n", "Ünïcödé: 日本語のテキスト, 한국어, العربية, עברית",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "<start_of_turn>user\nhi<end_of_turn>\n<bos><eos>",
    "I've, you'll, they're, we'd... don't 'quoted' \"double\"", "a  b   c    d\u00a0e\u2003f", "3.14159 1e-10 0x1F 1,000,000",
    "\u200b\u200d\ufeff zero width", "🏳️‍🌈👨‍👩‍👧 emoji sequences", "\xe9" * 40, "x" * 300,
]
RAW_TEXTS = [b"\xff\xfe invalid", b"ok \xe2\x82", b"\xc0\x80 overlong", b"\xed\xa0\x80 surrogate", b"\x00 nul \x00"]


def _close(w: gguf.GGUFWriter, path: Path) -> Path:
    """Write the header, KVs and (no) tensors of ``w`` to ``path``."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _tiny_spm_gguf(path: Path) -> Path:
    """A vocabulary-only GGUF with a SentencePiece (llama) tokenizer: <unk> <s> </s>, 256 byte
    tokens, a few pieces with U+2581 and scores, one control and one user-defined token."""
    w = gguf.GGUFWriter(str(path), "llama")
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + \
           ["\u2581", "\u2581a", "a", "b", "ab", "\u2581ab", "\u2581the", "the", "<start_of_turn>", "<mask>"]
    types = [2, 3, 3] + [6] * 256 + [1] * 8 + [3, 4]
    scores = [0.0] * 259 + [-1.0, -2.0, -3.0, -3.5, -1.5, -0.5, -0.7, -4.0, 0.0, 0.0]
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_scores(scores)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    return _close(w, path)


def _tiny_bpe_gguf(path: Path) -> Path:
    """A vocabulary-only GGUF with a byte-level BPE (gpt2) tokenizer: the 256 byte-level
    characters, merges, a control token, an EOT and a user-defined token."""
    w = gguf.GGUFWriter(str(path), "llama")
    byte_chars = [chr(c) for c in range(0x21, 0x7F)] + [chr(c) for c in range(0xA1, 0xAD)] + \
        [chr(c) for c in range(0xAE, 0x100)]
    byte_chars += [chr(0x100 + i) for i in range(256 - len(byte_chars))]
    merges = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n"]
    toks = byte_chars + [m.replace(" ", "") for m in merges] + ["<|endoftext|>", "<|im_end|>", "<tool>"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(toks)
    w.add_token_types([1] * (len(toks) - 3) + [3, 3, 4])
    w.add_token_merges(merges)
    w.add_bos_token_id(len(toks) - 3)
    w.add_eos_token_id(len(toks) - 2)
    return _close(w, path)


def _blob(gguf_path: Path) -> bytes:
    return tokenizer_pack.pack(tokenizer_json.from_gguf(gguf_file.read_header(gguf_path).reader))


def bump_seeds(tmp: Path) -> dict[str, bytes]:
    """weights.bump of a converted tiny llama (F32 + Q8_0 attn_q) and a one-tensor-per-format BUMP."""
    src = write_tiny_llama(tmp / "tiny.gguf", n_ff=32, weight_type=gguf.GGMLQuantizationType.Q8_0)
    importer.convert(src, tmp / "convert")
    rng = np.random.default_rng(0)
    tensors = []
    for i, name in enumerate(["F32", "F16", "Q8_0", "Q4_K", "Q6_K"]):
        fmt = ggml.by_name(name)
        shape = (fmt.block_elems, 1 + i % 2)
        tensors.append(bump.TensorSource(f"t{i}.{name.lower()}", name, shape,
                                         rng.integers(0, 255, fmt.tensor_bytes(shape), np.uint8)))
    bump.write(tmp / "formats.bump", tensors, {"format": "bump", "seed": True},
               {k: 1 for k in bump.DIM_FIELDS})
    return {"tiny_llama.bump": (tmp / "convert" / "weights.bump").read_bytes(),
            "formats.bump": (tmp / "formats.bump").read_bytes()}


#: the campaigns of fuzz_tok_encode (tests/fuzz/run.py CAMPAIGNS), which share the text seeds
TOK_ENCODE_CAMPAIGNS = ("tok_encode_smollm2", "tok_encode_gemma3", "tok_encode_default", "tok_encode_deepseek_llm",
                        "tok_encode_deepseek_coder", "tok_encode_qwen35", "tok_encode_gemma4")


def encode_seeds() -> dict[str, bytes]:
    """The seeds of a fuzz_tok_encode campaign: texts with mode bytes 0..3, and token-id lists."""
    texts = {f"text{i:02d}": bytes([i % 4]) + t.encode() for i, t in enumerate(TEXTS)}
    texts |= {f"raw{i:02d}": bytes([i % 4]) + t for i, t in enumerate(RAW_TEXTS)}
    texts |= {"ids_small": b"\x80" + struct.pack("<8i", 0, 1, 2, 3, 100, 255, 256, 1000),
              "ids_edges": b"\x81" + struct.pack("<6i", -1, -2**31, 2**31 - 1, 49151, 49152, 262143)}
    return texts


def chat_seeds() -> dict[str, bytes]:
    """The seeds of the fuzz_chat campaign: the packed chat.format blob of every chat format of every
    circuit (bringup.formats.chat.pack_chat_format, what convert writes into the weights)."""
    out = {}
    for p in sorted((ROOT / "circuits").glob("*.json")):
        for i, fmt in enumerate(canonjson.read(p, "circuit").get("contracts", {}).get("chat", {}).get("formats", [])):
            out[f"{p.stem}_{i}_{fmt.get('name', '')}"] = pack_chat_format(fmt)
    return out


def server_request_seeds() -> dict[str, bytes]:
    """Request bodies as clients send them (json.dumps), with and without an HTTP head."""
    bodies = {
        "chat": {"model": "smollm2", "messages": [{"role": "system", "content": "Be brief."},
                                                  {"role": "user", "content": "Hi \u00e9\U0001f600"},
                                                  {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]},
                                                  {"role": "user", "content": "Why?"}],
                 "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.7, "top_p": 0.9,
                 "top_k": 40, "min_p": 0.05, "seed": 42, "max_tokens": 16, "stop": ["\n\n", "END"], "n": 1},
        "completion": {"prompt": "The capital of France is", "max_tokens": 8, "echo": False, "logprobs": None,
                       "presence_penalty": 0, "frequency_penalty": 0.0, "repeat_penalty": 1.1, "repeat_last_n": 64},
        "ids": {"prompt": [1, 2, 3, 4096], "max_completion_tokens": 3, "stop": "x", "user": "u"},
        "edge": {"a": [None, True, False, -0.0, 1e-7, -12345678901234, "\"\\/\b\f\n\r\t\u001f"], "b": {"c": [[[]]]}},
    }
    out = {}
    for name, body in bodies.items():
        data = json.dumps(body).encode()
        out[f"{name}.json"] = data
        head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(data)}\r\n\r\n"
        out[f"{name}.http"] = head.encode() + data
    out["get.http"] = b"GET /v1/models?x=1 HTTP/1.0\r\nAccept: */*\r\nExpect: 100-continue\r\n\r\n"
    return out


def write_all(corpus: Path, work: Path) -> dict[str, int]:
    """(Re)write the seed files of every campaign under ``corpus/<campaign>/``; returns counts."""
    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work) as d:
        tmp = Path(d)
        sets = {"bump": bump_seeds(tmp),
                "tok_load": {"bpe.blob": _blob(_tiny_bpe_gguf(tmp / "bpe.gguf")),
                             "spm.blob": _blob(_tiny_spm_gguf(tmp / "spm.gguf"))}}
        sets["chat"] = chat_seeds()
    texts = encode_seeds()
    sets |= {name: texts for name in TOK_ENCODE_CAMPAIGNS}
    sets["server_request"] = server_request_seeds()
    counts = {}
    for name, files in sets.items():
        dest = corpus / name
        dest.mkdir(parents=True, exist_ok=True)
        for fname, data in files.items():
            (dest / f"seed_{fname}").write_bytes(data)
        counts[name] = len(files)
    return counts
