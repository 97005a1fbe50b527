"""Q8 activation rounding: the values ggml's 8-bit activation blocks represent (Q8_0, Q8_1, Q8_K).

llama.cpp's CPU backend rounds a mat-mul's float activations to the weight type's
``vec_dot_type`` before its integer dot products; the reference applies the same rounding, written
from the block definitions in ggml-common.h, to run an op under a program's activation contract.
"""
from __future__ import annotations

import numpy as np

from bringup.core.errors import BringupError

#: Activation dtypes a linear op can run with: float, or one of the Q8 block formats.
ACTIVATION_DTYPES = ("F32", "Q8_0", "Q8_1", "Q8_K")


_Q8_BLOCK = {"Q8_0": 32, "Q8_1": 32, "Q8_K": 256}


def _q8_blocks(x: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x [..., n] -> (q float64 [N, block] (integers), d float32 [N, 1] (unrounded), d' float64 [N, 1]
    (the stored scale)), N = x.size / block, blocks in row-major order."""
    block = _Q8_BLOCK.get(fmt)
    if block is None:
        raise BringupError(f"q8_activation: unknown activation format {fmt!r}")
    if x.shape[-1] % block:
        raise BringupError(f"q8_activation: width {x.shape[-1]} is not a multiple of {fmt}'s block {block}")
    b = np.asarray(x, dtype=np.float32).reshape(-1, block)
    amax = np.abs(b).max(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = (amax / np.float32(127)).astype(np.float32)
        inv = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint(b * inv).astype(np.float64)
    stored = d.astype(np.float16) if fmt != "Q8_K" else d
    return q, d, stored.astype(np.float64)


def q8_activation(x: np.ndarray, fmt: str) -> np.ndarray:
    """The values a Q8 activation block format represents for ``x`` (float [..., n], n a multiple
    of the block), as float64, same shape.

    Per block of 32 (Q8_0, Q8_1) or 256 (Q8_K) float32 values: amax = max |x|, d = amax / 127,
    q = round-half-to-even(x * (127 / amax)) (0 when amax = 0), value = d' * q with d' = d rounded to
    float16 for Q8_0 / Q8_1 (ggml-common.h block_q8_0 / block_q8_1 store ``d`` as ggml_half) and the
    float32 d for Q8_K (block_q8_K stores a float). Q8_1's second scale (:func:`q8_1_sum_scale`)
    enters only dot products with weights that have a block minimum. Raises BringupError for an
    unknown format or a width that is not a multiple of the block.
    """
    q, _, dq = _q8_blocks(x, fmt)
    return (q * dq).reshape(x.shape)


def q8_1_sum_scale(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For Q8_1 blocks of ``x`` [T, n]: (s, d' * sum(q)), both float64 [T, n / 32]. ``s`` is what
    block_q8_1 stores (ggml-common.h: ``s = d * sum(qs[i])``, the float32 d times the integer sum,
    rounded to float32 then float16); a dot product with a Q4_1 / Q5_1 weight block adds
    ``m * s`` for the weight block's minimum m, where the dequantized values give ``m * d' * sum(q)``."""
    T = x.shape[0]
    q, d, dq = _q8_blocks(x, "Q8_1")
    sq = q.sum(axis=1, keepdims=True)
    s = (d * sq.astype(np.float32)).astype(np.float32).astype(np.float16).astype(np.float64)
    return s.reshape(T, -1), (dq * sq).reshape(T, -1)

