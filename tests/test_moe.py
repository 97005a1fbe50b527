"""Mixture-of-experts kernels (csrc/kernels/bu_moe.c) against independent numpy expressions.

The routing is checked against a float64 softmax / sigmoid and numpy's stable argsort (ties to the
lower expert index, the declared tie-breaking); the routed FFN against a float64 sum over the
selected experts of gguf.quants-dequantized weights. Nothing here transliterates the C.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from bringup.core.paths import KERNEL_MAPS
from bringup.core import canonjson
from bringup.ir.kernel_maps import eval_size
from tests.helpers.kernels import (BU_ERR_ARG, BU_ERR_NULL, BU_ERR_WS, BU_OK, NO_GGUF_QUANTIZE, P, Guarded,
                                   bind_kernels, deq_ref, random_rows)

MOE_FMTS = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q6_K"]


@pytest.fixture(scope="module")
def moe_lib(build):
    return bind_kernels(ctypes.CDLL(str(build.library)))


def ref_route(z: np.ndarray, k: int, gating: int, norm: bool, scale: float):
    z = z.astype(np.float64)
    if gating == 0:
        p = np.exp(z - z.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
    else:
        p = 1.0 / (1.0 + np.exp(-z))
    ids = np.argsort(-p, axis=-1, kind="stable")[:, :k]
    w = np.take_along_axis(p, ids, -1)
    if norm:
        w = w / np.maximum(w.sum(-1, keepdims=True), 6.103515625e-5)
    return ids, w * scale


def route(lib, z, k, gating=0, norm=1, scale=1.0, ws_elems=None):
    T, E = z.shape
    ids, wts = Guarded((T, k), np.int32), Guarded((T, k))
    ws = np.zeros(E if ws_elems is None else ws_elems, np.float32)
    rc = lib.bu_moe_route_f32_scalar(P(z), ids.p, wts.p, T, E, k, gating, norm, scale, P(ws), ws.nbytes)
    return rc, ids, wts


@pytest.mark.parametrize("gating,norm,scale", [(0, 1, 1.0), (0, 0, 1.0), (1, 0, 2.5), (1, 1, 1.0)])
def test_moe_route_matches_numpy(moe_lib, gating, norm, scale):
    rng = np.random.default_rng(3 + gating + 2 * norm)
    z = (rng.standard_normal((7, 8)) * 2).astype(np.float32)
    rc, ids, wts = route(moe_lib, z, 3, gating, norm, scale)
    assert rc == BU_OK and ids.guards_intact() and wts.guards_intact()
    rid, rw = ref_route(z, 3, gating, norm, scale)
    np.testing.assert_array_equal(ids.arr, rid)
    np.testing.assert_allclose(wts.arr, rw, rtol=2.0 ** -20)


def test_moe_route_ties_and_all_experts(moe_lib):
    # exact ties: the lower expert index first (llama.cpp's stable insertion sort for <= 16 experts)
    z = np.array([[1.0, 3.0, 3.0, 0.0, 3.0], [0.5] * 5], np.float32)
    rc, ids, wts = route(moe_lib, z, 2)
    assert rc == BU_OK
    np.testing.assert_array_equal(ids.arr, [[1, 2], [0, 1]])
    np.testing.assert_array_equal(wts.arr, [[0.5, 0.5], [0.5, 0.5]])
    # k = n_expert: every expert, in decreasing gate order, weights summing to 1
    rng = np.random.default_rng(9)
    z = rng.standard_normal((4, 6)).astype(np.float32)
    rc, ids, wts = route(moe_lib, z, 6)
    assert rc == BU_OK
    np.testing.assert_array_equal(ids.arr, np.argsort(-z.astype(np.float64), axis=-1, kind="stable"))
    np.testing.assert_allclose(wts.arr.sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(wts.arr, ref_route(z, 6, 0, True, 1.0)[1], rtol=2.0 ** -20)


def test_moe_route_errors(moe_lib):
    z = np.zeros((2, 4), np.float32)
    rc, ids, wts = route(moe_lib, z, 1, gating=2)
    assert rc == BU_ERR_ARG and ids.untouched() and wts.untouched()
    zn = z.copy()
    zn[1, 2] = np.nan
    rc, ids, wts = route(moe_lib, zn, 2)
    assert rc == BU_ERR_ARG and ids.untouched() and wts.untouched()
    ids, wts, ws = Guarded((2, 4), np.int32), Guarded((2, 4)), np.zeros(4, np.float32)
    for k in (0, 5, -1):
        assert moe_lib.bu_moe_route_f32_scalar(P(z), ids.p, wts.p, 2, 4, k, 0, 1, 1.0, P(ws), 16) == BU_ERR_ARG
    assert moe_lib.bu_moe_route_f32_scalar(P(z), ids.p, wts.p, 2, 4, 2, 0, 1, 1.0, P(ws), 15) == BU_ERR_WS
    assert moe_lib.bu_moe_route_f32_scalar(None, ids.p, wts.p, 2, 4, 2, 0, 1, 1.0, P(ws), 16) == BU_ERR_NULL
    assert ids.untouched() and wts.untouched()


def ffn_scratch(fmt: str, **dims) -> int:
    m = canonjson.read(KERNEL_MAPS / f"moe_ffn.{fmt.lower()}.scalar.json", "kernel map")
    return eval_size(m["scratch"]["experts"]["bytes"], dims)


def experts(fmt, E, rows, n_in, rng):
    raw = random_rows(fmt, E * rows, n_in, rng, "bytes" if fmt in NO_GGUF_QUANTIZE else "quantize")
    return np.ascontiguousarray(raw), deq_ref(fmt, raw).astype(np.float64).reshape(E, rows, n_in)


def ref_ffn(x, z, wg, wu, wd, k, norm=True):
    ids, w = ref_route(z, k, 0, norm, 1.0)
    y = np.zeros((x.shape[0], wd.shape[1]))
    for t in range(x.shape[0]):
        for e, a in zip(ids[t], w[t]):
            g, u = wg[e] @ x[t], wu[e] @ x[t]
            y[t] += a * (wd[e] @ (g / (1 + np.exp(-g)) * u))
    return y


def call_ffn(lib, fmt, x, z, g, u, d, n_ff, k, norm=1, ws_bytes=None):
    T, n_embd = x.shape
    E = z.shape[1]
    need = ffn_scratch(fmt, n_tokens=T, n_embd=n_embd, n_ff=n_ff, n_expert=E, n_used=k)
    ws = np.zeros(need // 4 + 1, np.float32)
    y = Guarded((T, n_embd))
    rc = getattr(lib, f"bu_moe_ffn_{fmt.lower()}_scalar")(
        P(x), P(z), P(g), P(u), P(d), y.p, T, n_embd, n_ff, E, k, 0, norm, 1.0, P(ws),
        need if ws_bytes is None else ws_bytes)
    return rc, y


@pytest.mark.parametrize("fmt", MOE_FMTS)
def test_moe_ffn_matches_numpy(moe_lib, fmt):
    rng = np.random.default_rng(len(fmt) * 7 + ord(fmt[-1]))
    n_embd = n_ff = 256 if fmt.endswith("_K") else 64
    E, k, T = 6, 2, 5
    g, wg = experts(fmt, E, n_ff, n_embd, rng)
    u, wu = experts(fmt, E, n_ff, n_embd, rng)
    d, wd = experts(fmt, E, n_embd, n_ff, rng)
    x = (rng.standard_normal((T, n_embd)) * 0.5).astype(np.float32)
    # router logits well apart (no near-tie decides the comparison), one token with k = n_expert below
    z = (rng.permuted(np.tile(np.arange(E, dtype=np.float32), (T, 1)), axis=1) * 0.7).astype(np.float32)
    rc, y = call_ffn(moe_lib, fmt, x, z, g, u, d, n_ff, k)
    assert rc == BU_OK and y.guards_intact()
    ref = ref_ffn(x.astype(np.float64), z, wg, wu, wd, k)
    scale = np.abs(ref).max()
    np.testing.assert_allclose(y.arr, ref, rtol=1e-4, atol=1e-5 * scale)
    rc, y = call_ffn(moe_lib, fmt, x, z, g, u, d, n_ff, E, norm=0)
    assert rc == BU_OK
    np.testing.assert_allclose(y.arr, ref_ffn(x.astype(np.float64), z, wg, wu, wd, E, norm=False),
                               rtol=1e-4, atol=1e-5 * scale)


def test_moe_ffn_reads_only_selected(moe_lib):
    """Unselected experts' rows filled with NaN change nothing: they are never read."""
    rng = np.random.default_rng(5)
    E, k, T, n = 8, 2, 3, 32
    g, wg = experts("F32", E, n, n, rng)
    u, wu = experts("F32", E, n, n, rng)
    d, wd = experts("F32", E, n, n, rng)
    x = rng.standard_normal((T, n)).astype(np.float32)
    z = np.full((T, E), -5.0, np.float32)
    z[:, 1], z[:, 6] = 2.0, 1.0   # every token selects experts 1 and 6
    rc, y_ref = call_ffn(moe_lib, "F32", x, z, g, u, d, n, k)
    assert rc == BU_OK
    for t in (g, u, d):
        v = t.view(np.float32).reshape(E, -1)
        v[[0, 2, 3, 4, 5, 7]] = np.nan
    rc, y = call_ffn(moe_lib, "F32", x, z, g, u, d, n, k)
    assert rc == BU_OK and np.isfinite(y.arr).all()
    np.testing.assert_array_equal(y.arr, y_ref.arr)


def test_moe_ffn_errors(moe_lib):
    rng = np.random.default_rng(8)
    E, T, n = 4, 2, 32
    g, _ = experts("Q8_0", E, n, n, rng)
    x = rng.standard_normal((T, n)).astype(np.float32)
    z = rng.standard_normal((T, E)).astype(np.float32)
    need = ffn_scratch("Q8_0", n_tokens=T, n_embd=n, n_ff=n, n_expert=E, n_used=2)
    rc, y = call_ffn(moe_lib, "Q8_0", x, z, g, g, g, n, 2)
    assert rc == BU_OK
    rc, y = call_ffn(moe_lib, "Q8_0", x, z, g, g, g, n, 2, ws_bytes=need - 1)
    assert rc == BU_ERR_WS and y.untouched()
    rc, y = call_ffn(moe_lib, "Q8_0", x, z, g, g, g, n, E + 1)   # more experts per token than experts
    assert rc == BU_ERR_ARG and y.untouched()
    zn = z.copy()
    zn[0, 0] = np.nan
    rc, y = call_ffn(moe_lib, "Q8_0", x, zn, g, g, g, n, 2)
    assert rc == BU_ERR_ARG and y.untouched()
    ws = np.zeros(need, np.uint8)
    yy = Guarded((T, 48))   # n_embd 48 is not a multiple of Q8_0's 32-element block
    assert moe_lib.bu_moe_ffn_q8_0_scalar(P(x), P(z), P(g), P(g), P(g), yy.p, T, 48, n, E, 2, 0, 1, 1.0,
                                         P(ws), need) == BU_ERR_ARG
    assert moe_lib.bu_moe_ffn_q8_0_scalar(P(x), None, P(g), P(g), P(g), yy.p, T, n, n, E, 2, 0, 1, 1.0,
                                         P(ws), need) == BU_ERR_NULL
    big = 2**31 - 1   # every size product overflows: refused before any pointer is read
    assert moe_lib.bu_moe_ffn_f32_scalar(P(x), P(z), P(g), P(g), P(g), yy.p, big, big, big, big, big, 0, 1, 1.0,
                                        P(ws), need) == BU_ERR_ARG
    assert moe_lib.bu_moe_ffn_f32_scalar(P(x), P(z), P(g), P(g), P(g), yy.p, big, 32, 32, big, big, 0, 1, 1.0,
                                        P(ws), need) == BU_ERR_ARG
    assert yy.untouched()
