"""The dispatched ggml-q8 providers (``linear.<fmt>.q8act.fast``, csrc/kernels/bu_linear_q8fast*.c) at
every ISA level this host has.

Each level is loaded from its own copy of the kernel library with BU_ISA set (tests.helpers.kernels.load).
Per level the relation its map's ``variants`` entry declares is checked against the q8act scalar
provider: ``bitwise`` (level scalar), or the declared bound, computed here in numpy from the
contract's integer parts (test_kernels_q8act's independent expression: activation quantization in
float32 numpy, integer weights from gguf.quants.dequantize). The scalar provider itself is held bit
for bit against that numpy contract in tests/test_kernels_q8act.py. Also: a prefill row equals the
token decoded alone, a row-range call (the runtime's bu_linear_rows) equals the full call, the
status codes are the scalar provider's, and a level the host lacks is refused. On an AVX2 host
without AVX-512 the avx512 level (AVX-512 VNNI) runs in the library whose AVX-512 intrinsics are
SIMDe's code on AVX2 (tests.helpers.kernels.load_level, csrc/kernels/bu_avx512_emulated.h), so its
bits are checked on every host.
"""
from __future__ import annotations

import numpy as np
import pytest

from bringup.formats import ggml as formats
from bringup.ir import kernel_maps as kernels
from tests.helpers.kernels import (AVX512_EMULATED, BU_ERR_ARG, BU_ERR_NULL, BU_ERR_WS, BU_OK, Guarded,
                                   host_levels, levels_under_test, load, load_level)
from tests.helpers.q8act import ACT, ACT_BLOCK, FMTS, activations, quantize_act, random_rows, reference, weight_integers

U = 2.0 ** -24


def fast_fn(fmt: str) -> str:
    return f"bu_linear_{fmt.lower()}_{ACT[fmt].lower()}_fast"


def scalar_fn(fmt: str) -> str:
    return f"bu_linear_{fmt.lower()}_{ACT[fmt].lower()}_scalar"


@pytest.fixture(scope="session")
def q8maps():
    return {m.raw["quant"]["weight"]: m for m in kernels.load_maps().values() if m.id.endswith(".q8act.fast")}


def need(m, T: int, n_in: int) -> int:
    """The map's scratch expression (what the planner allots)."""
    return m.scratch_bytes({"n_tokens": T, "n_in": n_in, "n_out": 1})["row"]


def run(lib, fn, m, x, rows, bias=None, r=None):
    """y [T, n_out] of one call (guards checked); r = (r0, r1): only weight rows r0..r1-1, as
    bu_linear_rows calls a thread's share."""
    T, n_in = x.shape
    n_out = rows.shape[0]
    cap = need(m, T, n_in)
    ws = np.zeros(max(cap, 1), np.uint8)
    y = Guarded((T, n_out))
    r0, r1 = r or (0, n_out)
    rb = rows.shape[1]
    st = getattr(lib, fn)(x.ctypes.data, rows.ctypes.data + r0 * rb, None if bias is None else bias.ctypes.data + 4 * r0,
                          y.p + 4 * r0, T, n_in, r1 - r0, ws.ctypes.data, cap)
    assert st == BU_OK and y.guards_intact(), (fn, st)
    return y.arr.copy()


def magnitude(fmt, x, rows):
    """A [T, R] of the declared bound: sum over blocks of |dw*dx| sum|qw qx| + |dminw*dx| sum|m qx| + |mw sx|."""
    be = ACT_BLOCK[ACT[fmt]]
    T, n = x.shape
    R, nb = rows.shape[0], n // be
    dx, qx, sx, _ = quantize_act(x, ACT[fmt])
    wint, mins, dw, mw = weight_integers(fmt, rows)
    a = np.einsum("rbk,tbk->trb", np.abs(wint).reshape(R, nb, be), np.abs(qx)).astype(np.float64)
    out = np.abs(dw[None].astype(np.float64) * dx[:, None]) * a
    if fmt in ("Q4_1", "Q5_1"):
        out += np.abs(mw[None].astype(np.float64) * sx[:, None])
    elif mins is not None:
        ma = np.einsum("rbk,tbk->trb", np.abs(mins).reshape(R, nb, be), np.abs(qx)).astype(np.float64)
        out += np.abs(mw[None].astype(np.float64) * dx[:, None]) * ma
    return out.sum(axis=2)


def within_bound(v, fmt, x, rows, y, ref, bias):
    c = v["versus_reference"]["bound_coefficients"]
    n = x.shape[1]
    b = 0.0 if bias is None else np.abs(bias.astype(np.float64))
    lim = (c["per_n_in"] * n + c["constant"]) * U * magnitude(fmt, x, rows) + c["output"] * U * (np.abs(ref) + b)
    diff = np.abs(y.astype(np.float64) - ref.astype(np.float64))
    return bool((diff <= lim).all()), float((diff / np.maximum(lim, 1e-300)).max())


def test_maps_declare_levels(q8maps):
    assert sorted(q8maps) == sorted(FMTS)
    for fmt, m in q8maps.items():
        assert m.raw["impl"]["function"] == fast_fn(fmt)
        assert [v["level"] for v in m.raw["variants"]] == ["scalar", "avx2", "avx512"]
        assert m.raw["variants"][0]["versus_reference"] == {"reference": f"linear.{fmt.lower()}.q8act.scalar",
                                                           "relation": "bitwise"}
        assert m.raw["selection"]["equivalence"] == f"linear.{fmt.lower()}.q8act"


@pytest.mark.parametrize("fmt", FMTS)
def test_levels_against_scalar_provider(request, build, tmp_path_factory, q8maps, fmt):
    """Every level of the host: bitwise (scalar) or within the declared bound (avx2) of the q8act
    scalar provider, which equals the numpy contract; token counts across the 32-token pass, odd n_out."""
    rng = np.random.default_rng(sum(map(ord, fmt)))
    be = formats.by_name(fmt).block_elems
    m = q8maps[fmt]
    variants = {v["level"]: v for v in m.raw["variants"]}
    ref_lib = load(build, tmp_path_factory, "scalar")
    for T, nblk, n_out, with_bias in ((1, 3, 9, True), (6, 2, 5, False), (37, 2, 3, True)):
        n = be * nblk
        x = activations(rng, T, n)
        rows = random_rows(fmt, n_out, n, rng)
        bias = rng.standard_normal(n_out).astype(np.float32) if with_bias else None
        ref = run(ref_lib, scalar_fn(fmt), m, x, rows, bias)
        np.testing.assert_array_equal(ref.view(np.uint32), reference(fmt, x, rows, bias).view(np.uint32))
        for level in levels_under_test():
            y = run(load_level(request, tmp_path_factory, level), fast_fn(fmt), m, x, rows, bias)
            if variants[level]["versus_reference"]["relation"] == "bitwise":
                np.testing.assert_array_equal(y.view(np.uint32), ref.view(np.uint32), err_msg=f"{fmt} {level} T={T}")
            else:
                ok, worst = within_bound(variants[level], fmt, x, rows, y, ref, bias)
                assert ok, (fmt, level, T, worst)


def test_real_blocks(request, tmp_path_factory, q8maps, q8_real_rows):
    """Real rows of smollm2 / gemma3: each SIMD level within its bound of the scalar provider, which is
    the numpy contract bit for bit."""
    rng = np.random.default_rng(17)
    for fmt, (rows, n) in q8_real_rows.items():
        x = activations(rng, 5, n)
        ref = reference(fmt, x, rows)
        for level in levels_under_test()[1:]:
            y = run(load_level(request, tmp_path_factory, level), fast_fn(fmt), q8maps[fmt], x, rows)
            v = next(v for v in q8maps[fmt].raw["variants"] if v["level"] == level)
            ok, worst = within_bound(v, fmt, x, rows, y, ref, None)
            assert ok, (fmt, level, worst)


@pytest.mark.parametrize("fmt", ["Q4_1", "Q8_0", "Q5_0", "Q4_K", "Q6_K", "Q3_K"])
def test_prefill_rows_equal_decode_and_row_ranges(request, tmp_path_factory, q8maps, fmt):
    """At every level: each prefill row is bit-identical to the token alone, and calls on row ranges
    (a thread's share) give the full call's bits."""
    rng = np.random.default_rng(23)
    n = 2 * formats.by_name(fmt).block_elems
    x = activations(rng, 35, n)
    rows = random_rows(fmt, 11, n, rng)
    bias = rng.standard_normal(11).astype(np.float32)
    m = q8maps[fmt]
    for level in levels_under_test():
        lib = load_level(request, tmp_path_factory, level)
        y = run(lib, fast_fn(fmt), m, x, rows, bias)
        for t in (0, 1, 4, 31, 32, 34):
            y1 = run(lib, fast_fn(fmt), m, np.ascontiguousarray(x[t:t + 1]), rows, bias)
            np.testing.assert_array_equal(y1[0].view(np.uint32), y[t].view(np.uint32), err_msg=f"{level} t={t}")
        x1 = np.ascontiguousarray(x[:1])
        full = run(lib, fast_fn(fmt), m, x1, rows, bias)
        part = np.concatenate([run(lib, fast_fn(fmt), m, x1, rows, bias, r)[:, r[0]:r[1]]
                               for r in ((0, 3), (3, 8), (8, 11))], axis=1)
        np.testing.assert_array_equal(part.view(np.uint32), full.view(np.uint32), err_msg=level)


@pytest.mark.parametrize("fmt", ["Q4_1", "Q4_K"])
def test_status_codes_equal_the_scalar_providers(request, tmp_path_factory, q8maps, fmt):
    """The same status for the same arguments at every level, and nothing written on an error."""
    rng = np.random.default_rng(2)
    be = formats.by_name(fmt).block_elems
    n, n_out, T = 2 * be, 3, 2
    x = activations(rng, T, n)
    rows = random_rows(fmt, n_out, n, rng)
    cap = need(q8maps[fmt], T, n)
    ws = np.zeros(cap, np.uint8)
    cases = [dict(cap=cap - 1), dict(ws_=0), dict(x_=0), dict(w_=0), dict(n_=n + be // 2), dict(n_=-be),
             dict(T_=-1), dict(o_=-1), dict(n_=2**31 * be), dict(T_=0), dict(o_=0, w_=0), dict()]
    for level in levels_under_test():
        lib = load_level(request, tmp_path_factory, level)
        for c in cases:
            y = Guarded((T, n_out))
            st = getattr(lib, fast_fn(fmt))(c.get("x_", x.ctypes.data), c.get("w_", rows.ctypes.data), None, y.p,
                                            c.get("T_", T), c.get("n_", n), c.get("o_", n_out),
                                            c.get("ws_", ws.ctypes.data), c.get("cap", cap))
            want = {"cap": BU_ERR_WS, "ws_": BU_ERR_NULL, "x_": BU_ERR_NULL, "w_": BU_ERR_NULL}
            expect = BU_OK if not c or c.get("T_") == 0 or c.get("o_") == 0 else want.get(next(iter(c)), BU_ERR_ARG)
            assert st == expect, (level, c, st)
            assert y.guards_intact() and (y.untouched() if c else True), (level, c)


def test_missing_level_is_refused(build, tmp_path_factory):
    """A BU_ISA level above the host's: bu_isa_name says invalid, every call returns BU_ERR_ARG and
    writes nothing."""
    missing = [lv for lv in ("avx2", "avx512") if lv not in host_levels()]
    if not missing:
        pytest.skip("this host has every ISA level; no level to refuse")
    lib = load(build, tmp_path_factory, missing[0])
    assert lib.bu_isa_name() == b"invalid"
    x = np.ones((1, 32), np.float32)
    rows = random_rows("Q4_1", 2, 32, np.random.default_rng(0))
    ws = np.zeros(32 * 40, np.uint8)
    y = Guarded((1, 2))
    assert lib.bu_linear_q4_1_q8_1_fast(x.ctypes.data, rows.ctypes.data, None, y.p, 1, 32, 2, ws.ctypes.data,
                                        ws.size) == BU_ERR_ARG
    assert y.untouched()


def test_avx512_level_same_bits_as_avx2(request, build, tmp_path_factory, q8maps):
    """avx512 (VNNI where present; always in the emulated library) = avx2 bit for bit, as both
    variants declare; on a host without AVX-512, the avx512 code runs on SIMDe (AVX512_EMULATED)."""
    rng = np.random.default_rng(29)
    for fmt in FMTS:
        n = 2 * formats.by_name(fmt).block_elems
        x = activations(rng, 9, n)
        rows = random_rows(fmt, 6, n, rng)
        a = run(load(build, tmp_path_factory, "avx2"), fast_fn(fmt), q8maps[fmt], x, rows)
        b = run(load_level(request, tmp_path_factory, "avx512"), fast_fn(fmt), q8maps[fmt], x, rows)
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32), err_msg=fmt)
    if not AVX512_EMULATED:
        assert load(build, tmp_path_factory, None).bu_isa_name() == b"avx512"
