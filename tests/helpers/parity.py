"""Parity on synthetic programs (no model, no binary): a causal program whose logits are a fixed
function of the prefix, prompts of token ids, a small profile, and ``run_parity`` against them."""
from __future__ import annotations

import json

import numpy as np

from bringup.core.paths import ROOT
from bringup.core.schemas import validate
from bringup.parity import run as parity

PROFILE = json.loads((ROOT / "config/parity_profiles/smollm2.json").read_text())

class Synthetic:
    """A causal program: the logits at position t are a fixed function of tokens[:t+1] (+ an
    optional perturbation of scale ``noise``), and its greedy continuation is their argmax."""

    def __init__(self, V=64, noise=0.0, seed=0, eog=()):
        self.V, self.noise, self.seed, self.eog = V, noise, seed, set(eog)

    def _row(self, prefix_sum, t):
        row = np.random.default_rng([prefix_sum, t]).normal(size=self.V) * 3
        if self.noise:
            row += np.random.default_rng([prefix_sum, t, self.seed + 1]).normal(size=self.V) * self.noise
        return row

    def logits_all(self, tokens):
        return np.array([self._row(c, t) for t, c in enumerate(np.cumsum(tokens))], dtype=np.float32)

    def greedy(self, tokens, n):
        toks, out = list(tokens), []
        while len(out) < n:
            nxt = int(np.argmax(self._row(sum(toks), len(toks) - 1).astype(np.float32)))
            out.append(nxt)
            toks.append(nxt)
            if nxt in self.eog:
                break
        return out

def synthetic_prompts(n=8, T=130):
    return [{"id": f"p{i}", "kind": "prose", "text": "", "tokens": list(range(i, i + T))} for i in range(n)]

SMALL_GREEDY = {**PROFILE, "greedy": {"max_tokens": 16, "min_prefix": 8}}

def run_synthetic(ours, prompts=None, profile=SMALL_GREEDY, reference=True):
    """Parity of ``ours`` against a synthetic llama.cpp (the model + noise 0.3) and the exact model
    as the reference; the floor's programs disagree with them by the same kind of noise."""
    doc, arrays = parity.run_parity(model="synthetic", oracle=Synthetic(noise=0.3, seed=1), ours=ours,
                                    prompts=prompts or synthetic_prompts(), profile=profile,
                                    oracle_info={"name": "synthetic"}, program_info={}, inputs={},
                                    reference=Synthetic() if reference else None,
                                    reference_llama_act=Synthetic(noise=0.3, seed=2) if reference else None,
                                    oracle_kv_f32=Synthetic(noise=0.3, seed=3))
    validate(doc, "parity")
    return doc, arrays
