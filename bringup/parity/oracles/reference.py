"""The numpy reference: a float64 forward pass of a GGUF model, independent of llama.cpp and of our C.

Weights are dequantized by ``gguf.quants.dequantize``; the ops are written from the architecture
papers and the GGUF conventions (not from llama.cpp's or our C). It is the source of per-op hidden
states for X-ray, computed on the program's own inputs to each op (teacher forcing per op), and
it can run with injected faults (wrong RoPE theta, wrong norm eps, swapped stride at one layer) to
stand in for a broken program under test. (The PyTorch/transformers oracle was not adopted: torch
+ transformers are a multi-hundred-MB install for CI, and transformers' GGUF loader dequantizes
with the same gguf-py code anyway.)
"""
from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any, Sequence

import gguf
import numpy as np
from gguf.quants import dequantize

from bringup.core.errors import BringupError, UnsupportedError
from bringup.formats import ggml as formats
from bringup.parity.oracles.q8 import ACTIVATION_DTYPES, q8_1_sum_scale, q8_activation

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

#: Activation numerics of the reference's linear ops (the names of ``bringup.ir.resolve.NUMERICS``,
#: recorded in an IR's ``dims.numerics``). ``f32``: x W^T in float64 on the float activations
#: (the model's math). ``ggml-q8``: each token row of x is first rounded to the Q8 format
#: llama.cpp's CPU backend pairs with the weight type (``bringup.formats.ggml.vec_dot_types()``,
#: llama.cpp ``type_traits_cpu[type].vec_dot_type``), then x_q W^T in float64 (:func:`q8_activation`).
#: ``forward`` also takes a mapping checkpoint -> activation dtype ("F32", "Q8_0", "Q8_1", "Q8_K"),
#: one per linear op, e.g. from the program's kernel maps (``bringup.parity.xray.activation_contract``).
ACTIVATIONS = ("f32", "ggml-q8")


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
        fmt = formats.by_name(qtype.name)
        bb, be = fmt.block_bytes, fmt.block_elems
        raw = np.array(data, dtype=np.uint8).reshape(-1, bb)
        raw[:, 0:2] = 0   # d = +0.0 in float16
        m = np.asarray(dequantize(raw.reshape(data.shape), qtype), dtype=np.float64)
        return m.reshape(data.shape[0], -1, be)[:, :, 0]

    def with_faults(self, faults: Sequence[Fault]) -> "NumpyReference":
        """A copy sharing these weights (no reload) that injects ``faults``."""
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
                "gguf_version": version("gguf"), "numpy_version": np.__version__,
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
                dt = formats.vec_dot_types().get(self.wtype[wname])
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

