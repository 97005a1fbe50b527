"""`bringup inspect`: a GGUF's inventory against what bringup has (circuit, tensor map, providers,
tokenizer, chat format, reference oracle), each missing piece named with where it goes."""
