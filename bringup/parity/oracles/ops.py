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
                     window: int | None = None) -> np.ndarray:
    """Scaled dot-product attention (Vaswani et al. 2017), causal, with grouped KV heads (GQA,
    Ainslie et al. 2023: query head h reads KV head h // (H / Hkv)).

    q [T, H, D] at positions ``pos`` [T]; k [S, Hkv, D], v [S, Hkv, Dv] at ``kpos`` [S]; scale
    1/sqrt(D). Key p0 is masked for query p1 if p0 > p1, or, with a ``window``, if
    p1 - p0 >= window (the query sees itself and the window - 1 before it). Returns [T, H * Dv].
    """
    T, H, hd = q.shape
    rep = H // k.shape[1]
    kk = np.repeat(k, rep, axis=1)
    vv = np.repeat(v, rep, axis=1)
    scale = 1.0 / math.sqrt(hd)
    s = (q.transpose(1, 0, 2) @ kk.transpose(1, 2, 0)) * scale     # [H, T, S]
    mask = kpos[None, :] > pos[:, None]                      # future
    if window:
        mask = mask | (pos[:, None] - kpos[None, :] >= window)
    s = np.where(mask[None], -np.inf, s)
    s = s - s.max(axis=-1, keepdims=True)
    pr = np.exp(s)
    pr /= pr.sum(axis=-1, keepdims=True)
    return (pr @ vv.transpose(1, 0, 2)).transpose(1, 0, 2).reshape(T, H * vv.shape[-1])


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
