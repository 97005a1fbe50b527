"""Stage build: gcc turns kernels, runtime, tokenizer and the generated model into libmodel.so and
the bringup-run CLI."""
