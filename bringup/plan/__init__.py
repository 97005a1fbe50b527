"""Stage plan: the liveness arena plan of each phase, the IR report, and the memory model against a
device budget (from the GGUF header alone)."""
