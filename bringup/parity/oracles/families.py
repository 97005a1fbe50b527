"""What the numpy reference computes for each architecture family, and how its checkpoints are named.

A family is a set of switches on one pre-norm decoder block, each read from the family's paper or
model card and from the GGUF conventions (gguf-py ``MODEL_TENSORS`` / ``convert_hf_to_gguf.py``):

- llama (Touvron et al. 2023): RMSNorm, RoPE on interleaved pairs (the GGUF converter permutes
  HF's Q/K rows so that the pairs (2i, 2i+1) rotate together), SwiGLU MLP. With
  ``llama.expert_count`` (Mixtral, Jiang et al. 2024) every FFN is routed as qwen3moe's below
  (softmax, top-k renormalized), the experts feed_forward_length wide (:func:`family_of`).
- mistral3 (Ministral 3): the llama block; its GGUF may give head_dim (``attention.key_length``)
  independently of n_embd / n_head. YaRN and attention temperature scaling are refused.
- qwen2 (Qwen2 technical report, 2024): the llama block with biases on the Q, K and V projections
  and RoPE on half-split pairs (i, i + d/2), HF's ``rotate_half`` (NeoX layout, kept by the converter).
- qwen3 (Qwen3 technical report, 2025): qwen2 without the QKV biases, with RMSNorm over each Q and
  K head (weight [head_dim]) before RoPE.
- gemma3 (Gemma 3 technical report, 2025): embeddings times sqrt(n_embd), Q/K head norms, RMSNorm
  after attention and after the MLP, GeGLU (tanh GELU), NeoX RoPE with base 10000 on the local
  (sliding-window) layers and every 6th layer global. (The converter already added Gemma's +1 to
  the RMSNorm weights.)
- gemma2 (Gemma 2 technical report, 2024): the gemma3 block without the Q/K head norms; attention
  logits soft-capped, cap * tanh(logit / cap) after the 1/sqrt(head_dim) scale (cap 50), and the
  final logits too (cap 30; GGUF ``attn_logit_softcapping`` / ``final_logit_softcapping``);
  local (sliding-window) and global layers alternate, the first local; one RoPE base on every
  layer unless the GGUF gives ``rope.freq_base_swa``.
- phi3 (Phi-3 technical report, 2024): one fused ``attn_qkv`` projection (rows: Q [n_head *
  head_dim], K, V [n_head_kv * head_dim each], HF ``Phi3Attention.qkv_proj``), one fused ``ffn_up``
  of 2 * n_ff rows whose first half is the gate and second half the up projection (HF
  ``Phi3MLP.gate_up_proj`` + ``chunk(2)``), SwiGLU, NeoX RoPE. The reference cuts the fused
  weights into those row ranges when it loads them (row i of a product is row i of the weight),
  so its block is the unfused one. LongRoPE (``rope_factors_*`` tensors) is refused; the sliding
  window of some Phi-3 configs is not applied (llama.cpp disables it for phi3 too, so parity is
  against the same model).
- qwen3moe (Qwen3 technical report, 2025; Shazeer et al. 2017 / Fedus et al. 2021 for routed
  experts): the qwen3 block whose FFN is routed: router logits z = x W_r^T over n_expert experts,
  p = softmax(z), the n_expert_used largest p (ties to the lower expert index), their p divided
  by their sum, and the sum of those weights times each selected expert's SwiGLU FFN (the stacked
  ``ffn_{gate,up,down}_exps`` tensors, expert e = index e of the outermost axis).
- olmoe (OLMoE, Muennighoff et al. 2024): the routed block of qwen3moe with RMSNorm over the
  whole Q and K projections (weights [n_embd]) instead of per head, and the selected experts'
  softmax weights used as they are (no renormalization); untied head.

Checkpoint names are IR op ids (``header.embed``, ``layer.{L}.{op}``, ``footer.{op}``), the op ids
of ``circuits/<family>.json``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from bringup.core.errors import BringupError, UnsupportedError

#: Checkpoint names inside one transformer block, in execution order: the op ids of the block
#: section of ``circuits/*.json`` (the union over families). A checkpoint is the output of that
#: op, so the IR op id (``layer.{L}.{id}``) names it in the runtime's ``--dump-hidden`` output,
#: here and in X-ray.
LAYER_CHECKPOINTS = ("attn_norm", "attn_q", "attn_k", "attn_v", "q_norm", "k_norm", "rope_q",
                     "rope_k", "attn", "attn_out", "post_attn_norm", "attn_residual", "ffn_norm", "ffn_gate",
                     "ffn_up", "ffn_act", "ffn_down", "ffn_router", "ffn_experts", "post_ffn_norm",
                     "ffn_residual")
#: the dense FFN's checkpoints, and the routed FFN's (a MoE family has the latter instead)
DENSE_FFN = ("ffn_gate", "ffn_up", "ffn_act", "ffn_down")
MOE_FFN = ("ffn_router", "ffn_experts")
#: Checkpoints outside the blocks (IR op ids ``header.{id}`` / ``footer.{id}``); a family with a
#: final soft-cap adds ``footer.final_softcap`` after ``footer.lm_head``.
HEAD_CHECKPOINTS = ("header.embed",)
FOOT_CHECKPOINTS = ("footer.output_norm", "footer.lm_head")
SOFTCAP_CHECKPOINT = "footer.final_softcap"


@dataclass(frozen=True)
class Family:
    """The switches of one architecture's block (module docstring gives the source of each)."""
    neox: bool = False             # RoPE pairs (i, i + n_rot/2) instead of (2i, 2i+1)
    qkv_bias: bool = False         # attn_{q,k,v}.bias are part of the architecture (required)
    qk_norm: bool = False          # RMSNorm over each Q and K head before RoPE
    post_norms: bool = False       # RMSNorm on the attention and MLP outputs (sandwich norms)
    embed_scale: bool = False      # embeddings times sqrt(n_embd)
    gelu: bool = False             # GeGLU (tanh GELU) instead of SwiGLU
    swa_period: int | None = None  # layer L is local (sliding window) iff (L + 1) % period != 0
    local_rope_base: float | None = None  # RoPE base of local layers without rope.freq_base_swa (None: the global one)
    attn_softcap: float | None = None   # attention logit soft-cap without attn_logit_softcapping (None: none)
    final_softcap: float | None = None  # final logit soft-cap without final_logit_softcapping (None: none)
    fused_qkv: bool = False        # the GGUF stores Q, K, V as one attn_qkv (split on load)
    fused_gate_up: bool = False    # the GGUF stores one ffn_up of rows [gate | up] (split on load)
    moe: bool = False              # routed experts instead of one FFN (softmax gating, top-k)
    moe_optional: bool = False     # routed experts exactly when {arch}.expert_count is present (llama: Mixtral)
    moe_norm: bool = True          # the selected experts' weights renormalized to sum 1
    qk_norm_full: bool = False     # the Q / K RMSNorm spans the whole projection, not each head


FAMILIES = {
    # Mixtral is llama with llama.expert_count (src/models/llama.cpp: the MoE branch, softmax,
    # renormalized top-k, experts feed_forward_length wide): family_of gives it moe=True
    "llama": Family(moe_optional=True),
    "mistral3": Family(),
    "qwen2": Family(neox=True, qkv_bias=True),
    "qwen3": Family(neox=True, qk_norm=True),
    "gemma3": Family(neox=True, qk_norm=True, post_norms=True, embed_scale=True, gelu=True, swa_period=6,
                     local_rope_base=10000.0),
    "gemma2": Family(neox=True, post_norms=True, embed_scale=True, gelu=True, swa_period=2, attn_softcap=50.0,
                     final_softcap=30.0),
    "phi3": Family(neox=True, fused_qkv=True, fused_gate_up=True),
    "qwen3moe": Family(neox=True, qk_norm=True, moe=True),
    "olmoe": Family(neox=True, qk_norm=True, qk_norm_full=True, moe=True, moe_norm=False),
}


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
    head_dim_v: int | None = None   # attention.value_length; None: head_dim
    attn_softcap: float | None = None   # attention logit soft-cap (None: none)
    final_softcap: float | None = None  # final logit soft-cap (None: none)
    extra: dict = field(default_factory=dict)


def layer_ops(fam: Family) -> tuple[str, ...]:
    """The block's checkpoint op ids for ``fam``, in execution order (a subset of LAYER_CHECKPOINTS)."""
    skip = set()
    if not fam.qk_norm:
        skip |= {"q_norm", "k_norm"}
    if not fam.post_norms:
        skip |= {"post_attn_norm", "post_ffn_norm"}
    skip |= set(DENSE_FFN if fam.moe else MOE_FFN)
    return tuple(op for op in LAYER_CHECKPOINTS if op not in skip)


def checkpoint_names(fam: Family, n_layer: int) -> list[str]:
    """Every checkpoint of a forward pass, in execution order."""
    names = list(HEAD_CHECKPOINTS)
    ops = layer_ops(fam)
    for L in range(n_layer):
        names += [f"layer.{L}.{op}" for op in ops]
    return names + list(FOOT_CHECKPOINTS) + ([SOFTCAP_CHECKPOINT] if fam.final_softcap else [])


def checkpoint_inputs(fam: Family, n_layer: int) -> dict[str, list[str]]:
    """Checkpoint -> the checkpoints its op reads, in execution order (the data flow of
    ``NumpyReference.forward``; attention reads the rotated Q and K and the V projection of every
    position of the call, i.e. the whole KV cache of a single prefill)."""
    deps: dict[str, list[str]] = {"header.embed": []}
    ops = layer_ops(fam)
    resid = "header.embed"
    for L in range(n_layer):
        n = f"layer.{L}."
        q, k = (n + "q_norm", n + "k_norm") if fam.qk_norm else (n + "attn_q", n + "attn_k")
        v = n + "attn_v"
        o = n + ("post_attn_norm" if fam.post_norms else "attn_out")
        d = n + ("post_ffn_norm" if fam.post_norms else "ffn_experts" if fam.moe else "ffn_down")
        act_in = [n + "ffn_gate", n + "ffn_up"]
        layer = {"attn_norm": [resid], "attn_q": [n + "attn_norm"],
                 "attn_k": [n + "attn_norm"], "attn_v": [n + "attn_norm"], "q_norm": [n + "attn_q"],
                 "k_norm": [n + "attn_k"], "rope_q": [q], "rope_k": [k],
                 "attn": [n + "rope_q", n + "rope_k", v], "attn_out": [n + "attn"],
                 "post_attn_norm": [n + "attn_out"], "attn_residual": [resid, o],
                 "ffn_norm": [n + "attn_residual"], "ffn_gate": [n + "ffn_norm"], "ffn_up": [n + "ffn_norm"],
                 "ffn_act": act_in, "ffn_down": [n + "ffn_act"], "ffn_router": [n + "ffn_norm"],
                 "ffn_experts": [n + "ffn_norm", n + "ffn_router"],
                 "post_ffn_norm": [n + ("ffn_experts" if fam.moe else "ffn_down")],
                 "ffn_residual": [n + "attn_residual", d]}
        deps.update({n + op: layer[op] for op in ops})
        resid = n + "ffn_residual"
    deps["footer.output_norm"] = [resid]
    deps["footer.lm_head"] = ["footer.output_norm"]
    if fam.final_softcap:
        deps[SOFTCAP_CHECKPOINT] = ["footer.lm_head"]
    return deps


def required_tensors(fam: Family, n_layer: int) -> list[str]:
    """GGUF tensor names the reference reads for ``fam`` (``output.weight`` may be absent: tied head)."""
    per_layer = ["attn_norm.weight", "attn_output.weight", "ffn_norm.weight"]
    per_layer += ["ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"] \
        if fam.moe else ["ffn_up.weight", "ffn_down.weight"]
    per_layer += ["attn_qkv.weight"] if fam.fused_qkv else ["attn_q.weight", "attn_k.weight", "attn_v.weight"]
    if not fam.fused_gate_up and not fam.moe:
        per_layer.append("ffn_gate.weight")
    if fam.qkv_bias:
        per_layer += ["attn_q.bias", "attn_k.bias", "attn_v.bias"]
    if fam.qk_norm:
        per_layer += ["attn_q_norm.weight", "attn_k_norm.weight"]
    if fam.post_norms:
        per_layer += ["post_attention_norm.weight", "post_ffw_norm.weight"]
    names = ["token_embd.weight", "output_norm.weight"]
    for L in range(n_layer):
        names += [f"blk.{L}.{t}" for t in per_layer]
    return names


def family_of(arch: str, get: Callable[[str, str], Any]) -> Family:
    """The block of ``arch`` for this GGUF: FAMILIES[arch], routed (moe=True) when the family's
    experts are optional and ``{arch}.expert_count`` is present (as convert chooses circuit llama_moe
    from the same key). ``get`` as in :func:`read_config`."""
    fam = FAMILIES[arch]
    if fam.moe_optional and get(f"{arch}.expert_count", "int") is not None:
        return replace(fam, moe=True)
    return fam


def read_config(arch: str, get: Callable[[str, str], Any], where: str) -> RefConfig:
    """The reference's hyper-parameters from GGUF keys: ``get(key, kind)`` returns a key's value
    or None, refusing one not stored with a GGUF type of ``kind`` ("int", "float", "str":
    ``bringup.formats.gguf_types.typed_field``, as convert reads them).

    Keys (gguf-py ``Keys.LLM`` / ``Keys.Attention`` / ``Keys.Rope``, prefix ``{arch}.``):
    block_count, embedding_length, attention.head_count, feed_forward_length and
    attention.layer_norm_rms_epsilon are required; head_count_kv defaults to head_count,
    key_length (head_dim) to n_embd / n_head, value_length to head_dim, rope.dimension_count to
    head_dim, rope.freq_base to 10000, attn_logit_softcapping / final_logit_softcapping to the
    family's caps (Family). n_vocab is the length of tokenizer.ggml.tokens. Raises
    BringupError for an absent required key (``where`` names the file), UnsupportedError for RoPE
    scaling (``rope.scaling.type`` other than none, as ``bringup.convert`` refuses it too) or an
    attention temperature scale, which the reference does not compute.
    """
    def k(s: str, required: bool = True, kind: str = "int"):
        v = get(f"{arch}.{s}", kind)
        if v is None and required:
            raise BringupError(f"{where}: GGUF key {arch}.{s} is absent")
        return v

    scaling = k("rope.scaling.type", False, "str")
    if scaling not in (None, "none"):
        raise UnsupportedError(f"numpy reference: RoPE scaling {scaling!r} ({arch}.rope.scaling.type) "
                               "is not supported")
    if k("attention.temperature_scale", False, "float"):
        raise UnsupportedError(f"numpy reference: attention temperature scaling "
                               f"({arch}.attention.temperature_scale) is not supported")
    n_embd, n_head = int(k("embedding_length")), int(k("attention.head_count"))
    head_dim = k("attention.key_length", False)
    head_dim = int(head_dim) if head_dim is not None else n_embd // n_head
    head_dim_v = k("attention.value_length", False)
    tok = get("tokenizer.ggml.tokens", "str")
    if tok is None:
        raise BringupError(f"{where}: GGUF key tokenizer.ggml.tokens is absent")
    rope_dim = k("rope.dimension_count", False)
    cfg = RefConfig(
        arch=arch, n_layer=int(k("block_count")), n_embd=n_embd, n_head=n_head,
        n_head_kv=int(k("attention.head_count_kv", False) or n_head), head_dim=head_dim,
        n_ff=int(k("feed_forward_length")), n_vocab=len(tok),
        rope_theta=float(k("rope.freq_base", False, "float") or 10000.0),
        norm_eps=float(k("attention.layer_norm_rms_epsilon", True, "float")),
        rope_dim=int(rope_dim) if rope_dim is not None else head_dim,
        head_dim_v=int(head_dim_v) if head_dim_v is not None else head_dim)
    fam = family_of(arch, get)
    if fam.swa_period:
        sw = k("attention.sliding_window", False)
        cfg.sliding_window = int(sw) if sw else None
        # Gemma 3 technical report: local layers use RoPE base 10000 (GGUF carries it only as the
        # optional rope.freq_base_swa); every swa_period-th layer (index 5, 11, ...) is global.
        # Gemma 2: one base for all layers.
        cfg.rope_theta_local = float(k("rope.freq_base_swa", False, "float") or fam.local_rope_base or cfg.rope_theta)
        cfg.extra["swa_period"] = fam.swa_period
    if fam.attn_softcap:
        cfg.attn_softcap = float(k("attn_logit_softcapping", False, "float") or fam.attn_softcap)
    if fam.final_softcap:
        cfg.final_softcap = float(k("final_logit_softcapping", False, "float") or fam.final_softcap)
    if fam.moe:
        n_expert, n_used = int(k("expert_count")), int(k("expert_used_count"))
        if not 1 <= n_used <= n_expert:
            raise BringupError(f"{where}: {arch}.expert_used_count {n_used} is not in [1, expert_count {n_expert}]")
        cfg.extra.update(n_expert=n_expert, n_expert_used=n_used, norm_topk=fam.moe_norm)
    return cfg
