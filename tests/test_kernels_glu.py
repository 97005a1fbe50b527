"""The dispatched GLU gates ``swiglu.f32.fast`` and ``geglu.f32.fast`` (csrc/kernels/bu_glu_fast.c,
bu_glu_avx2.c, bu_simd_exp.h) at every ISA level this host has (tests.helpers.kernels.load).

Per level: against numpy float64 of the formula (SwiGLU ``g sigmoid(g) up``; GeGLU with the tanh
GELU ``0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) up``) within the declared bound's terms
(the exact value is within them of both providers); against the scalar provider bit for bit at level
scalar and within the map's ``bound_coefficients`` at avx2 / avx512; tails (counts not a multiple
of 8), in place on either input, extreme gates (+-100, +-88, 0, -0, tiny), status codes equal to the
reference's, and an invalid ISA level refused with nothing written.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from bringup.ir import kernel_maps as kernels
from tests.helpers.kernels import BU_ERR_ARG, BU_ERR_NULL, BU_OK, P, U, Guarded, host_levels, load

OPS = ("swiglu", "geglu")


def exact(op: str, g: np.ndarray, u: np.ndarray) -> np.ndarray:
    g64, u64 = g.astype(np.float64), u.astype(np.float64)
    if op == "swiglu":
        return g64 / (1.0 + np.exp(-g64)) * u64
    return 0.5 * g64 * (1.0 + np.tanh(math.sqrt(2 / math.pi) * (g64 + 0.044715 * g64 ** 3))) * u64


def gates(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    g = (rng.standard_normal(n) * 4).astype(np.float32)
    special = np.array([0.0, -0.0, 1e-30, -1e-30, 100.0, -100.0, 88.5, -88.5, 87.0, -87.0, 20.0, -20.0, 5.5, -5.5,
                        3.0, -3.0], np.float32)
    g[:len(special)] = special[:n]
    u = rng.standard_normal(n).astype(np.float32)
    return g, u


def call(lib, fn, g, u, T, n, inplace=None):
    if inplace is None:
        y = Guarded((T, n))
        st = getattr(lib, fn)(P(g), P(u), y.p, T, n, None, 0)
        assert st == BU_OK and y.guards_intact()
        return y.arr.copy()
    g2, u2 = g.copy(), u.copy()
    out = g2 if inplace == "gate" else u2
    assert getattr(lib, fn)(P(g2), P(u2), P(out), T, n, None, 0) == BU_OK
    return out


@pytest.fixture(scope="module")
def fast_maps():
    maps = kernels.load_maps()
    return {op: maps[f"{op}.f32.fast"].raw for op in OPS}


@pytest.mark.parametrize("level", host_levels())
@pytest.mark.parametrize("op", OPS)
def test_fast_glu_against_numpy_and_reference(build, tmp_path_factory, fast_maps, level, op):
    lib = load(build, tmp_path_factory, level)
    rng = np.random.default_rng(11)
    var = {v["level"]: v for v in fast_maps[op]["variants"]}[level]
    rel = var["versus_reference"]
    for T, n in ((1, 1), (1, 7), (3, 29), (2, 6912), (5, 1536)):
        g, u = gates(rng, T * n)
        g, u = g.reshape(T, n), u.reshape(T, n)
        y = call(lib, f"bu_{op}_f32_fast", g, u, T, n)
        ref = call(lib, f"bu_{op}_f32_scalar", g, u, T, n)
        ex = exact(op, g, u)
        gu = np.abs(g.astype(np.float64) * u)
        # the exact value: within the bound's terms of the fast provider
        assert (np.abs(y - ex) <= U * (12 * np.abs(ex) + 2 * gu) + 1e-45).all(), (op, level, T, n)
        if rel["relation"] == "bitwise":
            np.testing.assert_array_equal(y.view(np.uint32), ref.view(np.uint32))
        else:
            c = rel["bound_coefficients"]
            err = np.abs(y.astype(np.float64) - ref)
            assert (err <= U * (c["output"] * np.abs(ref) + c["gate_up"] * gu) + 1e-45).all(), (op, level, err.max())
        for side in ("gate", "up"):
            np.testing.assert_array_equal(call(lib, f"bu_{op}_f32_fast", g, u, T, n, side).view(np.uint32),
                                          y.view(np.uint32))


@pytest.mark.parametrize("level", host_levels())
@pytest.mark.parametrize("op", OPS)
def test_fast_glu_status_codes_equal_reference(build, tmp_path_factory, level, op):
    lib = load(build, tmp_path_factory, level)
    fast, ref = getattr(lib, f"bu_{op}_f32_fast"), getattr(lib, f"bu_{op}_f32_scalar")
    g = np.ones((2, 8), np.float32)
    u = np.ones((2, 8), np.float32)
    y = Guarded((2, 8))
    for args in ((P(g), P(u), y.p, -1, 8), (P(g), P(u), y.p, 2, -8), (None, P(u), y.p, 2, 8), (P(g), None, y.p, 2, 8),
                 (P(g), P(u), None, 2, 8), (P(g), P(u), P(g) + 4, 2, 8), (P(g), P(u), y.p, 0, 8)):
        st = fast(*args, None, 0)
        assert st == ref(*args, None, 0) and st in (BU_OK, BU_ERR_ARG, BU_ERR_NULL), args
    assert y.untouched()


@pytest.mark.parametrize("op", OPS)
def test_invalid_isa_level_is_refused(build, tmp_path_factory, op):
    lib = load(build, tmp_path_factory, "sse9")
    g = np.ones((1, 8), np.float32)
    y = Guarded((1, 8))
    assert getattr(lib, f"bu_{op}_f32_fast")(P(g), P(g), y.p, 1, 8, None, 0) == BU_ERR_ARG
    assert y.untouched()
