"""The C kernel library against independent expressions of its contracts (numpy, gguf.quants).

Every kernel is called through ctypes on the library built by ``bringup.build.kernel_lib.build_kernel_library``.
Expected values never come from a transliteration of the C: dequantization is gguf.quants', linear
algebra is numpy's in float64, and tolerances come from the contract's declared accumulation (or
are bit-exact where the contract fixes every rounding). Outputs are surrounded by guard elements.
"""
from __future__ import annotations

import ctypes
import itertools
import math

import gguf
import numpy as np
import pytest

from bringup.formats import ggml as formats
from bringup.build import sources as c_sources
from bringup.core.errors import BringupError, UnsupportedError
from bringup.core.paths import CSRC
from bringup.build import kernel_lib
from bringup.ir import kernel_maps as kernels
from tests.helpers.attention import KV, assert_appended, attention_error_case, attn_ref
from tests.helpers.kernels import (BU_ERR_ARG, BU_ERR_NULL, BU_ERR_WS, BU_OK, F16_FIELDS, FMTS, NO_GGUF_QUANTIZE, P,
                                   SENTINEL, U, Guarded,
                                   bind_kernels, cname, deq_ref, qtype, random_rows)

# ----------------------------------------------------------------------------- harness (tests/helpers/kernels.py)


@pytest.fixture(scope="session")
def lib(build):
    cdll = bind_kernels(ctypes.CDLL(str(build.library)))
    cdll.bu_dequantize_row.restype = ctypes.c_int
    cdll.bu_dequantize_row.argtypes = [ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    cdll.bu_kernels_abi_version.restype = ctypes.c_int
    cdll.bu_row_bytes.restype = ctypes.c_int
    cdll.bu_row_bytes.argtypes = [ctypes.c_int32, ctypes.c_int64, ctypes.POINTER(ctypes.c_size_t)]
    return cdll


# ----------------------------------------------------------------------------- formats / dequant

def test_abi_version_and_row_bytes(lib):
    assert lib.bu_kernels_abi_version() == kernels.ABI_VERSION
    out = ctypes.c_size_t()
    for f in formats.table().values():
        if f.name not in FMTS:
            continue
        assert lib.bu_row_bytes(f.ggml_type, 3 * f.block_elems, ctypes.byref(out)) == BU_OK
        assert out.value == f.row_bytes(3 * f.block_elems) == gguf.GGML_QUANT_SIZES[qtype(f.name)][1] * 3
        if f.block_elems > 1:
            assert lib.bu_row_bytes(f.ggml_type, f.block_elems + 1, ctypes.byref(out)) == BU_ERR_ARG
    assert lib.bu_row_bytes(99, 32, ctypes.byref(out)) == BU_ERR_ARG      # unknown type
    assert lib.bu_row_bytes(2, -32, ctypes.byref(out)) == BU_ERR_ARG      # negative
    assert lib.bu_row_bytes(2, 32, None) == BU_ERR_NULL


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("how", ["quantize", "bytes"])
def test_dequantize_matches_gguf(lib, fmt, how):
    """C dequantization is bit-identical to gguf.quants.dequantize (same fp32 rounding points)."""
    if how == "quantize" and fmt in NO_GGUF_QUANTIZE:
        how = "bytes"  # gguf.quants cannot quantize these; random valid blocks instead
    rng = np.random.default_rng(hash((fmt, how)) % 2**32)
    be = formats.by_name(fmt).block_elems
    n = be * (3 if be > 1 else 37)
    rows = random_rows(fmt, 5, n, rng, how)
    ref = deq_ref(fmt, rows)
    for r in range(rows.shape[0]):
        out = Guarded((n,))
        assert lib.bu_dequantize_row(formats.by_name(fmt).ggml_type, P(np.ascontiguousarray(rows[r])), out.p, n) == BU_OK
        assert out.guards_intact()
        np.testing.assert_array_equal(out.arr.view(np.uint32), ref[r].view(np.uint32))


NEW_FORMATS = ["IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0"]
# fp16 scales at the edges: 1, -1, the smallest subnormal, the largest finite, -0
EDGE_SCALES = [0x3C00, 0xBC00, 0x0001, 0x7BFF, 0x8000]
# quant bytes at the edges: all zero, all ones, alternating nibbles, and TQ1_0's 242 / 243 (the
# largest byte a base-3 packing of 5 digits emits, and the first it never emits)
EDGE_BYTES = [0x00, 0xFF, 0x0F, 0xF0, 0xF2, 0xF3, 0x80, 0x7F]


def edge_rows(fmt: str) -> np.ndarray:
    """One row per (scale, quant byte) pair: every block byte but the fp16 scale is the quant byte."""
    f = formats.by_name(fmt)
    rows = []
    for sc, q in itertools.product(EDGE_SCALES, EDGE_BYTES):
        blk = np.full(f.block_bytes, q, np.uint8)
        for off in F16_FIELDS[fmt]:
            blk[off:off + 2] = np.array([sc], np.uint16).view(np.uint8)
        rows.append(np.tile(blk, 2))
    return np.ascontiguousarray(np.stack(rows))


@pytest.mark.parametrize("fmt", NEW_FORMATS)
def test_dequantize_edge_blocks(lib, fmt):
    """IQ4 / ternary blocks at the edges (every scale sign, subnormal and largest fp16; quant bytes
    all 0 / all 1 / 243 and up for TQ1_0; IQ4_XS 6-bit scales 0 and 63) dequantize bit-exactly as
    gguf.quants, -0 included."""
    assert_dequantizes_as_gguf(lib, fmt, edge_rows(fmt), 2 * formats.by_name(fmt).block_elems)


def assert_dequantizes_as_gguf(lib, fmt: str, rows: np.ndarray, n: int) -> None:
    """bu_dequantize_row of each row of ``rows`` (n weights each) is gguf.quants' bit for bit."""
    ref = deq_ref(fmt, rows)
    out = Guarded(ref.shape)
    for r in range(rows.shape[0]):
        assert lib.bu_dequantize_row(formats.by_name(fmt).ggml_type, P(rows[r]), out.p + r * n * 4, n) == BU_OK
    assert out.guards_intact()
    np.testing.assert_array_equal(out.arr.view(np.uint32), ref.view(np.uint32), err_msg=fmt)


def test_dequantize_real_blocks(lib, real_rows):
    """Real blocks from smollm2 (Q4_1, Q8_0) and gemma3 (Q5_0, Q8_0, Q4_K, Q6_K) dequantize bit-exactly."""
    for fmt, (rows, n) in real_rows.items():
        assert_dequantizes_as_gguf(lib, fmt, rows, n)


def test_fp16_conversion_every_value(lib):
    """All 65536 fp16 bit patterns (subnormals, inf, NaN) convert exactly as numpy's float16."""
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    out = Guarded((65536,))
    assert lib.bu_dequantize_row(1, P(h), out.p, 65536) == BU_OK
    ref = h.view(np.float16).astype(np.float32)
    finite = np.isfinite(ref)
    np.testing.assert_array_equal(out.arr.view(np.uint32)[finite], ref.view(np.uint32)[finite])
    assert np.array_equal(np.isnan(out.arr), np.isnan(ref)) and np.array_equal(np.isinf(out.arr), np.isinf(ref))
    assert out.guards_intact()


# ----------------------------------------------------------------------------- embed

@pytest.mark.parametrize("fmt", FMTS)
def test_embed(lib, fmt):
    rng = np.random.default_rng(7)
    be = formats.by_name(fmt).block_elems
    n_embd, n_vocab = be * 2 if be > 1 else 24, 11
    table = random_rows(fmt, n_vocab, n_embd, rng, "bytes" if fmt in NO_GGUF_QUANTIZE else "quantize")
    ref_table = deq_ref(fmt, table)
    tokens = np.array([3, 0, 10, 3, 7], dtype=np.int32)
    fn = getattr(lib, f"bu_embed_{cname(fmt)}_scalar")
    for scale in (1.0, math.sqrt(640.0)):
        out = Guarded((len(tokens), n_embd))
        assert fn(P(tokens), P(table), out.p, len(tokens), n_embd, n_vocab, scale, None, 0) == BU_OK
        assert out.guards_intact()
        ref = ref_table[tokens] * np.float32(scale)
        np.testing.assert_array_equal(out.arr.view(np.uint32), ref.view(np.uint32))
    # out-of-range token: error, nothing written
    for bad in (-1, n_vocab):
        out = Guarded((2, n_embd))
        toks = np.array([1, bad], dtype=np.int32)
        assert fn(P(toks), P(table), out.p, 2, n_embd, n_vocab, 1.0, None, 0) == BU_ERR_ARG
        assert out.untouched()
    out = Guarded((1, n_embd))
    assert fn(None, P(table), out.p, 1, n_embd, n_vocab, 1.0, None, 0) == BU_ERR_NULL
    assert fn(P(tokens), None, out.p, 1, n_embd, n_vocab, 1.0, None, 0) == BU_ERR_NULL
    assert fn(P(tokens), P(table), None, 1, n_embd, n_vocab, 1.0, None, 0) == BU_ERR_NULL
    assert fn(P(tokens), P(table), out.p, -1, n_embd, n_vocab, 1.0, None, 0) == BU_ERR_ARG
    if be > 1:
        assert fn(P(tokens), P(table), out.p, 1, n_embd + 1, n_vocab, 1.0, None, 0) == BU_ERR_ARG
    assert fn(P(tokens), P(table), out.p, 0, n_embd, n_vocab, 1.0, None, 0) == BU_OK  # T = 0: nothing to do
    assert fn(P(tokens), P(table), out.p, 1, n_embd, 2**31, 1.0, None, 0) == BU_ERR_ARG  # > BU_DIM_MAX
    assert out.untouched()


def test_embed_real_q8_0(lib, real_rows):
    rows, n = real_rows["Q8_0"]
    tokens = np.array([5, 0, 23, 5], dtype=np.int32)
    out = Guarded((4, n))
    assert lib.bu_embed_q8_0_scalar(P(tokens), P(rows), out.p, 4, n, rows.shape[0], np.float32(math.sqrt(n)), None, 0) == BU_OK
    ref = deq_ref("Q8_0", rows)[tokens] * np.float32(math.sqrt(n))
    np.testing.assert_array_equal(out.arr, ref)
    assert out.guards_intact()


# ----------------------------------------------------------------------------- linear

def linear_ref(x, wdeq, bias):
    y = x.astype(np.float64) @ wdeq.astype(np.float64).T
    bound = (x.shape[1] / 8 + 8) * U * (np.abs(x).astype(np.float64) @ np.abs(wdeq).astype(np.float64).T)
    if bias is not None:
        y = y + bias
        bound = bound + 2 * U * (np.abs(y) + np.abs(bias))
    return y, bound + 1e-30


def call_linear(lib, fmt, x, w, bias, n_in, n_out, ws_extra=0):
    T = x.shape[0]
    y = Guarded((T, n_out))
    ws_bytes = 0 if fmt == "F32" else n_in * 4
    ws = np.zeros(max(ws_bytes + ws_extra, 1), dtype=np.uint8)
    st = getattr(lib, f"bu_linear_{cname(fmt)}_scalar")(P(x), P(w), P(bias), y.p, T, n_in, n_out, P(ws), ws_bytes + ws_extra)
    return st, y


@pytest.mark.parametrize("fmt", FMTS)
def test_linear(lib, fmt):
    """Decode (T=1) and prefill (T>1), with and without bias, non-square shapes, vs numpy float64."""
    rng = np.random.default_rng(11)
    be = formats.by_name(fmt).block_elems
    n_in = be * 3 if be > 1 else 45   # 45: a tail that is not a multiple of the 8 lanes
    n_out = 7
    w = random_rows(fmt, n_out, n_in, rng, "bytes" if fmt in NO_GGUF_QUANTIZE else "quantize")
    wdeq = deq_ref(fmt, w)
    for T in (1, 5):
        x = (rng.standard_normal((T, n_in)) * np.linspace(1, 2, n_in)).astype(np.float32)
        for bias in (None, rng.standard_normal(n_out).astype(np.float32)):
            st, y = call_linear(lib, fmt, x, w, bias, n_in, n_out)
            assert st == BU_OK
            assert y.guards_intact()
            ref, bound = linear_ref(x, wdeq, bias)
            assert (np.abs(y.arr - ref) <= bound).all(), np.max(np.abs(y.arr - ref) / bound)
    # prefill equals stacked decode, bit for bit (the contract does not depend on T)
    x = rng.standard_normal((4, n_in)).astype(np.float32)
    _, yp = call_linear(lib, fmt, x, w, None, n_in, n_out)
    for t in range(4):
        _, yd = call_linear(lib, fmt, x[t:t + 1].copy(), w, None, n_in, n_out)
        np.testing.assert_array_equal(yd.arr[0], yp.arr[t])


def test_linear_real_weights(lib, real_rows):
    rng = np.random.default_rng(3)
    for fmt, (rows, n) in real_rows.items():
        x = rng.standard_normal((3, n)).astype(np.float32)
        st, y = call_linear(lib, fmt, x, rows, None, n, rows.shape[0])
        assert st == BU_OK and y.guards_intact()
        ref, bound = linear_ref(x, deq_ref(fmt, rows), None)
        assert (np.abs(y.arr - ref) <= bound).all(), fmt


def test_linear_declared_reduction_order(lib):
    """The lanes8 order of the contract, expressed with numpy fp32 sequential cumsums: bit-exact."""
    rng = np.random.default_rng(5)
    for n_in in (1, 7, 8, 29, 64):
        x = rng.standard_normal((2, n_in)).astype(np.float32)
        w = rng.standard_normal((3, n_in)).astype(np.float32)
        st, y = call_linear(lib, "F32", x, w, None, n_in, 3)
        assert st == BU_OK
        for t in range(2):
            for r in range(3):
                prod = x[t] * w[r]                                   # fp32 products
                pad = np.zeros(-(-n_in // 8) * 8, np.float32)
                pad[:n_in] = prod
                lanes = np.cumsum(pad.reshape(-1, 8), axis=0, dtype=np.float32)[-1]
                s = lanes.astype(np.float32)
                expect = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
                assert y.arr[t, r] == expect, (n_in, t, r)


def test_linear_hand_checked(lib):
    x = np.array([[1, 2, 3]], dtype=np.float32)
    w = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 1], [-1, 0.5, 2]], dtype=np.float32)
    b = np.array([0, 10, 0, 0.25], dtype=np.float32)
    st, y = call_linear(lib, "F32", x, w, b, 3, 4)
    assert st == BU_OK
    np.testing.assert_array_equal(y.arr, [[1, 12, 6, 6.25]])


def test_linear_errors_and_boundaries(lib):
    rng = np.random.default_rng(1)
    n_in, n_out = 64, 4
    w = random_rows("Q4_0", n_out, n_in, rng)
    x = rng.standard_normal((2, n_in)).astype(np.float32)
    fn = lib.bu_linear_q4_0_scalar
    ws = np.zeros(n_in * 4, np.uint8)
    y = Guarded((2, n_out))
    # workspace too small: -3, nothing written
    assert fn(P(x), P(w), None, y.p, 2, n_in, n_out, P(ws), n_in * 4 - 1) == BU_ERR_WS and y.untouched()
    assert fn(P(x), P(w), None, y.p, 2, n_in, n_out, None, n_in * 4) == BU_ERR_NULL and y.untouched()
    assert fn(None, P(w), None, y.p, 2, n_in, n_out, P(ws), n_in * 4) == BU_ERR_NULL
    assert fn(P(x), None, None, y.p, 2, n_in, n_out, P(ws), n_in * 4) == BU_ERR_NULL
    assert fn(P(x), P(w), None, None, 2, n_in, n_out, P(ws), n_in * 4) == BU_ERR_NULL
    for T, ni, no in ((-1, n_in, n_out), (2, -32, n_out), (2, n_in, -1), (2, 33, n_out),
                      (2, n_in, 2**31), (2**31, n_in, n_out)):
        assert fn(P(x), P(w), None, y.p, T, ni, no, P(ws), n_in * 4) == BU_ERR_ARG, (T, ni, no)
    assert y.untouched()
    # y aliasing x (forbidden: x is read while y is written)
    xa = rng.standard_normal((1, n_in)).astype(np.float32)
    assert fn(P(xa), P(w), None, P(xa), 1, n_in, n_out, P(ws), n_in * 4) == BU_ERR_ARG
    # workspace overlapping the output
    big = np.zeros(n_in + n_out, np.float32)
    assert fn(P(x[:1].copy()), P(w), None, P(big), 1, n_in, n_out, P(big), n_in * 4) == BU_ERR_ARG
    # boundary dims: T = 0 and n_out = 0 do nothing; n_in = 0 gives bias (or 0)
    assert fn(P(x), P(w), None, y.p, 0, n_in, n_out, None, 0) == BU_OK and y.untouched()
    assert fn(P(x), P(w), None, y.p, 2, n_in, 0, None, 0) == BU_OK and y.untouched()
    b = np.arange(n_out, dtype=np.float32)
    st = lib.bu_linear_f32_scalar(P(x), P(w), P(b), y.p, 2, 0, n_out, None, 0)
    assert st == BU_OK and y.guards_intact()
    np.testing.assert_array_equal(y.arr, np.stack([b, b]))
    # the largest dimension value passes the range check (error only from the block multiple)
    assert fn(P(x), P(w), None, y.p, 1, 2**31 - 1, 1, P(ws), 0) == BU_ERR_ARG


# ----------------------------------------------------------------------------- rmsnorm

def rms_ref(x, w, eps):
    x64 = x.astype(np.float64)
    return x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps) * w


def test_rmsnorm(lib):
    rng = np.random.default_rng(2)
    for T, n in ((1, 1), (3, 45), (2, 576)):
        x = (rng.standard_normal((T, n)) * np.linspace(0.5, 5, n)).astype(np.float32)
        w = rng.uniform(0.5, 2, n).astype(np.float32)
        y = Guarded((T, n))
        assert lib.bu_rmsnorm_f32_scalar(P(x), P(w), y.p, T, n, 1e-5, None, 0) == BU_OK
        assert y.guards_intact()
        np.testing.assert_allclose(y.arr, rms_ref(x, w, 1e-5), rtol=4 * U * 8, atol=1e-30)
        # in place (declared aliasing y == x) gives the same bits
        xi = x.copy()
        assert lib.bu_rmsnorm_f32_scalar(P(xi), P(w), P(xi), T, n, 1e-5, None, 0) == BU_OK
        np.testing.assert_array_equal(xi, y.arr)
    # hand-checked: x = [3, 4], mean square 12.5, eps 0 -> x / sqrt(12.5)
    x = np.array([[3, 4]], np.float32)
    y = Guarded((1, 2))
    assert lib.bu_rmsnorm_f32_scalar(P(x), P(np.ones(2, np.float32)), y.p, 1, 2, 0.0, None, 0) == BU_OK
    np.testing.assert_allclose(y.arr, [[3 / math.sqrt(12.5), 4 / math.sqrt(12.5)]], rtol=1e-7)
    # errors
    w = np.ones(2, np.float32)
    assert lib.bu_rmsnorm_f32_scalar(None, P(w), y.p, 1, 2, 1e-5, None, 0) == BU_ERR_NULL
    assert lib.bu_rmsnorm_f32_scalar(P(x), None, y.p, 1, 2, 1e-5, None, 0) == BU_ERR_NULL
    assert lib.bu_rmsnorm_f32_scalar(P(x), P(w), y.p, 1, -2, 1e-5, None, 0) == BU_ERR_ARG
    assert lib.bu_rmsnorm_f32_scalar(P(x), P(w), y.p, 1, 2, -1.0, None, 0) == BU_ERR_ARG
    assert lib.bu_rmsnorm_f32_scalar(P(x), P(w), y.p, 1, 2, float("nan"), None, 0) == BU_ERR_ARG
    buf = np.arange(6, dtype=np.float32)  # partial overlap: y = x shifted by one element
    assert lib.bu_rmsnorm_f32_scalar(P(buf), P(w), buf.ctypes.data + 4, 2, 2, 1e-5, None, 0) == BU_ERR_ARG
    assert y.untouched() is False  # written by the hand-checked case above
    assert lib.bu_rmsnorm_f32_scalar(P(x), P(w), y.p, 0, 2, 1e-5, None, 0) == BU_OK


def test_rmsnorm_heads(lib):
    rng = np.random.default_rng(4)
    T, H, D = 3, 4, 24
    x = (rng.standard_normal((T, H, D)) * np.arange(1, H + 1)[None, :, None]).astype(np.float32)
    w = rng.uniform(0.5, 2, D).astype(np.float32)
    y = Guarded((T, H, D))
    assert lib.bu_rmsnorm_heads_f32_scalar(P(x), P(w), y.p, T, H, D, 1e-6, None, 0) == BU_OK
    assert y.guards_intact()
    np.testing.assert_allclose(y.arr, rms_ref(x, w, 1e-6), rtol=32 * U)
    xi = x.copy()
    assert lib.bu_rmsnorm_heads_f32_scalar(P(xi), P(w), P(xi), T, H, D, 1e-6, None, 0) == BU_OK
    np.testing.assert_array_equal(xi, y.arr)
    assert lib.bu_rmsnorm_heads_f32_scalar(P(x), P(w), y.p, T, -1, D, 1e-6, None, 0) == BU_ERR_ARG
    assert lib.bu_rmsnorm_heads_f32_scalar(P(x), None, y.p, T, H, D, 1e-6, None, 0) == BU_ERR_NULL


# ----------------------------------------------------------------------------- rope

def rope_ref(x, pos, theta, rope_dim, neox, freq_scale=1.0):
    T, H, D = x.shape
    y = x.astype(np.float64).copy()
    half = rope_dim // 2
    i = np.arange(half)
    ang = (pos + np.arange(T))[:, None] * freq_scale * theta ** (-2.0 * i / rope_dim)[None, :]   # [T, half]
    rot = np.exp(1j * ang)[:, None, :]
    if neox:
        z = x[..., :half] + 1j * x[..., half:rope_dim].astype(np.float64)
        z = z * rot
        y[..., :half], y[..., half:rope_dim] = z.real, z.imag
    else:
        z = x[..., 0:rope_dim:2] + 1j * x[..., 1:rope_dim:2].astype(np.float64)
        z = z * rot
        y[..., 0:rope_dim:2], y[..., 1:rope_dim:2] = z.real, z.imag
    return y


@pytest.mark.parametrize("mode", ["normal", "neox"])
def test_rope(lib, mode):
    rng = np.random.default_rng(6)
    fn = getattr(lib, f"bu_rope_{mode}_f32_scalar")
    for T, H, D, rd, pos, theta, fs in ((3, 2, 8, 8, 0, 10000.0, 1.0), (4, 3, 64, 64, 17, 100000.0, 1.0),
                                        (2, 2, 256, 256, 4095, 1e6, 1.0), (2, 2, 16, 8, 5, 10000.0, 0.25)):
        x = rng.standard_normal((T, H, D)).astype(np.float32)
        y = Guarded((T, H, D))
        assert fn(P(x), y.p, T, H, D, rd, pos, theta, fs, None, 0) == BU_OK
        assert y.guards_intact()
        ref = rope_ref(x, pos, theta, rd, mode == "neox", fs)
        np.testing.assert_allclose(y.arr, ref, atol=2e-6 * 4, rtol=0)
        np.testing.assert_array_equal(y.arr[..., rd:], x[..., rd:])  # pass-through beyond rope_dim
        xi = x.copy()
        assert fn(P(xi), P(xi), T, H, D, rd, pos, theta, fs, None, 0) == BU_OK
        np.testing.assert_array_equal(xi, y.arr)
    # position 0 is the identity; the layouts differ (exposes a swapped pair layout)
    x = np.arange(2 * 1 * 8, dtype=np.float32).reshape(2, 1, 8)
    y = Guarded((2, 1, 8))
    assert fn(P(x), y.p, 2, 1, 8, 8, 0, 10000.0, 1.0, None, 0) == BU_OK
    np.testing.assert_array_equal(y.arr[0], x[0])
    other = rope_ref(x, 0, 10000.0, 8, mode != "neox")
    assert not np.allclose(y.arr[1], other[1], atol=1e-3)
    for bad in ((2, 1, 8, 7, 0), (2, 1, 8, 10, 0), (2, 1, 8, 0, 0), (2, 1, 8, 8, -1), (-1, 1, 8, 8, 0)):
        assert fn(P(x), y.p, *bad, 10000.0, 1.0, None, 0) == BU_ERR_ARG, bad
    assert fn(P(x), y.p, 2, 1, 8, 8, 0, -1.0, 1.0, None, 0) == BU_ERR_ARG
    assert fn(P(x), y.p, 2, 1, 8, 8, 0, 10000.0, 0.0, None, 0) == BU_ERR_ARG
    assert fn(None, y.p, 2, 1, 8, 8, 0, 10000.0, 1.0, None, 0) == BU_ERR_NULL


# ----------------------------------------------------------------------------- attention


def call_attn(lib, q, k, v, kv, pos, scale, window=0, softcap=0.0, ws_cap=None):
    T, H, D = q.shape
    n_ctx, Hkv, Dv = kv.v.shape
    out = Guarded((T, H, Dv))
    ws = np.zeros(n_ctx, np.float32)
    st = lib.bu_attention_f32_scalar(P(q), P(k), P(v), P(kv.k), P(kv.v), out.p, T, H, Hkv, D, Dv, n_ctx, pos,
                                     window, scale, softcap, P(ws), n_ctx * 4 if ws_cap is None else ws_cap)
    return st, out


@pytest.mark.parametrize("T,H,Hkv,D,Dv,n_ctx,pos,window,softcap", [
    (1, 1, 1, 8, 8, 4, 0, 0, 0.0),          # first token: attends to itself only
    (5, 4, 2, 16, 16, 12, 3, 0, 0.0),       # GQA prefill after earlier tokens
    (1, 9, 3, 64, 64, 40, 31, 0, 0.0),      # smollm2 decode shape
    (3, 4, 1, 256, 256, 20, 9, 4, 0.0),     # gemma3: head_dim 256, MQA, sliding window 4
    (4, 2, 2, 12, 20, 8, 4, 0, 50.0),       # head_dim_v != head_dim, soft-capping
])
def test_attention(lib, T, H, Hkv, D, Dv, n_ctx, pos, window, softcap):
    rng = np.random.default_rng(T * 100 + pos)
    q = rng.standard_normal((T, H, D)).astype(np.float32)
    k = rng.standard_normal((T, Hkv, D)).astype(np.float32)
    v = (rng.standard_normal((T, Hkv, Dv)) * np.arange(1, Dv + 1)).astype(np.float32)
    kv = KV(rng, n_ctx, Hkv, D, Dv, pos)
    old_k, old_v = kv.k.copy(), kv.v.copy()
    scale = 1.0 / math.sqrt(D)
    st, out = call_attn(lib, q, k, v, kv, pos, scale, window, softcap)
    assert st == BU_OK and out.guards_intact()
    assert_appended(kv, k, v, pos, old_k)
    np.testing.assert_array_equal(kv.v[:pos], old_v[:pos])
    ref = attn_ref(q, kv.k, kv.v, pos, scale, window, softcap)
    np.testing.assert_allclose(out.arr, ref, atol=2e-5 * Dv, rtol=0)
    assert np.isfinite(out.arr).all()  # rows beyond pos + T (NaN sentinels) were never read


def test_attention_prefill_equals_decode(lib):
    """Prefill of T tokens gives the bits of T successive decode calls."""
    rng = np.random.default_rng(8)
    T, H, Hkv, D, n_ctx = 6, 4, 2, 32, 8
    q = rng.standard_normal((T, H, D)).astype(np.float32)
    k = rng.standard_normal((T, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((T, Hkv, D)).astype(np.float32)
    kv1 = KV(rng, n_ctx, Hkv, D, D, 0)
    st, pre = call_attn(lib, q, k, v, kv1, 0, 0.125, window=3)
    assert st == BU_OK
    kv2 = KV(rng, n_ctx, Hkv, D, D, 0)
    for t in range(T):
        st, dec = call_attn(lib, q[t:t + 1].copy(), k[t:t + 1].copy(), v[t:t + 1].copy(), kv2, t, 0.125, window=3)
        assert st == BU_OK
        np.testing.assert_array_equal(dec.arr[0], pre.arr[t])


def test_attention_errors(lib):
    q, k, v, kv = attention_error_case()
    before = kv.k.copy()
    st, out = call_attn(lib, q, k, v, kv, 1, 0.3, ws_cap=4 * 4 - 1)
    assert st == BU_ERR_WS and out.untouched()
    np.testing.assert_array_equal(kv.k.view(np.uint32), before.view(np.uint32))  # cache unchanged on error
    st, out = call_attn(lib, q, k, v, kv, 3, 0.3)         # pos + T > n_ctx
    assert st == BU_ERR_ARG and out.untouched()
    ws = np.zeros(4, np.float32)
    fn = lib.bu_attention_f32_scalar
    o = Guarded((2, 4, 8))
    args = [P(q), P(k), P(v), P(kv.k), P(kv.v), o.p]
    for i in range(6):
        a = list(args)
        a[i] = None
        assert fn(*a, 2, 4, 2, 8, 8, 4, 1, 0, 0.3, 0.0, P(ws), 16) == BU_ERR_NULL
    assert fn(*args, 2, 4, 3, 8, 8, 4, 1, 0, 0.3, 0.0, P(ws), 16) == BU_ERR_ARG   # n_head % n_head_kv
    assert fn(*args, 2, 4, 0, 8, 8, 4, 1, 0, 0.3, 0.0, P(ws), 16) == BU_ERR_ARG   # n_head_kv = 0
    assert fn(*args, 2, 4, 2, 8, 8, 4, -1, 0, 0.3, 0.0, P(ws), 16) == BU_ERR_ARG  # negative pos
    assert fn(*args, 2, 4, 2, 8, 8, 4, 1, -1, 0.3, 0.0, P(ws), 16) == BU_ERR_ARG  # negative window
    assert fn(*args, 2, 4, 2, 8, 8, 4, 1, 0, 0.3, -1.0, P(ws), 16) == BU_ERR_ARG  # negative softcap
    assert fn(*args[:5], P(q), 2, 4, 2, 8, 8, 4, 1, 0, 0.3, 0.0, P(ws), 16) == BU_ERR_ARG  # out aliases q
    assert fn(*args, 2, 4, 2, 8, 8, 4, 1, 0, 0.3, 0.0, None, 16) == BU_ERR_NULL
    assert o.untouched()
    assert fn(*args, 0, 4, 2, 8, 8, 4, 1, 0, 0.3, 0.0, None, 0) == BU_OK          # T = 0: nothing to do
    big = 2**31 - 1  # every dim in range, but n_ctx * n_head_kv * head_dim * 4 overflows 64 bits
    assert fn(*args, 1, big, big, big, 8, big, 0, 0, 0.3, 0.0, P(ws), 16) == BU_ERR_ARG
    assert fn(*args, 1, 4, 2, 8, 8, 2**31, 0, 0, 0.3, 0.0, P(ws), 16) == BU_ERR_ARG  # n_ctx > BU_DIM_MAX


# ----------------------------------------------------------------------------- elementwise

def gelu_tanh(g):
    g = g.astype(np.float64)
    return 0.5 * g * (1 + np.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g ** 3)))


BINARY = {
    "swiglu": (lambda a, b: a.astype(np.float64) / (1 + np.exp(-a.astype(np.float64))) * b, 8 * U),
    "geglu": (lambda a, b: gelu_tanh(a) * b, 64 * U),
    "add": (lambda a, b: a.astype(np.float32) + b, 0.0),
}


@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_elementwise(lib, op):
    ref_fn, rtol = BINARY[op]
    fn = getattr(lib, f"bu_{op}_f32_scalar")
    rng = np.random.default_rng(10)
    for T, n in ((1, 1), (3, 37), (2, 1536)):
        a = (rng.standard_normal((T, n)) * 4).astype(np.float32)
        b = rng.standard_normal((T, n)).astype(np.float32)
        y = Guarded((T, n))
        assert fn(P(a), P(b), y.p, T, n, None, 0) == BU_OK and y.guards_intact()
        ref = ref_fn(a, b)
        if rtol == 0:
            np.testing.assert_array_equal(y.arr, ref)
        else:
            np.testing.assert_allclose(y.arr, ref, rtol=rtol, atol=1e-6 * np.abs(b).max())
        for alias in (a, b):  # declared: y may be either input exactly
            a2, b2 = a.copy(), b.copy()
            tgt = a2 if alias is a else b2
            assert fn(P(a2), P(b2), P(tgt), T, n, None, 0) == BU_OK
            np.testing.assert_array_equal(tgt, y.arr)
    y = Guarded((1, 4))
    a = np.ones((1, 4), np.float32)
    assert fn(None, P(a), y.p, 1, 4, None, 0) == BU_ERR_NULL
    assert fn(P(a), None, y.p, 1, 4, None, 0) == BU_ERR_NULL
    assert fn(P(a), P(a), None, 1, 4, None, 0) == BU_ERR_NULL
    assert fn(P(a), P(a), y.p, 1, -4, None, 0) == BU_ERR_ARG
    assert fn(P(a), P(a), y.p, 2**31, 4, None, 0) == BU_ERR_ARG
    buf = np.ones(8, np.float32)
    assert fn(P(buf), P(a), buf.ctypes.data + 4, 1, 4, None, 0) == BU_ERR_ARG   # partial overlap
    assert fn(P(a), P(a), y.p, 0, 4, None, 0) == BU_OK
    assert y.untouched()


def test_swiglu_geglu_hand_checked(lib):
    g = np.array([[0.0, 1.0, -1.0, 20.0]], np.float32)
    u = np.array([[5.0, 2.0, 2.0, 1.0]], np.float32)
    y = Guarded((1, 4))
    assert lib.bu_swiglu_f32_scalar(P(g), P(u), y.p, 1, 4, None, 0) == BU_OK
    np.testing.assert_allclose(y.arr, [[0.0, 2 / (1 + math.exp(-1)), -2 / (1 + math.e), 20.0]], rtol=1e-6)
    assert lib.bu_geglu_f32_scalar(P(g), P(u), y.p, 1, 4, None, 0) == BU_OK
    np.testing.assert_allclose(y.arr, [[0.0, 2 * 0.8411919906082768, 2 * -0.15880800939172324, 20.0]], rtol=1e-6)


def test_scale_softcap_copy(lib):
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((3, 53)) * 40).astype(np.float32)
    y = Guarded((3, 53))
    assert lib.bu_scale_f32_scalar(P(x), y.p, 3, 53, 0.125, None, 0) == BU_OK and y.guards_intact()
    np.testing.assert_array_equal(y.arr, x * np.float32(0.125))
    xi = x.copy()
    assert lib.bu_scale_f32_scalar(P(xi), P(xi), 3, 53, 0.125, None, 0) == BU_OK
    np.testing.assert_array_equal(xi, y.arr)
    y = Guarded((3, 53))
    assert lib.bu_softcap_f32_scalar(P(x), y.p, 3, 53, 30.0, None, 0) == BU_OK and y.guards_intact()
    np.testing.assert_allclose(y.arr, 30.0 * np.tanh(x.astype(np.float64) / 30.0), rtol=8 * U, atol=1e-6)
    assert np.abs(y.arr).max() <= 30.0
    for cap in (0.0, -1.0, float("inf"), float("nan")):
        assert lib.bu_softcap_f32_scalar(P(x), y.p, 3, 53, cap, None, 0) == BU_ERR_ARG
    y = Guarded((3, 53))
    assert lib.bu_copy_f32_scalar(P(x), y.p, 3, 53, None, 0) == BU_OK and y.guards_intact()
    np.testing.assert_array_equal(y.arr, x)
    assert lib.bu_copy_f32_scalar(P(x), P(x), 3, 53, None, 0) == BU_ERR_ARG  # copy never aliases
    assert lib.bu_copy_f32_scalar(None, y.p, 3, 53, None, 0) == BU_ERR_NULL
    assert lib.bu_scale_f32_scalar(P(x), y.p, -3, 53, 1.0, None, 0) == BU_ERR_ARG


def test_argmax(lib):
    rng = np.random.default_rng(13)
    x = rng.standard_normal((4, 49152)).astype(np.float32)
    x[1, 100] = x[1, 7] = 50.0           # tie: the smaller index wins
    x[2, -1] = 60.0                        # the last element (a tail position)
    x[3, 0] = 70.0
    idx = Guarded((4,), np.int32)
    assert lib.bu_argmax_f32_scalar(P(x), idx.p, 4, 49152, None, 0) == BU_OK and idx.guards_intact()
    np.testing.assert_array_equal(idx.arr, np.argmax(x, axis=1))   # numpy: first occurrence too
    assert idx.arr[1] == 7
    one = np.array([[-np.inf]], np.float32)
    idx1 = Guarded((1,), np.int32)
    assert lib.bu_argmax_f32_scalar(P(one), idx1.p, 1, 1, None, 0) == BU_OK and idx1.arr[0] == 0
    xn = x.copy()
    xn[2, 5] = np.nan
    idx = Guarded((4,), np.int32)
    assert lib.bu_argmax_f32_scalar(P(xn), idx.p, 4, 49152, None, 0) == BU_ERR_ARG and idx.untouched()
    assert lib.bu_argmax_f32_scalar(P(x), idx.p, 4, 0, None, 0) == BU_ERR_ARG
    assert lib.bu_argmax_f32_scalar(None, idx.p, 4, 49152, None, 0) == BU_ERR_NULL
    assert lib.bu_argmax_f32_scalar(P(x), None, 4, 49152, None, 0) == BU_ERR_NULL
    assert lib.bu_argmax_f32_scalar(P(x), idx.p, 0, 49152, None, 0) == BU_OK
    assert idx.untouched()


# ----------------------------------------------------------------------------- build helper

def test_build_record_and_cache(build, tmp_path):
    assert build.library.exists()
    assert "-march=x86-64-v2" in build.flags and "-ffp-contract=off" in build.flags
    assert build.compiler_version and set(build.sources) >= {str(p.relative_to(CSRC.parent)) for p in c_sources.kernel_sources()}
    again = kernel_lib.build_kernel_library(build.library.parent)
    assert again.cached and again.key == build.key and again.library == build.library
    with pytest.raises(UnsupportedError):
        kernel_lib.build_kernel_library(tmp_path, flags=["-O2", "-march=native"])
    with pytest.raises(BringupError, match="build failed"):
        kernel_lib.build_kernel_library(tmp_path, flags=["-O2", "-fno-such-flag-xyz"])
    assert not list(tmp_path.glob(".*.tmp"))  # failed build leaves nothing behind


@pytest.mark.slow   # compiles the whole kernel library a second time
def test_kernel_library_builds_warning_free(build, tmp_path):
    other = kernel_lib.build_kernel_library(tmp_path, flags=list(kernel_lib.DEFAULT_FLAGS) + ["-Werror"])
    assert other.key != build.key and not other.cached


# ----------------------------------------------------------------------------- the host's ISA

def cpu_has_avx2() -> bool:
    with open("/proc/cpuinfo") as fh:
        return any(line.startswith("flags") and " avx2" in line for line in fh)


# ----------------------------------------------------------------------------- map-driven ABI check

DIM_VALUES = {"n_embd": 64, "n_vocab": 5, "n_in": 64, "n_out": 3, "n": 10, "n_heads": 2, "head_dim": 8,
              "rope_dim": 8, "n_head": 4, "n_head_kv": 2, "head_dim_v": 6, "n_ctx": 8,
              "n_ff": 32, "n_expert": 4, "n_used": 2}
PARAM_VALUES = {"eps": 1e-5, "theta": 10000.0, "freq_scale": 1.0, "window": 0, "scale": 0.5, "softcap": 0.0,
                "s": 2.0, "cap": 30.0, "gating": 0, "norm": 1}


def _call_values(m):
    """Dim, runtime and integer-param values a call of map ``m`` is made with: the test's sizes,
    raised to the map's minimum and block multiple."""
    values = {"n_tokens": 3, "pos": 2}
    for name, spec in m.raw["dims"].items():
        v = max(DIM_VALUES[name], spec["min"])
        mult = spec.get("multiple_of", 1)
        if m.weight_dtype:
            mult = max(mult, formats.by_name(m.weight_dtype).block_elems if name in ("n_in", "n_embd") else 1)
        values[name] = -(-v // mult) * mult
    values.update({p: int(v) for p, v in PARAM_VALUES.items() if p in m.raw["params"] and m.raw["params"][p]["ctype"] == "int64_t"})
    if "n_head" in values:   # runtime:head_begin / head_end of a head-split kernel: the whole call
        values.update(head_begin=0, head_end=values["n_head"])
    return values


def _scratch_bytes(m):
    """Workspace bytes per scratch buffer of map ``m`` at the values its test call uses."""
    values = _call_values(m)
    return {n: kernels.eval_size(s["bytes"], values) for n, s in m.raw["scratch"].items()}


def _map_call(lib, m, rng, null_arg=None, ws_short=False):
    """Call the kernel of map ``m`` exactly as its ``call`` list says, with buffers sized from the
    map's own shape and scratch expressions. Returns (status, {output port: Guarded})."""
    values = _call_values(m)
    bufs, outs = {}, {}
    for name, (kind, spec) in m.ports().items():
        shape = [kernels.eval_size(d, values) for d in spec["shape"]]
        if kind == "output":
            outs[name] = Guarded(shape, np.int32 if spec["dtype"] == "I32" else np.float32)
        elif spec["dtype"] == "I32":
            bufs[name] = rng.integers(0, values["n_vocab"], size=shape, dtype=np.int32)
        elif kind == "weight" and spec["layout"] == "ggml_blocks":
            # rows of the last dim (a stacked [n_expert, rows, n] tensor is n_expert * rows of them)
            bufs[name] = random_rows(spec["dtype"], math.prod(shape[:-1]), shape[-1], rng,
                                     "bytes" if spec["dtype"] in NO_GGUF_QUANTIZE else "quantize")
        else:
            bufs[name] = rng.standard_normal(shape).astype(np.float32)
    scratch = _scratch_bytes(m)
    ws = {n: np.zeros(max(b, 1), np.uint8) for n, b in scratch.items()}
    fn = getattr(lib, m.function)
    args = []
    for i, src in enumerate(m.call):
        kind, _, name = src.partition(":")
        if kind in ("activation", "weight", "state"):
            a = P(bufs[name])
        elif kind == "output":
            a = outs[name].p
        elif kind in ("dim", "runtime"):
            a = values[name]
        elif kind == "param":
            a = PARAM_VALUES[name]
        elif kind == "scratch":
            a = P(ws[name]) if scratch[name] else None
        else:  # scratch_cap
            a = scratch[name] - (1 if ws_short and scratch[name] else 0)
        args.append(None if i == null_arg else a)
    return fn(*args), outs


def test_every_map_call_abi(lib):
    """Every kernel map, called exactly as its `call` list says with buffers sized by its own shape
    and scratch expressions: succeeds without writing outside its outputs; a NULL for each required
    pointer is -1; a workspace one byte short is -3; nothing is written on error."""
    rng = np.random.default_rng(99)
    maps = kernels.load_maps()
    for m in maps.values():
        if m.selection["isa"] and not cpu_has_avx2():
            continue  # a provider that needs AVX2 cannot run on this CPU
        st, outs = _map_call(lib, m, rng)
        assert st == BU_OK, m.id
        for name, g in outs.items():
            assert g.guards_intact(), f"{m.id}: wrote outside output {name}"
            assert not (g.arr.view(np.uint32) == SENTINEL).any(), f"{m.id}: left part of output {name} unwritten"
        for i, src in enumerate(m.call):
            kind, _, name = src.partition(":")
            required = kind in ("activation", "output", "state") or (
                kind == "weight" and not m.raw["weights"][name].get("optional")) or (
                kind == "scratch" and _scratch_bytes(m)[name] > 0)
            if required:
                st, outs = _map_call(lib, m, rng, null_arg=i)
                assert st == BU_ERR_NULL, f"{m.id}: NULL {src} gave {st}"
                assert all(g.untouched() for g in outs.values()), m.id
        if any(b > 0 for b in _scratch_bytes(m).values()):
            st, outs = _map_call(lib, m, rng, ws_short=True)
            assert st == BU_ERR_WS, m.id
            assert all(g.untouched() for g in outs.values()), m.id
