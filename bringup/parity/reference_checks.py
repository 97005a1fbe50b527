"""The float64 reference as parity runs it (:class:`ReferenceProgram`), and what parity records
about it: its memory and its next-token entropy.

- Memory: each reference pass's peak resident-set growth, predicted from the GGUF header by
  ``bringup.plan.memory.reference.reference_peak`` and measured (``bringup.core.rss.PeakGrowth``);
  ``parity.json`` -> ``reference.memory`` (docs/memory_model.md, "The float64 reference").
- Entropy: the mean next-token entropy of the reference's distribution over every teacher-forced
  position, against log(n_vocab), the entropy of the uniform distribution. The gate
  ``reference_entropy`` (``against: reference_distribution``, docs/parity.md) refuses a model
  whose distribution is near uniform: there top-1 and KL agreements compare noise.
"""
from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from bringup.core.rss import PeakGrowth
from bringup.parity.oracles import NumpyReference
from bringup.plan.memory.reference import reference_peak
from bringup.plan.memory.spec import read_model_header

#: Logit rows per block of :func:`entropies` (float64 temporaries of [rows, V]).
_ENTROPY_ROWS = 64


def entropies(logits: np.ndarray) -> np.ndarray:
    """Next-token entropy in nats, float64 [T], of softmax over each row of ``logits`` [T, V]."""
    out = np.empty(logits.shape[0])
    for i in range(0, logits.shape[0], _ENTROPY_ROWS):
        x = logits[i:i + _ENTROPY_ROWS].astype(np.float64)
        x -= x.max(axis=-1, keepdims=True)
        p = np.exp(x)
        z = p.sum(axis=-1, keepdims=True)
        # H = log z - sum p x / z (x shifted so that max x = 0)
        out[i:i + _ENTROPY_ROWS] = (np.log(z) - (p * x).sum(axis=-1, keepdims=True) / z)[:, 0]
    return out


def entropy_summary(per_prompt: Sequence[np.ndarray], n_vocab: int) -> dict:
    """The pooled mean entropy over every position of ``per_prompt`` (arrays of nats), log(n_vocab)
    and their ratio (``entropy_ratio``: 1 for a uniform distribution, 0 for a certain one)."""
    h = np.concatenate([np.asarray(a, dtype=np.float64) for a in per_prompt])
    mean = float(h.mean())
    return {"mean_entropy_nats": mean, "log_vocab_nats": math.log(n_vocab), "entropy_ratio": mean / math.log(n_vocab),
            "min_entropy_nats": float(h.min()), "max_entropy_nats": float(h.max()), "n_positions": int(h.size)}


class ReferenceMemory:
    """The reference's peak memory per pass, predicted and measured, over one parity run.

    ``gguf``: the model the reference runs (its header sizes the prediction); ``hp``: n_embd, n_ff,
    n_head, n_vocab. :meth:`measure` wraps one pass; :meth:`summary` reports the pass with the
    largest measured growth, and the largest relative error over all passes."""

    def __init__(self, gguf: Path, hp: dict):
        self.weights = read_model_header(gguf).weights
        self.hp = hp
        self.calls: list[dict] = []
        self.unavailable: str | None = None

    @classmethod
    def of(cls, gguf: Path, cfg) -> "ReferenceMemory":
        """For the reference of ``gguf`` whose hyper-parameters are ``cfg`` (a ``RefConfig``)."""
        return cls(gguf, {"n_embd": cfg.n_embd, "n_ff": cfg.n_ff, "n_head": cfg.n_head,
                        "n_vocab": cfg.n_vocab, "n_expert_used": cfg.extra.get("n_expert_used", 0)})

    def measure(self, n_tokens: int, run: Callable[[], Any]) -> Any:
        """``run()``'s result; its peak resident-set growth recorded beside the prediction for ``n_tokens``."""
        pred = reference_peak(self.weights, self.hp, n_tokens)
        with PeakGrowth() as g:
            out = run()
        if g.bytes is None:
            self.unavailable = g.unavailable
        else:
            self.calls.append({"tokens": n_tokens, "predicted_bytes": pred["total"], "measured_bytes": g.bytes,
                               "phase": pred["phase"], "components": pred["components"]})
        return out

    def summary(self) -> dict:
        if not self.calls:
            return {"status": "unavailable", "reason": self.unavailable or "no reference pass ran"}
        worst = max(self.calls, key=lambda c: c["measured_bytes"])
        errs = [c["measured_bytes"] / c["predicted_bytes"] - 1.0 for c in self.calls]
        return {"status": "measured", "passes": len(self.calls), "method": PeakGrowth.method,
                "prediction": "bringup.plan.memory.reference.reference_peak (docs/memory_model.md)",
                "peak": worst, "relative_error_min": min(errs), "relative_error_max": max(errs)}


class ReferenceProgram:
    """The float64 numpy reference as a :class:`bringup.parity.run.Program` (logits only) with fixed activation
    numerics: ``activations`` is ``"ggml-q8"`` (llama.cpp's Q8 activation rounding), ``"f32"``, or a
    mapping linear op id -> activation dtype (a program's own contract,
    :func:`bringup.parity.xray.activation_contract`); ``kv_dtype`` the program's KV cache element
    type (:func:`bringup.parity.xray.kv_cache_dtype`)."""

    def __init__(self, reference: NumpyReference, activations: str | dict[str, str], kv_dtype: str = "F32",
                 memory: ReferenceMemory | None = None):
        self.reference, self.activations, self.kv_dtype = reference, activations, kv_dtype
        self.memory = memory   # each pass's peak memory, predicted and measured

    def logits_all(self, tokens: Sequence[int]) -> np.ndarray:
        run = functools.partial(self.reference.forward, tokens, activations=self.activations, kv_dtype=self.kv_dtype)
        return (run() if self.memory is None else self.memory.measure(len(tokens), run))[0]
