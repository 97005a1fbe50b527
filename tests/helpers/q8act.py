"""The q8act linear providers' contract in numpy (weights x activations quantized to the weight
format's vec_dot_type, as llama.cpp's CPU backend): activation quantization, integer weights,
the reference output, and test data. Shared by test_kernels_q8act and test_kernels_q8fast."""
from __future__ import annotations

import gguf
import numpy as np
import pytest

from bringup.formats import ggml as formats
from bringup.formats.gguf_file import open_gguf
from bringup.ir.kernel_map_table import Q8ACT_FORMATS

# weight format -> activation format: the format table's vec_dot_type (checked against
# libggml-cpu's own type_traits_cpu in test_vec_dot_types_are_ggml_cpus), for the quantized formats
ACT = {fmt: act for fmt, act in formats.vec_dot_types().items() if fmt in Q8ACT_FORMATS}


# byte offsets of (fp16 block scale, fp16 block min or None) in each block (ggml-common.h)
SCALE_FIELDS = {"Q4_0": (0, None), "Q4_1": (0, 2), "Q5_0": (0, None), "Q5_1": (0, 2), "Q8_0": (0, None),
                "Q2_K": (80, 82), "Q3_K": (108, None), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208, None)}


# quantized activation block in the scratch (kernel maps' scratch.row description): bytes per block
XQ_BYTES = {"Q8_0": 36, "Q8_1": 40, "Q8_K": 292}


ACT_BLOCK = {"Q8_0": 32, "Q8_1": 32, "Q8_K": 256}


FMTS = list(ACT)


def quantize_act(x: np.ndarray, act: str):
    """The contract's activation quantization of fp32 ``x`` [T, n]: (dx [T, nb] f32, q [T, nb, be]
    int64, sx [T, nb] f32 or None, bsums [T, nb, 16] or None)."""
    T, n = x.shape
    be = ACT_BLOCK[act]
    xb = x.reshape(T, n // be, be).astype(np.float32)
    if act in ("Q8_0", "Q8_1"):
        amax = np.abs(xb).max(axis=2)
        d = amax / np.float32(127)
        with np.errstate(divide="ignore"):
            inv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
        q = np.rint(xb * inv[..., None]).astype(np.int64)
        with np.errstate(over="ignore"):   # fp16 overflow to inf is part of the contract
            dx = d.astype(np.float16).astype(np.float32)
            sx = None
            if act == "Q8_1":
                sx = (d * q.sum(axis=2).astype(np.float32)).astype(np.float16).astype(np.float32)
        return dx, q, sx, None
    ax = np.abs(xb)
    first = ax.argmax(axis=2)                       # first index of the largest |x|
    mx = np.take_along_axis(xb, first[..., None], axis=2)[..., 0]
    zero = ax.max(axis=2) == 0
    with np.errstate(divide="ignore"):
        iscale = np.where(zero, np.float32(0), np.float32(-127) / np.where(zero, np.float32(1), mx)).astype(np.float32)
        dx = np.where(zero, np.float32(0), np.float32(1) / np.where(zero, np.float32(1), iscale)).astype(np.float32)
    q = np.minimum(127, np.rint(xb * iscale[..., None])).astype(np.int64)
    bsums = q.reshape(T, n // be, 16, 16).sum(axis=3)
    return dx, q, None, bsums


def _f16_field(blocks: np.ndarray, off: int) -> np.ndarray:
    return blocks[..., off:off + 2].copy().view(np.float16)[..., 0].astype(np.float32)


def _with_fields(blocks: np.ndarray, fields: dict[int, float]) -> np.ndarray:
    b = blocks.copy()
    for off, v in fields.items():
        b[..., off:off + 2] = np.frombuffer(np.float16(v).tobytes(), np.uint8)
    return b


def weight_integers(fmt: str, rows: np.ndarray):
    """(integer weights [R, n] = sub-block scale * q, integer mins per element [R, n] or None,
    d [R, nb], min scale [R, nb] or None) via gguf.quants.dequantize on blocks whose fp16 scales
    are set to 1/0 (the layout's scale fields only; the quant bits are untouched)."""
    f = formats.by_name(fmt)
    R = rows.shape[0]
    nb = rows.shape[1] // f.block_bytes
    blocks = rows.reshape(R, nb, f.block_bytes)
    doff, moff = SCALE_FIELDS[fmt]
    qt = gguf.GGMLQuantizationType[fmt]
    unit = {doff: 1.0} if moff is None else {doff: 1.0, moff: 0.0}
    wint = gguf.quants.dequantize(_with_fields(blocks, unit).reshape(R, -1), qt)
    assert np.array_equal(wint, np.round(wint)), "integer weights must be integers"
    d = _f16_field(blocks, doff)
    if moff is None:
        return wint.astype(np.int64), None, d, None
    mins = None
    if fmt.endswith("_K"):  # w = d*sc*q - dmin*m: scale 0 / min 1 leaves -m
        mins = -gguf.quants.dequantize(_with_fields(blocks, {doff: 0.0, moff: 1.0}).reshape(R, -1), qt)
        mins = mins.astype(np.int64)
    return wint.astype(np.int64), mins, d, _f16_field(blocks, moff)


def reference(fmt: str, x: np.ndarray, rows: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """y [T, R] float32 by the kernel map's contract."""
    act = ACT[fmt]
    be = ACT_BLOCK[act]
    T, n = x.shape
    nb = n // be
    dx, qx, sx, _ = quantize_act(x, act)
    wint, mins, dw, mw = weight_integers(fmt, rows)
    R = rows.shape[0]
    isum = np.einsum("rbk,tbk->trb", wint.reshape(R, nb, be), qx)
    dd = (dw[None, :, :] * dx[:, None, :]).astype(np.float32)           # (dw*dx), one rounding
    term = (dd * isum.astype(np.float32)).astype(np.float32)
    if fmt in ("Q4_1", "Q5_1"):
        term = (term + (mw[None, :, :] * sx[:, None, :]).astype(np.float32)).astype(np.float32)
    elif mins is not None:
        msum = np.einsum("rbk,tbk->trb", mins.reshape(R, nb, be), qx)
        dm = (mw[None, :, :] * dx[:, None, :]).astype(np.float32)
        term = (term - (dm * msum.astype(np.float32)).astype(np.float32)).astype(np.float32)
    y = np.zeros((T, R), dtype=np.float32)
    for b in range(nb):                     # fp32 accumulator, increasing block order
        y = (y + term[:, :, b]).astype(np.float32)
    if bias is not None:
        y = (y + bias[None, :]).astype(np.float32)
    return y


def random_rows(fmt: str, n_rows: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """gguf.quants.quantize of non-uniform floats where gguf can quantize the format, else random
    block bytes with finite fp16 scales (every quant bit pattern)."""
    f = formats.by_name(fmt)
    if not fmt.endswith("_K"):
        w = (rng.standard_normal((n_rows, n)) * np.linspace(0.1, 3.0, n)).astype(np.float32)
        return np.ascontiguousarray(gguf.quants.quantize(w, gguf.GGMLQuantizationType[fmt]))
    nb = n // f.block_elems
    raw = rng.integers(0, 256, size=(n_rows, nb, f.block_bytes), dtype=np.uint8)
    for off in SCALE_FIELDS[fmt]:
        if off is not None:
            raw[:, :, off:off + 2] = rng.uniform(-0.05, 0.05, size=(n_rows, nb)).astype(np.float16).view(np.uint8).reshape(n_rows, nb, 2)
    return np.ascontiguousarray(raw.reshape(n_rows, nb * f.block_bytes))


def activations(rng, T, n):
    """Non-uniform rows: a per-column spread, outliers, an all-zero block and exact ties."""
    x = (rng.standard_normal((T, n)) * np.geomspace(0.01, 5.0, n)).astype(np.float32)
    x[0, :32] = 0.0
    if T > 1:
        x[1, 5] = 40.0
    return x


@pytest.fixture(scope="session")
def q8_real_rows(smollm2_gguf, gemma3_gguf):
    """Real rows per format from the two checkpoints: fmt -> (uint8 rows, n_in)."""
    out = {}
    for path in (smollm2_gguf, gemma3_gguf):
        for t in open_gguf(path).tensors:
            fmt = t.tensor_type.name
            if fmt in ACT and fmt not in out and len(t.shape) == 2:
                out[fmt] = (np.ascontiguousarray(t.data[:16]), int(t.shape[0]))
    assert {"Q4_1", "Q8_0", "Q5_0", "Q4_K", "Q6_K"} <= set(out), sorted(out)
    return out
