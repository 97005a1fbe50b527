"""Small synthetic GGUF files for error-path tests (written with gguf.GGUFWriter, never by hand)."""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np


def write_tiny_llama(path: Path, arch: str = "llama", n_layer: int = 1, n_embd: int = 32,
                     n_head: int = 2, n_ff: int = 64, n_vocab: int = 8, weight_type=None,
                     extra_tensor: str | None = None) -> Path:
    """A 1-layer llama-shaped GGUF with F32 weights (or ``weight_type`` raw bytes for wq) and a
    byte-level BPE vocabulary of ``n_vocab`` tokens."""
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(n_layer)
    w.add_embedding_length(n_embd)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_feed_forward_length(n_ff)
    w.add_context_length(128)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    toks = [chr(ord("a") + i) for i in range(n_vocab)]
    w.add_token_list(toks)
    w.add_token_types([1] * n_vocab)
    w.add_token_merges(["a b"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)

    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    w.add_tensor("token_embd.weight", f32(n_vocab, n_embd))
    w.add_tensor("output_norm.weight", f32(n_embd))
    for L in range(n_layer):
        p = f"blk.{L}."
        w.add_tensor(p + "attn_norm.weight", f32(n_embd))
        if weight_type is None:
            w.add_tensor(p + "attn_q.weight", f32(n_embd, n_embd))
        else:
            el, nbytes = gguf.GGML_QUANT_SIZES[weight_type]
            raw = rng.integers(0, 255, size=(n_embd, n_embd // el * nbytes), dtype=np.uint8)
            w.add_tensor(p + "attn_q.weight", raw, raw_shape=(n_embd, n_embd // el * nbytes), raw_dtype=weight_type)
        w.add_tensor(p + "attn_k.weight", f32(n_embd, n_embd))
        w.add_tensor(p + "attn_v.weight", f32(n_embd, n_embd))
        w.add_tensor(p + "attn_output.weight", f32(n_embd, n_embd))
        w.add_tensor(p + "ffn_norm.weight", f32(n_embd))
        w.add_tensor(p + "ffn_gate.weight", f32(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.weight", f32(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", f32(n_embd, n_ff))
    if extra_tensor:
        w.add_tensor(extra_tensor, f32(4))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
