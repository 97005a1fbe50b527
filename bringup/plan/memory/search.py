"""Inverse queries over the footprint evaluator: longest context, most sequences, smallest budget.

Each query bisects one run parameter over the same ``evaluate`` that sizes the footprint, which is
only valid while the footprint does not decrease as that parameter grows: every query records a
``monotonic_check`` (the footprint at every probe plus a 33-point grid, and the knees of window
layers, never decreases) and fails with the two offending points otherwise.

A search range has an upper end. When it is the model's own limit (``n_ctx_train``) the answer is
exact; when it is a search cap (``SEQ_SEARCH_CAP`` sequences, ``CTX_SEARCH_CAP`` positions for a
model without ``n_ctx_train``) and the cap itself fits, the answer is only a lower bound: the
result says so with ``capped: true`` (the true answer is >= the reported value).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterable

from bringup.core.errors import BringupError
from bringup.plan.memory.budget import Budget
from bringup.plan.memory.footprint import evaluate
from bringup.plan.memory.spec import ModelSpec, RunParams

CTX_SEARCH_CAP = 1 << 24        # longest context searched when the model has no n_ctx_train
SEQ_SEARCH_CAP = 1 << 16        # most sequences searched
_BUDGET_SEARCH_CAP = 1 << 62     # bytes


def check_monotonic(f: Callable[[int], int], xs: Iterable[int], what: str) -> dict:
    """Evaluate ``f`` at ``xs`` and raise BringupError if it ever decreases as x grows.

    Bisection is only valid over a non-decreasing footprint; this is the check. Returns
    {"points": n, "range": [min, max], "monotonic": True}.
    """
    pts = sorted(set(int(x) for x in xs))
    prev = None
    for x in pts:
        y = f(x)
        if prev is not None and y < prev[1]:
            raise BringupError(f"footprint is not monotonic in {what}: {prev[1]} bytes at {prev[0]} but {y} at {x}; "
                               "bisection does not apply")
        prev = (x, y)
    return {"points": len(pts), "range": [pts[0], pts[-1]], "monotonic": True}


def _grid(lo: int, hi: int, n: int = 33) -> list[int]:
    if hi <= lo:
        return [lo]
    return sorted({lo, hi, *(lo + (hi - lo) * i // (n - 1) for i in range(n))})


def largest_fitting(f: Callable[[int], int], usable: int, lo: int, hi: int) -> tuple[int | None, list[int]]:
    """Largest x in [lo, hi] with f(x) <= usable, by bisection on a non-decreasing f.

    Returns (x or None when even lo does not fit, the probed xs).
    """
    probes = [lo]
    if f(lo) > usable:
        return None, probes
    probes.append(hi)
    if f(hi) <= usable:
        return hi, probes
    good, bad = lo, hi
    while bad - good > 1:
        mid = (good + bad) // 2
        probes.append(mid)
        if f(mid) <= usable:
            good = mid
        else:
            bad = mid
    return good, probes



def _window_points(spec: ModelSpec, chunk: int) -> list[int]:
    """Contexts around each window's knee (where a ring-buffered layer stops growing)."""
    ws = {L.window + chunk - 1 for L in (spec.kv_layers or ()) if L.window}
    return sorted(w + d for w in ws for d in (-1, 0, 1) if w + d >= 1)


def longest_context(spec: ModelSpec, p: RunParams, budget: Budget) -> dict:
    """Longest C in [1, n_ctx_train] (or [1, CTX_SEARCH_CAP] without n_ctx_train) that fits the
    budget at p.seqs: bisection, monotonicity checked.

    Returns {seqs, kv_dtype, ctx (None when C=1 does not fit), searched, upper_limit, capped,
    monotonic_check, total_bytes (at ctx)}; ``capped`` is True when the search cap (not the
    model's n_ctx_train) still fits, so the longest context is at least ``ctx``. Raises
    BringupError when the footprint is not monotonic in C.
    """
    n_ctx_train = spec.hparams.get("n_ctx_train")
    cap = n_ctx_train or CTX_SEARCH_CAP
    cap_src = "n_ctx_train" if n_ctx_train else f"search cap {CTX_SEARCH_CAP}"
    search = spec
    if spec.arena_at is not None:
        # Re-planning per probe costs seconds; the arena planned at the top of the range bounds
        # every smaller context from above (scratch grows with C), and the answer is re-checked
        # with the arena planned at that context.
        search = dataclasses.replace(spec, arena=spec.arena_at(cap))
    f = lambda c: evaluate(search, dataclasses.replace(p, ctx=c)).total_bytes  # noqa: E731
    best, probes = largest_fitting(f, budget.usable_bytes, 1, cap)
    mono = check_monotonic(f, probes + _grid(1, cap) + [x for x in _window_points(spec, p.chunk) if x <= cap], "context")
    total = None if best is None else f(best)
    if best is not None and spec.arena_at is not None:
        total = evaluate(dataclasses.replace(spec, arena=spec.arena_at(best)),
                         dataclasses.replace(p, ctx=best)).total_bytes
        if not budget.fits(total):
            raise BringupError(f"longest-context check failed: C={best} needs {total} bytes with its own arena")
    return {"seqs": p.seqs, "kv_dtype": p.kv_dtype, "ctx": best, "searched": [1, cap], "upper_limit": cap_src,
            "capped": best == cap and not n_ctx_train, "monotonic_check": mono, "total_bytes": total}


def most_sequences(spec: ModelSpec, p: RunParams, budget: Budget) -> dict:
    """Most sequences S in [1, SEQ_SEARCH_CAP] that fit the budget at p.ctx (doubling to bracket,
    then bisection).

    Returns {ctx, kv_dtype, seqs (None when S=1 does not fit), searched, upper_limit, capped,
    monotonic_check, total_bytes (at seqs)}; ``capped`` is True when SEQ_SEARCH_CAP sequences
    still fit, so the answer is at least ``seqs``, not the boundary. Raises BringupError when the
    footprint is not monotonic in S.
    """
    f = lambda s: evaluate(spec, dataclasses.replace(p, seqs=s)).total_bytes  # noqa: E731
    hi = 1
    while hi < SEQ_SEARCH_CAP and f(hi) <= budget.usable_bytes:
        hi = min(hi * 2, SEQ_SEARCH_CAP)
    best, probes = largest_fitting(f, budget.usable_bytes, 1, hi)
    mono = check_monotonic(f, probes + _grid(1, hi), "sequences")
    return {"ctx": p.ctx, "kv_dtype": p.kv_dtype, "seqs": best, "searched": [1, hi],
            "upper_limit": f"search cap {SEQ_SEARCH_CAP}" if hi == SEQ_SEARCH_CAP else "bracketed by doubling",
            "capped": best == SEQ_SEARCH_CAP, "monotonic_check": mono,
            "total_bytes": None if best is None else f(best)}


def smallest_budget(spec: ModelSpec, p: RunParams, headroom_fraction: float) -> dict:
    """Smallest budget B (bytes, before headroom) whose usable part holds the footprint at p,
    by bisection over [0, 2**62]. Returns {ctx, seqs, kv_dtype, budget_bytes, total_bytes} (+
    headroom_fraction and monotonic_check when B > 0)."""
    total = evaluate(spec, p).total_bytes

    def usable(b: int) -> int:
        return Budget("", b, headroom_fraction, "").usable_bytes

    # smallest b with usable(b) >= total  <=>  largest b with usable(b) < total, plus one
    g = lambda b: 0 if usable(b) >= total else 1  # noqa: E731  (1 = still too small)
    lo, hi = 0, _BUDGET_SEARCH_CAP
    if usable(lo) >= total:
        return {"ctx": p.ctx, "seqs": p.seqs, "kv_dtype": p.kv_dtype, "budget_bytes": 0, "total_bytes": total}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if g(mid):
            lo = mid
        else:
            hi = mid
    mono = check_monotonic(usable, _grid(0, hi * 2), "budget")
    return {"ctx": p.ctx, "seqs": p.seqs, "kv_dtype": p.kv_dtype, "budget_bytes": hi, "total_bytes": total,
            "headroom_fraction": headroom_fraction, "monotonic_check": mono}
