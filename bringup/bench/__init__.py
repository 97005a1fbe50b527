"""The bench stage: llama-bench-style speed of our native program against llama.cpp on the same
GGUF and thread count (pp512, tg128, tg128 after a 1024-token context), the host's DRAM read
bandwidth, and our decode's effective bandwidth as a share of it (docs/bench.md)."""
