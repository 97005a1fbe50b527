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
from bringup.ir import kernel_maps as kernels
from bringup.ir import resolve
from bringup.ir.kernel_maps import eval_size
from tests.helpers.kernels import (BU_ERR_ARG, BU_ERR_NULL, BU_ERR_WS, BU_OK, GUARD, NO_GGUF_QUANTIZE, SENTINEL, P,
                                   Guarded, bind_kernels, deq_ref, level_params, load, load_level, random_rows)

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


def ffn_scratch(fmt: str, kind: str = "scalar", **dims) -> int:
    m = canonjson.read(KERNEL_MAPS / f"moe_ffn.{fmt.lower()}.{kind}.json", "kernel map")
    return eval_size(m["scratch"]["experts"]["bytes"], dims)


def experts(fmt, E, rows, n_in, rng):
    raw = random_rows(fmt, E * rows, n_in, rng, "bytes" if fmt in NO_GGUF_QUANTIZE else "quantize")
    return np.ascontiguousarray(raw), deq_ref(fmt, raw).astype(np.float64).reshape(E, rows, n_in)


def silu(g: np.ndarray) -> np.ndarray:
    """g * sigmoid(g) in float64 without overflow: exp of -|g| only (random K-quant bytes give |g| > 709)."""
    e = np.exp(-np.abs(g))
    return g * np.where(g >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def ref_ffn(x, z, wg, wu, wd, k, norm=True):
    ids, w = ref_route(z, k, 0, norm, 1.0)
    y = np.zeros((x.shape[0], wd.shape[1]))
    for t in range(x.shape[0]):
        for e, a in zip(ids[t], w[t]):
            g, u = wg[e] @ x[t], wu[e] @ x[t]
            y[t] += a * (wd[e] @ (silu(g) * u))
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


# ----------------------------------------------------------------------------- moe_ffn.<fmt>.fast

def call_ffn_at(lib, fn, x, z, g, u, d, n_ff, k, norm=1, ws_bytes=None, need=None):
    """y of one moe_ffn call of ``fn`` with a workspace of exactly ``need`` bytes (the map's scratch)
    followed by sentinel guards: the kernel must use no byte beyond what its map declares."""
    T, n_embd = x.shape
    E = z.shape[1]
    ws = np.empty(need // 4 + 2 * GUARD, np.float32)
    ws.view(np.uint32)[:] = SENTINEL
    y = Guarded((T, n_embd))
    rc = getattr(lib, fn)(P(x), P(z), P(g), P(u), P(d), y.p, T, n_embd, n_ff, E, k, 0, norm, 1.0,
                          ws.ctypes.data + 4 * GUARD, need if ws_bytes is None else ws_bytes)
    tail = ws.view(np.uint32)[GUARD + -(-need // 4):]
    assert (ws.view(np.uint32)[:GUARD] == SENTINEL).all() and (tail == SENTINEL).all(), f"{fn} wrote outside its workspace"
    return rc, y


def composed_ffn(lib, fmt, x, z, g, u, d, n_embd, n_ff, k):
    """moe_ffn as the composition its fast map declares, from the library's own pieces: moe_route,
    then per expert in increasing index the rows routed to it through bu_linear_<fmt>_fast (gate, up),
    bu_swiglu_f32_scalar, bu_linear_<fmt>_fast (down); the fp32 weighted sum (product rounded, then
    added, starting at +0) in numpy float32."""
    T, E = z.shape
    rc, ids, wts = route(lib, z, k)
    assert rc == BU_OK
    ids, wts = ids.arr, wts.arr
    gu_exp, d_exp = g.nbytes // E, d.nbytes // E
    lin = getattr(lib, f"bu_linear_{fmt.lower()}_fast")
    ws = np.zeros(max(n_embd, n_ff) * 64 + 16, np.float32)

    def mm(xs, w, off, n_in, n_out):
        out = np.zeros((xs.shape[0], n_out), np.float32)
        assert lin(P(xs), P(w) + off, None, P(out), xs.shape[0], n_in, n_out, P(ws), ws.nbytes) == BU_OK
        return out
    y = np.zeros((T, n_embd), np.float32)
    for e in range(E):
        sel = [(t, j) for t in range(T) for j in range(k) if ids[t, j] == e]
        if not sel:
            continue
        xs = np.ascontiguousarray(x[[t for t, _ in sel]])
        gg, uu = mm(xs, g, e * gu_exp, n_embd, n_ff), mm(xs, u, e * gu_exp, n_embd, n_ff)
        h = np.zeros_like(gg)
        assert lib.bu_swiglu_f32_scalar(P(gg), P(uu), P(h), gg.shape[0], n_ff, None, 0) == BU_OK
        dd = mm(h, d, e * d_exp, n_ff, n_embd)
        for i, (t, j) in enumerate(sel):
            y[t] = y[t] + np.float32(wts[t, j]) * dd[i]
    return y


@pytest.mark.parametrize("level", level_params())
@pytest.mark.parametrize("fmt", MOE_FMTS)
def test_moe_ffn_fast_against_scalar(request, build, tmp_path_factory, level, fmt):
    """At level scalar the fast provider gives moe_ffn.<fmt>.scalar's bits (the map declares bitwise, so
    the resolver lets it replace the scalar one); at avx2 / avx512 exactly the composition of its
    declared pieces (linear.<fmt>.fast at that level), the same bits at both levels, and within the
    scalar test's tolerance of numpy float64. Decode (1 token), prefill, and a many-token call whose
    experts take more rows than one fast panel; n_ff != n_embd so each shape's panel is exercised."""
    lib = load_level(request, tmp_path_factory, level)
    ref_lib = load(build, tmp_path_factory, "scalar")
    fast_map = kernels.load_maps()[f"moe_ffn.{fmt.lower()}.fast"].raw
    var = {v["level"]: v for v in fast_map["variants"]}[level]
    rng = np.random.default_rng(len(fmt) * 11 + ord(fmt[-1]) + len(level))
    n_embd, n_ff = (256, 512) if fmt.endswith("_K") else (64, 96)
    E = 6
    g, wg = experts(fmt, E, n_ff, n_embd, rng)
    u, wu = experts(fmt, E, n_ff, n_embd, rng)
    d, wd = experts(fmt, E, n_embd, n_ff, rng)
    for T, k in ((1, 2), (5, 2), (40, 3)):
        x = (rng.standard_normal((T, n_embd)) * 0.5).astype(np.float32)
        z = (rng.permuted(np.tile(np.arange(E, dtype=np.float32), (T, 1)), axis=1) * 0.7).astype(np.float32)
        dims = dict(n_tokens=T, n_embd=n_embd, n_ff=n_ff, n_expert=E, n_used=k)
        rc, y = call_ffn_at(lib, f"bu_moe_ffn_{fmt.lower()}_fast", x, z, g, u, d, n_ff, k,
                            need=ffn_scratch(fmt, "fast", **dims))
        assert rc == BU_OK and y.guards_intact()
        rc, y_ref = call_ffn_at(ref_lib, f"bu_moe_ffn_{fmt.lower()}_scalar", x, z, g, u, d, n_ff, k,
                                need=ffn_scratch(fmt, **dims))
        assert rc == BU_OK
        if var["versus_reference"]["relation"] == "bitwise":
            assert level == "scalar"
            np.testing.assert_array_equal(y.arr.view(np.uint32), y_ref.arr.view(np.uint32))
        else:
            comp = composed_ffn(lib, fmt, x, z, g, u, d, n_embd, n_ff, k)
            np.testing.assert_array_equal(y.arr.view(np.uint32), comp.view(np.uint32))
            for other in var["same_bits_as"]:
                if other in [p.values[0] for p in level_params()]:
                    rc, y_o = call_ffn_at(load_level(request, tmp_path_factory, other),
                                          f"bu_moe_ffn_{fmt.lower()}_fast", x, z, g, u, d, n_ff, k,
                                          need=ffn_scratch(fmt, "fast", **dims))
                    np.testing.assert_array_equal(y.arr.view(np.uint32), y_o.arr.view(np.uint32))
        ref = ref_ffn(x.astype(np.float64), z, wg, wu, wd, k)
        np.testing.assert_allclose(y.arr, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("level", level_params())
def test_moe_ffn_fast_errors_equal_scalar(request, tmp_path_factory, level):
    """The fast provider's argument checking is the scalar one's, at every level: its map's scratch
    expression is exactly the C's need (one byte less is BU_ERR_WS, for every format: the panel for
    the wider shape, none for F32), bad n_used, a NaN logit, NULL, a dim off the block; nothing written."""
    lib = load_level(request, tmp_path_factory, level)
    rng = np.random.default_rng(12)
    E, T = 4, 3
    for fmt in MOE_FMTS:
        n_embd, n_ff = (256, 768) if fmt.endswith("_K") else (32, 1536)
        g, _ = experts(fmt, E, n_ff, n_embd, rng)
        d, _ = experts(fmt, E, n_embd, n_ff, rng)
        x = rng.standard_normal((T, n_embd)).astype(np.float32)
        z = rng.standard_normal((T, E)).astype(np.float32)
        fn = f"bu_moe_ffn_{fmt.lower()}_fast"
        need = ffn_scratch(fmt, "fast", n_tokens=T, n_embd=n_embd, n_ff=n_ff, n_expert=E, n_used=2)
        assert call_ffn_at(lib, fn, x, z, g, g, d, n_ff, 2, need=need)[0] == BU_OK
        rc, y = call_ffn_at(lib, fn, x, z, g, g, d, n_ff, 2, need=need, ws_bytes=need - 1)
        assert rc == BU_ERR_WS and y.untouched(), fmt
        rc, y = call_ffn_at(lib, fn, x, z, g, g, d, n_ff, E + 1, need=need)
        assert rc == BU_ERR_ARG and y.untouched()
        zn = z.copy()
        zn[1, 2] = np.nan
        rc, y = call_ffn_at(lib, fn, x, zn, g, g, d, n_ff, 2, need=need)
        assert rc == BU_ERR_ARG and y.untouched()
    ws, yy = np.zeros(1 << 16, np.uint8), Guarded((T, 48))
    g, _ = experts("Q8_0", E, 32, 32, rng)
    x, z = np.ones((T, 48), np.float32), np.zeros((T, E), np.float32)
    assert lib.bu_moe_ffn_q8_0_fast(P(x), P(z), P(g), P(g), P(g), yy.p, T, 48, 32, E, 2, 0, 1, 1.0,
                                    P(ws), ws.nbytes) == BU_ERR_ARG   # n_embd 48: not whole Q8_0 blocks
    assert lib.bu_moe_ffn_q8_0_fast(P(x), None, P(g), P(g), P(g), yy.p, T, 32, 32, E, 2, 0, 1, 1.0,
                                    P(ws), ws.nbytes) == BU_ERR_NULL
    assert yy.untouched()


def test_moe_resolution_picks_the_dispatched_provider():
    """A moe_ffn op resolves to exactly one provider with the real maps: the dispatched one, the
    scalar one rejected as its scalar level; with the fast map disabled, the scalar one again."""
    maps = [m for m in kernels.load_maps().values() if m.op == "moe_ffn"]
    for fmt in ("F16", "Q8_0", "Q4_K", "F32"):
        n = 256
        tensors = {"x": {"kind": "activation", "dtype": "F32", "shape": [4, n]},
                   "z": {"kind": "activation", "dtype": "F32", "shape": [4, 8]},
                   "y": {"kind": "activation", "dtype": "F32", "shape": [4, n]},
                   **{w: {"kind": "weight", "dtype": fmt, "shape": [8, n, n]} for w in ("g", "u", "d")}}
        op = {"id": "layer.0.ffn_moe", "op": "moe_ffn", "inputs": {"x": "x", "logits": "z"},
              "weights": {"w_gate": "g", "w_up": "u", "w_down": "d"}, "outputs": {"y": "y"}, "state": {},
              "dims": {"n_tokens": 4, "n_embd": n, "n_ff": n, "n_expert": 8, "n_used": 2},
              "params": {"gating": 0, "norm": 1, "scale": 1.0}, "variant": None}
        sel = resolve.resolve_op(op, tensors, maps, "decode")
        fast, ref = f"moe_ffn.{fmt.lower()}.fast", f"moe_ffn.{fmt.lower()}.scalar"
        assert sel["chosen"] == fast and [c["id"] for c in sel["candidates"] if c["accepted"]] == [fast]
        assert "dispatched provider" in {c["id"]: c for c in sel["candidates"]}[ref]["reasons"][0]
        off = [m if m.id != fast else kernels.KernelMap(m.id, m.op, m.interface, m.path, {
            **m.raw, "selection": {**m.raw["selection"], "status": "disabled"}}) for m in maps]
        assert resolve.resolve_op(op, tensors, off, "decode")["chosen"] == ref
