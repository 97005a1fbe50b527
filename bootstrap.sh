#!/usr/bin/env bash
# Install everything bringup needs into a project-local virtual environment (.venv).
# Needs only Python >= 3.11 and gcc. Re-running is cheap: pip skips what is installed, and pip's
# wheel cache serves the llama-cpp-python build (the llama.cpp oracle) after the first time.
#   bash bootstrap.sh          the main job's environment
#   bash bootstrap.sh --test   plus the system tools the test suite drives (Debian's chromium for
#                              the IR report's browser test, clang + libFuzzer for the fuzz tests,
#                              openssh-client's ssh-keygen for the bundle signature tests);
#                              what CI and the README's test command run
set -euo pipefail
cd "$(dirname "$0")"
TEST_TOOLS=0
for a in "$@"; do
  case "$a" in
    --test) TEST_TOOLS=1 ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bootstrap: unknown option $a (try --help)" >&2; exit 2 ;;
  esac
done
T0=$SECONDS
step() { echo "bootstrap: $* ($((SECONDS - T0)) s so far)"; }
PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "bringup needs Python >= 3.11")'
command -v gcc >/dev/null || { echo "bootstrap: gcc is required" >&2; exit 2; }
# Said before anything else: the first run compiles llama.cpp (the oracle), measured at about
# 4 min on 2 cores (2026-12); the compile is parallel, so about 8 core-minutes over $(nproc).
NPROC=$(nproc 2>/dev/null || echo 1)
COMPILE_ETA="about $(( (8 + NPROC - 1) / NPROC )) min on this machine's $NPROC core(s)"
if ! { [ -x .venv/bin/python ] && .venv/bin/python -c 'import llama_cpp' 2>/dev/null; }; then
  echo "bootstrap: the first run compiles llama.cpp from source, $COMPILE_ETA; later runs take seconds"
fi
[ -x .venv/bin/python ] || { step "creating .venv"; "$PY" -m venv .venv; }
# A lean, portable llama.cpp build: the library only (no tools, examples, tests, server, curl or
# llava), for AVX2/FMA/F16C rather than -march=native: some VMs report AMX but fault on it.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DGGML_OPENMP=OFF -DLLAMA_OPENSSL=OFF}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
if .venv/bin/python -c 'import llama_cpp' 2>/dev/null; then
  step "installing bringup and its Python dependencies (llama-cpp-python already built)"
else
  step "installing bringup and its Python dependencies; llama-cpp-python compiles llama.cpp from source the first time: $COMPILE_ETA (then pip's wheel cache serves it)"
fi
# pip's own progress (downloads, 'Building wheel for llama-cpp-python ...') stays visible; only
# the 'Requirement already satisfied' chatter is dropped
set +e
.venv/bin/python -m pip install --disable-pip-version-check --progress-bar on -e '.[test,oracle]' \
  | grep -v --line-buffered '^Requirement already satisfied'
PIP_RC=${PIPESTATUS[0]}
set -e
[ "$PIP_RC" -eq 0 ] || { echo "bootstrap: pip install failed (exit $PIP_RC)" >&2; exit 1; }
# apt_for_tests WHAT PACKAGES...: install Debian PACKAGES for the test suite's WHAT (as root with
# apt-get), else stop with exit 5 naming them. The caller tests first whether they are needed.
apt_for_tests() {
  local what=$1; shift
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    step "installing Debian's $* for $what"
    apt-get install -y -q --no-install-recommends "$@" >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "$@" >/dev/null; }
  else
    echo "bootstrap: the test suite needs $* for $what (Debian: apt-get install $*); not root or no apt-get here" >&2
    exit 5
  fi
}
if [ "$TEST_TOOLS" = 1 ]; then
  command -v chromium >/dev/null || apt_for_tests "the IR report's browser test" chromium
  # clang + compiler-rt (libFuzzer, ASan, UBSan) for tests/test_fuzz.py (docs/fuzzing.md)
  [ -f "$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null)" ] \
    || apt_for_tests "the fuzz tests (clang with libFuzzer)" clang libclang-rt-dev
  # SIMDe's headers for the kernel tests' AVX-512 emulation (tests/test_kernels_fast.py on a host
  # without AVX-512; csrc/kernels/bu_avx512_emulated.h)
  [ -f /usr/include/simde/x86/avx512.h ] || apt_for_tests "the kernel tests' AVX-512 emulation (SIMDe)" libsimde-dev
  # OpenSSH's ssh-keygen for the bundle signature tests (tests/test_export.py, docs/export.md)
  command -v ssh-keygen >/dev/null || apt_for_tests "the bundle signature tests (ssh-keygen)" openssh-client
  # curl for the server tests (tests/test_server.py; the openai client comes with .[test])
  command -v curl >/dev/null || apt_for_tests "the server tests (curl)" curl
fi
step "done: .venv ready ($(.venv/bin/python -c 'import bringup, llama_cpp; print("bringup", bringup.__version__, "| llama-cpp-python", llama_cpp.__version__)'))"
