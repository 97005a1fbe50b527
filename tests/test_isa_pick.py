"""The measured choice between ISA levels of one contract (csrc/kernels/bu_cpu.c, "the level of
each linear op class"): with avx2 and avx512 both present and BU_ISA unset, each class of
dispatched linear call (format, activations, n_in, decode / prefill) times both levels on its first
calls and keeps the faster. Checked with a test build whose hook makes one level 2 ms slower per
call (kernel_lib.TEST_HOOK_FLAGS, BU_TEST_SLOW_LEVEL): the slowed level is never chosen, every call
- calibrating or not - gives the bits of the forced level, and bu_isa_report says what was chosen
and why. On an AVX2 host without AVX-512 the avx512 level is SIMDe's (as in test_kernels_fast.py),
so the mechanism is tested on every host; BU_ISA still forces one level, unmeasured.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil

import numpy as np
import pytest

from bringup.build import kernel_lib
from tests.helpers.kernels import AVX512_EMULATED, host_levels

P, I64 = ctypes.c_void_p, ctypes.c_int64
N_IN, N_OUT = 256, 96  # a multiple of 256: the K-quant / Q8_K activations too
CALLS = 40              # more than a decode class's 2 x 16 timed calls


@pytest.fixture(scope="module")
def hook_build(tmp_path_factory):
    if "avx2" not in host_levels():
        pytest.fail("this test needs an AVX2 host (the project's hosts all have it)")
    base = kernel_lib.AVX512_EMULATION_FLAGS if AVX512_EMULATED else kernel_lib.DEFAULT_FLAGS
    return kernel_lib.build_kernel_library(tmp_path_factory.mktemp("isa_pick"),
                                           flags=(*base, *kernel_lib.TEST_HOOK_FLAGS)).library


def load(lib_path, tmp_path, name, env):
    """The library from its own copy, loaded with `env` set (read once, at load)."""
    path = tmp_path / f"{name}.so"
    shutil.copy(lib_path, path)
    saved = {k: os.environ.pop(k, None) for k in ("BU_ISA", "BU_TEST_SLOW_LEVEL")}
    try:
        os.environ.update(env)
        lib = ctypes.CDLL(str(path))
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v
    lib.bu_isa_report.restype = ctypes.c_size_t
    lib.bu_isa_report.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return lib


def q4_1_rows(rng):
    """N_OUT random Q4_1 rows (20-byte blocks) with a finite fp16 scale and minimum"""
    w = rng.integers(0, 256, size=(N_OUT * N_IN // 32, 20), dtype=np.uint8)
    w[:, 0:2] = np.full((len(w), 1), 0.01, np.float16).view(np.uint8)
    w[:, 2:4] = np.full((len(w), 1), -0.05, np.float16).view(np.uint8)
    return w.reshape(-1)


def run(lib, fn_name, w, x, n_tokens):
    fn = getattr(lib, fn_name)
    fn.argtypes = [P, P, P, P, I64, I64, I64, P, ctypes.c_size_t]
    ws = np.zeros(1 << 20, np.uint8)
    y = np.zeros(n_tokens * N_OUT, np.float32)
    assert fn(x.ctypes.data, w.ctypes.data, None, y.ctypes.data, n_tokens, N_IN, N_OUT, ws.ctypes.data, ws.nbytes) == 0
    return y


def report(lib) -> dict:
    n = lib.bu_isa_report(None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    assert lib.bu_isa_report(buf, n + 1) == n
    return json.loads(buf.value)


FNS = ("bu_linear_q4_1_fast", "bu_linear_q4_1_q8_1_fast")


def calls(lib, rng_seed=0):
    """CALLS decode and CALLS 8-token calls of each FNS function: their outputs, all the same bits"""
    rng = np.random.default_rng(rng_seed)
    w = q4_1_rows(rng)
    out = {}
    for fn in FNS:
        for n_tokens in (1, 8):
            x = rng.standard_normal(n_tokens * N_IN).astype(np.float32)
            ys = [run(lib, fn, w, x, n_tokens) for _ in range(CALLS)]
            for y in ys[1:]:
                assert np.array_equal(ys[0].view(np.uint32), y.view(np.uint32)), (fn, n_tokens)
            out[fn, n_tokens] = ys[0]
    return out


@pytest.mark.parametrize("slow", ["avx2", "avx512"])
def test_slow_level_avoided_same_bits(hook_build, tmp_path, slow):
    lib = load(hook_build, tmp_path, f"slow_{slow}", {"BU_TEST_SLOW_LEVEL": slow})
    forced = load(hook_build, tmp_path, "forced_avx2", {"BU_ISA": "avx2"})
    got, want = calls(lib), calls(forced)
    for k in want:
        assert np.array_equal(got[k].view(np.uint32), want[k].view(np.uint32)), k
    rep = report(lib)
    assert rep["how"].startswith("measured"), rep
    classes = rep["classes"]
    assert {(c["activations"], c["phase"]) for c in classes} == {(a, p) for a in ("f32", "q8")
                                                                   for p in ("decode", "prefill")}, classes
    other = "avx512" if slow == "avx2" else "avx2"
    for c in classes:
        assert c["format"] == "Q4_1" and c["n_in"] == N_IN, c
        assert c["level"] == other, c
        assert c["ns_per_row"][slow] > c["ns_per_row"][other], c


def test_forced_level_is_not_measured(hook_build, tmp_path):
    lib = load(hook_build, tmp_path, "forced_avx512", {"BU_ISA": "avx512", "BU_TEST_SLOW_LEVEL": "avx512"})
    calls(lib)
    rep = report(lib)
    assert rep["how"] == "forced by BU_ISA" and rep["default"] == "avx512" and rep["classes"] == [], rep


def test_report_sized_like_snprintf(hook_build, tmp_path):
    lib = load(hook_build, tmp_path, "sizing", {})
    calls(lib)
    n = lib.bu_isa_report(None, 0)
    small = ctypes.create_string_buffer(b"x" * 16, 16)
    assert lib.bu_isa_report(small, 16) == n > 16
    assert small.raw[15] == 0 and len(small.value) == 15   # cut, NUL-terminated, never overrun
