"""The llama.cpp oracle: llama.cpp (CPU) on the same GGUF, through the pinned ``llama-cpp-python``.

Its low-level API is used, so every parameter that changes the numbers is set and recorded, not
inherited from a wrapper: teacher-forced logits at every position, greedy continuation, timing,
and build/CPU provenance (docs/parity.md, "Oracles").
"""
from __future__ import annotations

import ctypes
import os
import platform
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from bringup.core.errors import BringupError, UnavailableError
from bringup.core.hashing import sha256_file as _sha256_file

# CPU flags worth recording: the ones that select kernels in llama.cpp and in our builds.
_CPU_FLAGS_OF_INTEREST = ("sse3", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "bmi2",
                          "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx_vnni",
                          "amx_tile", "amx_int8", "amx_bf16", "neon", "asimd", "sve")


def cpu_features() -> dict[str, Any]:
    """The host CPU: ``{"machine", "model_name" (None if unknown), "flags"}``, the flags being those
    of _CPU_FLAGS_OF_INTEREST that /proc/cpuinfo lists (Linux; none elsewhere)."""
    info: dict[str, Any] = {"machine": platform.machine(), "model_name": None, "flags": []}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and info["model_name"] is None:
            info["model_name"] = value.strip()
        elif key in ("flags", "Features"):
            have = set(value.split())
            info["flags"] = [f for f in _CPU_FLAGS_OF_INTEREST if f in have]
            break
    return info


def _import_llama_cpp():
    try:
        # imported here, not at the top: llama-cpp-python is the optional extra "oracle", and
        # everything else in parity (metrics, X-ray, the reference) works without it
        import llama_cpp  # noqa: PLC0415
    except ImportError as e:
        raise UnavailableError(
            "the llama.cpp oracle needs llama-cpp-python==0.3.36 (pip install '.[oracle]'): " + str(e)) from None
    return llama_cpp


@ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
def _quiet_log(level, text, user_data):  # pragma: no cover - called from C
    # llama.cpp logs every tensor at load time; keep warnings and errors (ggml_log_level:
    # 3 WARN, 4 ERROR; 5 CONT continues the previous line and is dropped with INFO/DEBUG).
    if level in (3, 4):
        os.write(2, text)


class LlamaCppOracle:
    """llama.cpp (CPU) on one GGUF, through llama-cpp-python's low-level API.

    Settings that change numbers are explicit and recorded in :meth:`info`: ``n_threads``,
    ``n_ubatch`` (the chunk llama.cpp computes at once), flash attention off, the KV cache type
    (``kv_type``: default F16, what llama.cpp's users get; F32 to isolate the weight-side
    contract), and ``use_extra_bufts=False`` so weights stay in plain GGML block layout (no repacking, no AMX:
    the AMX path faults on hosts that report AMX but do not enable it, and repacked kernels are
    a different numerical contract than the plain ``vec_dot`` path).

    Raises UnavailableError if llama-cpp-python is not installed; BringupError if the model does
    not load or a decode fails.
    """

    def __init__(self, gguf_path: str | os.PathLike, n_ctx: int = 2048, n_threads: int = 2,
                 n_ubatch: int = 512, kv_type: str = "f16"):
        L = self._L = _import_llama_cpp()
        self.gguf_path = Path(gguf_path)
        if not self.gguf_path.is_file():
            raise BringupError(f"oracle: no GGUF at {self.gguf_path}")
        L.llama_log_set(_quiet_log, ctypes.c_void_p(0))
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        mp.use_extra_bufts = False
        self._model = L.llama_model_load_from_file(str(self.gguf_path).encode(), mp)
        if not self._model:
            raise BringupError(f"llama.cpp could not load {self.gguf_path}")
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_ctx
        cp.n_ubatch = n_ubatch
        cp.n_seq_max = 1
        cp.n_threads = n_threads
        cp.n_threads_batch = n_threads
        cp.flash_attn_type = 0  # LLAMA_FLASH_ATTN_TYPE_DISABLED: plain softmax(QK^T)V
        cp.no_perf = False
        kv_ids = {"f32": 0, "f16": 1}  # enum ggml_type: GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1
        if kv_type not in kv_ids:
            raise BringupError(f"oracle: KV cache type {kv_type!r} not in {sorted(kv_ids)}")
        cp.type_k = cp.type_v = kv_ids[kv_type]
        self._params = {"n_ctx": n_ctx, "n_batch": n_ctx, "n_ubatch": n_ubatch, "n_threads": n_threads,
                        "flash_attn": "disabled", "kv_type": kv_type,
                        "use_extra_bufts": False, "n_gpu_layers": 0}
        self._ctx = L.llama_init_from_model(self._model, cp)
        if not self._ctx:
            L.llama_model_free(self._model)
            raise BringupError("llama.cpp could not create a context")
        self._vocab = L.llama_model_get_vocab(self._model)
        self.n_vocab = int(L.llama_vocab_n_tokens(self._vocab))
        self.n_ctx = n_ctx

    # -- provenance ---------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """Oracle provenance: package version, libllama version, system info, library hashes, settings."""
        L = self._L
        libdir = Path(L.__file__).parent / "lib"
        libs = {p.name: _sha256_file(p) for p in sorted(libdir.glob("*.so")) if p.is_file()}
        return {
            "name": "llama.cpp",
            "package": "llama-cpp-python",
            "package_version": L.__version__,
            "libllama_version": L.llama_version().decode() if hasattr(L, "llama_version") else None,
            "system_info": L.llama_print_system_info().decode().strip(),
            "library_sha256": libs,
            "params": dict(self._params),
            "cpu": cpu_features(),
        }

    # -- tokens -------------------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool, parse_special: bool = True) -> list[int]:
        """Token ids of ``text`` by llama.cpp's tokenizer (the GGUF's vocabulary and pre-tokenizer)."""
        L = self._L
        data = text.encode("utf-8")
        cap = len(data) + 16
        buf = (L.llama_token * cap)()
        n = L.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:  # never truncate: retry with the size llama.cpp asked for
            cap = -n
            buf = (L.llama_token * cap)()
            n = L.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            raise BringupError(f"llama.cpp tokenization failed ({n})")
        return [int(t) for t in buf[:n]]

    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as text (None if absent), read by llama.cpp."""
        L = self._L
        n = L.llama_model_meta_val_str(self._model, key.encode(), None, 0)
        if n < 0:
            return None
        buf = ctypes.create_string_buffer(n + 1)
        L.llama_model_meta_val_str(self._model, key.encode(), buf, n + 1)
        return buf.value.decode("utf-8")

    def token_text(self, token: int) -> str:
        """The vocabulary entry of ``token`` (special tokens as written, e.g. ``<|im_start|>``)."""
        return self._L.llama_vocab_get_text(self._vocab, int(token)).decode("utf-8")

    def special_tokens(self) -> dict[str, int]:
        L = self._L
        return {"bos": int(L.llama_vocab_bos(self._vocab)), "eos": int(L.llama_vocab_eos(self._vocab))}

    def add_bos(self) -> bool:
        return bool(self._L.llama_vocab_get_add_bos(self._vocab))

    def is_eog(self, token: int) -> bool:
        return bool(self._L.llama_vocab_is_eog(self._vocab, int(token)))

    def detokenize(self, tokens: Sequence[int]) -> str:
        L = self._L
        out = b""
        buf = ctypes.create_string_buffer(256)
        for t in tokens:
            n = L.llama_token_to_piece(self._vocab, int(t), buf, len(buf), 0, False)
            if n < 0:
                raise BringupError(f"llama.cpp could not detokenize token {t}")
            out += buf.raw[:n]
        return out.decode("utf-8", errors="replace")

    # -- evaluation ---------------------------------------------------------------------------
    def _clear(self) -> None:
        L = self._L
        L.llama_memory_clear(L.llama_get_memory(self._ctx), True)

    def _decode(self, tokens: Sequence[int], pos0: int, want: str) -> None:
        """Decode ``tokens`` at positions pos0.. ; ``want`` = 'all' or 'last' logits."""
        L = self._L
        n = len(tokens)
        if n == 0:
            raise BringupError("oracle: empty token list")
        if pos0 + n > self.n_ctx:
            raise BringupError(f"oracle: {pos0 + n} positions exceed the oracle context {self.n_ctx}")
        batch = L.llama_batch_init(n, 0, 1)
        try:
            batch.n_tokens = n
            for i, t in enumerate(tokens):
                if not 0 <= int(t) < self.n_vocab:
                    raise BringupError(f"oracle: token id {t} outside the vocabulary [0, {self.n_vocab})")
                batch.token[i] = int(t)
                batch.pos[i] = pos0 + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1 if (want == "all" or i == n - 1) else 0
            rc = L.llama_decode(self._ctx, batch)
        finally:
            L.llama_batch_free(batch)
        if rc != 0:
            raise BringupError(f"llama_decode failed with status {rc}")

    def _logits_rows(self, n_rows: int) -> np.ndarray:
        ptr = self._L.llama_get_logits(self._ctx)
        return np.ctypeslib.as_array(ptr, shape=(n_rows * self.n_vocab,)).reshape(n_rows, self.n_vocab).copy()

    def logits_all(self, tokens: Sequence[int]) -> np.ndarray:
        """Teacher-forced logits, float32 [len(tokens), n_vocab]; row i predicts token i+1."""
        self._clear()
        self._decode(tokens, 0, "all")
        return self._logits_rows(len(tokens))

    def greedy(self, tokens: Sequence[int], n: int) -> list[int]:
        """Greedy (argmax, lowest id on ties) continuation of up to ``n`` tokens; stops after an
        end-of-generation token, which is included in the result."""
        self._clear()
        self._decode(tokens, 0, "last")
        out: list[int] = []
        pos = len(tokens)
        while len(out) < n:
            nxt = int(np.argmax(self._logits_rows(1)[0]))
            out.append(nxt)
            if self.is_eog(nxt) or len(out) == n:
                break
            self._decode([nxt], pos, "last")
            pos += 1
        return out

    def timing(self, tokens: Sequence[int], n_decode: int) -> dict[str, float]:
        """Wall-clock prefill of ``tokens`` and ``n_decode`` single-token decode steps (argmax fed
        back, EOS ignored so the step count is fixed). Units: ms and tokens per second."""
        self._clear()
        self._decode(tokens[:1], 0, "last")  # warm-up: thread pool and graph allocation
        self._clear()
        t0 = time.perf_counter()
        self._decode(tokens, 0, "last")
        t1 = time.perf_counter()
        pos = len(tokens)
        for _ in range(n_decode):
            nxt = int(np.argmax(self._logits_rows(1)[0]))
            self._decode([nxt], pos, "last")
            pos += 1
        t2 = time.perf_counter()
        pre_ms, dec_ms = (t1 - t0) * 1e3, (t2 - t1) * 1e3
        return {"prefill_tokens": len(tokens), "prefill_ms": pre_ms,
                "prefill_tok_s": len(tokens) / (pre_ms / 1e3),
                "decode_tokens": n_decode, "decode_ms": dec_ms,
                "decode_tok_s": n_decode / (dec_ms / 1e3) if n_decode else 0.0}

    def close(self) -> None:
        L = self._L
        if getattr(self, "_ctx", None):
            L.llama_free(self._ctx)
            self._ctx = None
        if getattr(self, "_model", None):
            L.llama_model_free(self._model)
            self._model = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):  # pragma: no cover
        try:
            self.close()
        except Exception:
            pass
