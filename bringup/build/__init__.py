"""Stage build: gcc turns kernels, common, runtime, tokenizer and the generated model into
libmodel.so and the bringup-run CLI (program.py, `bringup build`), through the one C compiler driver
(compiler.py) and the per-binary source lists (sources.py); kernel_lib.py builds the kernel library
alone for the kernel tests and `bringup kernels build`."""
