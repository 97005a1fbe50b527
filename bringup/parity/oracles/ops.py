"""The reference's ops in float64 numpy, each written from its paper (cited per function).

Shapes: T tokens, H query heads, Hkv KV heads, D head width; positions are integer token indices.
"""
from __future__ import annotations

import math

import numpy as np

from bringup.core.errors import BringupError


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm (Zhang & Sennrich 2019) over the last axis: x / sqrt(mean(x^2) + eps) * w.
    x float64 [..., n], w [n]; same shape out."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x: np.ndarray, pos: np.ndarray, theta: float, n_rot: int, neox: bool) -> np.ndarray:
    """RoPE (Su et al. 2021) on the first ``n_rot`` dims of each head of x [T, H, D] at positions
    ``pos`` [T], frequencies theta^(-2i/n_rot). Pair layout: 'normal' rotates (x[2i], x[2i+1])
    (GGUF llama Q/K are stored permuted for this); NEOX rotates (x[i], x[i + n_rot/2]) (HF
    ``rotate_half``). Dims from n_rot on pass through."""
    half = n_rot // 2
    inv = theta ** (-np.arange(half, dtype=np.float64) * 2.0 / n_rot)
    ang = pos[:, None].astype(np.float64) * inv[None, :]          # [T, half]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]   # [T, 1, half]
    out = x.copy()
    if neox:
        a, b = x[..., :half], x[..., half:n_rot]
        out[..., :half] = a * cos - b * sin
        out[..., half:n_rot] = a * sin + b * cos
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * cos - b * sin
        out[..., 1:n_rot:2] = a * sin + b * cos
    return out


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (Hendrycks & Gimpel 2016), as Gemma specifies."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def glu(gate: np.ndarray, up: np.ndarray, gelu: bool) -> np.ndarray:
    """Gated MLP activation (Shazeer 2020): GeGLU gelu_tanh(gate) * up, or SwiGLU silu(gate) * up
    with silu(g) = g / (1 + e^-g) (Ramachandran et al. 2017)."""
    return (gelu_tanh(gate) if gelu else gate / (1.0 + np.exp(-gate))) * up


def causal_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, pos: np.ndarray, kpos: np.ndarray,
                     window: int | None = None, softcap: float | None = None) -> np.ndarray:
    """Scaled dot-product attention (Vaswani et al. 2017), causal, with grouped KV heads (GQA,
    Ainslie et al. 2023: query head h reads KV head h // (H / Hkv)).

    q [T, H, D] at positions ``pos`` [T]; k [S, Hkv, D], v [S, Hkv, Dv] at ``kpos`` [S]; scale
    1/sqrt(D). Key p0 is masked for query p1 if p0 > p1, or, with a ``window``, if
    p1 - p0 >= window (the query sees itself and the window - 1 before it). With a ``softcap``
    (Gemma 2 report) each scaled logit l becomes softcap * tanh(l / softcap) before the softmax.
    Returns [T, H * Dv].

    Computed per block of :data:`ATTENTION_BLOCK` queries, each against the span of keys that
    block can see (from its first visible key to its last): the mask makes every key outside the
    span weigh exactly 0 (exp(-inf)), so leaving them out changes no value but skips the masked
    half of a causal prefill and all but a window's worth of keys on a sliding-window layer. The
    query heads that share a KV head form one matrix product with it (no repeated K/V copies).
    """
    T, H, hd = q.shape
    S, Hkv, hdv = v.shape
    rep = H // Hkv
    scale = 1.0 / math.sqrt(hd)
    # query head h = g * rep + r reads KV head g: rows (t, r) of group g form one [T * rep, D] matrix
    qg = np.ascontiguousarray(q.reshape(T, Hkv, rep, hd).transpose(1, 0, 2, 3))   # [Hkv, T, rep, D]
    kg = np.ascontiguousarray(k.transpose(1, 0, 2))                              # [Hkv, S, D]
    vg = np.ascontiguousarray(v.transpose(1, 0, 2))                              # [Hkv, S, Dv]
    out = np.empty((T, Hkv, rep, hdv))
    for t0 in range(0, T, ATTENTION_BLOCK):
        t1 = min(T, t0 + ATTENTION_BLOCK)
        mask = kpos[None, :] > pos[t0:t1, None]                                  # future
        if window:
            mask |= pos[t0:t1, None] - kpos[None, :] >= window
        seen = np.flatnonzero(~mask.all(axis=0))
        lo, hi = (int(seen[0]), int(seen[-1]) + 1) if seen.size else (0, S)
        s = qg[:, t0:t1].reshape(Hkv, (t1 - t0) * rep, hd) @ kg[:, lo:hi].transpose(0, 2, 1)
        s *= scale                                                               # [Hkv, tb * rep, span]
        if softcap:
            s = softcap * np.tanh(s / softcap)
        s[:, np.repeat(mask[:, lo:hi], rep, axis=0)] = -np.inf
        s -= s.max(axis=-1, keepdims=True)
        pr = np.exp(s)
        pr /= pr.sum(axis=-1, keepdims=True)
        out[t0:t1] = (pr @ vg[:, lo:hi]).reshape(Hkv, t1 - t0, rep, hdv).transpose(1, 0, 2, 3)
    return out.reshape(T, H * hdv)


#: Queries per block of :func:`causal_attention` (its scores are [H, block, keys] float64).
ATTENTION_BLOCK = 256


def float_activation(x: np.ndarray, fmt: str) -> np.ndarray:
    """The values of x (float, any shape) once stored as ``fmt`` and read back, float64.

    ``F16``: IEEE binary16, round to nearest even (llama.cpp's CPU backend converts a mat-mul's
    activations to F16 for F16 weights: ``vec_dot_type`` F16, F16C ``_cvtss_sh`` mode 0).
    ``BF16``: the top 16 bits of float32 after round to nearest even (bfloat16; ggml-impl.h
    ``ggml_compute_fp32_to_bf16``; NaN stays NaN). Raises BringupError for another format.
    """
    x32 = np.asarray(x, dtype=np.float32)
    if fmt == "F16":
        return x32.astype(np.float16).astype(np.float64)
    if fmt == "BF16":
        u = x32.view(np.uint32).astype(np.uint64)
        r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
        out = r.astype(np.uint32).view(np.float32).astype(np.float64)
        return np.where(np.isnan(x32), np.nan, out)
    raise BringupError(f"float_activation: unknown activation format {fmt!r}")


#: llama.cpp build_moe_ffn clamps the sum of the selected weights below at the smallest normal half
MOE_WEIGHT_SUM_MIN = 6.103515625e-5


def moe_route(z: np.ndarray, n_used: int, norm: bool) -> tuple[np.ndarray, np.ndarray]:
    """Expert selection from router logits ``z`` [T, n_expert] (float64): softmax gate values,
    the ``n_used`` largest per row in decreasing order with ties to the lower expert index (a
    stable sort of the negated values), their gate values, divided by their sum (clamped below at
    MOE_WEIGHT_SUM_MIN) when ``norm``. Returns (ids int64 [T, n_used], weights float64 [T, n_used])."""
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    ids = np.argsort(-p, axis=-1, kind="stable")[:, :n_used]
    wts = np.take_along_axis(p, ids, axis=-1)
    if norm:
        wts = wts / np.maximum(wts.sum(axis=-1, keepdims=True), MOE_WEIGHT_SUM_MIN)
    return ids, wts


def moe_ffn(h: np.ndarray, z: np.ndarray, expert, extra: dict) -> np.ndarray:
    """The routed SwiGLU FFN of one layer, float64: for each token, the sum over its selected
    experts (``moe_route`` of the router logits ``z``), in selection order, of weight * W_down[e]
    (silu(W_gate[e] h) * W_up[e] h). ``expert(part, e)`` gives expert e's float64 matrix of
    ``ffn_{part}_exps`` (part "gate", "up" or "down"; [rows, n_in]), asked once per selected expert
    and dropped after it: only the selected experts are dequantized and one expert's three matrices
    are alive at a time. ``extra`` carries n_expert_used and norm_topk (families.read_config).
    Returns [T, n_embd]."""
    ids, wts = moe_route(np.asarray(z, dtype=np.float64), extra["n_expert_used"], extra["norm_topk"])
    contrib: np.ndarray | None = None   # [T, n_used, n_embd]: each slot's expert output
    for e in np.unique(ids):
        t, j = np.nonzero(ids == e)
        wg, wu, wd = (expert(part, int(e)) for part in ("gate", "up", "down"))
        y = glu(h[t] @ wg.T, h[t] @ wu.T, False) @ wd.T
        if contrib is None:
            contrib = np.zeros(ids.shape + (wd.shape[0],))
        contrib[t, j] = y
        del wg, wu, wd, y
    out = np.zeros((h.shape[0], contrib.shape[2]))
    for j in range(ids.shape[1]):   # the selected experts' sum in selection order
        out += wts[:, j:j + 1] * contrib[:, j]
    return out
