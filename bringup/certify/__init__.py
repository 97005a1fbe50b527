"""Stage certify: one verdict per model with every gate, value and the full provenance chain."""
