"""The dispatched attention provider ``attention.f32.fast`` (csrc/kernels/bu_attention_fast.c,
bu_attention_avx2.c) at every ISA level this host has.

Per level (each from its own copy of the library, BU_ISA forced; tests.helpers.kernels.load):
- against numpy float64 of masked softmax attention (causal, GQA with repeated KV heads, sliding
  window, soft-cap; ``tests.helpers.attention.attn_ref``, independent of the C) within the reference's
  tolerance;
- against ``attention.f32.scalar``: bit for bit at level scalar, within the bound the map's
  ``variants[].bound_coefficients`` declare at avx2 / avx512 (evaluated here in float64);
- any partition of the query heads into ranges [b, e) (what the runtime's threads call) gives the
  bits and the cache of one whole call; a prefill row equals the same token decoded alone;
- the cache: this call's rows appended exactly, no other row touched (NaN sentinels beyond);
- status codes: the reference's for the same bad input, plus head ranges and the 4-row scratch.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from bringup.ir import kernel_maps as kernels
from tests.helpers.attention import (CASES, KV, assert_appended, attention_error_case, attn_bound, attn_ref,
                                     check_head_ranges, inputs)
from tests.helpers.kernels import BU_ERR_ARG, BU_ERR_NULL, BU_ERR_WS, BU_OK, P, Guarded, host_levels, load

TILE = 4   # score rows of the scratch (bu_attention.h BU_ATTN_TILE)


def fast(lib, q, k, v, kv, pos, scale, window, softcap, ranges=None, ws_cap=None):
    """out and status of attention_f32_fast over the head ranges (default: one whole call)."""
    T, H, D = q.shape
    n_ctx, Hkv, Dv = kv.v.shape
    out = Guarded((T, H, Dv))
    ws = np.zeros(TILE * n_ctx, np.float32)
    for b, e in ranges or [(0, H)]:
        st = lib.bu_attention_f32_fast(P(q), P(k), P(v), P(kv.k), P(kv.v), out.p, T, H, Hkv, D, Dv, n_ctx, pos, b, e,
                                       window, scale, softcap, P(ws), TILE * n_ctx * 4 if ws_cap is None else ws_cap)
        if st != BU_OK:
            return st, out
    return BU_OK, out


@pytest.fixture(scope="module")
def amap():
    return kernels.load_maps()["attention.f32.fast"].raw


@pytest.mark.parametrize("level", host_levels())
@pytest.mark.parametrize("case", CASES,
                         ids=[f"T{c[0]}H{c[1]}kv{c[2]}D{c[3]}Dv{c[4]}w{c[7]}s{int(c[8])}" for c in CASES])
def test_fast_against_numpy_and_reference(build, tmp_path_factory, amap, level, case):
    lib = load(build, tmp_path_factory, level)
    T, H, Hkv, D, Dv, n_ctx, pos, window, softcap = case
    q, k, v, kv = inputs(case, T * 100 + pos)
    kv_ref = KV(np.random.default_rng(0), n_ctx, Hkv, D, Dv, 0)
    kv_ref.k[:], kv_ref.v[:] = kv.k, kv.v
    old_k = kv.k.copy()
    scale = 1.0 / math.sqrt(D)
    st, out = fast(lib, q, k, v, kv, pos, scale, window, softcap)
    assert st == BU_OK and out.guards_intact()
    assert_appended(kv, k, v, pos, old_k)
    np.testing.assert_allclose(out.arr, attn_ref(q, kv.k, kv.v, pos, scale, window, softcap), atol=2e-5 * Dv, rtol=0)

    ref = Guarded((T, H, Dv))
    ws = np.zeros(n_ctx, np.float32)
    assert lib.bu_attention_f32_scalar(P(q), P(k), P(v), P(kv_ref.k), P(kv_ref.v), ref.p, T, H, Hkv, D, Dv, n_ctx,
                                       pos, window, scale, softcap, P(ws), n_ctx * 4) == BU_OK
    np.testing.assert_array_equal(kv.k.view(np.uint32), kv_ref.k.view(np.uint32))
    var = {x["level"]: x for x in amap["variants"]}[level]
    rel = var["versus_reference"]
    if rel["relation"] == "bitwise":
        np.testing.assert_array_equal(out.arr.view(np.uint32), ref.arr.view(np.uint32))
    else:
        diff = np.abs(out.arr.astype(np.float64) - ref.arr)
        bound = attn_bound(rel["bound_coefficients"], q, kv.k, kv.v, pos, scale, window)
        assert (diff <= bound).all(), (level, diff.max(), bound[diff > bound].min())
        print(f"{level} {case}: max |fast - scalar| {diff.max():.3g}, declared bound >= {bound.min():.3g}")


@pytest.mark.parametrize("level", host_levels())
def test_head_ranges_give_the_whole_call(build, tmp_path_factory, level):
    """Head ranges = the whole call (:func:`check_head_ranges`); and a prefill row = the same token
    decoded alone."""
    lib = load(build, tmp_path_factory, level)
    for case in (CASES[3], CASES[5], CASES[7]):
        T, H, Hkv, D, Dv, n_ctx, pos, window, softcap = case
        whole = check_head_ranges(fast, lib, case, inputs, 7)
        q3, k3, v3, kv3 = inputs(case, 7)
        for t in range(T):
            st, one = fast(lib, q3[t:t + 1].copy(), k3[t:t + 1].copy(), v3[t:t + 1].copy(), kv3, pos + t, 0.2,
                           window, softcap)
            assert st == BU_OK
            np.testing.assert_array_equal(one.arr[0].view(np.uint32), whole.arr[t].view(np.uint32))


@pytest.mark.parametrize("level", host_levels())
def test_fast_status_codes(build, tmp_path_factory, level):
    lib = load(build, tmp_path_factory, level)
    q, k, v, kv = attention_error_case()
    before = kv.k.copy()
    st, out = fast(lib, q, k, v, kv, 1, 0.3, 0, 0.0, ws_cap=TILE * 4 * 4 - 1)
    assert st == BU_ERR_WS and out.untouched()
    np.testing.assert_array_equal(kv.k.view(np.uint32), before.view(np.uint32))  # cache unchanged on error
    st, out = fast(lib, q, k, v, kv, 3, 0.3, 0, 0.0)         # pos + T > n_ctx
    assert st == BU_ERR_ARG and out.untouched()
    for ranges in ([(-1, 2)], [(3, 2)], [(0, 5)]):           # head range outside [0, n_head] or reversed
        st, out = fast(lib, q, k, v, kv, 1, 0.3, 0, 0.0, ranges)
        assert st == BU_ERR_ARG and out.untouched(), ranges
    ws = np.zeros(TILE * 4, np.float32)
    fn, ref = lib.bu_attention_f32_fast, lib.bu_attention_f32_scalar
    o = Guarded((2, 4, 8))
    args = [P(q), P(k), P(v), P(kv.k), P(kv.v), o.p]
    for i in range(6):
        a = list(args)
        a[i] = None
        assert fn(*a, 2, 4, 2, 8, 8, 4, 1, 0, 4, 0, 0.3, 0.0, P(ws), 64) == BU_ERR_NULL
    for dims in ((2, 4, 3, 8, 8, 4, 1), (2, 4, 0, 8, 8, 4, 1), (2, 4, 2, 8, 8, 4, -1), (1, 4, 2, 8, 8, 2**31, 0)):
        assert fn(*args, *dims, 0, 4, 0, 0.3, 0.0, P(ws), 64) == BU_ERR_ARG
        assert ref(*args, *dims, 0, 0.3, 0.0, P(ws), 64) == BU_ERR_ARG
    assert fn(*args, 2, 4, 2, 8, 8, 4, 1, 0, 4, -1, 0.3, 0.0, P(ws), 64) == BU_ERR_ARG    # negative window
    assert fn(*args, 2, 4, 2, 8, 8, 4, 1, 0, 4, 0, 0.3, -1.0, P(ws), 64) == BU_ERR_ARG    # negative softcap
    assert fn(*args[:5], P(q), 2, 4, 2, 8, 8, 4, 1, 0, 4, 0, 0.3, 0.0, P(ws), 64) == BU_ERR_ARG  # out aliases q
    assert fn(*args, 2, 4, 2, 8, 8, 4, 1, 0, 4, 0, 0.3, 0.0, None, 64) == BU_ERR_NULL
    assert o.untouched()
    assert fn(*args, 0, 4, 2, 8, 8, 4, 1, 0, 4, 0, 0.3, 0.0, None, 0) == BU_OK     # T = 0: nothing to do
    assert fn(*args, 2, 4, 2, 8, 8, 4, 1, 2, 2, 0, 0.3, 0.0, None, 0) == BU_OK     # empty head range
    assert o.untouched()
    np.testing.assert_array_equal(kv.k.view(np.uint32), before.view(np.uint32))


def test_invalid_isa_level_is_refused(build, tmp_path_factory):
    """A forced level the host lacks (or an unknown name): BU_ERR_ARG, nothing written."""
    lib = load(build, tmp_path_factory, "sse9")
    q, k, v, kv = inputs(CASES[1], 3)
    before = kv.k.copy()
    st, out = fast(lib, q, k, v, kv, 3, 0.25, 0, 0.0)
    assert st == BU_ERR_ARG and out.untouched()
    np.testing.assert_array_equal(kv.k.view(np.uint32), before.view(np.uint32))
