"""Stage parity: the native program against independent oracles (llama.cpp, the float64 reference);
X-ray localises the first op where they part.

``metrics`` (the measures, pure numpy), ``oracles`` (llama.cpp, the numpy reference), ``xray``
(per-op hidden states against the reference, ``bringup xray``), ``run`` (the stage: prompts,
gates, ``parity.json``, plot, ``bringup parity``). Our program runs through
``bringup.core.native``."""
