"""Oracles: independent programs that compute the same model from the same GGUF.

Two oracles, neither sharing code with bringup's C:

- :class:`LlamaCppOracle`: llama.cpp through the pinned ``llama-cpp-python`` (low-level API, so
  every parameter that changes the numbers is set and recorded, not inherited from a wrapper).
  Teacher-forced logits at every position, greedy continuation, timing, and build/CPU provenance.
- :class:`NumpyReference`: a float64 numpy forward pass over weights dequantized by
  ``gguf.quants.dequantize``, written from the architecture papers and the GGUF conventions
  (not from llama.cpp's or our C). It is the source of per-op hidden states for X-ray, computed
  on the program's own inputs to each op (teacher forcing per op)
  (the PyTorch/transformers oracle was not adopted: torch + transformers are a multi-hundred-MB
  install for CI, and transformers' GGUF loader dequantizes with the same gguf-py code anyway).
  It can run with injected faults (wrong RoPE theta, wrong norm eps, swapped stride at one layer)
  to stand in for a broken program under test.

Both expose the *program* interface parity uses: ``logits_all(tokens) -> float32 [T, n_vocab]``
and ``greedy(tokens, n) -> list[int]``.
"""
from __future__ import annotations

import ctypes
import math
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from bringup.core.errors import BringupError, UnavailableError, UnsupportedError
from bringup.core.hashing import sha256_file as _sha256_file

# CPU flags worth recording: the ones that select kernels in llama.cpp and in our builds.
_CPU_FLAGS_OF_INTEREST = ("sse3", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "bmi2",
                          "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx_vnni",
                          "amx_tile", "amx_int8", "amx_bf16", "neon", "asimd", "sve")


def cpu_features() -> dict[str, Any]:
    """The host CPU: model name and the SIMD flags (from /proc/cpuinfo on Linux) that select kernels."""
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


# --------------------------------------------------------------------------------------------
# llama.cpp
# --------------------------------------------------------------------------------------------

def _import_llama_cpp():
    try:
        import llama_cpp  # noqa: PLC0415 (optional extra "oracle")
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


# --------------------------------------------------------------------------------------------
# numpy reference forward pass
# --------------------------------------------------------------------------------------------

#: Checkpoint names inside one transformer block, in execution order: the op ids of the block
#: section of ``circuits/{llama,gemma3}.json``. A checkpoint is the output of that op, so the IR op
#: id (``layer.{L}.{id}``) names it in the runtime's ``--dump-hidden`` output, here and in X-ray.
LAYER_CHECKPOINTS = ("attn_norm", "attn_q", "attn_k", "attn_v", "q_norm", "k_norm", "rope_q", "rope_k",
                     "attn", "attn_out", "post_attn_norm", "attn_residual", "ffn_norm", "ffn_gate",
                     "ffn_up", "ffn_act", "ffn_down", "post_ffn_norm", "ffn_residual")
#: Checkpoints outside the blocks (IR op ids ``header.{id}`` / ``footer.{id}``).
HEAD_CHECKPOINTS = ("header.embed",)
FOOT_CHECKPOINTS = ("footer.output_norm", "footer.lm_head")

#: Faults the reference can inject (test-only variants of ops).
FAULT_KINDS = ("rope_theta", "norm_eps", "swap_stride")

#: Activation numerics of the reference's linear ops (the names of ``bringup.resolve.NUMERICS``,
#: recorded in an IR's ``dims.numerics``). ``f32``: x W^T in float64 on the float activations
#: (the model's math). ``ggml-q8``: each token row of x is first rounded to the Q8 format
#: llama.cpp's CPU backend pairs with the weight type (``bringup.resolve.GGML_VEC_DOT_TYPE``,
#: llama.cpp ``type_traits_cpu[type].vec_dot_type``), then x_q W^T in float64 (:func:`q8_activation`).
#: ``forward`` also takes a mapping checkpoint -> activation dtype ("F32", "Q8_0", "Q8_1", "Q8_K"),
#: one per linear op, e.g. from the program's kernel maps (``bringup.xray.activation_contract``).
ACTIVATIONS = ("f32", "ggml-q8")
ACTIVATION_DTYPES = ("F32", "Q8_0", "Q8_1", "Q8_K")


_Q8_BLOCK = {"Q8_0": 32, "Q8_1": 32, "Q8_K": 256}


def _q8_blocks(x: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x [..., n] -> (q float64 [N, block] (integers), d float32 [N, 1] (unrounded), d' float64 [N, 1]
    (the stored scale)), N = x.size / block, blocks in row-major order."""
    block = _Q8_BLOCK.get(fmt)
    if block is None:
        raise BringupError(f"q8_activation: unknown activation format {fmt!r}")
    if x.shape[-1] % block:
        raise BringupError(f"q8_activation: width {x.shape[-1]} is not a multiple of {fmt}'s block {block}")
    b = np.asarray(x, dtype=np.float32).reshape(-1, block)
    amax = np.abs(b).max(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = (amax / np.float32(127)).astype(np.float32)
        inv = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint(b * inv).astype(np.float64)
    stored = d.astype(np.float16) if fmt != "Q8_K" else d
    return q, d, stored.astype(np.float64)


def q8_activation(x: np.ndarray, fmt: str) -> np.ndarray:
    """The values a Q8 activation block format represents for ``x`` (float [..., n], n a multiple
    of the block), as float64, same shape.

    Per block of 32 (Q8_0, Q8_1) or 256 (Q8_K) float32 values: amax = max |x|, d = amax / 127,
    q = round-half-to-even(x * (127 / amax)) (0 when amax = 0), value = d' * q with d' = d rounded to
    float16 for Q8_0 / Q8_1 (ggml-common.h block_q8_0 / block_q8_1 store ``d`` as ggml_half) and the
    float32 d for Q8_K (block_q8_K stores a float). Q8_1's second scale (:func:`q8_1_sum_scale`)
    enters only dot products with weights that have a block minimum. Raises BringupError for an
    unknown format or a width that is not a multiple of the block.
    """
    q, _, dq = _q8_blocks(x, fmt)
    return (q * dq).reshape(x.shape)


def q8_1_sum_scale(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For Q8_1 blocks of ``x`` [T, n]: (s, d' * sum(q)), both float64 [T, n / 32]. ``s`` is what
    block_q8_1 stores (ggml-common.h: ``s = d * sum(qs[i])``, the float32 d times the integer sum,
    rounded to float32 then float16); a dot product with a Q4_1 / Q5_1 weight block adds
    ``m * s`` for the weight block's minimum m, where the dequantized values give ``m * d' * sum(q)``."""
    T = x.shape[0]
    q, d, dq = _q8_blocks(x, "Q8_1")
    sq = q.sum(axis=1, keepdims=True)
    s = (d * sq.astype(np.float32)).astype(np.float32).astype(np.float16).astype(np.float64)
    return s.reshape(T, -1), (dq * sq).reshape(T, -1)


@dataclass(frozen=True)
class Fault:
    """A deliberate error at one layer, to test that parity fails and X-ray finds it.

    kind: ``rope_theta`` (RoPE base ``value`` instead of the model's, at layer ``layer``),
    ``norm_eps`` (``value`` as the attention RMSNorm epsilon at ``layer``), ``swap_stride``
    (the output projection of ``layer`` reads its [n_embd, n_embd] weight with rows and columns
    swapped, as a kernel with swapped strides would).
    """
    kind: str
    layer: int
    value: float | None = None

    def __post_init__(self):
        if self.kind not in FAULT_KINDS:
            raise BringupError(f"unknown fault kind {self.kind!r}; known: {', '.join(FAULT_KINDS)}")


@dataclass
class RefConfig:
    """Hyper-parameters of the reference, read from GGUF keys (``{arch}.*``)."""
    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    rope_theta: float
    norm_eps: float
    rope_dim: int
    sliding_window: int | None = None
    rope_theta_local: float | None = None
    extra: dict = field(default_factory=dict)


def _rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    # RMSNorm (Zhang & Sennrich 2019): x / sqrt(mean(x^2) + eps) * w, over the last axis.
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rope(x: np.ndarray, pos: np.ndarray, theta: float, n_rot: int, neox: bool) -> np.ndarray:
    """RoPE (Su et al. 2021) on x [T, H, D]. Pair layout: 'normal' rotates (x[2i], x[2i+1]) (GGUF
    llama Q/K are stored permuted for this); NEOX rotates (x[i], x[i + n_rot/2])."""
    half = n_rot // 2
    inv = theta ** (-np.arange(half, dtype=np.float64) * 2.0 / n_rot)
    ang = pos[:, None].astype(np.float64) * inv[None, :]          # [T, half]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]   # [T, 1, half]
    out = x.copy()
    if neox:
        a, b = x[..., :half], x[..., half:n_rot]
        out[..., :half] = a * cos - b * sin
        out[..., half:n_rot] = a * sin + b * cos
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * cos - b * sin
        out[..., 1:n_rot:2] = a * sin + b * cos
    return out


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    # GELU, tanh approximation (Hendrycks & Gimpel 2016), as Gemma specifies.
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


class NumpyReference:
    """Float64 forward pass of a GGUF model (architectures ``llama`` and ``gemma3``).

    Weights: ``gguf.quants.dequantize`` of the GGUF tensors, as float64, [out, in]. Every op's
    output is kept when ``capture=True`` (dict ``layer.{L}.{op}`` -> float32 [T, ...]). For X-ray,
    :meth:`forward` can run each op on a program's own dumped inputs (``feed``, teacher forcing
    per op) and with the program's activation numerics (``activations="ggml-q8"``).
    Raises UnsupportedError for other architectures, BringupError for a missing key or tensor.
    """

    SUPPORTED = ("llama", "gemma3")

    def __init__(self, gguf_path: str | os.PathLike, faults: Sequence[Fault] = ()):
        import gguf  # noqa: PLC0415
        from gguf.quants import dequantize  # noqa: PLC0415

        self.gguf_path = Path(gguf_path)
        reader = gguf.GGUFReader(str(self.gguf_path))
        self._fields = reader.fields
        arch = self._str("general.architecture")
        if arch not in self.SUPPORTED:
            raise UnsupportedError(f"numpy reference: architecture {arch!r} not supported "
                                   f"(supported: {', '.join(self.SUPPORTED)})")
        self.faults = tuple(faults)
        self.cfg = self._config(arch)
        self.w: dict[str, np.ndarray] = {}
        self.wtype: dict[str, str] = {}
        self.wmin: dict[str, np.ndarray] = {}   # Q4_1 / Q5_1: per-block minimum m, [out, in / 32]
        for t in reader.tensors:
            self.wtype[t.name] = t.tensor_type.name
            if t.tensor_type.name in ("Q4_1", "Q5_1"):
                self.wmin[t.name] = self._block_min(t.data, t.tensor_type)
            a = dequantize(t.data, t.tensor_type)
            shape = tuple(int(d) for d in reversed(t.shape.tolist()))  # numpy order: [.., ne1, ne0]
            self.w[t.name] = np.asarray(a, dtype=np.float64).reshape(shape)
        if "output.weight" not in self.w:
            self.w["output.weight"] = self.w["token_embd.weight"]  # tied head
            self.wtype["output.weight"] = self.wtype["token_embd.weight"]
            if "token_embd.weight" in self.wmin:
                self.wmin["output.weight"] = self.wmin["token_embd.weight"]
        for f in self.faults:
            if not 0 <= f.layer < self.cfg.n_layer:
                raise BringupError(f"fault at layer {f.layer}: the model has {self.cfg.n_layer} layers")
        self.checkpoint_names = self._checkpoint_names()

    @staticmethod
    def _block_min(data: np.ndarray, qtype) -> np.ndarray:
        """Per-block minimum m of Q4_1 / Q5_1 blocks (value = d * q + m; ggml-common.h block_q4_1 /
        block_q5_1 start with ggml_half d, then ggml_half m): the blocks dequantized by
        ``gguf.quants`` with d set to 0. Returns float64 [rows, blocks per row]."""
        from gguf.quants import dequantize  # noqa: PLC0415
        from bringup.formats import ggml as formats  # noqa: PLC0415

        fmt = formats.by_name(qtype.name)
        bb, be = fmt.block_bytes, fmt.block_elems
        raw = np.array(data, dtype=np.uint8).reshape(-1, bb)
        raw[:, 0:2] = 0   # d = +0.0 in float16
        m = np.asarray(dequantize(raw.reshape(data.shape), qtype), dtype=np.float64)
        return m.reshape(data.shape[0], -1, be)[:, :, 0]

    def with_faults(self, faults: Sequence[Fault]) -> "NumpyReference":
        """A copy sharing these weights (no reload) that injects ``faults``."""
        import copy  # noqa: PLC0415
        other = copy.copy(self)
        for f in faults:
            if not 0 <= f.layer < self.cfg.n_layer:
                raise BringupError(f"fault at layer {f.layer}: the model has {self.cfg.n_layer} layers")
        other.faults = tuple(faults)
        return other

    # -- GGUF keys -----------------------------------------------------------------------------
    def _raw(self, key: str):
        f = self._fields.get(key)
        if f is None:
            return None
        return f.contents()

    def _str(self, key: str) -> str:
        v = self._raw(key)
        if v is None:
            raise BringupError(f"{self.gguf_path.name}: GGUF key {key} is absent")
        return str(v)

    def _num(self, key: str, required: bool = True):
        v = self._raw(key)
        if v is None and required:
            raise BringupError(f"{self.gguf_path.name}: GGUF key {key} is absent")
        return v

    def _config(self, arch: str) -> RefConfig:
        k = lambda s, req=True: self._num(f"{arch}.{s}", req)  # noqa: E731
        n_embd, n_head = int(k("embedding_length")), int(k("attention.head_count"))
        head_dim = k("attention.key_length", False)
        head_dim = int(head_dim) if head_dim is not None else n_embd // n_head
        tok = self._raw("tokenizer.ggml.tokens")
        rope_dim = k("rope.dimension_count", False)
        cfg = RefConfig(
            arch=arch, n_layer=int(k("block_count")), n_embd=n_embd, n_head=n_head,
            n_head_kv=int(k("attention.head_count_kv", False) or n_head), head_dim=head_dim,
            n_ff=int(k("feed_forward_length")), n_vocab=len(tok),
            rope_theta=float(k("rope.freq_base", False) or 10000.0),
            norm_eps=float(k("attention.layer_norm_rms_epsilon")),
            rope_dim=int(rope_dim) if rope_dim is not None else head_dim)
        if arch == "gemma3":
            sw = k("attention.sliding_window", False)
            cfg.sliding_window = int(sw) if sw else None
            # Gemma3 architecture constants that GGUF does not carry: local layers use RoPE base
            # 10000; every 6th layer (index 5, 11, ...) is global (Gemma 3 technical report).
            cfg.rope_theta_local = 10000.0
            cfg.extra["swa_period"] = 6
        return cfg

    def _checkpoint_names(self) -> list[str]:
        skip = {"llama": {"q_norm", "k_norm", "post_attn_norm", "post_ffn_norm"}, "gemma3": set()}[self.cfg.arch]
        names = list(HEAD_CHECKPOINTS)
        for L in range(self.cfg.n_layer):
            names += [f"layer.{L}.{op}" for op in LAYER_CHECKPOINTS if op not in skip]
        return names + list(FOOT_CHECKPOINTS)

    def info(self) -> dict[str, Any]:
        """What the reference is: dtype, dequantizer and package versions, injected faults."""
        return {"name": "numpy-reference", "dtype": "float64", "dequantize": "gguf.quants.dequantize",
                "gguf_version": _pkg_version("gguf"), "numpy_version": np.__version__,
                "architecture": self.cfg.arch, "faults": [f.__dict__ for f in self.faults]}

    # -- forward -------------------------------------------------------------------------------
    def _fault(self, kind: str, layer: int) -> Fault | None:
        for f in self.faults:
            if f.kind == kind and f.layer == layer:
                return f
        return None

    def checkpoint_inputs(self) -> dict[str, list[str]]:
        """Checkpoint -> the checkpoints its op reads, in execution order (the data flow of
        :meth:`forward`; attention reads the rotated Q and K and the V projection of every position
        of the call, i.e. the whole KV cache of a single prefill)."""
        gemma = self.cfg.arch == "gemma3"
        deps: dict[str, list[str]] = {"header.embed": []}
        resid = "header.embed"
        for L in range(self.cfg.n_layer):
            n = f"layer.{L}."
            q, k = (n + "q_norm", n + "k_norm") if gemma else (n + "attn_q", n + "attn_k")
            o = n + ("post_attn_norm" if gemma else "attn_out")
            d = n + ("post_ffn_norm" if gemma else "ffn_down")
            layer = {"attn_norm": [resid], "attn_q": [n + "attn_norm"], "attn_k": [n + "attn_norm"],
                     "attn_v": [n + "attn_norm"], "rope_q": [q], "rope_k": [k],
                     "attn": [n + "rope_q", n + "rope_k", n + "attn_v"], "attn_out": [n + "attn"],
                     "attn_residual": [resid, o], "ffn_norm": [n + "attn_residual"],
                     "ffn_gate": [n + "ffn_norm"], "ffn_up": [n + "ffn_norm"],
                     "ffn_act": [n + "ffn_gate", n + "ffn_up"], "ffn_down": [n + "ffn_act"],
                     "ffn_residual": [n + "attn_residual", d]}
            if gemma:
                layer.update(q_norm=[n + "attn_q"], k_norm=[n + "attn_k"], post_attn_norm=[n + "attn_out"],
                             post_ffn_norm=[n + "ffn_down"])
            deps.update({n + op: layer[op] for op in LAYER_CHECKPOINTS if op in layer})
            resid = n + "ffn_residual"
        deps["footer.output_norm"] = [resid]
        deps["footer.lm_head"] = ["footer.output_norm"]
        return deps

    def forward(self, tokens: Sequence[int], capture: bool = False, cache: dict | None = None,
                last_only: bool = False, feed: dict[str, np.ndarray] | None = None,
                activations: str | dict[str, str] = "f32") -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Logits float32 [T, n_vocab] (or [1, n_vocab] with ``last_only``) for ``tokens``, and the
        checkpoints (empty unless ``capture``).

        Without ``cache`` the tokens sit at positions 0..T-1. With a ``cache`` dict (KV cache:
        layer -> (K, V) after RoPE, filled by earlier calls) they continue after the cached ones.

        ``feed`` (teacher forcing per op, for X-ray): checkpoint name -> float32 [T, width], e.g. a
        program's ``--dump-hidden`` output. Each op then reads the fed value of every input
        checkpoint present in ``feed`` instead of the reference's own, so a captured checkpoint is
        the reference op applied to the fed inputs (:meth:`checkpoint_inputs` lists which).
        Inputs absent from ``feed`` come from the reference (callers report them). Not with
        ``cache`` or ``last_only``; a fed array of another shape raises BringupError.

        ``activations``: one of :data:`ACTIVATIONS` (the linear ops' activation numerics), or a
        mapping linear checkpoint -> activation dtype (:data:`ACTIVATION_DTYPES`); a linear op it
        does not cover raises BringupError.
        """
        c, w = self.cfg, self.w
        toks = np.asarray(tokens, dtype=np.int64)
        if toks.ndim != 1 or toks.size == 0:
            raise BringupError("reference: tokens must be a non-empty 1-D sequence")
        if toks.min() < 0 or toks.max() >= c.n_vocab:
            raise BringupError(f"reference: token id outside the vocabulary [0, {c.n_vocab})")
        if isinstance(activations, str):
            if activations not in ACTIVATIONS:
                raise BringupError(f"reference: activations {activations!r} not in {ACTIVATIONS}")
        elif not set(activations.values()) <= set(ACTIVATION_DTYPES):
            raise BringupError(f"reference: activation dtypes {sorted(set(activations.values()))} "
                               f"not all in {ACTIVATION_DTYPES}")
        if feed is not None and (cache is not None or last_only):
            raise BringupError("reference: feed (teacher forcing per op) works on a whole prefill only")
        T = toks.size
        pos0 = cache[0][0].shape[0] if cache else 0
        pos = np.arange(pos0, pos0 + T)
        kpos = np.arange(pos0 + T)
        cap: dict[str, np.ndarray] = {}

        def keep(name: str, a: np.ndarray) -> np.ndarray:
            """Record the reference's output of op ``name``; return what the next ops read."""
            if capture:
                cap[name] = np.asarray(a, dtype=np.float32).reshape(a.shape[0], -1)
            if feed is None or name not in feed:
                return a
            f = np.asarray(feed[name])
            if f.shape != (a.shape[0], a.size // a.shape[0]):
                raise BringupError(f"reference: fed {name} has shape {f.shape}, the op gives "
                                   f"{(a.shape[0], a.size // a.shape[0])}")
            return f.astype(np.float64).reshape(a.shape)

        def act_dtype(name: str, wname: str) -> str:
            if activations == "f32":
                return "F32"
            if activations == "ggml-q8":
                from bringup.ir.resolve import GGML_VEC_DOT_TYPE  # noqa: PLC0415
                dt = GGML_VEC_DOT_TYPE.get(self.wtype[wname])
            else:
                dt = activations.get(name)
            if dt not in ACTIVATION_DTYPES:
                raise BringupError(f"reference: no activation dtype the reference can apply for {name} "
                                   f"({wname}, {self.wtype[wname]}): {dt!r}")
            return dt

        def linear(name: str, x: np.ndarray, wname: str, wt: np.ndarray | None = None) -> np.ndarray:
            fmt = act_dtype(name, wname)
            if fmt == "F32":
                return x @ (w[wname] if wt is None else wt).T
            x2 = x.reshape(x.shape[0], -1)
            y = q8_activation(x2, fmt) @ (w[wname] if wt is None else wt).T
            if fmt == "Q8_1" and wname in self.wmin and wt is None:
                # the weight minimum multiplies Q8_1's stored s, not d' * sum(q) (a swapped-stride
                # fault's transposed weight has no per-block minimum: float activations' math there)
                s, dsq = q8_1_sum_scale(x2)
                y = y + (s - dsq) @ self.wmin[wname].T
            return y

        gemma = c.arch == "gemma3"
        x = w["token_embd.weight"][toks]
        if gemma:
            x = x * math.sqrt(c.n_embd)  # Gemma scales embeddings by sqrt(d_model)
        x = keep("header.embed", x)
        hd, H, Hkv = c.head_dim, c.n_head, c.n_head_kv
        for L in range(c.n_layer):
            p = f"blk.{L}."
            nm = f"layer.{L}."
            f_eps = self._fault("norm_eps", L)
            h = keep(nm + "attn_norm", _rmsnorm(x, w[p + "attn_norm.weight"], f_eps.value if f_eps else c.norm_eps))
            q = keep(nm + "attn_q", linear(nm + "attn_q", h, p + "attn_q.weight").reshape(T, H, hd))
            k = keep(nm + "attn_k", linear(nm + "attn_k", h, p + "attn_k.weight").reshape(T, Hkv, hd))
            v = keep(nm + "attn_v", linear(nm + "attn_v", h, p + "attn_v.weight").reshape(T, Hkv, hd))
            if gemma:
                q = keep(nm + "q_norm", _rmsnorm(q, w[p + "attn_q_norm.weight"], c.norm_eps))
                k = keep(nm + "k_norm", _rmsnorm(k, w[p + "attn_k_norm.weight"], c.norm_eps))
            is_local = gemma and c.sliding_window and (L + 1) % c.extra["swa_period"] != 0
            theta = c.rope_theta_local if is_local else c.rope_theta
            f_rope = self._fault("rope_theta", L)
            if f_rope:
                theta = f_rope.value
            q = keep(nm + "rope_q", _rope(q, pos, theta, c.rope_dim, neox=gemma))
            k = keep(nm + "rope_k", _rope(k, pos, theta, c.rope_dim, neox=gemma))
            if cache is not None:
                if L in cache:
                    k = np.concatenate([cache[L][0], k])
                    v = np.concatenate([cache[L][1], v])
                cache[L] = (k, v)
            # Causal GQA attention: query head h reads KV head h // (H / Hkv).
            rep = H // Hkv
            kk = np.repeat(k, rep, axis=1)
            vv = np.repeat(v, rep, axis=1)
            scale = 1.0 / math.sqrt(hd)
            s = (q.transpose(1, 0, 2) @ kk.transpose(1, 2, 0)) * scale     # [H, T, T]
            mask = kpos[None, :] > pos[:, None]                      # future
            if is_local:
                mask = mask | (pos[:, None] - kpos[None, :] >= c.sliding_window)
            s = np.where(mask[None], -np.inf, s)
            s = s - s.max(axis=-1, keepdims=True)
            pr = np.exp(s)
            pr /= pr.sum(axis=-1, keepdims=True)
            a = keep(nm + "attn", (pr @ vv.transpose(1, 0, 2)).transpose(1, 0, 2).reshape(T, H * hd))
            wo = None
            if self._fault("swap_stride", L):
                wo = w[p + "attn_output.weight"]
                if wo.shape[0] != wo.shape[1]:
                    raise BringupError("swap_stride fault needs a square output projection")
                wo = wo.T
            o = keep(nm + "attn_out", linear(nm + "attn_out", a, p + "attn_output.weight", wo))
            if gemma:
                o = keep(nm + "post_attn_norm", _rmsnorm(o, w[p + "post_attention_norm.weight"], c.norm_eps))
            x = keep(nm + "attn_residual", x + o)
            h = keep(nm + "ffn_norm", _rmsnorm(x, w[p + "ffn_norm.weight"], c.norm_eps))
            g = keep(nm + "ffn_gate", linear(nm + "ffn_gate", h, p + "ffn_gate.weight"))
            u = keep(nm + "ffn_up", linear(nm + "ffn_up", h, p + "ffn_up.weight"))
            act = keep(nm + "ffn_act", (_gelu_tanh(g) if gemma else g / (1.0 + np.exp(-g))) * u)  # GeGLU / SwiGLU
            d = keep(nm + "ffn_down", linear(nm + "ffn_down", act, p + "ffn_down.weight"))
            if gemma:
                d = keep(nm + "post_ffn_norm", _rmsnorm(d, w[p + "post_ffw_norm.weight"], c.norm_eps))
            x = keep(nm + "ffn_residual", x + d)
        x = keep("footer.output_norm", _rmsnorm(x, w["output_norm.weight"], c.norm_eps))
        logits = linear("footer.lm_head", x[-1:] if last_only else x, "output.weight")
        keep("footer.lm_head", logits)
        return logits.astype(np.float32), cap

    # -- program interface ---------------------------------------------------------------------
    def logits_all(self, tokens: Sequence[int]) -> np.ndarray:
        return self.forward(tokens)[0]

    def greedy(self, tokens: Sequence[int], n: int, eog: Sequence[int] = ()) -> list[int]:
        """Greedy (argmax) continuation of up to ``n`` tokens, with a KV cache; stops after a token
        in ``eog``."""
        cache: dict = {}
        logits = self.forward(tokens, cache=cache, last_only=True)[0]
        out: list[int] = []
        while len(out) < n:
            nxt = int(np.argmax(logits[-1]))
            out.append(nxt)
            if nxt in eog or len(out) == n:
                break
            logits = self.forward([nxt], cache=cache, last_only=True)[0]
        return out


def _pkg_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415
    try:
        return version(name)
    except PackageNotFoundError:
        return None
