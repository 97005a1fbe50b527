"""The float64 reference's peak memory: a prediction from the GGUF header, for one forward pass.

The reference (``bringup.parity.oracles.reference``) streams its weights
(``bringup.parity.oracles.weights``): a block's tensors are dequantized to float64 while the block
runs, the embedding is gathered by rows, the head is applied in chunks of ``HEAD_CHUNK_ROWS``
vocabulary rows. So a pass over T tokens holds, at its peak, the larger of two phases:

=====================  ============================================================================
block phase            the largest block's tensors in float64 (8 bytes per element: every tensor of
                       the block is kept until the block ends; of a stacked expert tensor, one
                       expert: the routed FFN dequantizes the selected experts one at a time) + the dequantizer's temporaries for
                       one call (``DEQUANT_CHUNK_ELEMS`` elements x ``DEQUANT_BYTES_PER_ELEM``) + the
                       block's activations: ``ACT_EMBD`` float64 arrays of [T, n_embd] and
                       ``ACT_FF`` of [T, n_ff] (residual, norm, Q/K/V and their rotations; gate, up,
                       the GLU's temporaries) + attention scores, ``ACT_SCORES`` float64 arrays of
                       [n_head, min(T, ATTENTION_BLOCK), T]; a routed FFN adds its per-slot outputs
                       [T, n_expert_used, n_embd] and their sum [T, n_embd]
head phase             one head chunk in float64 ([HEAD_CHUNK_ROWS, n_embd]) and its product
                       [T, HEAD_CHUNK_ROWS], the dequantizer's temporaries, the logits [T, n_vocab]
                       in float64 and their float32 copy (what forward returns: 12 bytes a logit)
=====================  ============================================================================

It is the growth of the process's resident set during the pass (what is resident before, the
interpreter, numpy, llama.cpp's oracles, is not the reference's). The coefficients are counted from
the code (reference.py, ops.py) and checked against measurements (docs/memory_model.md, "The
float64 reference"); ``MARGIN`` is the agreement the tests require.
"""
from __future__ import annotations

import math
from typing import Iterable

from bringup.parity.oracles.ops import ATTENTION_BLOCK
from bringup.parity.oracles.weights import DEQUANT_CHUNK_ELEMS, HEAD_CHUNK_ROWS
from bringup.plan.memory.spec import Weight

#: Bytes of temporaries per element of one ``gguf.quants.dequantize`` call beyond the float64
#: result (counted apart): its unpacked integers, scales and float32 result. Measured (peak growth
#: of one 1M-element call less its 8-byte output, 2026-12-03): Q8_0 4.5, F16 6.0, Q4_K and Q5_0
#: 8.9, Q6_K 9.3; 10 bounds them.
DEQUANT_BYTES_PER_ELEM = 10
#: float64 [T, n_embd] arrays live at a block's peak: x, the norm's output and temporaries, Q, K, V
#: (widths n_embd or less), their rotated copies, the attention output and its projection.
ACT_EMBD = 10
#: float64 [T, n_ff] arrays live at the feed-forward's peak: gate, up, and the GLU's temporaries
#: (exp, 1 + exp, the quotient, the product) and, under Q8 activations, the rounded copy.
ACT_FF = 6
#: float64 score arrays of one attention block live at once (scores, their exp, the mask's repeat).
ACT_SCORES = 3
#: The relative agreement of prediction and measurement the tests require (tests/test_reference_streaming.py).
MARGIN = 0.25


def reference_peak(weights: Iterable[Weight], hp: dict, tokens: int) -> dict:
    """Predicted peak bytes of one reference forward pass over ``tokens`` positions.

    ``weights``: the GGUF's tensors (``ModelHeader.weights``); ``hp``: config hparams (``n_embd``,
    ``n_ff``, ``n_head``, ``n_vocab``; ``n_expert_used`` for a mixture of experts). Returns {"total": bytes, "phase": "block" | "head",
    "components": {name: bytes}, "tokens": T, "phases": {"block": {...}, "head": {...}}, "formula": text}:
    the larger phase's components, and both phases'.
    """
    T, E, F, H, V = tokens, int(hp["n_embd"]), int(hp["n_ff"]), int(hp["n_head"]), int(hp["n_vocab"])
    per_layer: dict[int, int] = {}
    for w in weights:
        if w.layer is not None:
            # a stacked expert tensor (GGUF [n_in, rows, n_expert]) is dequantized one expert at a
            # time (ops.moe_ffn, weights.StreamedWeights.expert): one expert's slice counts
            n = math.prod(w.shape) // (w.shape[-1] if w.role.endswith("_exps") else 1)
            per_layer[w.layer] = per_layer.get(w.layer, 0) + n
    dequant = DEQUANT_CHUNK_ELEMS * DEQUANT_BYTES_PER_ELEM
    block = {"block_weights_f64": 8 * max(per_layer.values(), default=0),
             "dequantize_temporaries": dequant,
             "activations_f64": 8 * T * (ACT_EMBD * E + ACT_FF * F),
             "attention_scores_f64": 8 * ACT_SCORES * H * min(T, ATTENTION_BLOCK) * T}
    n_used = int(hp.get("n_expert_used") or 0)
    if n_used:   # moe_ffn's per-slot outputs [T, n_used, n_embd] and their sum
        block["expert_slot_outputs_f64"] = 8 * T * (n_used + 1) * E
    rows = min(HEAD_CHUNK_ROWS, V)
    head = {"head_chunk_f64": 8 * rows * E + 8 * T * rows,
            "dequantize_temporaries": dequant,
            "logits_f64_and_f32": 12 * T * V}
    phase, comp = ("block", block) if sum(block.values()) >= sum(head.values()) else ("head", head)
    return {"total": sum(comp.values()), "phase": phase, "components": comp, "tokens": T,
            "phases": {"block": block, "head": head},
            "formula": "max(block phase, head phase), bringup.plan.memory.reference (docs/memory_model.md)"}
