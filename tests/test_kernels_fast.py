"""The dispatched linear providers (``linear.<fmt>.fast``, csrc/kernels/bu_linear_fast*.c) at every ISA
level this host has, against the reference providers and against numpy + gguf.quants.

A level is forced with the environment variable BU_ISA, read once when the library loads; each level
gets its own copy of the library file so that one process can hold all of them. Per level the
declared relation of the map's ``variants`` entry is checked: ``bitwise`` against the reference
provider, or the declared bound (``bound_coefficients``); SIMD levels that declare ``same_bits_as``
each other are compared bit for bit when the host has both. Independently of the C reference, every
level is held against numpy float64 of ``gguf.quants.dequantize``. A level the host lacks must be
refused (bu_isa_check's message, BU_ERR_ARG from every kernel, nothing written). On a host with
AVX-512 the avx512 level must exist and be the default: the test fails, never skips, when it is not.
On an AVX2 host without AVX-512 the avx512 level's code is still tested, bit for bit against avx2:
in a second library whose AVX-512 intrinsics are SIMDe's code on AVX2
(``kernel_lib.AVX512_EMULATION_FLAGS``, csrc/kernels/bu_avx512_emulated.h; test ids
``avx512-emulated``). That checks its arithmetic on every host; its speed needs the hardware.
"""
from __future__ import annotations

import ctypes
import itertools

import numpy as np
import pytest

from bringup.formats import ggml as formats
from bringup.ir import kernel_maps as kernels
from bringup.ir import resolve
from bringup.ir.kernel_map_table import FAST_PANEL_BYTES
from tests.helpers.kernels import (AVX512_EMULATED, BU_ERR_ARG, BU_OK, FMTS, LEVELS, P, U, Guarded, deq_ref,
                                   host_levels, level_params, levels_under_test, load, load_level,
                                   random_rows)


@pytest.fixture(scope="session")
def fast_maps():
    return {m.raw["quant"]["weight"]: m.raw for m in kernels.load_maps().values()
            if m.op == "linear" and m.id.endswith(".fast")}


def linear(lib, fn, x, w, bias, n_in, n_out, rows=None):
    """y of one call of ``fn`` (guards checked); rows = (r0, r1) calls on that row range only, as the
    runtime's bu_linear_rows does (weight rows, bias and y offset by r0)."""
    T = x.shape[0]
    y = Guarded((T, n_out))
    ws = np.zeros(n_in * fast_panel_rows(n_in), np.float32)   # the maps' scratch "panel": n_in * 4 * rows bytes
    row_bytes = w.shape[1] if w.dtype == np.uint8 else w.shape[1] * w.itemsize
    if rows is None:
        st = getattr(lib, fn)(P(x), P(w), P(bias), y.p, T, n_in, n_out, P(ws), ws.nbytes)
    else:
        r0, r1 = rows
        assert T == 1
        st = getattr(lib, fn)(P(x), P(w) + r0 * row_bytes, None if bias is None else P(bias) + 4 * r0,
                              y.p + 4 * r0, 1, n_in, r1 - r0, P(ws), ws.nbytes)
    assert st == BU_OK and y.guards_intact(), (fn, st)
    return y.arr.copy()


def fast_panel_rows(n_in: int) -> int:
    """Weight rows of the fast providers' many-token panel: the maps' declared scratch / (4 n_in)."""
    return kernels.eval_size(FAST_PANEL_BYTES, {"n_in": n_in}) // (4 * n_in)


def bound(coef, n_in, x, wd, ref, bias):
    """The declared bound of a map variant: (a * n_in + c) * 2^-24 * sum_k |x_k w_k| + o * 2^-24 * (|ref| + |bias|)."""
    s = np.abs(x.astype(np.float64)) @ np.abs(wd.astype(np.float64)).T
    b = 0.0 if bias is None else np.abs(bias.astype(np.float64))
    return (coef["per_n_in"] * n_in + coef["constant"]) * U * s + coef["output"] * U * (np.abs(ref) + b)


def cases(fmt, rng):
    """(weights, n_in) cases: random block bytes, quantized floats where gguf can quantize, odd shapes."""
    be = formats.by_name(fmt).block_elems
    out = []
    for n_blocks, n_out in ((3, 13), (1, 5)) if be == 256 else ((18, 13), (1, 6)):
        n_in = be * n_blocks if be > 1 else 32 * n_blocks + 13    # F formats: a tail of 13
        out.append((random_rows(fmt, n_out, n_in, rng, "bytes"), n_in))
    if fmt in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "BF16"):
        out.append((random_rows(fmt, 9, 32 * 7, rng, "quantize"), 32 * 7))
    # more rows than one many-token panel, the last one partial, at three panel heights (64, 48 and 16
    # rows: fast_panel_rows); n_in a multiple of 32, so F formats take the panel path too
    for n_in in (max(be, 32) * 2, 768, 1536):
        out.append((random_rows(fmt, 2 * fast_panel_rows(n_in) + 5, n_in, rng, "bytes"), n_in))
    return out


def test_isa_levels(build, tmp_path_factory, fast_maps):
    """The default level is the best the host has; every lower level can be forced; a level the host
    lacks, or an unknown name, is refused with a message and every fast kernel returns BU_ERR_ARG. Every
    map declares all three levels, so an AVX-512 host without the avx512 variant fails here."""
    have = host_levels()
    print(f"host ISA levels: {have}; fast variants tested at: {levels_under_test()}"
          f"{' (avx512 emulated)' if AVX512_EMULATED else ''}")
    default = load(build, tmp_path_factory, None)
    assert default.bu_isa_name().decode() == have[-1]
    for fmt, m in fast_maps.items():
        assert [v["level"] for v in m["variants"]] == list(LEVELS), m["id"]
    err = ctypes.create_string_buffer(200)
    for level in LEVELS:
        lib = load(build, tmp_path_factory, level)
        if level in have:
            assert lib.bu_isa_name().decode() == level and lib.bu_isa_check(err, 200) == BU_OK
            continue
        assert lib.bu_isa_name().decode() == "invalid"
        assert lib.bu_isa_check(err, 200) == BU_ERR_ARG
        assert f"BU_ISA={level}" in err.value.decode() and "only up to" in err.value.decode()
        x = np.ones((1, 64), np.float32)
        w = random_rows("Q8_0", 2, 64, np.random.default_rng(0))
        y = Guarded((1, 2))
        ws = np.zeros(64, np.float32)
        assert lib.bu_linear_q8_0_fast(P(x), P(w), None, y.p, 1, 64, 2, P(ws), 256) == BU_ERR_ARG
        assert y.untouched()
    bogus = load(build, tmp_path_factory, "sse9")
    assert bogus.bu_isa_name().decode() == "invalid" and bogus.bu_isa_check(err, 200) == BU_ERR_ARG
    assert "not an ISA level" in err.value.decode()


@pytest.mark.parametrize("level", level_params())
@pytest.mark.parametrize("fmt", FMTS)
def test_fast_against_reference(request, build, tmp_path_factory, fast_maps, real_rows, level, fmt):
    """Every level against the reference provider (bitwise or within the declared bound) and against
    numpy float64 of gguf.quants.dequantize; a prefill row equals the same token alone; any row range
    gives the rows of the full call (bu_linear_rows' split); bit-identical levels agree bit for bit."""
    lib = load_level(request, tmp_path_factory, level)
    ref_lib = load(build, tmp_path_factory, "scalar")
    var = {v["level"]: v for v in fast_maps[fmt]["variants"]}[level]
    rel = var["versus_reference"]
    fn, ref_fn = f"bu_linear_{fmt.lower()}_fast", f"bu_linear_{fmt.lower()}_scalar"
    rng = np.random.default_rng(1234)
    todo = cases(fmt, rng) + ([real_rows[fmt]] if fmt in real_rows else [])
    for w, n_in in todo:
        n_out = w.shape[0]
        wd = deq_ref(fmt, w)
        for T in (1, 3, 9, 37):
            x = (rng.standard_normal((T, n_in)) * np.linspace(0.1, 5, n_in)).astype(np.float32)
            bias = rng.standard_normal(n_out).astype(np.float32) if T in (3, 37) else None
            y = linear(lib, fn, x, w, bias, n_in, n_out)
            y_ref = linear(ref_lib, ref_fn, x, w, bias, n_in, n_out)
            exact = x.astype(np.float64) @ wd.astype(np.float64).T + (0 if bias is None else bias)
            if rel["relation"] == "bitwise":
                np.testing.assert_array_equal(y.view(np.uint32), y_ref.view(np.uint32))
            else:
                err = np.abs(y.astype(np.float64) - y_ref)
                assert (err <= bound(rel["bound_coefficients"], n_in, x, wd, y_ref, bias)).all(), (fmt, T, err.max())
            # independent of the C reference: numpy float64 of gguf's dequantization, with the
            # reference map's tolerance (which covers both the lanes8 and the lanes16fma order)
            tol = (n_in / 8 + 8) * U * (np.abs(x.astype(np.float64)) @ np.abs(wd.astype(np.float64)).T) \
                + 2 * U * (np.abs(exact) + (0 if bias is None else np.abs(bias)))
            assert (np.abs(y - exact) <= tol).all(), (fmt, T)
            # the order does not depend on n_tokens: every token row (the micro-kernels' tiles and
            # edges) equals that token alone
            for t in range(T):
                one = linear(lib, fn, x[t:t + 1].copy(), w, bias, n_in, n_out)
                np.testing.assert_array_equal(one.view(np.uint32), y[t:t + 1].view(np.uint32), err_msg=f"{fmt} T={T} t={t}")
            if T == 1:
                r0, r1 = 1, max(2, n_out - 2)
                part = linear(lib, fn, x, w, bias, n_in, n_out, rows=(r0, r1))
                np.testing.assert_array_equal(part[:, r0:r1].view(np.uint32), y[:, r0:r1].view(np.uint32))
            for other in var.get("same_bits_as", []):
                if other in levels_under_test():
                    y_o = linear(load_level(request, tmp_path_factory, other), fn, x, w, bias, n_in, n_out)
                    np.testing.assert_array_equal(y.view(np.uint32), y_o.view(np.uint32))


@pytest.mark.parametrize("level", level_params())
@pytest.mark.parametrize("fmt", FMTS)
def test_fast_decoders_give_the_reference_weights(request, tmp_path_factory, level, fmt):
    """Each level's decoder yields gguf.quants' weights exactly: with x = the identity (n_in tokens,
    the many-token path) y[t, r] = 1 * w[r, t] + zeros, so y = W^T; with one one-hot token (the
    one-token path: adjacent or split 4-row groups, single tail rows) y = W's column k. Compared as
    values, so a zero may be +0 where the reference has -0 (bu_fast_deq.h: q * d - 16d)."""
    lib = load_level(request, tmp_path_factory, level)
    fn = f"bu_linear_{fmt.lower()}_fast"
    rng = np.random.default_rng(77)
    for w, n_in in cases(fmt, rng):
        n_out = w.shape[0]
        wd = deq_ref(fmt, w)
        y = linear(lib, fn, np.eye(n_in, dtype=np.float32), w, None, n_in, n_out)
        assert np.array_equal(y, wd.T), (fmt, n_in, n_out)
        for k in sorted({0, 17, n_in - 1}):
            x = np.zeros((1, n_in), np.float32)
            x[0, k] = 1.0
            y1 = linear(lib, fn, x, w, None, n_in, n_out)
            assert np.array_equal(y1[0], wd[:, k]), (fmt, k)


@pytest.mark.parametrize("level", level_params())
def test_fast_status_codes_equal_reference(request, tmp_path_factory, level):
    """Same argument checking as the reference at every level: workspace (each at the capacity its
    map declares: the reference one row, the fast provider the panel), block multiple, NULL,
    aliasing, empty calls; nothing written on error."""
    lib = load_level(request, tmp_path_factory, level)
    rng = np.random.default_rng(5)
    for fmt, n_in in itertools.product(("Q4_1", "Q4_K", "F32"), (256, 768, 1536)):   # panels of 64, 48, 16 rows
        fast, ref = getattr(lib, f"bu_linear_{fmt.lower()}_fast"), getattr(lib, f"bu_linear_{fmt.lower()}_scalar")
        w = random_rows(fmt, 3, n_in, rng, "bytes")
        x = np.ones((2, n_in), np.float32)
        ws = np.zeros(n_in * fast_panel_rows(n_in), np.float32)   # the maps' scratch "panel": n_in * 4 * rows bytes
        need_ref = 0 if fmt == "F32" else n_in * 4
        need = 0 if fmt == "F32" else n_in * 4 * fast_panel_rows(n_in)

        def calls(need):
            return [(P(x), P(w), None, 2, n_in, 3, P(ws), max(need - 1, 0)),
                    (P(x), P(w), None, 2, n_in + 1, 3, P(ws), need + 4),
                    (None, P(w), None, 2, n_in, 3, P(ws), need),
                    (P(x), P(w), None, 0, n_in, 3, P(ws), need),
                    (P(x), P(w), None, 2, n_in, 3, P(ws), need)]
        for (x_p, w_p, b_p, T, ni, no, ws_p, cap), ref_args in zip(calls(need), calls(need_ref)):
            y1, y2 = Guarded((2, 3)), Guarded((2, 3))
            st = fast(x_p, w_p, b_p, y1.p, T, ni, no, ws_p, cap)
            assert st == ref(*ref_args[:3], y2.p, *ref_args[3:])
            assert st == BU_OK or y1.untouched()
        # y overlapping x is rejected
        assert fast(P(x), P(w), None, P(x), 1, n_in, 3, P(ws), need) == BU_ERR_ARG


def test_resolution_picks_the_dispatched_provider():
    """With the real maps, a fp32-activation linear op resolves to exactly one provider, the dispatched
    one; the reference it runs at level scalar is rejected with that reason. With the dispatched map
    disabled, the reference is chosen again (nothing else changes)."""
    maps = [m for m in kernels.load_maps().values() if m.op == "linear"]
    for fmt in ("Q4_1", "Q8_0", "Q4_K", "F16"):
        n_in = formats.by_name(fmt).block_elems * 256 if fmt != "F16" else 96
        tensors = {"x": {"kind": "activation", "dtype": "F32", "shape": [4, n_in]},
                   "w": {"kind": "weight", "dtype": fmt, "shape": [8, n_in]},
                   "y": {"kind": "activation", "dtype": "F32", "shape": [4, 8]}}
        op = {"id": "layer.0.attn_q", "op": "linear", "inputs": {"x": "x"}, "weights": {"w": "w"},
              "outputs": {"y": "y"}, "state": {}, "dims": {"n_tokens": 4, "n_in": n_in, "n_out": 8},
              "params": {}, "variant": None}
        sel = resolve.resolve_op(op, tensors, maps, "prefill")
        fast, ref = f"linear.{fmt.lower()}.fast", f"linear.{fmt.lower()}.scalar"
        assert sel["chosen"] == fast and [c["id"] for c in sel["candidates"] if c["accepted"]] == [fast]
        assert "dispatched provider" in {c["id"]: c for c in sel["candidates"]}[ref]["reasons"][0]
        off = [m if m.id != fast else kernels.KernelMap(m.id, m.op, m.interface, m.path, {
            **m.raw, "selection": {**m.raw["selection"], "status": "disabled"}}) for m in maps]
        assert resolve.resolve_op(op, tensors, off, "prefill")["chosen"] == ref
