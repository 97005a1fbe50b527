"""Stage convert: GGUF -> weights.bump, weights_manifest.json, config.json, tokenizer.json."""
