"""What makes a parity run cheaper without changing a number: the reference's attention computed in
blocks of queries against the keys they can see, and the reference's second pass (under llama.cpp's
activation numerics) recognised as the first one when our numerics are llama.cpp's."""
from __future__ import annotations

import numpy as np
import pytest

from bringup.parity.oracles import NumpyReference, ops
from tests.synth import write_tiny_llama


def _attention_by_query(q, k, v, pos, kpos, window):
    """Per query position and head, written out: softmax over the keys it may see, then the
    weighted sum of their values (GQA: head h reads KV head h // (H / Hkv))."""
    T, H, D = q.shape
    rep = H // k.shape[1]
    out = np.zeros((T, H, v.shape[2]))
    for t in range(T):
        seen = (kpos <= pos[t]) & ((pos[t] - kpos < window) if window else True)
        for h in range(H):
            s = k[seen, h // rep] @ q[t, h] / np.sqrt(D)
            p = np.exp(s - s.max())
            out[t, h] = (p / p.sum()) @ v[seen, h // rep]
    return out.reshape(T, -1)


@pytest.mark.parametrize("T, pos0, window, block", [
    (300, 0, None, 256),      # two blocks, plain causal
    (300, 0, 40, 64),         # sliding window much shorter than a block: most keys skipped
    (37, 0, 5, 8),            # blocks smaller than the window and than T
    (9, 20, 12, 4),           # a continuation after 20 cached positions (decode / chunked prefill)
])
def test_blocked_attention_equals_the_per_query_formula(monkeypatch, T, pos0, window, block):
    monkeypatch.setattr(ops, "ATTENTION_BLOCK", block)
    rng = np.random.default_rng(T)
    H, Hkv, D = 6, 2, 8
    S = pos0 + T
    q, k, v = rng.standard_normal((T, H, D)) * 2, rng.standard_normal((S, Hkv, D)) * 2, rng.standard_normal((S, Hkv, D))
    pos, kpos = np.arange(pos0, S), np.arange(S)
    got = ops.causal_attention(q, k, v, pos, kpos, window)
    np.testing.assert_allclose(got, _attention_by_query(q, k, v, pos, kpos, window), rtol=1e-12, atol=1e-14)


def test_activation_dtypes_tell_when_two_numerics_are_one_computation(tmp_path):
    ref = NumpyReference(write_tiny_llama(tmp_path / "tiny.gguf"))
    f32 = ref.activation_dtypes("f32")
    assert set(f32.values()) == {"F32"} and "footer.lm_head" in f32 and "layer.0.ffn_down" in f32
    # F32 weights: llama.cpp's vec_dot_type is F32 too, so ggml-q8 is the same computation here
    assert ref.activation_dtypes("ggml-q8") == f32
    contract = {**f32, "layer.0.attn_q": "Q8_0"}
    assert ref.activation_dtypes(contract) != f32
    toks = [1, 2, 3, 4]
    same = ref.forward(toks, activations="ggml-q8")[0]
    np.testing.assert_array_equal(same, ref.forward(toks, activations=dict(f32))[0])
    assert not np.array_equal(ref.forward(toks, activations=contract)[0], same)
