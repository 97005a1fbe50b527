"""Routed experts in the memory model: what is mapped, what is resident, how many fit a budget.

A mixture-of-experts program maps every expert of every layer (the read-only mapping of its BUMP
weights file; any token may select any expert), so ``weights`` counts them all. What of them is
resident in RAM depends on the run, and this record says so instead of leaving it implied:

- ``bringup-run`` checks the weights payload's SHA-256 at open by default (csrc/runtime/bu_bump.c),
  which reads every page of the mapping: after open every expert is resident (file-backed pages
  shared with the page cache; the measured peak RSS includes them);
- with ``--no-verify`` only the pages the computation reads become resident: a decode token reads
  ``n_expert_used`` experts per layer (``decode_token_bytes``), a prompt of T tokens the union of
  its tokens' selections, up to every expert;
- under memory pressure the kernel may drop mapped pages (they are clean): an expert selected
  again is then read back from the file (major page faults), so a budget smaller than the
  weights runs, slower, rather than failing. ``experts_resident_per_layer`` answers how many
  experts per layer a budget holds resident beside everything else the run needs.
"""
from __future__ import annotations

import dataclasses

from bringup.plan.memory.budget import Budget
from bringup.plan.memory.footprint import evaluate
from bringup.plan.memory.spec import ModelSpec, RunParams


def experts_record(spec: ModelSpec, p: RunParams, budget: Budget | None) -> dict | None:
    """The ``experts`` entry of memory_model.json for a model with stacked ``*_exps`` tensors
    (None for a dense model). Bytes as stored (``Weight.bytes``). ``experts_resident_per_layer``
    (with a budget): the largest k <= n_expert such that the footprint with weights not counted
    plus k experts of every layer (``expert_bytes`` per layer each) and the non-expert weights
    fits ``budget.usable_bytes`` (None without a budget)."""
    n_expert, n_used = spec.hparams.get("n_expert"), spec.hparams.get("n_expert_used")
    stacked = [w for w in spec.weights if w.role.endswith("_exps")]
    if not n_expert or not n_used or not stacked:
        return None
    layers = sorted({w.layer for w in stacked})
    total = sum(w.bytes for w in stacked)
    per_layer_max = max(sum(w.bytes for w in stacked if w.layer == L) for L in layers)
    one = per_layer_max // n_expert                       # one expert of the largest layer, all parts
    rec = {"n_expert": n_expert, "n_expert_used": n_used, "layers": len(layers),
           "tensors": sorted({w.role for w in stacked}), "bytes": total, "expert_bytes": one,
           "decode_token_bytes": total * n_used // n_expert,
           "mapped": f"all {n_expert} experts of each of the {len(layers)} layers ({total} bytes): the weights file "
                     "is mapped read-only and any token may select any expert",
           "resident": "after open, every expert: bringup-run checks the payload SHA-256 by default, which reads "
                       "every page of the mapping (file-backed, shared with the page cache, evictable); with "
                       f"--no-verify only the experts tokens select: {n_used} per layer per decode token "
                       f"({total * n_used // n_expert} bytes), a prompt's union of selections, up to all",
           "counted": "in the weights component" if not p.weights_mapped
                      else "not counted (weights mapped: evictable page cache)",
           "experts_resident_per_layer": None}
    if budget is not None:
        rec["experts_resident_per_layer"] = _fitting(spec, p, budget, n_expert, one * len(layers), total)
    return rec


def _fitting(spec: ModelSpec, p: RunParams, budget: Budget, n_expert: int, per_expert_all_layers: int,
             expert_total: int) -> int:
    """Largest k in [0, n_expert] with (footprint, weights not counted) + non-expert weights + k
    experts of every layer <= usable bytes; 0 when even none fit."""
    rest = evaluate(spec, dataclasses.replace(p, weights_mapped=True)).total_bytes
    other_weights = sum(w.bytes for w in spec.weights) - expert_total
    room = budget.usable_bytes - rest - other_weights
    return max(0, min(n_expert, room // per_expert_all_layers)) if per_expert_all_layers else n_expert
