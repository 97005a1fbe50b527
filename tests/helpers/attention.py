"""Attention as the kernels' contract says, in numpy float64 (independent of the C): which keys a
query attends to, the reference output, a KV cache with sentinel rows, the declared bound of a
fast provider, and the cases and the head-range check shared by the f32 and f16-KV providers."""
from __future__ import annotations

import math

import numpy as np

from tests.helpers.kernels import BU_OK, SENTINEL, U


def attended(p, window):
    """Key positions a query at position p attends to: j <= p and, with a window, p - j < window."""
    j = np.arange(p + 1)
    return j[p - j < window] if window > 0 else j


def attn_ref(q, kc, vc, pos, scale, window=0, softcap=0.0):
    T, H, D = q.shape
    Hkv = kc.shape[1]
    g = H // Hkv
    out = np.zeros((T, H, vc.shape[2]))
    for t in range(T):
        j = attended(pos + t, window)
        for h in range(H):
            s = scale * (kc[j, h // g].astype(np.float64) @ q[t, h].astype(np.float64))
            if softcap > 0:
                s = softcap * np.tanh(s / softcap)
            e = np.exp(s - s.max())
            out[t, h] = (e / e.sum()) @ vc[j, h // g].astype(np.float64)
    return out


class KV:
    """A KV cache with old rows [0, pos) filled and rows >= pos set to the NaN sentinel."""

    def __init__(self, rng, n_ctx, hkv, d, dv, pos):
        self.k = np.empty((n_ctx, hkv, d), np.float32)
        self.v = np.empty((n_ctx, hkv, dv), np.float32)
        self.k.view(np.uint32)[:] = SENTINEL
        self.v.view(np.uint32)[:] = SENTINEL
        self.k[:pos] = rng.standard_normal((pos, hkv, d))
        self.v[:pos] = rng.standard_normal((pos, hkv, dv)) * np.arange(1, dv + 1)


def assert_appended(kv, k, v, pos, old_k):
    """The cache: rows pos..pos+T-1 appended exactly, rows below as before, rows above still sentinels."""
    T = k.shape[0]
    np.testing.assert_array_equal(kv.k[pos:pos + T], k)
    np.testing.assert_array_equal(kv.v[pos:pos + T], v)
    np.testing.assert_array_equal(kv.k[:pos], old_k[:pos])
    assert (kv.k[pos + T:].view(np.uint32) == SENTINEL).all() and (kv.v[pos + T:].view(np.uint32) == SENTINEL).all()


def attention_error_case():
    """q [2, 4, 8], k and v [2, 2, 8], a KV cache of 4 positions with 1 filled: the status-code cases."""
    rng = np.random.default_rng(9)
    q = rng.standard_normal((2, 4, 8)).astype(np.float32)
    k = rng.standard_normal((2, 2, 8)).astype(np.float32)
    v = rng.standard_normal((2, 2, 8)).astype(np.float32)
    return q, k, v, KV(rng, 4, 2, 8, 8, 1)


CASES = [   # T, H, Hkv, D, Dv, n_ctx, pos, window, softcap
    (1, 1, 1, 8, 8, 4, 0, 0, 0.0),          # first token: attends to itself only
    (5, 4, 2, 16, 16, 12, 3, 0, 0.0),       # GQA prefill after earlier tokens, a tile across heads
    (1, 9, 3, 64, 64, 40, 31, 0, 0.0),      # smollm2 decode shape
    (7, 9, 3, 64, 64, 80, 50, 0, 0.0),      # smollm2 prefill shape
    (3, 4, 1, 256, 256, 20, 9, 4, 0.0),     # gemma3: head_dim 256, MQA, sliding window 4
    (9, 4, 1, 256, 256, 700, 600, 512, 0.0),  # gemma3 local layer: window 512 crossed inside the call
    (4, 2, 2, 12, 20, 8, 4, 0, 50.0),       # head_dim / head_dim_v tails (not multiples of 8), soft-cap
    (6, 6, 2, 13, 37, 30, 11, 5, 20.0),     # odd widths, window and soft-cap together
]


def attn_bound(coef, q, kc, vc, pos, scale, window):
    """The declared bound (kernel map variants[].bound_coefficients, schema "attention"), float64."""
    T, H, D = q.shape
    g = H // kc.shape[1]
    out = np.zeros((T, H, vc.shape[2]))
    for t in range(T):
        j = attended(pos + t, window)
        m = len(j)
        for h in range(H):
            s = abs(scale) * (np.abs(kc[j, h // g].astype(np.float64)) @ np.abs(q[t, h].astype(np.float64)))
            vmax = np.abs(vc[j, h // g].astype(np.float64)).max(axis=0)
            c = ((coef["logit_per_head_dim"] * D + coef["logit_constant"]) * s.max() + coef["per_key"] * m
                 + coef["per_log_keys"] * math.log(m + 1) + coef["constant"])
            out[t, h] = coef["factor"] * U * c * vmax
    return out


def inputs(case, seed):
    T, H, Hkv, D, Dv, n_ctx, pos, window, softcap = case
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((T, H, D)).astype(np.float32)
    k = rng.standard_normal((T, Hkv, D)).astype(np.float32)
    v = (rng.standard_normal((T, Hkv, Dv)) * np.arange(1, Dv + 1)).astype(np.float32)
    return q, k, v, KV(rng, n_ctx, Hkv, D, Dv, pos)


def check_head_ranges(fast_call, lib, case, make_inputs, seed):
    """What the runtime's threads do: disjoint head ranges (in any order, empty ones included) give
    one whole call's output and KV cache bit for bit. ``fast_call`` is a provider's call helper
    (test_kernels_attention's ``fast``, or test_kv_f16's); returns the whole call's output."""
    T, H, Hkv, D, Dv, n_ctx, pos, window, softcap = case
    q, k, v, kv = make_inputs(case, seed)
    st, whole = fast_call(lib, q, k, v, kv, pos, 0.2, window, softcap)
    assert st == BU_OK
    for ranges in ([(h, h + 1) for h in range(H)][::-1], [(0, 1), (1, H - 2), (H - 2, H)],
                   [(H // 2, H), (0, H // 2)], [(0, 0), (0, H), (H, H)]):
        q2, k2, v2, kv2 = make_inputs(case, seed)
        st, part = fast_call(lib, q2, k2, v2, kv2, pos, 0.2, window, softcap, ranges)
        assert st == BU_OK and part.guards_intact(), ranges
        np.testing.assert_array_equal(part.arr.view(np.uint32), whole.arr.view(np.uint32))
        for got, want in ((kv2.k, kv.k), (kv2.v, kv.v)):
            np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    return whole
