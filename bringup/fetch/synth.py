"""Generated models: a deterministic GGUF writer for families whose weights cannot be downloaded.

A registry entry pins a generated model like any other (config/models.yaml): its URI names the
generator version, the architecture, the shape, the seed, the weight format and a vocabulary
GGUF that llama.cpp ships (resource ``llama_cpp_vocab``), and its sha256 is that of the file
this module must produce. Same URI, same bytes (gguf==0.19.0 and numpy==2.4.6 are pinned).

    synth://bringup-synth-v1/<arch>?vocab=<v>&n_layer=<int>&n_embd=<int>&n_head=<int>
        &n_head_kv=<int>&n_ff=<int>&n_ctx=<int>&seed=<int>&wtype=<format>

Every key is required, once; head_dim = n_embd / n_head. A mixture-of-experts family
(Family.moe) also requires ``n_expert`` and ``n_expert_used``; its ``n_ff`` is each expert's width.
A family whose experts are optional (Family.moe_optional: llama, which llama.cpp loads as Mixtral
when ``llama.expert_count`` is present) takes both keys or neither. Metadata keys and tensor names are the
ones llama.cpp's loader reads for the architecture (src/models/<arch>.cpp, src/llama-arch.cpp),
spelled through gguf-py's constants; the tokenizer.* keys (chat template included) are copied
unchanged from ``ggml-vocab-<v>.gguf`` (plus the family's template where it has none). Weights are uniform random numbers from a per-tensor
PCG64 stream, scaled so the next-token distribution is peaked (docs/generated_models.md).
A changed generator is a new version string, hence a visible registry diff.
"""
from __future__ import annotations

import ctypes
import dataclasses
import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from bringup.core.errors import BringupError, UnavailableError
from bringup.fetch.synth_draw import BLOCK_WTYPES, UNIFORM_CHUNK, Draw, block_memory_bytes, uniform, write_blocks
from bringup.formats import gguf_file
from bringup.fetch.synth_templates import GEMMA, MISTRAL_V7_TEKKEN

GENERATOR = "bringup-synth-v1"
VOCAB_RESOURCE = "llama_cpp_vocab"  # registry resource holding llama.cpp's models/ folder

# Formats gguf.quants.quantize can write (gguf 0.19.0) that have linear and embed providers in
# kernel_maps/ (linear.<fmt>.*.json, embed.<fmt>.scalar.json). K-quants have providers but no
# quantizer in gguf-py, so they cannot be generated here.
WTYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")
# llama.cpp file types (llama-quantize presets) a model can be made in: generated in the base
# format, then quantized by llama.cpp's own llama_model_quantize (the pinned oracle package,
# llama-cpp-python) with one thread, which gives the same bytes every time. ftype -> (base format,
# row multiple: K-quant super-blocks are 256 wide).
LLAMA_FTYPES = {"Q4_K_M": ("F16", 256)}

# key -> inclusive range. Small on purpose: a generated model is a test vehicle of a few MB.
RANGES = {"n_layer": (1, 16), "n_embd": (32, 4096), "n_head": (1, 64), "n_head_kv": (1, 64),
          "n_ff": (32, 16384), "n_ctx": (16, 131072), "seed": (0, 2**32 - 1)}
KEYS = ("vocab", *RANGES, "wtype")
# the extra keys of a mixture-of-experts family (Family.moe): experts per layer, experts per token
MOE_RANGES = {"n_expert": (1, 256), "n_expert_used": (1, 64)}
MOE_KEYS = (*KEYS, *MOE_RANGES)

_URI = re.compile(r"^synth://(?P<gen>[^/?]+)/(?P<arch>[^/?]+)\?(?P<query>.*)$")
_VOCAB = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
_INT = re.compile(r"^(0|[1-9][0-9]{0,9})$")


@dataclass(frozen=True)
class Family:
    """What distinguishes one architecture's GGUF layout, read from llama.cpp's loader."""
    source: str                        # llama.cpp file the layout and keys were read from
    rope_theta: float                  # <arch>.rope.freq_base, the family's usual value
    norm_eps: float                    # <arch>.attention.layer_norm_rms_epsilon
    tied: bool                         # no output.weight: llama.cpp reuses token_embd
    qkv_bias: bool = False             # attn_{q,k,v}.bias (Qwen2)
    qk_norm: bool = False              # attn_{q,k}_norm over each head (Qwen3)
    post_norms: bool = False           # post_attention_norm, post_ffw_norm (Gemma 2)
    fused_qkv: bool = False            # one attn_qkv of n_embd + 2 * n_embd_kv rows (Phi-3)
    fused_gate_up: bool = False        # ffn_up of 2 * n_ff rows, gate first (Phi-3)
    embed_scale_sqrt: bool = False     # the graph multiplies embeddings by sqrt(n_embd) (Gemma)
    head_dim_keys: bool = False        # write attention.key_length / value_length
    rope_dim_key: bool = False         # write rope.dimension_count
    sliding_window: int | None = None  # attention.sliding_window
    attn_softcap: float | None = None  # attn_logit_softcapping
    final_softcap: float | None = None  # final_logit_softcapping
    chat_template: str | None = None   # written when the vocabulary carries none (see below)
    moe: bool = False                  # routed experts: ffn_gate_inp + stacked ffn_*_exps
    moe_optional: bool = False         # routed experts when the URI gives n_expert (llama -> Mixtral)
    moe_chat_template: str | None = None  # chat_template of the routed layout (else chat_template)
    qk_norm_full: bool = False         # attn_{q,k}_norm over the whole Q / K row (OLMoE)


FAMILIES = {
    # Llama 3.2 1B's layout: tied head, RoPE base 500000 (its llama3 per-dimension frequency scaling,
    # a rope_freqs tensor, is left out: the reference refuses it and a generated model needs none)
    # With n_expert / n_expert_used: Mixtral's layout, which llama.cpp loads as llama (n_expert > 0:
    # ffn_gate_inp + stacked ffn_*_exps of width feed_forward_length, no expert_feed_forward_length).
    # Its chat template (for vocabularies without one): mistral3's V7-tekken, the Mistral turn format
    # circuit llama_moe declares (Mixtral-Instruct's own [INST] v1 format is not a circuit format yet).
    "llama": Family("src/models/llama.cpp", 5e5, 1e-5, tied=True, moe_optional=True,
                    moe_chat_template=MISTRAL_V7_TEKKEN),
    "qwen2": Family("src/models/qwen2.cpp", 1e6, 1e-6, tied=True, qkv_bias=True),
    "qwen3": Family("src/models/qwen3.cpp", 1e6, 1e-6, tied=True, qk_norm=True, head_dim_keys=True),
    # llama.cpp qwen3moe: qwen3 attention, every layer's FFN routed (softmax, top-k, renormalized)
    "qwen3moe": Family("src/models/qwen3moe.cpp", 1e6, 1e-6, tied=True, qk_norm=True, head_dim_keys=True,
                       moe=True),
    # llama.cpp olmoe: Q/K RMSNorm over the whole projection (so n_head_kv = n_head), untied
    # head, routed FFN whose selected weights are not renormalized
    "olmoe": Family("src/models/olmoe.cpp", 1e4, 1e-5, tied=False, qk_norm_full=True, moe=True),
    "mistral3": Family("src/models/mistral3.cpp", 1e6, 1e-5, tied=False, head_dim_keys=True,
                       chat_template=MISTRAL_V7_TEKKEN),
    "phi3": Family("src/models/phi3.cpp", 1e4, 1e-5, tied=False, fused_qkv=True, fused_gate_up=True,
                   rope_dim_key=True),
    # llama.cpp's gemma2 loader never reads output.weight (the head is always token_embd)
    "gemma2": Family("src/models/gemma2.cpp", 1e4, 1e-6, tied=True, post_norms=True,
                     embed_scale_sqrt=True, head_dim_keys=True, sliding_window=32,
                     attn_softcap=50.0, final_softcap=30.0, chat_template=GEMMA),
}

# Scale targets (RMS over entries). LOGIT_RMS: the maximum of n_vocab random logits lies about
# sqrt(2 ln n_vocab) ~ 4.6 RMS above their mean, so the top-1 probability is about 0.1-0.3
# instead of 1/n_vocab. EMBED_RMS < SUBLAYER_RMS: with a tied head, the token's own embedding in
# the residual stream would otherwise win every step and greedy decoding would repeat it.
LOGIT_RMS = 4.0
EMBED_RMS = 0.1
SUBLAYER_RMS = 1.5
BIAS_RMS = 0.1  # a V bias adds one vector at every position: 0.3 made a few tokens win everywhere
NORM_SPREAD = 0.1  # norm weights are 1 +- this (uniform)


@dataclass(frozen=True)
class SynthSpec:
    """A parsed synth:// URI: generator version, architecture and every generation parameter."""
    generator: str
    arch: str
    vocab: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_ctx: int
    seed: int
    wtype: str
    n_expert: int = 0        # 0: a dense family
    n_expert_used: int = 0

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


def parse(text: str) -> SynthSpec:
    """Parse ``synth://<generator>/<arch>?<key>=<value>&...`` strictly.

    Raises BringupError (one line) for another generator version, an unknown architecture, a
    missing, repeated or unknown key, a non-decimal or out-of-range integer (RANGES), an unknown
    weight format (WTYPES), or a shape the architecture or format cannot have: n_embd a multiple
    of n_head with an even head_dim, n_head a multiple of n_head_kv, n_embd and n_ff multiples of
    the format's block size.
    """
    m = _URI.match(text)
    if not m:
        raise BringupError(f"bad synth URI {text!r}: expected synth://{GENERATOR}/<arch>?key=value&...")
    if m["gen"] != GENERATOR:
        raise BringupError(f"synth URI {text!r}: generator {m['gen']!r} is not this one ({GENERATOR})")
    if m["arch"] not in FAMILIES:
        raise BringupError(f"synth URI {text!r}: architecture {m['arch']!r} is not generated "
                           f"(known: {', '.join(sorted(FAMILIES))})")
    fam = FAMILIES[m["arch"]]
    keys = MOE_KEYS if fam.moe or fam.moe_optional else KEYS
    values: dict[str, str] = {}
    for item in m["query"].split("&"):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise BringupError(f"synth URI {text!r}: {item!r} is not key=value")
        if key not in keys:
            raise BringupError(f"synth URI {text!r}: unknown key {key!r} (keys: {', '.join(keys)})")
        if key in values:
            raise BringupError(f"synth URI {text!r}: key {key!r} given twice")
        values[key] = value
    if fam.moe_optional and not any(k in values for k in MOE_RANGES):
        keys = KEYS   # the dense layout
    missing = [k for k in keys if k not in values]
    if missing:
        raise BringupError(f"synth URI {text!r}: missing key(s) {', '.join(missing)}")
    ranges = {**RANGES, **MOE_RANGES} if keys is MOE_KEYS else RANGES
    ints = {k: _int(text, k, values[k], ranges[k]) for k in ranges}
    if not _VOCAB.match(values["vocab"]):
        raise BringupError(f"synth URI {text!r}: vocab {values['vocab']!r} is not a vocabulary name "
                           "(the <v> of llama.cpp's models/ggml-vocab-<v>.gguf)")
    if values["wtype"] not in (*WTYPES, *LLAMA_FTYPES, *BLOCK_WTYPES):
        raise BringupError(f"synth URI {text!r}: wtype {values['wtype']!r} is not one of "
                           f"{', '.join(WTYPES + tuple(LLAMA_FTYPES) + tuple(BLOCK_WTYPES))}")
    spec = SynthSpec(m["gen"], m["arch"], values["vocab"], wtype=values["wtype"], **ints)
    _check_shape(text, spec)
    return spec


def _int(text: str, key: str, value: str, bounds: tuple[int, int]) -> int:
    lo, hi = bounds
    if not _INT.match(value) or not lo <= int(value) <= hi:
        raise BringupError(f"synth URI {text!r}: {key}={value!r} is not an integer in [{lo}, {hi}]")
    return int(value)


def _check_shape(text: str, s: SynthSpec) -> None:
    block = LLAMA_FTYPES[s.wtype][1] if s.wtype in LLAMA_FTYPES else BLOCK_WTYPES[s.wtype] \
        if s.wtype in BLOCK_WTYPES else gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[s.wtype]][0]
    problems = []
    if s.n_embd % s.n_head or (s.n_embd // s.n_head) % 2:
        problems.append(f"n_embd {s.n_embd} / n_head {s.n_head} must be an even head_dim (RoPE pairs)")
    if s.n_head % s.n_head_kv:
        problems.append(f"n_head {s.n_head} must be a multiple of n_head_kv {s.n_head_kv}")
    for k in ("n_embd", "n_ff"):
        if getattr(s, k) % block:
            problems.append(f"{k} {getattr(s, k)} must be a multiple of the {s.wtype} block size {block}")
    if FAMILIES[s.arch].qk_norm_full and s.n_head_kv != s.n_head:
        problems.append(f"n_head_kv {s.n_head_kv} must equal n_head {s.n_head} ({s.arch}: K norm weight of n_embd)")
    if s.n_expert_used > s.n_expert:
        problems.append(f"n_expert_used {s.n_expert_used} exceeds n_expert {s.n_expert}")
    if problems:
        raise BringupError(f"synth URI {text!r}: {'; '.join(problems)}")


def vocab_file(spec: SynthSpec, vocab_dir: Path) -> Path:
    """``<vocab_dir>/ggml-vocab-<spec.vocab>.gguf``; BringupError naming the available ones if absent."""
    path = Path(vocab_dir) / f"ggml-vocab-{spec.vocab}.gguf"
    if not path.is_file():
        have = sorted(p.name[len("ggml-vocab-"):-len(".gguf")] for p in Path(vocab_dir).glob("ggml-vocab-*.gguf"))
        raise BringupError(f"vocabulary {spec.vocab!r}: no {path.name} in {vocab_dir} (have: {', '.join(have)})")
    return path


def generate(spec: SynthSpec, vocab_dir: Path, out: Path) -> Path:
    """Write the GGUF that ``spec`` names to ``out`` (overwritten) and return ``out``.

    Tensors: as llama.cpp's loader for ``spec.arch`` creates them (Family.source), 2-D weights in
    ``spec.wtype`` (quantized by gguf.quants.quantize, row-wise, so a fused tensor is the
    byte-concatenation of its parts), 1-D norms and biases in F32; metadata as Family says, then
    the vocabulary's tokenizer.* keys byte for byte (plus Family.chat_template when the
    vocabulary has no tokenizer.chat_template). Raises BringupError for a missing vocabulary
    file or one without tokens, IntegrityError for an unreadable one.
    """
    fam = FAMILIES[spec.arch]
    tokenizer = tokenizer_kvs(vocab_file(spec, vocab_dir))
    tokens = [v for k, _, v in tokenizer if k == "tokenizer.ggml.tokens"]
    if not tokens:
        raise BringupError(f"vocabulary {spec.vocab!r} has no tokenizer.ggml.tokens")
    n_vocab = struct.unpack_from("<Q", tokens[0], 4)[0]  # array: item type u32, count u64
    need = memory_bytes(spec, n_vocab)
    if need > MAX_MEMORY_BYTES:
        raise BringupError(f"synth://{spec.generator}/{spec.arch} with vocabulary {spec.vocab!r} ({n_vocab} tokens), "
                           f"n_layer {spec.n_layer}, n_embd {spec.n_embd}, n_ff {spec.n_ff}, {spec.wtype} needs about "
                           f"{need / 2**20:.0f} MiB of memory to generate; the limit is "
                           f"{MAX_MEMORY_BYTES / 2**20:.0f} MiB (a generated model is a test vehicle)")
    base = dataclasses.replace(spec, wtype=LLAMA_FTYPES[spec.wtype][0]) if spec.wtype in LLAMA_FTYPES else spec
    dest = out.with_name(out.name + ".base") if base is not spec else out
    w = _Writer(str(dest), spec.arch)
    _write_hparams(w, base, fam)
    for key, vtype, value in tokenizer:
        w.add_key_value(key, value, vtype)
    template = fam.moe_chat_template if spec.n_expert and fam.moe_chat_template else fam.chat_template
    if template and not any(k == gguf.Keys.Tokenizer.CHAT_TEMPLATE for k, _, _ in tokenizer):
        w.add_chat_template(template)
    if spec.wtype in BLOCK_WTYPES:
        write_blocks(w, spec, list(_tensors(base, fam, n_vocab)))
    else:
        for name, data in _tensors(base, fam, n_vocab):
            router = name.endswith(".ffn_gate_inp.weight")  # llama.cpp's quantizer keeps routers F32
            data = data.values(base) if isinstance(data, Draw) else data
            _add(w, name, data, base.wtype if data.ndim >= 2 and not router else "F32")
            del data
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
    w.close()
    if dest != out:
        try:
            llama_quantize(dest, out, spec.wtype)
        finally:
            dest.unlink(missing_ok=True)
    return out


def llama_quantize(src: Path, dst: Path, ftype: str) -> Path:
    """llama.cpp's ``llama_model_quantize`` of ``src`` into ``dst`` as ``LLAMA_FTYPE_MOSTLY_<ftype>``
    with one thread (llama-quantize's defaults otherwise: its choice of per-tensor types, e.g. Q6_K
    for some ffn_down and the tied embedding under Q4_K_M). Raises UnavailableError without the
    llama-cpp-python package, BringupError when llama.cpp reports a failure."""
    try:
        import llama_cpp  # noqa: PLC0415 - the oracle package, needed only for llama.cpp file types
    except ImportError:
        raise UnavailableError(f"wtype {ftype} is made by llama.cpp's quantizer: the llama-cpp-python package "
                               "is not installed (bootstrap.sh installs it)") from None
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    p.nthread = 1
    if llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(p)) != 0:
        raise BringupError(f"llama.cpp's quantizer failed to make {ftype} from {src.name}")
    return dst


#: most memory ``generate`` may need (``memory_bytes``): generated models are test vehicles, the
#: largest one shaped like a 1B model (Llama-3.2-1B on llama-bpe: about 4.8 GB, F16 before
#: llama.cpp quantizes it); the top of every RANGES entry together would need tens of GB
MAX_MEMORY_BYTES = 6 << 30
#: bytes per element of the largest tensor while it is made: uint64 random bits, their float64,
#: the float32 result and the quantizer's float32 temporaries
_WORK_BYTES = 48


def memory_bytes(s: SynthSpec, n_vocab: int) -> int:
    """Upper bound of the bytes ``generate`` holds at once for ``s`` with a vocabulary of
    ``n_vocab`` tokens: every 2-D weight in ``s.wtype`` (gguf's writer keeps all tensors until it
    writes them; 1-D norms and biases are negligible) plus the working copies of the largest
    tensor (_WORK_BYTES per element). Computed from the shape alone, before anything is made."""
    if s.wtype in BLOCK_WTYPES:
        return block_memory_bytes(s, n_vocab)
    wtype = LLAMA_FTYPES[s.wtype][0] if s.wtype in LLAMA_FTYPES else s.wtype   # held in the base format
    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[wtype]]
    n_kv = s.n_head_kv * s.head_dim
    experts = max(1, s.n_expert)  # every expert's FFN is stored; the router is F32 (counted as such)
    per_layer = 2 * s.n_embd * s.n_embd + 2 * n_kv * s.n_embd + 3 * s.n_ff * s.n_embd * experts
    elems = s.n_layer * per_layer + n_vocab * s.n_embd * (1 if FAMILIES[s.arch].tied else 2)
    largest = max(n_vocab * s.n_embd, 2 * s.n_ff * s.n_embd * experts, (s.n_embd + 2 * n_kv) * s.n_embd)
    router = s.n_layer * s.n_expert * s.n_embd * 4
    # uniform works in chunks of UNIFORM_CHUNK: the largest tensor's float32 values, its stored
    # copy and one chunk's temporaries
    return elems * size // block + router + 8 * largest + _WORK_BYTES * min(largest, UNIFORM_CHUNK)


def _write_hparams(w: gguf.GGUFWriter, s: SynthSpec, fam: Family) -> None:
    # No family name here: llama.cpp changes special-token attributes when general.name contains
    # "phi3" or "phi-3" (src/llama-vocab.cpp), which a generated model must not trigger.
    w.add_name(f"{GENERATOR} generated model, seed {s.seed}")
    w.add_context_length(s.n_ctx)
    w.add_embedding_length(s.n_embd)
    w.add_block_count(s.n_layer)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_rope_freq_base(fam.rope_theta)
    w.add_layer_norm_rms_eps(fam.norm_eps)
    if fam.head_dim_keys:
        w.add_key_length(s.head_dim)
        w.add_value_length(s.head_dim)
    if fam.rope_dim_key:
        w.add_rope_dimension_count(s.head_dim)
    if fam.sliding_window is not None:
        w.add_sliding_window(fam.sliding_window)
    if fam.attn_softcap is not None:
        w.add_attn_logit_softcapping(fam.attn_softcap)
    if fam.final_softcap is not None:
        w.add_final_logit_softcapping(fam.final_softcap)
    if s.n_expert:
        w.add_expert_count(s.n_expert)
        w.add_expert_used_count(s.n_expert_used)
        if fam.moe:  # llama's experts are feed_forward_length wide; its loader reads no expert width
            w.add_expert_feed_forward_length(s.n_ff)
    # llama.cpp has no all-Q4_K file type: MOSTLY_Q4_K_S ("mostly Q4_K") is the nearest; the
    # type is informational (llama.cpp reads each tensor's own type)
    ftype = {"F32": "ALL_F32", "Q4_K": "MOSTLY_Q4_K_S"}.get(s.wtype, f"MOSTLY_{s.wtype}")
    w.add_file_type(gguf.LlamaFileType[ftype])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)


class _Encoded(bytes):
    """A metadata value already in GGUF's little-endian encoding, written verbatim."""


class _Writer(gguf.GGUFWriter):
    """gguf.GGUFWriter that also writes _Encoded values as they are (gguf 0.19 _pack_val, pinned).

    Its writer re-packs every item of a list value; copying the encoded bytes takes milliseconds
    and cannot alter them.
    """

    def _pack_val(self, val, vtype, add_vtype, sub_type=None):
        if isinstance(val, _Encoded):
            return (self._pack("I", vtype) if add_vtype else b"") + val
        return super()._pack_val(val, vtype, add_vtype, sub_type)


def tokenizer_kvs(path: Path) -> list[tuple[str, gguf.GGUFValueType, _Encoded]]:
    """(key, value type, encoded value) of every ``tokenizer.*`` metadata key of GGUF ``path``
    (``gguf_file.metadata_kvs``). Raises IntegrityError for a file that is not a little-endian
    GGUF v2/v3 or ends inside its metadata."""
    return [(k, t, _Encoded(v)) for k, t, v in gguf_file.metadata_kvs(path, prefix="tokenizer.")]


def _tensors(s: SynthSpec, fam: Family, n_vocab: int):
    """Yield (GGUF tensor name, float32 array of shape (rows, n_in) or (n,)) in file order.

    Each weight's random stream is named by its unfused GGUF name, so a fused tensor holds the
    same numbers as its parts would in another family with the same seed and shape.
    """
    T = gguf.MODEL_TENSOR
    allowed = {gguf.TENSOR_NAMES[t] for t in gguf.MODEL_TENSORS[gguf.MODEL_ARCH[s.arch.upper()]]}
    n_q, n_kv = s.n_embd, s.n_head_kv * s.head_dim

    def name(t: gguf.MODEL_TENSOR, L: int | None = None, suffix: str = ".weight") -> str:
        # gguf-py's per-architecture tensor list is the writer-side contract llama.cpp reads
        assert gguf.TENSOR_NAMES[t] in allowed, f"{t.name} is not a {s.arch} tensor in gguf-py"
        return gguf.TENSOR_NAMES[t].format(bid=L) + suffix

    def lin(t, L, n_out, n_in, gain):
        return _linear(s, gguf.TENSOR_NAMES[t].format(bid=L), n_out, n_in, gain)

    def norm(t, L, n, center):
        return name(t, L), _norm(s, gguf.TENSOR_NAMES[t].format(bid=L), n, center)

    # The residual stream starts at EMBED_RMS whatever the graph's embedding multiplier.
    sigma_e = EMBED_RMS / (math.sqrt(s.n_embd) if fam.embed_scale_sqrt else 1.0)
    yield name(T.TOKEN_EMBD), Draw(gguf.TENSOR_NAMES[T.TOKEN_EMBD], (n_vocab, s.n_embd), sigma_e)
    # Residual writers: a post-norm sets their output RMS itself; otherwise the weights do.
    res_gain = 1.0 if fam.post_norms else SUBLAYER_RMS
    for L in range(s.n_layer):
        yield norm(T.ATTN_NORM, L, s.n_embd, 1.0)
        qkv = [(t, lin(t, L, n, s.n_embd, 1.0)) for t, n in ((T.ATTN_Q, n_q), (T.ATTN_K, n_kv), (T.ATTN_V, n_kv))]
        if fam.fused_qkv:  # llama.cpp build_qkv: Q, K, V are consecutive row ranges
            yield name(T.ATTN_QKV, L), Draw.cat([a for _, a in qkv])
        else:
            yield from ((name(t, L), a) for t, a in qkv)
        if fam.qkv_bias:
            for t, a in qkv:
                yield name(t, L, ".bias"), uniform(s, name(t, L, ".bias"), (a.shape[0],), BIAS_RMS)
        if fam.qk_norm:
            yield norm(T.ATTN_Q_NORM, L, s.head_dim, 1.0)
            yield norm(T.ATTN_K_NORM, L, s.head_dim, 1.0)
        if fam.qk_norm_full:
            yield norm(T.ATTN_Q_NORM, L, n_q, 1.0)
            yield norm(T.ATTN_K_NORM, L, n_kv, 1.0)
        yield name(T.ATTN_OUT, L), lin(T.ATTN_OUT, L, s.n_embd, n_q, res_gain)
        if fam.post_norms:
            yield norm(T.ATTN_POST_NORM, L, s.n_embd, SUBLAYER_RMS)
        yield norm(T.FFN_NORM, L, s.n_embd, 1.0)
        if s.n_expert:
            yield from _experts(s, L, name, res_gain)
            if fam.post_norms:
                yield norm(T.FFN_POST_NORM, L, s.n_embd, SUBLAYER_RMS)
            continue
        gate, up = (lin(t, L, s.n_ff, s.n_embd, 1.0) for t in (T.FFN_GATE, T.FFN_UP))
        if fam.fused_gate_up:  # llama.cpp LLM_FFN_SWIGLU: silu(first half) * second half
            yield name(T.FFN_UP, L), Draw.cat([gate, up])
        else:
            yield name(T.FFN_GATE, L), gate
            yield name(T.FFN_UP, L), up
        # silu(g) * u of unit-RMS g, u has RMS ~0.5: the factor 2 brings the output to res_gain
        yield name(T.FFN_DOWN, L), lin(T.FFN_DOWN, L, s.n_embd, s.n_ff, 2.0 * res_gain)
        if fam.post_norms:
            yield norm(T.FFN_POST_NORM, L, s.n_embd, SUBLAYER_RMS)
    if fam.tied:
        # logits = output_norm(x) . e_j: this gain brings their RMS to LOGIT_RMS
        yield norm(T.OUTPUT_NORM, None, s.n_embd, LOGIT_RMS / (sigma_e * math.sqrt(s.n_embd)))
    else:
        yield norm(T.OUTPUT_NORM, None, s.n_embd, 1.0)
        yield name(T.OUTPUT), lin(T.OUTPUT, None, n_vocab, s.n_embd, LOGIT_RMS)


def _experts(s: SynthSpec, L: int, name, res_gain: float):
    """Layer ``L``'s routed FFN: the router ffn_gate_inp (n_expert, n_embd), always F32 as
    llama.cpp's quantizer leaves it, and the stacked (n_expert, rows, n_in) expert weights."""
    T = gguf.MODEL_TENSOR
    # router logits of RMS 1: the softmax over experts is neither one-hot nor uniform
    yield name(T.FFN_GATE_INP, L), _linear(s, gguf.TENSOR_NAMES[T.FFN_GATE_INP].format(bid=L),
                                           s.n_expert, s.n_embd, 1.0)
    for t, n_out, n_in, gain in ((T.FFN_GATE_EXP, s.n_ff, s.n_embd, 1.0), (T.FFN_UP_EXP, s.n_ff, s.n_embd, 1.0),
                                 (T.FFN_DOWN_EXP, s.n_embd, s.n_ff, 2.0 * res_gain)):
        stream = gguf.TENSOR_NAMES[t].format(bid=L)
        yield name(t, L), Draw(stream, (s.n_expert, n_out, n_in), gain / math.sqrt(n_in))


def _linear(s: SynthSpec, stream: str, n_out: int, n_in: int, gain: float) -> "Draw":
    """(n_out, n_in) weight whose output has RMS ``gain`` for a unit-RMS input (1/sqrt(fan_in))."""
    return Draw(stream, (n_out, n_in), gain / math.sqrt(n_in))


def _norm(s: SynthSpec, stream: str, n: int, center: float) -> np.ndarray:
    """RMSNorm weights: ``center`` times (1 +- NORM_SPREAD)."""
    spread = uniform(s, stream, (n,), NORM_SPREAD / math.sqrt(3.0))
    return (center * (1.0 + spread)).astype(np.float32)


def _add(w: gguf.GGUFWriter, name: str, data: np.ndarray, wtype: str) -> None:
    qtype = gguf.GGMLQuantizationType[wtype]
    w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
