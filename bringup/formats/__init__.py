"""File formats bringup reads and writes: the ggml block-format table, the one GGUF reader, BUMP,
tokenizer.json and its packed blob, chat formats."""
