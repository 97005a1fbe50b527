"""The ggml-q8 contract's text for the generated kernel maps (bringup/ir/kernel_map_table.py): per
activation format how fp32 activations are quantized and the integer block sum, what a weight
format's block minimum adds, the fast providers' declared order and bound, and which weight formats
have a quantized-activation provider. Only kernel_map_table.py reads it.
"""
from __future__ import annotations

from bringup.formats import ggml as formats

# Weight formats with quantized-activation providers (contract ggml-q8, bu_linear_q8act.c): the
# format table's ``q8act`` (config/ggml_formats.json; C reads the same rows as BU_Q8ACT_FORMATS).
# IQ4_NL / IQ4_XS / TQ1_0 / TQ2_0 have a vec_dot_type but no such provider yet: under ggml-q8 a
# model with them finds no provider and the IR says so.
Q8ACT_FORMATS = tuple(f.name for f in formats.q8act_formats())

# Contract ggml-q8: each activation format (a weight format's vec_dot_type) as our scratch holds
# one block (bytes, layout: f32 scales where ggml stores fp16, csrc/kernels/bu_linear_q8act.c),
# how fp32 activations are quantized to it, and the integer block sum it enters.
_Q8_ISUM_32 = ("isum = sum over the 32 elements of q_w * q_x (int32, exact); q_w is the block's integer "
               "weight (Q4_0: nibble - 8, Q5_0: 5-bit - 16, Q4_1/Q5_1: unsigned nibble / 5-bit, Q8_0: int8)")
Q8_ACTIVATIONS = {
    "Q8_0": {
        "scratch_block_bytes": 36,
        "scratch_block_layout": "f32 dx (the fp16-rounded scale) | i8 q[32]",
        "quantization": "activation quantization: Q8_0, blocks of 32 (ggml-cpu/arch/x86/quants.c quantize_row_q8_0): "
                        "amax = max|x| over the block; d = amax / 127 (fp32 division); id = 127 / amax (fp32; "
                        "0 when amax = 0); q = round half to even (x * id) as int8; dx = d rounded to fp16 "
                        "(nearest even), widened exactly",
        "isum": _Q8_ISUM_32,
    },
    "Q8_1": {
        "scratch_block_bytes": 40,
        "scratch_block_layout": "f32 dx (fp16-rounded) | f32 sx (fp16-rounded) | i8 q[32]",
        "quantization": "activation quantization: Q8_1, blocks of 32 (ggml-cpu/arch/x86/quants.c quantize_row_q8_1): "
                        "as Q8_0 (amax, d = amax / 127, id = 127 / amax, q = round half to even (x * id), "
                        "dx = fp16(d)), plus sx = fp16(d * sum(q)) with the fp32 d (product rounded to fp32, "
                        "then to fp16)",
        "isum": _Q8_ISUM_32,
    },
    "Q8_K": {
        "scratch_block_bytes": 292,
        "scratch_block_layout": "f32 dx | i16 bsums[16] | i8 q[256]",
        "quantization": "activation quantization: Q8_K, blocks of 256 (ggml-quants.c quantize_row_q8_K_ref): "
                        "max = the first x of largest |x|; all-zero block: d = 0, q = 0; else iscale = -127 / max "
                        "(fp32), q = min(127, round half to even (iscale * x)), dx = 1 / iscale (fp32, not fp16); "
                        "bsums = sums of q over 16 consecutive elements",
        "isum": "isum = sum over the 16 groups g of 16 elements of sc_g * sum(q_w * q_x) (int32, exact), sc_g "
                "the group's integer sub-block scale (Q3_K: 6-bit - 32, Q6_K: int8, Q2_K: 4-bit, Q4_K/Q5_K: "
                "6-bit of its 32-element sub-block); msum = sum over g of m_g * bsum_g with m_g the group's "
                "integer sub-block min (Q2_K, Q4_K, Q5_K)",
    },
}

# Contract ggml-q8: what a weight format's block minimum adds to t_b = (dw*dx) * isum
# (ggml-cpu/quants.c ggml_vec_dot_<fmt>_<act>_generic); formats without a minimum add nothing.
Q8_MIN_TERM = {"Q4_1": " + mw * sx", "Q5_1": " + mw * sx",
               "Q2_K": " - (dminw*dx) * msum", "Q4_K": " - (dminw*dx) * msum", "Q5_K": " - (dminw*dx) * msum"}

# The declared order of the SIMD levels of the ggml-q8 fast providers (csrc/kernels/bu_q8fast.h) and
# their bound against the q8act scalar provider: both sum the same exact integer parts; the scalar
# provider rounds nb block terms in sequence, the lanes chain up to 2 nb FMAs, so the two differ by
# at most (3 nb + 10) roundings of the magnitude sum A, plus the output's.
Q8LANES8FMA = ("q8lanes8fma: per block, each 32-element chunk gives 8 int32 lanes (lane j: the products q_w * q_x "
               "of elements 4j..4j+3, times the 16-element sub-block scale for K-quants), summed over the block's "
               "chunks in int32 (exact; every lane below 2^24, so its fp32 conversion is exact); per block in "
               "increasing order: acc_j = fma(dw*dx, float(isum_j), acc_j) (dw*dx one rounding), then for Q2_K "
               "Q4_K Q5_K acc_j = fma(-(dminw*dx), float(msum_j), acc_j), msum_j = m_2j*bsum_2j + m_(2j+1)*bsum_(2j+1); "
               "Q4_1 Q5_1: ms = ((0 + mw_0*sx_0) + mw_1*sx_1) + ... (products rounded, no FMA); lanes start at +0; "
               "u_j = acc_j + acc_(j+4), s_j = u_j + u_(j+2), dot = s_0 + s_1 (+ ms); the bias added after, one "
               "rounding. The order does not depend on n_tokens, on tiling or on the rows a call covers")
_Q8FAST_BOUND_TEXT = ("|y - y_q8act_scalar| <= (3 * n_in / block + 10) * 2^-24 * A + 2 * 2^-24 * (|y_q8act_scalar| + "
                      "|bias|), block = the activation block (32 or 256), A = sum over blocks of |dw*dx| * sum_k "
                      "|qw_k * qx_k| (qw with its sub-block scale) + |dminw*dx| * sum_k |m_k * qx_k| + |mw * sx|")

_Q8_SOURCE = ("ggml-cpu/ggml-cpu.c type_traits_cpu (vec_dot_type), ggml-cpu/arch/x86/quants.c "
              "quantize_row_q8_0/q8_1 (AVX path), ggml-quants.c quantize_row_q8_K_ref, ggml-cpu/quants.c "
              "ggml_vec_dot_*_generic (integer parts); the fp32 order across blocks is ours (ggml's SIMD uses "
              "lanes and FMA)")
