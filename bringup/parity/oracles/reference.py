"""The numpy reference: a float64 forward pass of a GGUF model, independent of llama.cpp and of our C.

Weights are dequantized by ``gguf.quants.dequantize``; the ops are written from the architecture
papers and the GGUF conventions (not from llama.cpp's or our C). It is the source of per-op hidden
states for X-ray, computed on the program's own inputs to each op (teacher forcing per op), and
it can run with injected faults (wrong RoPE theta, wrong norm eps, swapped stride at one layer) to
stand in for a broken program under test. (The PyTorch/transformers oracle was not adopted: torch
+ transformers are a multi-hundred-MB install for CI, and transformers' GGUF loader dequantizes
with the same gguf-py code anyway.)
"""
from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from bringup.core.errors import BringupError, UnsupportedError
from bringup.formats import ggml as formats
from bringup.formats import gguf_file
from bringup.formats.gguf_types import typed_field
from bringup.parity.oracles import families
from bringup.parity.oracles.families import (FAMILIES, FOOT_CHECKPOINTS, HEAD_CHECKPOINTS, LAYER_CHECKPOINTS,
                                             RefConfig)
from bringup.parity.oracles.ops import causal_attention, float_activation, glu, moe_ffn, rmsnorm, rope
from bringup.parity.oracles.q8 import ACTIVATION_DTYPES, q8_1_sum_scale, q8_activation
from bringup.parity.oracles.weights import StreamedWeights

__all__ = ["ACTIVATIONS", "FAULT_KINDS", "FOOT_CHECKPOINTS", "HEAD_CHECKPOINTS", "LAYER_CHECKPOINTS",
           "LINEAR_ACTIVATION_DTYPES", "Fault", "NumpyReference", "RefConfig"]

#: Faults the reference can inject (test-only variants of ops).
FAULT_KINDS = ("rope_theta", "norm_eps", "swap_stride")

#: Activation numerics of the reference's linear ops (the names of ``bringup.ir.resolve.NUMERICS``,
#: recorded in an IR's ``dims.numerics``). ``f32``: x W^T in float64 on the float activations
#: (the model's math). ``ggml-q8``: each token row of x is first rounded to the activation format
#: llama.cpp's CPU backend pairs with the weight type (``bringup.formats.ggml.vec_dot_types()``,
#: llama.cpp ``type_traits_cpu[type].vec_dot_type``: a Q8 block format, :func:`q8_activation`, or
#: F16 / BF16 for F16 / BF16 weights, ``ops.float_activation``), then x_q W^T in float64.
#: ``forward`` also takes a mapping checkpoint -> activation dtype (:data:`LINEAR_ACTIVATION_DTYPES`),
#: one per linear op, e.g. from the program's kernel maps (``bringup.parity.xray.activation_contract``).
ACTIVATIONS = ("f32", "ggml-q8")
#: KV cache element types the reference computes with (:meth:`NumpyReference.forward` ``kv_dtype``).
KV_DTYPES = ("F32", "F16")
#: Activation dtypes a linear op can run with: the Q8 formats of ``q8.py``, and F16 / BF16, which
#: llama.cpp's CPU backend converts activations to for F16 / BF16 weights (their vec_dot_type).
LINEAR_ACTIVATION_DTYPES = ACTIVATION_DTYPES + ("F16", "BF16")


@dataclass(frozen=True)
class Fault:
    """A deliberate error at one layer, to test that parity fails and X-ray finds it.

    kind: ``rope_theta`` (RoPE base ``value`` instead of the model's, at layer ``layer``),
    ``norm_eps`` (``value`` as the attention RMSNorm epsilon at ``layer``), ``swap_stride``
    (the output projection of ``layer`` reads its [n_embd, n_embd] weight with rows and columns
    swapped, as a kernel with swapped strides would).
    """
    kind: str
    layer: int
    value: float | None = None

    def __post_init__(self):
        if self.kind not in FAULT_KINDS:
            raise BringupError(f"unknown fault kind {self.kind!r}; known: {', '.join(FAULT_KINDS)}")


class NumpyReference:
    """Float64 forward pass of a GGUF model (the families of :data:`SUPPORTED`,
    ``bringup.parity.oracles.families``).

    Weights: ``gguf.quants.dequantize`` of the GGUF tensors, as float64, [out, in], streamed by
    ``self.weights`` (``weights.StreamedWeights``): a block's tensors exist in float64 only while
    the block runs, the embedding is gathered by rows and the head applied in row chunks, so a pass
    never holds the whole model (its peak: ``bringup.plan.memory.reference``). Every op's
    output is kept when ``capture=True`` (dict ``layer.{L}.{op}`` -> float32 [T, ...]). For X-ray,
    :meth:`forward` can run each op on a program's own dumped inputs (``feed``, teacher forcing
    per op) and with the program's activation numerics (``activations="ggml-q8"``).
    Raises UnsupportedError for other architectures and for RoPE scalings the reference does not
    compute, BringupError for a missing key or tensor.
    """

    SUPPORTED = tuple(FAMILIES)

    def __init__(self, gguf_path: str | os.PathLike, faults: Sequence[Fault] = ()):
        self.gguf_path = Path(gguf_path)
        reader = gguf_file.open_gguf(self.gguf_path)  # the one checked, cached GGUF reader
        self._reader = reader
        arch = self._str("general.architecture")
        if arch not in self.SUPPORTED:
            raise UnsupportedError(f"numpy reference: architecture {arch!r} not supported "
                                   f"(supported: {', '.join(self.SUPPORTED)})")
        self.faults = tuple(faults)
        self.family = families.family_of(arch, self._raw)
        self.cfg = families.read_config(arch, self._raw, self.gguf_path.name)
        present = {t.name for t in reader.tensors}
        # LongRoPE (Phi-3 128k) and Llama 3.1 scale RoPE frequencies per dimension by these factors
        scaled = sorted(present & {"rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"})
        if scaled:
            raise UnsupportedError(f"numpy reference: RoPE frequency factors ({', '.join(scaled)}) "
                                   "are not supported")
        missing = [n for n in families.required_tensors(self.family, self.cfg.n_layer) if n not in present]
        if missing:
            raise BringupError(f"{self.gguf_path.name}: tensor {missing[0]} is absent "
                               f"({len(missing)} missing for {arch})")
        # weights stream layer by layer (weights.py): nothing holds the whole model in float64
        self.weights = StreamedWeights(self.gguf_path, reader, self._fused_parts(), tied_head=True)
        self.wtype = self.weights.wtype
        for f in self.faults:
            if not 0 <= f.layer < self.cfg.n_layer:
                raise BringupError(f"fault at layer {f.layer}: the model has {self.cfg.n_layer} layers")
        self.checkpoint_names = families.checkpoint_names(self.family, self.cfg.n_layer)

    def _fused_parts(self) -> dict[str, tuple[tuple[str, int], ...]]:
        """Phi-3's fused weights as the separate projections (families.py: attn_qkv rows [Q | K | V],
        ffn_up rows [gate | up]); a product's row i is the weight's row i, so the parts are row ranges."""
        c = self.cfg
        sizes = {"attn_qkv": (("attn_q", c.n_head * c.head_dim), ("attn_k", c.n_head_kv * c.head_dim),
                              ("attn_v", c.n_head_kv * c.head_dim_v)),
                 "ffn_up": (("ffn_gate", c.n_ff), ("ffn_up", c.n_ff))}
        fused = [f for f, on in (("attn_qkv", self.family.fused_qkv), ("ffn_up", self.family.fused_gate_up)) if on]
        return {f"blk.{L}.{f}.weight": tuple((f"blk.{L}.{part}.weight", n) for part, n in sizes[f])
                for L in range(c.n_layer) for f in fused}

    def with_faults(self, faults: Sequence[Fault]) -> "NumpyReference":
        """A copy sharing these weights (no reload) that injects ``faults``."""
        other = copy.copy(self)
        for f in faults:
            if not 0 <= f.layer < self.cfg.n_layer:
                raise BringupError(f"fault at layer {f.layer}: the model has {self.cfg.n_layer} layers")
        other.faults = tuple(faults)
        return other

    # -- GGUF keys -----------------------------------------------------------------------------
    def _raw(self, key: str, kind: str):
        """The value of ``key`` if stored with a GGUF type of ``kind`` (BringupError otherwise)."""
        return typed_field(self._reader, key, kind)

    def _str(self, key: str) -> str:
        v = self._raw(key, "str")
        if v is None:
            raise BringupError(f"{self.gguf_path.name}: GGUF key {key} is absent")
        return v

    def info(self) -> dict[str, Any]:
        """What the reference is: dtype, dequantizer and package versions, injected faults."""
        return {"name": "numpy-reference", "dtype": "float64", "dequantize": "gguf.quants.dequantize",
                "gguf_version": version("gguf"), "numpy_version": np.__version__,
                "architecture": self.cfg.arch, "faults": [f.__dict__ for f in self.faults]}

    # -- forward -------------------------------------------------------------------------------
    def _fault(self, kind: str, layer: int) -> Fault | None:
        for f in self.faults:
            if f.kind == kind and f.layer == layer:
                return f
        return None

    def checkpoint_inputs(self) -> dict[str, list[str]]:
        """Checkpoint -> the checkpoints its op reads, in execution order (the data flow of
        :meth:`forward`; attention reads the rotated Q and K and the V projection of every position
        of the call, i.e. the whole KV cache of a single prefill)."""
        return families.checkpoint_inputs(self.family, self.cfg.n_layer)

    def forward(self, tokens: Sequence[int], capture: bool = False, cache: dict | None = None,
                last_only: bool = False, feed: dict[str, np.ndarray] | None = None,
                activations: str | dict[str, str] = "f32",
                resolved: dict[str, str] | None = None,
                kv_dtype: str = "F32") -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Logits float32 [T, n_vocab] (or [1, n_vocab] with ``last_only``) for ``tokens``, and the
        checkpoints (empty unless ``capture``).

        Without ``cache`` the tokens sit at positions 0..T-1. With a ``cache`` dict (KV cache:
        layer -> (K, V) after RoPE, filled by earlier calls) they continue after the cached ones.

        ``feed`` (teacher forcing per op, for X-ray): checkpoint name -> float32 [T, width], e.g. a
        program's ``--dump-hidden`` output. Each op then reads the fed value of every input
        checkpoint present in ``feed`` instead of the reference's own, so a captured checkpoint is
        the reference op applied to the fed inputs (:meth:`checkpoint_inputs` lists which).
        Inputs absent from ``feed`` come from the reference (callers report them). Not with
        ``cache`` or ``last_only``; a fed array of another shape raises BringupError.

        ``activations``: one of :data:`ACTIVATIONS` (the linear ops' activation numerics), or a
        mapping linear checkpoint -> activation dtype (:data:`LINEAR_ACTIVATION_DTYPES`); a linear
        op it does not cover raises BringupError. A linear op adds the GGUF bias ``<weight>.bias``
        when the file has one (Qwen2's Q/K/V), in float64 after the product, as part of the op.
        ``resolved``: a dict to fill with linear checkpoint -> the activation dtype applied (what
        :meth:`activation_dtypes` reports).

        ``kv_dtype``: the program's KV cache element type (:data:`KV_DTYPES`, the IR's state dtype,
        ``bringup ir --kv-type``). ``"F16"``: every K row (after RoPE) and V row is rounded to IEEE
        half (round to nearest even, ``astype(np.float16)``) before attention reads it, the call's
        own rows included, as the attention.f16.* providers and llama.cpp's F16 cache do.
        The pass, in execution order: :meth:`_embedding`, then for each block
        :meth:`_attention_block` and :meth:`_ffn_block`, then :meth:`_final_norm_and_logits`; the
        state they share (captured and fed checkpoints, activation numerics, the block's weights)
        is a ``_Pass``.
        """
        toks = self._checked_tokens(tokens, cache, last_only, feed, activations, kv_dtype)
        run = _Pass(self, capture, feed, activations, resolved)
        T = toks.size
        pos0 = cache[0][0].shape[0] if cache else 0
        pos = np.arange(pos0, pos0 + T)
        kpos = np.arange(pos0 + T)
        x = self._embedding(run, toks)
        for L in range(self.cfg.n_layer):
            run.w = self.weights.layer(L)   # this block's weights in float64, dropped after the block
            x = self._attention_block(run, L, x, pos, kpos, cache, kv_dtype)
            x = self._ffn_block(run, L, x)
            run.w = None   # the block's float64 weights are freed before the head runs
        return self._final_norm_and_logits(run, x, last_only), run.cap

    def _checked_tokens(self, tokens: Sequence[int], cache: dict | None, last_only: bool,
                        feed: dict[str, np.ndarray] | None, activations: str | dict[str, str],
                        kv_dtype: str) -> np.ndarray:
        """``tokens`` as int64 [T], once :meth:`forward`'s arguments are checked. BringupError for
        an empty or not 1-D sequence, a token id outside [0, n_vocab), ``activations`` not in
        :data:`ACTIVATIONS` (or a mapping to dtypes not in :data:`LINEAR_ACTIVATION_DTYPES`),
        ``kv_dtype`` not in :data:`KV_DTYPES`, and ``feed`` with ``cache`` or ``last_only``."""
        c = self.cfg
        toks = np.asarray(tokens, dtype=np.int64)
        if toks.ndim != 1 or toks.size == 0:
            raise BringupError("reference: tokens must be a non-empty 1-D sequence")
        if toks.min() < 0 or toks.max() >= c.n_vocab:
            raise BringupError(f"reference: token id outside the vocabulary [0, {c.n_vocab})")
        if isinstance(activations, str):
            if activations not in ACTIVATIONS:
                raise BringupError(f"reference: activations {activations!r} not in {ACTIVATIONS}")
        elif not set(activations.values()) <= set(LINEAR_ACTIVATION_DTYPES):
            raise BringupError(f"reference: activation dtypes {sorted(set(activations.values()))} "
                               f"not all in {LINEAR_ACTIVATION_DTYPES}")
        if kv_dtype not in KV_DTYPES:
            raise BringupError(f"reference: KV cache dtype {kv_dtype!r} not in {KV_DTYPES}")
        if feed is not None and (cache is not None or last_only):
            raise BringupError("reference: feed (teacher forcing per op) works on a whole prefill only")
        return toks

    def _embedding(self, run: "_Pass", toks: np.ndarray) -> np.ndarray:
        """Embedding lookup: the ``token_embd`` rows of ``toks`` (int64 [T]) as float64 [T, n_embd],
        times sqrt(n_embd) for the Gemma families (checkpoint ``header.embed``)."""
        x = self.weights.rows("token_embd.weight", toks)   # only the rows of these tokens
        if self.family.embed_scale:
            x = x * math.sqrt(self.cfg.n_embd)  # Gemma scales embeddings by sqrt(d_model)
        return run.keep("header.embed", x)

    def _rope_base(self, L: int) -> tuple[bool, float]:
        """(whether block ``L`` is local, i.e. attends within the sliding window; its RoPE base
        theta). Local: every layer but each ``swa_period``-th when the model has a window (Gemma 2 /
        3), with base ``rope_theta_local``. A ``rope_theta`` fault at ``L`` replaces the base."""
        c, fam = self.cfg, self.family
        is_local = bool(fam.swa_period and c.sliding_window and (L + 1) % fam.swa_period != 0)
        theta = c.rope_theta_local if is_local else c.rope_theta
        f_rope = self._fault("rope_theta", L)
        if f_rope:
            theta = f_rope.value
        return is_local, theta

    def _qkv_rope(self, run: "_Pass", L: int, x: np.ndarray, pos: np.ndarray,
                  theta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Attention inputs of block ``L``: RMSNorm of the residual stream x float64 [T, n_embd]
        (``attn_norm``; a ``norm_eps`` fault's epsilon at ``L``), the Q / K / V projections (with
        their GGUF biases), the Q / K RMSNorm of the qk_norm families (per head, or OLMoE: over the
        whole projection), then RoPE with base ``theta`` at positions ``pos`` int64 [T] on Q and K.
        Returns float64 q [T, n_head, head_dim], k [T, n_head_kv, head_dim] (both rotated) and
        v [T, n_head_kv, head_dim_v]."""
        c, fam, w = self.cfg, self.family, run.w
        T, hd, hdv, H, Hkv = x.shape[0], c.head_dim, c.head_dim_v, c.n_head, c.n_head_kv
        p, nm = f"blk.{L}.", f"layer.{L}."
        f_eps = self._fault("norm_eps", L)
        h = run.keep(nm + "attn_norm", rmsnorm(x, w[p + "attn_norm.weight"], f_eps.value if f_eps else c.norm_eps))
        q = run.keep(nm + "attn_q", run.linear(nm + "attn_q", h, p + "attn_q.weight").reshape(T, H, hd))
        k = run.keep(nm + "attn_k", run.linear(nm + "attn_k", h, p + "attn_k.weight").reshape(T, Hkv, hd))
        v = run.keep(nm + "attn_v", run.linear(nm + "attn_v", h, p + "attn_v.weight").reshape(T, Hkv, hdv))
        if fam.qk_norm:   # over each head, or (OLMoE) over the whole projection
            qs, ks = ((T, H * hd), (T, Hkv * hd)) if fam.qk_norm_full else (q.shape, k.shape)
            q = run.keep(nm + "q_norm", rmsnorm(q.reshape(qs), w[p + "attn_q_norm.weight"], c.norm_eps).reshape(T, H, hd))
            k = run.keep(nm + "k_norm", rmsnorm(k.reshape(ks), w[p + "attn_k_norm.weight"], c.norm_eps).reshape(T, Hkv, hd))
        q = run.keep(nm + "rope_q", rope(q, pos, theta, c.rope_dim, neox=fam.neox))
        k = run.keep(nm + "rope_k", rope(k, pos, theta, c.rope_dim, neox=fam.neox))
        return q, k, v

    def _attention_block(self, run: "_Pass", L: int, x: np.ndarray, pos: np.ndarray, kpos: np.ndarray,
                         cache: dict | None, kv_dtype: str) -> np.ndarray:
        """Block ``L``'s attention sublayer on the residual stream x float64 [T, n_embd]: Q / K / V
        with RoPE (:meth:`_qkv_rope`), K and V rounded to F16 under ``kv_dtype`` "F16", appended to
        the KV cache ``cache[L]`` (the (K, V) of earlier calls, after RoPE) when there is one, causal
        attention of the queries at ``pos`` [T] over the keys at ``kpos`` [S] with grouped KV heads
        (GQA), the sliding window on local layers and the attention soft-cap, the output projection
        (transposed under a ``swap_stride`` fault), Gemma's post-attention RMSNorm and the residual
        add. Returns float64 [T, n_embd] (checkpoint ``attn_residual``)."""
        c, fam = self.cfg, self.family
        p, nm = f"blk.{L}.", f"layer.{L}."
        is_local, theta = self._rope_base(L)
        q, k, v = self._qkv_rope(run, L, x, pos, theta)
        if kv_dtype == "F16":   # the cache stores halves; attention reads them widened
            k, v = k.astype(np.float16).astype(np.float64), v.astype(np.float16).astype(np.float64)
        if cache is not None:
            if L in cache:
                k = np.concatenate([cache[L][0], k])
                v = np.concatenate([cache[L][1], v])
            cache[L] = (k, v)
        a = run.keep(nm + "attn", causal_attention(q, k, v, pos, kpos, c.sliding_window if is_local else None,
                                                   softcap=c.attn_softcap))
        wo = None
        if self._fault("swap_stride", L):
            wo = run.w[p + "attn_output.weight"]
            if wo.shape[0] != wo.shape[1]:
                raise BringupError("swap_stride fault needs a square output projection")
            wo = wo.T
        o = run.keep(nm + "attn_out", run.linear(nm + "attn_out", a, p + "attn_output.weight", wo))
        if fam.post_norms:
            o = run.keep(nm + "post_attn_norm", rmsnorm(o, run.w[p + "post_attention_norm.weight"], c.norm_eps))
        return run.keep(nm + "attn_residual", x + o)

    def _ffn_block(self, run: "_Pass", L: int, x: np.ndarray) -> np.ndarray:
        """Block ``L``'s feed-forward sublayer on the residual stream x float64 [T, n_embd]: RMSNorm
        (``ffn_norm``), the routed MoE FFN (:meth:`_moe_ffn`) or the dense gated FFN
        (:meth:`_dense_ffn`), Gemma's post-FFN RMSNorm and the residual add. Returns float64
        [T, n_embd] (checkpoint ``ffn_residual``)."""
        c, fam = self.cfg, self.family
        p, nm = f"blk.{L}.", f"layer.{L}."
        h = run.keep(nm + "ffn_norm", rmsnorm(x, run.w[p + "ffn_norm.weight"], c.norm_eps))
        d = self._moe_ffn(run, L, h) if fam.moe else self._dense_ffn(run, L, h)
        if fam.post_norms:
            d = run.keep(nm + "post_ffn_norm", rmsnorm(d, run.w[p + "post_ffw_norm.weight"], c.norm_eps))
        return run.keep(nm + "ffn_residual", x + d)

    def _dense_ffn(self, run: "_Pass", L: int, h: np.ndarray) -> np.ndarray:
        """Block ``L``'s dense gated FFN (SwiGLU, or GeGLU for the Gemma families) on the normed
        h float64 [T, n_embd]: W_down (act(W_gate h) * W_up h), the gate and up products
        [T, n_ff]. Returns float64 [T, n_embd] (checkpoint ``ffn_down``)."""
        p, nm = f"blk.{L}.", f"layer.{L}."
        g = run.keep(nm + "ffn_gate", run.linear(nm + "ffn_gate", h, p + "ffn_gate.weight"))
        u = run.keep(nm + "ffn_up", run.linear(nm + "ffn_up", h, p + "ffn_up.weight"))
        act = run.keep(nm + "ffn_act", glu(g, u, self.family.gelu))
        return run.keep(nm + "ffn_down", run.linear(nm + "ffn_down", act, p + "ffn_down.weight"))

    def _moe_ffn(self, run: "_Pass", L: int, h: np.ndarray) -> np.ndarray:
        """Block ``L``'s routed MoE FFN on the normed h float64 [T, n_embd]: router logits
        [T, n_expert] (``ffn_gate_inp``), then ``ops.moe_ffn`` over the selected experts, which
        are dequantized one at a time. Returns float64 [T, n_embd] (checkpoint ``ffn_experts``)."""
        p, nm, w = f"blk.{L}.", f"layer.{L}.", run.w
        z = run.keep(nm + "ffn_router", run.linear(nm + "ffn_router", h, p + "ffn_gate_inp.weight"))
        return run.keep(nm + "ffn_experts", moe_ffn(h, z, lambda part, e: w.expert(f"{p}ffn_{part}_exps.weight", e),
                                                    self.cfg.extra))

    def _final_norm_and_logits(self, run: "_Pass", x: np.ndarray, last_only: bool) -> np.ndarray:
        """Final RMSNorm (``output_norm``) of the residual stream x float64 [T, n_embd], the output
        head on every row (the last one with ``last_only``), Gemma 2's final soft-cap. Returns the
        logits as float32 [T, n_vocab] (or [1, n_vocab])."""
        c = self.cfg
        x = run.keep("footer.output_norm", rmsnorm(x, self.weights.globals["output_norm.weight"], c.norm_eps))
        logits = run.head("footer.lm_head", x[-1:] if last_only else x)
        run.keep("footer.lm_head", logits)
        if c.final_softcap:   # Gemma 2: cap * tanh(logits / cap)
            logits = run.keep(families.SOFTCAP_CHECKPOINT, c.final_softcap * np.tanh(logits / c.final_softcap))
        return logits.astype(np.float32)

    def activation_dtypes(self, activations: str | dict[str, str]) -> dict[str, str]:
        """Linear checkpoint -> the activation dtype :meth:`forward` applies under ``activations``
        (found by a one-token forward pass, so it is exactly what forward does). Two settings with
        equal results compute identical logits: every other step of the pass is the same."""
        out: dict[str, str] = {}
        self.forward([0], last_only=True, activations=activations, resolved=out)
        return out

    # -- program interface ---------------------------------------------------------------------
    def logits_all(self, tokens: Sequence[int]) -> np.ndarray:
        return self.forward(tokens)[0]

    def greedy(self, tokens: Sequence[int], n: int, eog: Sequence[int] = ()) -> list[int]:
        """Greedy (argmax) continuation of up to ``n`` tokens, with a KV cache; stops after a token
        in ``eog``."""
        cache: dict = {}
        logits = self.forward(tokens, cache=cache, last_only=True)[0]
        out: list[int] = []
        while len(out) < n:
            nxt = int(np.argmax(logits[-1]))
            out.append(nxt)
            if nxt in eog or len(out) == n:
                break
            logits = self.forward([nxt], cache=cache, last_only=True)[0]
        return out


class _Pass:
    """The state one :meth:`NumpyReference.forward` call shares between its steps: the checkpoints
    it captures (``cap``: name -> float32 [T, width]), the fed ones it reads instead (``feed``),
    the linear ops' activation numerics (``activations``, recorded into ``resolved``) and the
    current block's float64 weights (``w``: a ``weights.LayerWeights``, None between blocks)."""

    def __init__(self, ref: NumpyReference, capture: bool, feed: dict[str, np.ndarray] | None,
                 activations: str | dict[str, str], resolved: dict[str, str] | None):
        self.wtype, self.weights, self.n_vocab = ref.wtype, ref.weights, ref.cfg.n_vocab
        self.capture, self.feed, self.activations, self.resolved = capture, feed, activations, resolved
        self.cap: dict[str, np.ndarray] = {}
        self.w = None   # the current block's weights (weights.LayerWeights), read by linear()

    def keep(self, name: str, a: np.ndarray) -> np.ndarray:
        """Record the reference's output of op ``name``; return what the next ops read."""
        if self.capture:
            self.cap[name] = np.asarray(a, dtype=np.float32).reshape(a.shape[0], -1)
        if self.feed is None or name not in self.feed:
            return a
        f = np.asarray(self.feed[name])
        if f.shape != (a.shape[0], a.size // a.shape[0]):
            raise BringupError(f"reference: fed {name} has shape {f.shape}, the op gives "
                               f"{(a.shape[0], a.size // a.shape[0])}")
        return f.astype(np.float64).reshape(a.shape)

    def act_dtype(self, name: str, wname: str) -> str:
        """The activation dtype linear op ``name`` (weight ``wname``) runs with (BringupError if
        none the reference can apply)."""
        if self.activations == "f32":
            return "F32"
        if self.activations == "ggml-q8":
            dt = formats.vec_dot_types().get(self.wtype[wname])
        else:
            dt = self.activations.get(name)
        if dt not in LINEAR_ACTIVATION_DTYPES:
            raise BringupError(f"reference: no activation dtype the reference can apply for {name} "
                               f"({wname}, {self.wtype[wname]}): {dt!r}")
        return dt

    def linear(self, name: str, x: np.ndarray, wname: str, wt: np.ndarray | None = None) -> np.ndarray:
        """Linear op ``name``: x float64 [T, n_in] times the block's weight ``wname`` [n_out, n_in]
        transposed (or ``wt`` instead), plus its GGUF bias if any; float64 [T, n_out]."""
        fmt = self.act_dtype(name, wname)
        if self.resolved is not None:
            self.resolved[name] = fmt
        w = self.w
        # a swapped-stride fault's transposed weight has no per-block minimum: float activations' math
        y = _product(x, fmt, w[wname] if wt is None else wt, w.block_min(wname) if wt is None else None)
        bias = w.get(wname[:-len(".weight")] + ".bias")
        return y if bias is None else y + bias

    def head(self, name: str, x: np.ndarray) -> np.ndarray:
        """The output head applied in row chunks (weights.HEAD_CHUNK_ROWS vocabulary rows at a
        time), so the [n_vocab, n_embd] matrix never exists in float64 as a whole. x float64
        [T, n_embd] -> float64 [T, n_vocab]."""
        fmt = self.act_dtype(name, "output.weight")
        if self.resolved is not None:
            self.resolved[name] = fmt
        y = np.empty((x.shape[0], self.n_vocab))
        for r0, r1, wc, wmin in self.weights.row_chunks("output.weight"):
            y[:, r0:r1] = _product(x, fmt, wc, wmin)
            del wc, wmin   # before the next chunk is made: one chunk alive at a time
        return y


def _product(x: np.ndarray, fmt: str, wt: np.ndarray, wmin: np.ndarray | None) -> np.ndarray:
    """x W^T in float64 with x's activations stored as ``fmt`` first (F32: as they are; F16 / BF16:
    ``ops.float_activation``; a Q8 format: :func:`q8_activation` per token row). ``wmin``: the
    weight's per-block minima (Q4_1 / Q5_1), which multiply Q8_1's stored s, not d' * sum(q)."""
    if fmt == "F32":
        return x @ wt.T
    if fmt in ("F16", "BF16"):
        return float_activation(x, fmt) @ wt.T
    x2 = x.reshape(x.shape[0], -1)
    y = q8_activation(x2, fmt) @ wt.T
    if fmt == "Q8_1" and wmin is not None:
        s, dsq = q8_1_sum_scale(x2)
        y = y + (s - dsq) @ wmin.T
    return y
