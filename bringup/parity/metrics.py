"""Parity metrics: how far two programs' logits and greedy continuations are apart (pure numpy).

Definitions (docs/parity.md, "Parity" step 4), per position t, oracle logits ``a``, ours ``b``,
both float32 [V], computed in float64:

- top-1 agreement: ``argmax a == argmax b`` (lowest id wins a tie, numpy's rule);
- top-k overlap: ``|topk(a) ∩ topk(b)| / k``;
- max / mean absolute logit difference: ``max|a-b|``, ``mean|a-b|``;
- KL(oracle ‖ ours) = ``sum softmax(a) * (log_softmax(a) - log_softmax(b))``, in nats;
- cosine similarity of the raw logit vectors (two zero vectors: 1; one zero vector: 0).

Per-prompt values average over positions; ``overall`` pools every position of every prompt.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from bringup.core.errors import BringupError


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def _topk_sets(x: np.ndarray, k: int) -> np.ndarray:
    # argpartition then a stable order is unnecessary: only set membership matters.
    return np.argpartition(-x, k - 1, axis=-1)[:, :k]


def position_metrics(oracle: np.ndarray, ours: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """Per-position metrics of two logit matrices, both [T, V] (any float dtype; computed in
    float64). Returns arrays of length T: ``top1_match`` (bool), ``topk_overlap`` (fraction of
    ``k``), ``max_abs_diff`` / ``mean_abs_diff`` (logit units), ``kl`` (nats), ``cosine``.

    Raises BringupError if the shapes differ, a matrix is not 2-D, ``k`` is outside [1, V], or
    either holds a NaN/Inf (non-finite logits are a failure to report, never something to average away).
    """
    if oracle.ndim != 2 or oracle.shape != ours.shape:
        raise BringupError(f"logit shapes differ: oracle {oracle.shape}, ours {ours.shape}")
    if not 1 <= k <= oracle.shape[1]:
        raise BringupError(f"top-k: k={k} outside [1, {oracle.shape[1]}]")
    for name, m in (("oracle", oracle), ("ours", ours)):
        bad = ~np.isfinite(m)
        if bad.any():
            t = int(np.argwhere(bad)[0][0])
            raise BringupError(f"{name} logits are not finite (first at position {t})")
    # in blocks of rows: a [T, V] float64 copy of gemma3's 262k-entry logits for an 800-token
    # prompt is 1.7 GB, and every quantity here is per row
    step = max(1, _BLOCK_ELEMS // oracle.shape[1])
    parts = [_rows_metrics(oracle[i:i + step], ours[i:i + step], k) for i in range(0, oracle.shape[0], step)]
    return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}


#: Logit entries per block of :func:`position_metrics` (float64: 32 MB per temporary).
_BLOCK_ELEMS = 1 << 22


def _rows_metrics(oracle: np.ndarray, ours: np.ndarray, k: int) -> dict[str, np.ndarray]:
    a, b = oracle.astype(np.float64), ours.astype(np.float64)
    la, lb = _log_softmax(a), _log_softmax(b)
    kl = (np.exp(la) * (la - lb)).sum(axis=-1)
    ta, tb = _topk_sets(a, k), _topk_sets(b, k)
    overlap = np.array([len(np.intersect1d(x, y, assume_unique=True)) for x, y in zip(ta, tb)]) / k
    diff = np.abs(a - b)
    na, nb = np.linalg.norm(a, axis=-1), np.linalg.norm(b, axis=-1)
    # a zero logit vector has no direction: two of them agree (1), one against another does not (0)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.where((na > 0) & (nb > 0), (a * b).sum(-1) / (na * nb), np.where((na == 0) & (nb == 0), 1.0, 0.0))
    return {
        "top1_match": (a.argmax(-1) == b.argmax(-1)),
        "topk_overlap": overlap,
        "max_abs_diff": diff.max(-1),
        "mean_abs_diff": diff.mean(-1),
        "kl": np.maximum(kl, 0.0),  # rounding can make an exact match -1e-17
        "cosine": cos,
    }


def summarize(pm: dict[str, np.ndarray]) -> dict[str, float]:
    """Summary of per-position metrics (one prompt, or several concatenated): means, with max
    for ``max_abs_diff`` and ``kl_max``, min for ``cosine_min``; ``n_positions`` an int."""
    return {
        "n_positions": int(pm["kl"].size),
        "top1_agreement": float(pm["top1_match"].mean()),
        "topk_overlap": float(pm["topk_overlap"].mean()),
        "max_abs_diff": float(pm["max_abs_diff"].max()),
        "mean_abs_diff": float(pm["mean_abs_diff"].mean()),
        "kl_mean": float(pm["kl"].mean()),
        "kl_max": float(pm["kl"].max()),
        "cosine_mean": float(pm["cosine"].mean()),
        "cosine_min": float(pm["cosine"].min()),
    }


def pooled_summary(pms: Sequence[dict[str, np.ndarray]]) -> dict[str, float]:
    """:func:`summarize` over every position of several per-position metric dicts (one per prompt)."""
    return summarize({key: np.concatenate([pm[key] for pm in pms]) for key in pms[0]})


def identical_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def greedy_compare(oracle: Sequence[int], ours: Sequence[int], max_tokens: int) -> dict[str, Any]:
    """Compare two greedy continuations (token ids). ``effective_prefix`` is ``max_tokens`` when
    both are identical (including both stopping early at the same end-of-generation token), else
    the identical-prefix length."""
    p = identical_prefix(oracle, ours)
    same = list(oracle) == list(ours)
    return {"oracle": [int(t) for t in oracle], "ours": [int(t) for t in ours], "prefix_len": p,
            "identical": same, "effective_prefix": max_tokens if same else p}


def greedy_by_teacher_forcing(logits: np.ndarray, n_prompt: int, ours: Sequence[int], max_tokens: int,
                              eog: Sequence[int] = ()) -> list[int]:
    """The greedy (argmax, lowest id on ties) continuation of a program whose logits over
    ``prompt + ours`` are ``logits`` ([n_prompt + len(ours), V]), as far as it can be known from them:
    greedy decoding is deterministic, so that program's continuation equals ``ours`` for as long as
    its argmax after each prefix equals our next token, and its first different token is the argmax
    where they part. Returns that continuation: equal to ``ours`` exactly when the two greedy
    continuations are identical (same tokens, both stopping after the same token in ``eog`` or at
    ``max_tokens``), else ours' common prefix plus the program's first different token.

    Raises BringupError if ``logits`` has fewer than ``n_prompt + len(ours)`` rows.
    """
    if n_prompt < 1 or logits.shape[0] < n_prompt + len(ours):
        raise BringupError(f"greedy check: {logits.shape[0]} logit rows for {n_prompt} prompt + {len(ours)} tokens")
    out: list[int] = []
    stop = set(int(t) for t in eog)
    for i in range(max_tokens):
        nxt = int(np.argmax(logits[n_prompt - 1 + i]))
        out.append(nxt)
        if i >= len(ours) or nxt != ours[i] or nxt in stop:
            break
    return out


def comparison_overall(pms: Sequence[dict[str, np.ndarray]], greedy: Sequence[dict[str, Any]],
                       min_prefix: int) -> dict[str, float]:
    """Overall measures of one comparison (ours against one oracle) over several prompts:
    :func:`pooled_summary` of the per-position metrics ``pms`` (one per prompt), plus
    ``n_prompts``, ``first_generated_top1_fraction`` (prompts whose last-position top-1 matches),
    and from the :func:`greedy_compare` results ``greedy``: ``greedy_identical_fraction``,
    ``greedy_prompts_meeting_min_prefix`` (effective prefix >= ``min_prefix``) and
    ``greedy_prefix_mean`` (tokens)."""
    out: dict[str, float] = pooled_summary(pms)
    out["n_prompts"] = len(pms)
    out["first_generated_top1_fraction"] = float(np.mean([bool(pm["top1_match"][-1]) for pm in pms]))
    out["greedy_identical_fraction"] = float(np.mean([g["identical"] for g in greedy]))
    out["greedy_prompts_meeting_min_prefix"] = int(sum(g["effective_prefix"] >= min_prefix for g in greedy))
    out["greedy_prefix_mean"] = float(np.mean([g["effective_prefix"] for g in greedy]))
    return out
