"""The float64 reference streams its weights (bringup.parity.oracles.weights) and parity records
its memory and next-token entropy (bringup.parity.reference_checks, bringup.plan.memory.reference).

- Streaming is a memory schedule, not other arithmetic: the logits are bit-identical whether the
  head and the dequantizer work in one chunk (the whole-model computation the reference did before)
  or in many, and every tensor equals gguf's dequantization of the whole tensor.
- Nothing holds the whole model: a block's weights are gone when the next block's are read, the
  embedding is read by rows, the head by chunks.
- The predicted peak growth of a pass agrees with the measured one within
  ``bringup.plan.memory.reference.MARGIN``.
- Entropy: the formula, the gate's bound on a near-uniform distribution, and a generated model
  that gives a real distribution.
"""
from __future__ import annotations

import gc
import math
import weakref

import numpy as np
import pytest
from gguf.quants import dequantize

from bringup.core.rss import PeakGrowth
from bringup.fetch import synth
from bringup.formats import gguf_file
from bringup.parity.oracles import ops
from bringup.parity.oracles import weights as streamed
from bringup.parity.oracles.reference import NumpyReference
from bringup.parity.reference_checks import ReferenceMemory, entropies, entropy_summary
from bringup.plan.memory.reference import MARGIN, reference_peak
from bringup.plan.memory.spec import read_model_header

#: a small phi3 (fused QKV and gate-up) in Q4_1 (per-block minima) on a 32k vocabulary: the head
#: is four chunks of HEAD_CHUNK_ROWS
STREAM_URI = ("synth://bringup-synth-v1/phi3?vocab=phi-3&n_layer=2&n_embd=64&n_head=4&n_head_kv=2"
              "&n_ff=128&n_ctx=2048&seed=3&wtype=Q4_1")
#: the entropy gate's bound (config/parity_profiles/*.json, reference_entropy)
ENTROPY_BOUND = 0.75


@pytest.fixture(scope="module")
def streaming_gguf(llama_vocab_dir, tmp_path_factory):
    return synth.generate(synth.parse(STREAM_URI), llama_vocab_dir, tmp_path_factory.mktemp("stream") / "phi3.gguf")


def _logits(path, toks, acts):
    return NumpyReference(path).forward(toks, activations=acts)[0]


@pytest.mark.parametrize("acts", ["f32", "ggml-q8"])
def test_streamed_logits_are_the_whole_model_computation(streaming_gguf, monkeypatch, acts):
    toks = list(np.random.default_rng(0).integers(0, 32064, 40))
    default = _logits(streaming_gguf, toks, acts)
    with monkeypatch.context() as m:   # one chunk: each tensor and the head at once, as before streaming
        m.setattr(streamed, "HEAD_CHUNK_ROWS", 10**9)
        m.setattr(streamed, "DEQUANT_CHUNK_ELEMS", 10**12)
        whole = _logits(streaming_gguf, toks, acts)
    with monkeypatch.context() as m:   # many small chunks
        m.setattr(streamed, "HEAD_CHUNK_ROWS", 1000)
        m.setattr(streamed, "DEQUANT_CHUNK_ELEMS", 64 * 7)
        small = _logits(streaming_gguf, toks, acts)
    assert default.tobytes() == whole.tobytes() == small.tobytes()


def test_every_tensor_is_gguf_s_dequantization_of_the_whole(streaming_gguf, monkeypatch):
    monkeypatch.setattr(streamed, "DEQUANT_CHUNK_ELEMS", 64 * 5)
    ref = NumpyReference(streaming_gguf)
    whole = {t.name: np.asarray(dequantize(t.data, t.tensor_type), np.float64)
             for t in gguf_file.open_gguf(streaming_gguf).tensors}
    c = ref.cfg
    parts = {"attn_q": (0, c.n_embd), "attn_k": (c.n_embd, c.n_embd + 32), "attn_v": (c.n_embd + 32, c.n_embd + 64),
             "ffn_gate": (0, c.n_ff), "ffn_up": (c.n_ff, 2 * c.n_ff)}
    for L in range(c.n_layer):
        w = ref.weights.layer(L)
        for name in w:
            role = name.split(".")[2]
            fused = {"attn_q": "attn_qkv", "attn_k": "attn_qkv", "attn_v": "attn_qkv", "ffn_gate": "ffn_up",
                     "ffn_up": "ffn_up"}.get(role)
            want = whole[name] if fused is None else whole[f"blk.{L}.{fused}.weight"][slice(*parts[role])]
            assert np.array_equal(w[name], want.reshape(w[name].shape)), name
    idx = np.array([5, 0, 32063, 5])
    assert np.array_equal(ref.weights.rows("token_embd.weight", idx), whole["token_embd.weight"][idx])
    head = np.concatenate([c for _, _, c, _ in ref.weights.row_chunks("output.weight")])
    assert np.array_equal(head, whole["output.weight"])


def test_no_pass_holds_more_than_one_block_or_a_whole_table(streaming_gguf, monkeypatch):
    ref = NumpyReference(streaming_gguf)
    alive: list[weakref.ref] = []
    seen: list[str] = []
    layer, dequant = streamed.StreamedWeights.layer, streamed.StreamedWeights.dequant

    def spy_layer(self, L):
        lw = layer(self, L)
        alive.append(weakref.ref(lw))
        return lw

    def spy_dequant(self, name):
        gc.collect()
        assert sum(r() is not None for r in alive) <= 1, f"two blocks' weights alive when {name} is read"
        seen.append(name)
        return dequant(self, name)

    monkeypatch.setattr(streamed.StreamedWeights, "layer", spy_layer)
    monkeypatch.setattr(streamed.StreamedWeights, "dequant", spy_dequant)
    ref.forward([1, 2, 3, 4])
    assert seen and all(n.startswith("blk.") for n in seen)   # tables only by rows and chunks
    assert sum(r() is not None for r in alive) == 0   # nothing kept after the pass


def test_predicted_peak_matches_the_measured_one(streaming_gguf):
    """One pass over 600 tokens (the head phase: [600, 32064] logits) against the memory model."""
    ref = NumpyReference(streaming_gguf)
    c = ref.cfg
    mem = ReferenceMemory.of(streaming_gguf, c)
    toks = list(np.random.default_rng(1).integers(0, c.n_vocab, 600))
    mem.measure(len(toks), lambda: ref.forward(toks)[0])
    s = mem.summary()
    if s["status"] != "measured":
        pytest.fail(f"this test needs Linux /proc: {s['reason']}")
    peak = s["peak"]
    assert abs(peak["measured_bytes"] / peak["predicted_bytes"] - 1) <= MARGIN, peak
    # and the prediction is a pass's, far below the whole model in float64 plus its logits
    whole_f64 = 8 * sum(math.prod(w.shape) for w in read_model_header(streaming_gguf).weights)
    assert reference_peak(read_model_header(streaming_gguf).weights, mem.hp, 1)["total"] < whole_f64


def test_peak_growth_sees_an_allocation():
    with PeakGrowth() as g:
        a = np.ones(50_000_000 // 8)
        del a
    assert g.bytes is not None and 40_000_000 <= g.bytes <= 80_000_000


def test_entropy_is_the_softmax_entropy():
    logits = np.random.default_rng(2).normal(size=(70, 500)).astype(np.float32) * 3
    p = np.exp(logits.astype(np.float64) - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(entropies(logits), -(p * np.log(p)).sum(axis=1), rtol=1e-12)
    flat = entropy_summary([entropies(np.zeros((3, 500), np.float32))], 500)
    assert flat["entropy_ratio"] == pytest.approx(1.0)


def test_small_random_weights_are_near_uniform_and_refused():
    """Logits of RMS 1 on a 32k vocabulary (what random weights without the generator's scaling give):
    the ratio is about 1 - 1/(2 log V) = 0.95, above the bound."""
    logits = np.random.default_rng(3).normal(size=(50, 32000)).astype(np.float32)
    ratio = entropy_summary([entropies(logits)], 32000)["entropy_ratio"]
    assert 0.9 < ratio and ratio > ENTROPY_BOUND


def test_a_generated_model_gives_a_real_distribution(streaming_gguf):
    ref = NumpyReference(streaming_gguf)
    toks = list(np.random.default_rng(4).integers(0, ref.cfg.n_vocab, 64))
    s = entropy_summary([entropies(ref.forward(toks)[0])], ref.cfg.n_vocab)
    assert s["entropy_ratio"] < ENTROPY_BOUND - 0.1, s


def test_a_routed_ffn_dequantizes_only_the_selected_experts_one_at_a_time(llama_vocab_dir, tmp_path, monkeypatch):
    """The reference's MoE layer reads each selected expert's rows (never a whole stacked tensor,
    never an unselected expert), holds one expert at a time, and computes what the whole tensors
    give (ops.moe_ffn against the per-token sum written from the definition)."""
    uri = ("synth://bringup-synth-v1/qwen3moe?vocab=qwen2&n_layer=2&n_embd=256&n_head=2&n_head_kv=1&n_ff=256"
           "&n_ctx=64&seed=2&wtype=Q4_K&n_expert=16&n_expert_used=2")
    g = synth.generate(synth.parse(uri), llama_vocab_dir, tmp_path / "moe.gguf")
    ref = NumpyReference(g)
    asked: list[tuple[str, int]] = []
    expert, dequant = streamed.StreamedWeights.expert, streamed.StreamedWeights.dequant

    def spy_expert(self, name, e):
        asked.append((name, e))
        return expert(self, name, e)

    def spy_dequant(self, name):
        assert not name.endswith("_exps.weight"), f"{name} dequantized whole"
        return dequant(self, name)

    monkeypatch.setattr(streamed.StreamedWeights, "expert", spy_expert)
    monkeypatch.setattr(streamed.StreamedWeights, "dequant", spy_dequant)
    toks = [5, 17, 300, 4000]
    _, cap = ref.forward(toks, capture=True)
    for L in range(2):
        z = cap[f"layer.{L}.ffn_router"]
        ids, wts = ops.moe_route(np.asarray(z, dtype=np.float64), 2, True)
        used = sorted(set(ids.ravel().tolist()))
        for part in ("gate", "up", "down"):   # each selected expert once per layer, nothing else
            assert sorted(e for n, e in asked if n == f"blk.{L}.ffn_{part}_exps.weight") == used
        whole = {p: dequant(ref.weights, f"blk.{L}.ffn_{p}_exps.weight") for p in ("gate", "up", "down")}
        h = cap[f"layer.{L}.ffn_norm"]
        want = np.zeros_like(h, dtype=np.float64)
        for t in range(len(toks)):
            for e, a in zip(ids[t], wts[t]):
                want[t] += a * (whole["down"][e] @ ops.glu(whole["gate"][e] @ h[t], whole["up"][e] @ h[t], False))
        np.testing.assert_allclose(cap[f"layer.{L}.ffn_experts"], want, rtol=1e-5, atol=1e-6)   # float32 captures
    # the memory model counts one expert of a stacked tensor, not all sixteen
    hp = ReferenceMemory.of(g, ref.cfg).hp
    pred = reference_peak(read_model_header(g).weights, hp, 4)["phases"]["block"]
    assert pred["expert_slot_outputs_f64"] == 8 * 4 * 3 * 256
    per_layer = 8 * sum(math.prod(w.shape) // (16 if w.role.endswith("_exps") else 1)
                        for w in read_model_header(g).weights if w.layer == 0)
    assert pred["block_weights_f64"] == per_layer
