"""The C kernel library under test (csrc/kernels, ``bringup.build.kernel_lib``): its status codes,
outputs guarded by sentinel elements, the library loaded once per ISA level, and weight rows to feed
it (random in every format, real ones from the two checkpoints). Shared by the kernel tests."""
from __future__ import annotations

import ctypes
import os
import shutil

import gguf
import numpy as np
import pytest

from bringup.build import kernel_lib
from bringup.formats import ggml as formats
from bringup.formats.gguf_file import open_gguf
from bringup.ir import kernel_maps as kernels

# ----------------------------------------------------------------------------- status codes, guards

#: status codes of every kernel (csrc/include/bu_kernels.h)
BU_OK, BU_ERR_NULL, BU_ERR_ARG, BU_ERR_WS = 0, -1, -2, -3
GUARD = 16
SENTINEL = 0x7FC0DEAD  # a quiet-NaN bit pattern no kernel computes
U = 2.0 ** -24         # fp32 unit roundoff

_CTYPES = {"int64_t": ctypes.c_int64, "size_t": ctypes.c_size_t, "float": ctypes.c_float}
FMTS = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
        "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0"]
# formats gguf.quants dequantizes but cannot quantize: tests use random valid blocks for them
NO_GGUF_QUANTIZE = {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"}
# byte offsets of the fp16 scale fields in each block (ggml-common.h), to make random blocks finite
F16_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
              "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
              "IQ4_NL": [0], "IQ4_XS": [0], "TQ1_0": [52], "TQ2_0": [64]}


def P(a):
    """Address of a C-contiguous numpy array; None (NULL) passes through."""
    if a is None:
        return None
    if isinstance(a, Guarded):
        return a.p
    assert a.flags["C_CONTIGUOUS"]
    return a.ctypes.data


class Guarded:
    """An fp32/int32 output with GUARD sentinel elements on both sides."""

    def __init__(self, shape, dtype=np.float32):
        self.shape = tuple(int(s) for s in shape)
        n = int(np.prod(self.shape, dtype=np.int64))
        self.buf = np.empty(n + 2 * GUARD, dtype=dtype)
        self.buf.view(np.uint32)[:] = SENTINEL
        self.arr = self.buf[GUARD:GUARD + n].reshape(self.shape)
        self.p = self.buf.ctypes.data + GUARD * self.buf.itemsize

    def guards_intact(self) -> bool:
        v = self.buf.view(np.uint32)
        return bool((v[:GUARD] == SENTINEL).all() and (v[-GUARD:] == SENTINEL).all())

    def untouched(self) -> bool:
        return bool((self.buf.view(np.uint32) == SENTINEL).all())


def qtype(fmt: str) -> gguf.GGMLQuantizationType:
    return gguf.GGMLQuantizationType[fmt]


def cname(fmt: str) -> str:
    return fmt.lower()


def random_rows(fmt: str, n_rows: int, n: int, rng: np.random.Generator, how: str = "quantize") -> np.ndarray:
    """``n_rows`` rows of ``n`` weights in ``fmt`` as uint8 [n_rows, row_bytes].

    how="quantize": gguf.quants.quantize of non-uniform floats (formats gguf can quantize);
    how="bytes": uniformly random block bytes with finite fp16 scales (every bit pattern of the
    quant fields, including those no quantizer emits).
    """
    f = formats.by_name(fmt)
    if fmt == "F32":
        return np.ascontiguousarray(rng.standard_normal((n_rows, n)).astype(np.float32)).view(np.uint8)
    if fmt == "F16":
        return np.ascontiguousarray(rng.standard_normal((n_rows, n)).astype(np.float16)).view(np.uint8)
    if how == "quantize":
        x = (rng.standard_normal((n_rows, n)) * np.linspace(0.1, 3.0, n)).astype(np.float32)
        return np.ascontiguousarray(gguf.quants.quantize(x, qtype(fmt)))
    nb = n // f.block_elems
    raw = rng.integers(0, 256, size=(n_rows, nb, f.block_bytes), dtype=np.uint8)
    if fmt == "BF16":
        # keep exponents finite: random sign/mantissa, exponent near 1.0
        v = rng.standard_normal((n_rows, n)).astype(np.float32).view(np.uint32)
        bits = (v >> 16).astype(np.uint16) ^ rng.integers(0, 128, size=(n_rows, n), dtype=np.uint16)
        return np.ascontiguousarray(bits).view(np.uint8)
    for off in F16_FIELDS[fmt]:
        scale = (rng.uniform(-0.05, 0.05, size=(n_rows, nb))).astype(np.float16)
        raw[:, :, off:off + 2] = scale.view(np.uint8).reshape(n_rows, nb, 2)
    return raw.reshape(n_rows, nb * f.block_bytes)


def deq_ref(fmt: str, rows: np.ndarray) -> np.ndarray:
    """gguf.quants' dequantization, fp32 [n_rows, n]."""
    if fmt == "F32":
        return rows.view(np.float32)
    return gguf.quants.dequantize(rows, qtype(fmt)).astype(np.float32)


def bind_kernels(cdll: ctypes.CDLL) -> ctypes.CDLL:
    """``cdll`` with every kernel of bu_kernels.h typed (int status, pointer / int64 / size_t / float
    arguments) so ctypes checks each call's arity."""
    for name, decl in kernels.header_kernels().items():
        fn = getattr(cdll, name)
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p if "*" in t else _CTYPES[t] for t, _ in kernels.parse_params(decl)]
    return cdll


# ----------------------------------------------------------------------------- the library per ISA level

LEVELS = ("scalar", "avx2", "avx512")
LEVEL_FEATURES = {"scalar": set(), "avx2": {"avx2", "fma", "f16c"},
                  "avx2_512": {"avx512f", "avx512bw", "avx512vl"}}


def host_flags() -> set[str]:
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def host_levels() -> list[str]:
    """The levels this CPU supports, lowest first (the CPUID features of the maps' variants)."""
    f = host_flags()
    out = ["scalar"]
    if LEVEL_FEATURES["avx2"] <= f:
        out.append("avx2")
        if LEVEL_FEATURES["avx2_512"] <= f:
            out.append("avx512")
    return out


#: avx512 is tested on SIMDe (the emulated library) when the host has avx2 but not avx512
AVX512_EMULATED = host_levels()[-1] == "avx2"


def levels_under_test() -> list[str]:
    """The host's levels, and avx512 (emulated) on an AVX2 host without it."""
    return host_levels() + (["avx512"] if AVX512_EMULATED else [])


def level_params() -> list:
    """levels_under_test() as pytest parameters, the emulated one named so in the test id."""
    return [pytest.param(lv, id="avx512-emulated" if lv == "avx512" and AVX512_EMULATED else lv)
            for lv in levels_under_test()]


@pytest.fixture(scope="session")
def build(tmp_path_factory):
    """The kernel library (every provider, dispatched and reference) built once into a temporary folder."""
    return kernel_lib.build_kernel_library(tmp_path_factory.mktemp("kernels"))


@pytest.fixture(scope="session")
def emulated_build(tmp_path_factory):
    """The kernel library with the avx512 files on SIMDe (a compile error if SIMDe is missing)."""
    return kernel_lib.build_kernel_library(tmp_path_factory.mktemp("kernels_fast_avx512emu"),
                                           flags=kernel_lib.AVX512_EMULATION_FLAGS)


_LIBS: dict[str | None, ctypes.CDLL] = {}


def load(build, tmp_path_factory, level: str | None, key: str | None = None) -> ctypes.CDLL:
    """The kernel library loaded with BU_ISA=level (None: unset), from its own copy of the file;
    ``key`` names that copy when one level is loaded from two libraries (default: the level)."""
    key = key or level
    if key in _LIBS:
        return _LIBS[key]
    path = tmp_path_factory.mktemp(f"isa_{key or 'default'}") / "libbu_kernels.so"
    shutil.copy(build.library, path)
    old = os.environ.pop("BU_ISA", None)
    try:
        if level is not None:
            os.environ["BU_ISA"] = level
        cdll = ctypes.CDLL(str(path))
    finally:
        os.environ.pop("BU_ISA", None)
        if old is not None:
            os.environ["BU_ISA"] = old
    bind_kernels(cdll)
    cdll.bu_isa_name.restype = ctypes.c_char_p
    cdll.bu_isa_check.restype = ctypes.c_int
    cdll.bu_isa_check.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    _LIBS[key] = cdll
    return cdll


def load_level(request, tmp_path_factory, level: str) -> ctypes.CDLL:
    """The library to test ``level`` with: the emulated one for avx512 on an AVX2 host (asserted to
    have chosen avx512), else the real build."""
    if level == "avx512" and AVX512_EMULATED:
        lib = load(request.getfixturevalue("emulated_build"), tmp_path_factory, level, key="avx512-emulated")
        assert lib.bu_isa_name() == b"avx512", lib.bu_isa_name()
        return lib
    return load(request.getfixturevalue("build"), tmp_path_factory, level)


# ----------------------------------------------------------------------------- real GGUF blocks

@pytest.fixture(scope="session")
def real_rows(smollm2_gguf, gemma3_gguf):
    """A few real rows per format present in the two checkpoints: fmt -> (uint8 rows, n)."""
    out = {}
    for path in (smollm2_gguf, gemma3_gguf):
        for t in open_gguf(path).tensors:   # cached reader, shared with the other tests
            fmt = t.tensor_type.name
            if fmt in FMTS and fmt != "F32" and fmt not in out and len(t.shape) == 2:
                rows = np.ascontiguousarray(t.data[:24])
                out[fmt] = (rows, int(t.shape[0]))
    assert {"Q4_1", "Q8_0", "Q5_0", "Q4_K", "Q6_K"} <= set(out), sorted(out)
    return out
