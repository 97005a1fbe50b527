"""Stage fetch: resolve a pinned registry URI to a local GGUF verified against its SHA-256."""
