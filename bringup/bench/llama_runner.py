"""One llama-bench test of llama.cpp, in its own process: ``python -m bringup.bench.llama_runner``.

Which llama.cpp build runs is chosen before llama-cpp-python loads its library: the environment
variable ``LLAMA_CPP_LIB_PATH`` (a folder with ``libllama.so``) selects the native build, its
absence the portable one the package ships. One process per test keeps the two builds apart (the
same symbols cannot be loaded twice) and gives llama.cpp the fresh process our CLI gets.

The test follows llama.cpp's ``tools/llama-bench`` (same pinned version): a context of
``n_prompt + n_gen + n_depth`` positions, batch 2048, micro-batch 512, F16 KV cache, flash
attention AUTO, weight repacking as the library defaults (``use_extra_bufts``); a warm-up (a
prompt batch when the test has a prompt, one generated token when it generates), the cache
cleared, the ``n_depth`` context filled untimed, then the timed part: the prompt in batches of
``n_batch`` (logits of the last token only), or ``n_gen`` one-token decodes (logits each time),
wall clock around ``llama_decode`` + ``llama_synchronize``.

Prints one JSON object: ``{"ms", "tokens", "tok_per_s", "system_info", "library", "params"}``.
Exit 2 on bad arguments, 5 when llama-cpp-python is missing, 1 when llama.cpp fails.
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence
from bringup.core.subcommands import Parser

N_BATCH = 2048
N_UBATCH = 512


def _decode(L, ctx, tokens: Sequence[int], pos0: int, logits_last: bool = True) -> None:
    """Decode ``tokens`` at positions pos0.. in batches of N_BATCH (logits of each batch's last
    token, as llama_batch_get_one asks), then synchronize. Raises RuntimeError on a failed decode."""
    for start in range(0, len(tokens), N_BATCH):
        part = tokens[start:start + N_BATCH]
        batch = L.llama_batch_init(len(part), 0, 1)
        try:
            batch.n_tokens = len(part)
            for i, t in enumerate(part):
                batch.token[i] = int(t)
                batch.pos[i] = pos0 + start + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1 if (logits_last and i == len(part) - 1) else 0
            rc = L.llama_decode(ctx, batch)
        finally:
            L.llama_batch_free(batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed with status {rc}")
    L.llama_synchronize(ctx)


def run_test(gguf: Path, threads: int, prompt: Sequence[int], n_gen: int, depth: Sequence[int],
             start: int = 0) -> dict:
    """Run one test (``prompt`` non-empty: a prompt-processing test; else ``n_gen`` generated
    tokens, the first fed being ``start``) after a context of ``depth`` tokens. Returns milliseconds, tokens and tokens/s of the
    timed part, with the library's system info and the settings. Units: ms, tokens/s."""
    import llama_cpp as L  # noqa: PLC0415  (lazy: the optional oracle extra, and LLAMA_CPP_LIB_PATH must be set first)

    @ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
    def quiet(level, text, user_data):  # keep warnings and errors only (ggml_log_level 3, 4)
        if level in (3, 4):
            os.write(2, text)

    L.llama_log_set(quiet, ctypes.c_void_p(0))
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    t_load = time.perf_counter()  # start-up: model load and context creation (llama.cpp checks no hash)
    model = L.llama_model_load_from_file(str(gguf).encode(), mp)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {gguf}")
    cp = L.llama_context_default_params()
    n_ctx = len(prompt) + n_gen + len(depth)
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = n_ctx, N_BATCH, N_UBATCH, 1
    cp.n_threads = cp.n_threads_batch = threads
    cp.type_k = cp.type_v = 1  # GGML_TYPE_F16, llama-bench's default
    cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_AUTO
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        raise RuntimeError("llama.cpp could not create a context")
    load_ms = (time.perf_counter() - t_load) * 1e3
    vocab = L.llama_model_get_vocab(model)
    first = list(prompt[:1]) or [start]
    try:
        # warm-up, as llama-bench: one prompt batch, or one generated token
        _decode(L, ctx, list(prompt[:N_BATCH]) if prompt else first, 0)
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        if depth:
            _decode(L, ctx, depth, 0)
        pos = len(depth)
        t0 = time.perf_counter()
        if prompt:
            _decode(L, ctx, prompt, pos)
            n = len(prompt)
        else:
            tok = first[0]
            for i in range(n_gen):
                _decode(L, ctx, [tok], pos + i)
                tok = (tok * 1103515245 + 12345) % int(L.llama_vocab_n_tokens(vocab))  # any token; speed only
            n = n_gen
        ms = (time.perf_counter() - t0) * 1e3
    finally:
        L.llama_free(ctx)
        L.llama_model_free(model)
    lib = Path(os.environ.get("LLAMA_CPP_LIB_PATH") or Path(L.__file__).parent / "lib")
    return {"ms": ms, "tokens": n, "tok_per_s": n / (ms / 1e3), "load_ms": load_ms, "system_info": L.llama_print_system_info().decode().strip(),
            "library": str(lib / "libllama.so"), "package_version": L.__version__,
            "params": {"n_ctx": n_ctx, "n_batch": N_BATCH, "n_ubatch": N_UBATCH, "type_k": "f16", "type_v": "f16",
                       "flash_attn": "auto", "use_extra_bufts": bool(mp.use_extra_bufts), "n_threads": threads}}


def _ids(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t] if text else []


def main(argv: Sequence[str] | None = None) -> int:
    ap = Parser(prog="python -m bringup.bench.llama_runner", description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", type=Path, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--prompt", default="", help="token ids of a prompt-processing test, comma-separated")
    ap.add_argument("--n-gen", type=int, default=0, help="tokens of a generation test")
    ap.add_argument("--depth", default="", help="token ids of the context filled before the test")
    ap.add_argument("--start", type=int, default=0, help="the first token fed to a generation test")
    a = ap.parse_args(argv)
    prompt, depth = _ids(a.prompt), _ids(a.depth)
    if bool(prompt) == bool(a.n_gen) or a.threads < 1 or not a.gguf.is_file():
        print("llama_runner: give a GGUF, --threads >= 1 and exactly one of --prompt, --n-gen", file=sys.stderr)
        return 2
    try:
        out = run_test(a.gguf, a.threads, prompt, a.n_gen, depth, a.start)
    except ImportError as e:
        print(f"llama_runner: llama-cpp-python is not importable: {e}", file=sys.stderr)
        return 5
    except RuntimeError as e:
        print(f"llama_runner: {e}", file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
