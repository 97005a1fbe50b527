"""Oracles: independent programs that compute the same model from the same GGUF, sharing no code
with bringup's C.

- :class:`LlamaCppOracle` (``llama_cpp.py``): llama.cpp through the pinned ``llama-cpp-python``.
- :class:`NumpyReference` (``reference.py``): a float64 numpy forward pass over weights
  dequantized by ``gguf.quants``, with the Q8 activation rounding of ``q8.py`` when asked to run
  under a program's activation contract, and with injectable faults.

Both expose the *program* interface parity uses: ``logits_all(tokens) -> float32 [T, n_vocab]``
and ``greedy(tokens, n) -> list[int]``.
"""
from bringup.parity.oracles.llama_cpp import LlamaCppOracle
from bringup.parity.oracles.reference import NumpyReference

__all__ = ["LlamaCppOracle", "NumpyReference"]
