"""What a generated model's weights are made of (bringup.fetch.synth): uniform random numbers from
per-tensor PCG64 streams, and, for a block-drawn format (``BLOCK_WTYPES``), random K-quant blocks
written tensor by tensor as they are drawn (docs/generated_models.md, "Drawn blocks").

Same seed and stream name, same numbers: the raw 64-bit outputs of PCG64 seeded by
``SeedSequence([seed, crc32(stream)])`` are stable across numpy versions (NEP 19).
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import gguf
import numpy as np

# Formats drawn directly as blocks (no float weights, no quantizer): every 2-D weight but the F32
# routers is made of random blocks (:func:`q4_k_blocks`) and written as it is made, so a model of
# several GB needs the memory of one tensor and seconds per GB (docs/generated_models.md).
BLOCK_WTYPES = {"Q4_K": 256}


def uniform(s, stream: str, shape: tuple[int, ...], rms: float) -> np.ndarray:
    """Uniform numbers of the given RMS from PCG64 seeded by (seed, crc32(stream)).

    The raw 64-bit outputs of PCG64 and SeedSequence are stable across numpy versions (NEP 19);
    the top 53 bits make a double in [0, 1), as numpy's own ``random()`` does.
    """
    bits = np.random.PCG64(np.random.SeedSequence([s.seed, zlib.crc32(stream.encode())]))
    n = math.prod(shape)
    out = np.empty(n, dtype=np.float32)
    # in chunks: the stream's outputs are consumed in order, so the numbers are those of one draw
    for a in range(0, n, UNIFORM_CHUNK):
        u = (bits.random_raw(min(UNIFORM_CHUNK, n - a)) >> np.uint64(11)).astype(np.float64) * 2.0**-53
        out[a:a + u.size] = ((2.0 * u - 1.0) * (rms * math.sqrt(3.0))).astype(np.float32)
    return out.reshape(shape)


#: random numbers drawn at once by :func:`uniform` (its temporaries: synth._WORK_BYTES each)
UNIFORM_CHUNK = 1 << 22


@dataclass(frozen=True)
class Draw:
    """A weight not drawn yet: ``uniform(s, stream, shape, rms)``, or (``parts``) the row-wise
    concatenation of such weights (a fused tensor). Drawn when written, one tensor at a time."""
    stream: str
    shape: tuple[int, ...]
    rms: float
    parts: tuple["Draw", ...] = ()

    @staticmethod
    def cat(parts: list["Draw"]) -> "Draw":
        rows = sum(p.shape[0] for p in parts)
        return Draw("", (rows, *parts[0].shape[1:]), 0.0, tuple(parts))

    def values(self, s) -> np.ndarray:
        """The float32 values (what gguf.quants.quantize is given for the other formats)."""
        if self.parts:
            return np.concatenate([p.values(s) for p in self.parts])
        return uniform(s, self.stream, self.shape, self.rms)

    def blocks(self, s) -> np.ndarray:
        """The weight drawn as ``s.wtype`` blocks (:func:`q4_k_blocks`); a fused one, its parts'
        blocks back to back (rows are independent)."""
        if self.parts:
            return np.concatenate([p.blocks(s) for p in self.parts])
        return q4_k_blocks(s.seed, self.stream, self.shape, self.rms)


def write_blocks(w: gguf.GGUFWriter, s, items: list) -> None:
    """Write ``items`` ((name, Draw or float32 array)) of spec ``s`` (a synth.SynthSpec) with every
    2-D weight but the routers drawn as ``s.wtype`` blocks, streamed: the tensor table first (sizes
    follow from shapes), then each tensor's bytes as they are made, so one tensor is held at a time."""
    qtype = gguf.GGMLQuantizationType[s.wtype]
    block, size = gguf.GGML_QUANT_SIZES[qtype]

    def blocks(name, d) -> bool:
        return isinstance(d, Draw) and len(d.shape) >= 2 and not name.endswith(".ffn_gate_inp.weight")

    for name, d in items:
        if blocks(name, d):
            shape = (*d.shape[:-1], d.shape[-1] // block * size)
            w.add_tensor_info(name, shape, np.dtype(np.uint8), math.prod(shape), raw_dtype=qtype)
        else:
            w.add_tensor_info(name, d.shape, np.dtype(np.float32), 4 * math.prod(d.shape))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, d in items:
        w.write_tensor_data(d.blocks(s) if blocks(name, d)
                            else (d.values(s) if isinstance(d, Draw) else d).astype(np.float32))


def block_memory_bytes(s, n_vocab: int) -> int:
    """synth.memory_bytes of a block-drawn model (BLOCK_WTYPES), written as it is made: the largest
    tensor's blocks, one chunk's random bits and their unpacked copies (BLOCK_WORK_BYTES per
    super-block), and the float32 routers and norms (the router of one layer is the largest)."""
    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[s.wtype]]
    n_kv = s.n_head_kv * s.head_dim
    largest = max(n_vocab * s.n_embd, s.n_ff * s.n_embd * max(1, s.n_expert), (s.n_embd + 2 * n_kv) * s.n_embd)
    small = 4 * (s.n_expert * s.n_embd + 4 * s.n_embd)
    return largest // block * size + BLOCK_CHUNK * BLOCK_WORK_BYTES + small


#: super-blocks drawn at once by :func:`q4_k_blocks`, and the bytes each needs meanwhile (its 19
#: random words, their bytes unpacked to int64 where it computes, the packed block)
BLOCK_CHUNK = 1 << 16
BLOCK_WORK_BYTES = 19 * 8 * 10
#: Q4_K sub-block scales and minima are drawn from [32, 63] (the upper half of their 6 bits, so
#: the d * scale products keep their precision), the per-super-block d from d0 * [0.75, 1.25)
_SCALE_LO = 32
#: E[y^2] / d^2 of one value y = d * sc * q - dmin * m with q uniform in 0..15, sc and m uniform in
#: [32, 63] and independent, dmin = 7.5 d (so E[y] = 0): E[sc^2] E[q^2] - 2 * 7.5 E[sc] E[q] E[m]
#: + 7.5^2 E[m^2] = 2341.5 * 77.5 - 2 * 56.25 * 47.5^2 + 56.25 * 2341.5 = 59347.5; the d factor f
#: adds E[f^2] = 1 + 0.5^2 / 12
Q4_K_MS = 59347.5 * (1.0 + 0.25 / 12.0)


def q4_k_blocks(seed: int, stream: str, shape: tuple[int, ...], rms: float) -> np.ndarray:
    """Random Q4_K super-blocks (ggml-common.h block_q4_K: half d, half dmin, 12 bytes of 6-bit
    scales and minima, 128 bytes of 4-bit quants; 256 values) whose values have mean 0 and RMS
    ``rms``: uint8 array of shape (*shape[:-1], shape[-1] / 256 * 144), rows in order.

    Per super-block, from 19 raw 64-bit words of PCG64 seeded by (seed, crc32(stream)): bytes
    0-127 are the quants (two uniform nibbles each), 128-135 the sub-block scales and 136-143 the
    minima (32 + low 5 bits), 144-145 the factor f = 0.75 + u16 / 2^17 of d = fp16(d0 f), and
    dmin = fp16(7.5 d); d0 = rms / sqrt(Q4_K_MS). The packing of scales and minima is
    ggml's get_scale_min_k4 inverted (sub-blocks 0-3 in the low 6 bits of bytes 0-3 / 4-7,
    sub-blocks 4-7 split into low nibbles in bytes 8-11 and high 2 bits in the top of bytes 0-7).
    """
    n_sb = math.prod(shape) // 256
    bits = np.random.PCG64(np.random.SeedSequence([seed, zlib.crc32(stream.encode())]))
    d0 = rms / math.sqrt(Q4_K_MS)
    out = np.empty((n_sb, 144), dtype=np.uint8)
    for a in range(0, n_sb, BLOCK_CHUNK):
        n = min(BLOCK_CHUNK, n_sb - a)
        r = bits.random_raw(19 * n).view(np.uint8).reshape(n, 152)
        sc = (_SCALE_LO + (r[:, 128:136] & 31)).astype(np.uint8)
        mn = (_SCALE_LO + (r[:, 136:144] & 31)).astype(np.uint8)
        f = 0.75 + r[:, 144:146].copy().view("<u2")[:, 0].astype(np.float64) * 2.0**-17
        d = (d0 * f).astype(np.float16)
        dmin = (7.5 * d.astype(np.float64)).astype(np.float16)
        blk = out[a:a + n]
        blk[:, 0:2] = d.view(np.uint8).reshape(n, 2)
        blk[:, 2:4] = dmin.view(np.uint8).reshape(n, 2)
        blk[:, 4:8] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
        blk[:, 8:12] = mn[:, 0:4] | ((mn[:, 4:8] >> 4) << 6)
        blk[:, 12:16] = (sc[:, 4:8] & 0xF) | ((mn[:, 4:8] & 0xF) << 4)
        blk[:, 16:144] = r[:, 0:128]
    return out.reshape(*shape[:-1], shape[-1] // 256 * 144)
