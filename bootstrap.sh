#!/usr/bin/env bash
# Install everything bringup needs into a project-local virtual environment (.venv).
# Needs only Python >= 3.11 and gcc. Re-running is cheap: pip skips what is installed, and pip's
# wheel cache serves the llama-cpp-python build (the llama.cpp oracle) after the first time.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "bringup needs Python >= 3.11")'
command -v gcc >/dev/null || { echo "bootstrap: gcc is required" >&2; exit 2; }
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# A lean, portable llama.cpp build: the library only (no tools, examples, tests, server, curl or
# llava), for AVX2/FMA/F16C rather than -march=native: some VMs report AMX but fault on it.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DGGML_OPENMP=OFF -DLLAMA_OPENSSL=OFF}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test,oracle]'
echo "bootstrap: .venv ready ($(.venv/bin/python -c 'import bringup, llama_cpp; print("bringup", bringup.__version__, "| llama-cpp-python", llama_cpp.__version__)'))"
