"""Memory model: the footprint of a model run, from the GGUF header alone, against a budget.

``bringup plan memory`` answers "does this model fit this device at context C with S sequences,
and if not, what would make it fit", before any tensor byte is read. The footprint is the sum of
six components (bytes, integers throughout):

========================  ===============================================================
``weights``               every GGUF tensor as stored: ``formats`` row bytes x rows (blocks
                          and scales included). Source: the GGUF tensor-info table.
``load_copies``           bytes the runtime copies at load time, from ``LOAD_COPY_RULES``
                          (empty today: the runtime uses every weight in place from the mmap).
``activations``           the planner's arena, max over prefill and decode, planned from the
                          header in-process (IR compiled + planned) or read from a
                          ``memory_plan.json``, + the logits row; without a plan an upper-bound
                          estimate from the hyperparameters, marked ``estimate``.
``workspace``             kernel scratch per kernel family at the widest run: inside the arena
                          when planned (listed, not added); otherwise an estimate, marked so.
``kv_cache``              K and V caches: S x sum over layers of rows x row bytes for the KV
                          dtype; a sliding-window layer holds min(C, window + T - 1) rows when
                          the KV layout ring-buffers it, C rows when it masks a full-length cache.
``runtime_overheads``     code, stacks, tokenizer tables, allocator: calibrated from a measured
                          run of the native CLI (``--calibration``); absent without one.
========================  ===============================================================

A component whose input is missing sizes nothing: it is reported with ``status: "absent"`` and the
whole footprint with ``complete: false``; nothing is filled in by a default.

Formats and formulas: GGML block sizes from ``config/ggml_formats.json`` (ggml-common.h); KV cache
layout from ``docs/ir_format.md`` (token-major ``[n_ctx][n_head_kv][head_dim]`` per layer);
sliding-window pattern from the circuit (``layer_values.window``; Gemma3: llama.cpp
``set_swa_pattern``). The design and the calibration procedure are in ``docs/memory_model.md``.
"""
from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import functools
import hashlib
import json
import math
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import jsonschema
import yaml

from bringup.core import canonjson
from bringup.formats import ggml as formats
from bringup.core.atomic import write_text
from bringup.core.errors import BringupError, GateError, IntegrityError, UnsupportedError
from bringup.core.hashing import sha256_file
from bringup.core.paths import CONFIG, SCHEMAS
from bringup.core.schemas import validate

SCHEMA_VERSION = 1

# KV cache element types a run may choose; values are names in the one block-format table.
KV_DTYPES = {"f32": "F32", "f16": "F16", "q8_0": "Q8_0"}

# Load-time copies: rules that say which weights the runtime copies at load (e.g. a repack into
# an interleaved layout) and in which format the copy is held. Empty today: every kernel reads the
# GGML block layout in place from the mmap'd BUMP (docs/architecture.md, Kernel ABI). A rule is
# {"name": str, "tensor_glob": fnmatch pattern on the GGUF name, "types": [GGML type names],
#  "copy_as": GGML type name of the copy (its bytes are that format's bytes for the same shape)}.
LOAD_COPY_RULES: tuple[dict, ...] = ()

# getrusage fields of `bringup-run --timing --json` (csrc/cli/bringup_run.c timing_fields) that
# calibration and the RSS proof read: ru_maxrss (KiB on Linux) and ru_majflt.
RUN_TIMING_RSS_KIB = "peak_rss_kib"
RUN_TIMING_MAJFLT = "major_page_faults"
RUN_TIMING_MINFLT = "minor_page_faults"

_CTX_SEARCH_CAP = 1 << 24        # longest context searched when the model has no n_ctx_train
_SEQ_SEARCH_CAP = 1 << 16        # most sequences searched
_BUDGET_SEARCH_CAP = 1 << 62     # bytes


# --------------------------------------------------------------------------------------------
# GGUF header
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TensorInfo:
    """One GGUF tensor-info entry. ``shape`` is GGUF order (ne0, the contiguous row, first)."""
    name: str
    type_name: str
    shape: tuple[int, ...]
    offset: int          # bytes from the start of the tensor-data section
    n_bytes: int         # formats.tensor_bytes(shape)


@dataclass(frozen=True)
class GGUFHeader:
    """What plan-memory needs from a GGUF file, read without touching tensor data.

    ``header_sha256`` hashes bytes ``[0, data_offset)`` (KV metadata + tensor infos + padding):
    it names the header a plan was made from, identical for a full file and a truncated copy.
    ``config`` is config.json as the convert stage derives it (``bringup.convert.extract_config``,
    one derivation of hyperparameters for the whole project); its ``gguf_sha256`` is the header
    hash here, since the full-file hash would read tensor data.
    """
    architecture: str
    name: str | None
    config: dict
    tensors: tuple[TensorInfo, ...]
    data_offset: int
    data_bytes: int      # end of the last tensor, relative to data_offset
    header_sha256: str


def _header_reader_class():
    from gguf import GGUFReader

    class _HeaderOnlyReader(GGUFReader):
        """gguf's own parser for metadata and tensor infos, minus the per-tensor data views.

        GGUFReader builds a numpy view of every tensor's bytes, which fails on a file cut after the
        header; the tensor-info fields it has parsed by then hold everything we need.
        """

        def _build_tensors(self, start_offs, fields):  # gguf 0.19 internal hook (pinned)
            self.tensor_info_fields = fields
            self.tensors = []

    return _HeaderOnlyReader


def read_gguf_header(path: str | os.PathLike) -> GGUFHeader:
    """Parse the GGUF header (metadata + tensor infos) of ``path`` without reading tensor data.

    Parsing a large vocabulary with gguf's reader takes seconds, so the result is kept per
    (path, inode, size, mtime) for the life of the process. Raises IntegrityError if the header is
    unreadable or cut, BringupError (exit 2) if the file is missing, UnsupportedError for a tensor
    type outside ``config/ggml_formats.json``.
    """
    path = Path(path)
    if not path.is_file():
        raise BringupError(f"GGUF file not found: {path}")
    st = path.stat()
    return _read_gguf_header(str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _read_gguf_header(path_s: str, _ino: int, _size: int, _mtime_ns: int) -> GGUFHeader:
    from bringup.convert.importer import extract_config

    path = Path(path_s)
    try:
        reader = _header_reader_class()(path, "r")
    except (ValueError, IndexError, KeyError, OSError, UnicodeDecodeError) as e:
        raise IntegrityError(f"{path}: not a readable GGUF header ({type(e).__name__}: {e})") from None
    tensors = []
    data_end = 0
    for tf in reader.tensor_info_fields:
        _nlen, name_data, _ndims, dims, raw_type, off = tf.parts
        name = bytes(name_data).decode("utf-8")
        try:
            fmt = formats.by_ggml_type(int(raw_type[0]))
        except BringupError as e:
            raise UnsupportedError(f"tensor {name!r}: {e}") from None
        shape = tuple(int(d) for d in dims)
        n_bytes = fmt.tensor_bytes(shape)
        tensors.append(TensorInfo(name, fmt.name, shape, int(off[0]), n_bytes))
        data_end = max(data_end, int(off[0]) + n_bytes)
    with open(path, "rb") as fh:
        head = fh.read(int(reader.data_offset))
    if len(head) != reader.data_offset:
        raise IntegrityError(f"{path}: file ends inside the GGUF header")
    header_sha = hashlib.sha256(head).hexdigest()
    arch = reader.fields.get("general.architecture")
    arch_s = bytes(arch.parts[-1]).decode("utf-8", "replace") if arch is not None else ""
    if not re.fullmatch(r"[a-z0-9_]{1,64}", arch_s):
        # the architecture names files and keys and reaches the reports: a plain identifier only
        raise UnsupportedError(f"{path}: general.architecture {arch_s[:80]!r} is not a plain identifier")
    config = extract_config(reader, header_sha)
    # extract_config reads tensor names from reader.tensors, which the header-only reader leaves
    # empty; these two values come from the tensor infos instead.
    names = {t.name for t in tensors}
    config = {**config, "tied_embeddings": "output.weight" not in names, "tensor_count": len(tensors)}
    return GGUFHeader(
        architecture=config["architecture"], name=config["name"] or None, config=config,
        tensors=tuple(tensors), data_offset=int(reader.data_offset), data_bytes=data_end,
        header_sha256=header_sha)


# --------------------------------------------------------------------------------------------
# The model spec: everything the evaluator needs, independent of the run parameters
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Weight:
    """A stored weight: GGUF name, GGML type name, GGUF shape, bytes, layer (or None), role."""
    name: str
    type_name: str
    shape: tuple[int, ...]
    bytes: int
    layer: int | None
    role: str


@dataclass(frozen=True)
class KVLayer:
    """One layer's K and V cache geometry. ``window`` is None for a global layer."""
    layer: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    window: int | None


@dataclass(frozen=True)
class Overhead:
    """A calibrated runtime overhead (bytes) and where its number comes from."""
    name: str
    bytes: int
    source: str


@dataclass(frozen=True)
class ArenaPlan:
    """Activation arena and scratch from the planner (``memory_plan.json`` or planned in-process).

    ``n_ctx`` and ``chunk`` are the values the plan was made for; ``scratch_by_family`` is the
    widest scratch buffer per kernel family (circuit op id), which the arena already contains.
    ``nodes`` is the per-op-node table from the IR when the plan was made in-process (else empty).
    """
    arena_bytes: int
    n_ctx: int | None
    chunk: int | None
    scratch_by_family: dict[str, int]
    source: str
    nodes: tuple[dict, ...] = ()
    nodes_source: str = ""


@dataclass(frozen=True)
class ModelSpec:
    """Run-independent description of a model for the footprint evaluator.

    ``hparams`` uses config.json's names (n_layer, n_embd, n_head, n_head_kv, head_dim,
    head_dim_v, n_ff, n_vocab, n_ctx_train, sliding_window) with ``sources`` naming the GGUF key
    or derivation of each. ``kv_layers`` is None when the state could not be sized (the reason is
    in ``kv_source``). ``kv_ring_buffer`` says whether sliding-window layers store only their
    window (True) or mask a full-length cache (False).
    """
    architecture: str
    name: str | None
    header_sha256: str
    hparams: dict[str, int | None]
    sources: dict[str, str]
    weights: tuple[Weight, ...]
    kv_layers: tuple[KVLayer, ...] | None
    kv_source: str
    kv_ring_buffer: bool
    kv_layout_source: str
    arena: ArenaPlan | None = None
    overheads: tuple[Overhead, ...] | None = None
    overheads_source: str = "absent: no --calibration given"
    load_copy_rules: tuple[dict, ...] = LOAD_COPY_RULES
    # ctx -> ArenaPlan planned at that context (in-process IR + planner), for inverse queries
    arena_at: Callable[[int], ArenaPlan] | None = None
    no_plan_reason: str = "none given"
    circuit_sha256: str | None = None


@dataclass(frozen=True)
class RunParams:
    """Runtime parameters of a footprint query.

    ctx: context length C (positions per sequence); seqs: S sequences, each with its own KV cache;
    kv_dtype: one of KV_DTYPES; chunk: prefill chunk T (tokens per prefill call);
    weights_mapped: count weights as evictable page cache instead of resident memory.
    """
    ctx: int
    seqs: int
    kv_dtype: str
    chunk: int
    weights_mapped: bool = False

    def __post_init__(self):
        if self.ctx < 1 or self.seqs < 1 or self.chunk < 1:
            raise BringupError(f"ctx, seqs and chunk must be >= 1 (got ctx={self.ctx}, "
                               f"seqs={self.seqs}, chunk={self.chunk})")
        if self.kv_dtype not in KV_DTYPES:
            raise BringupError(f"unknown KV dtype {self.kv_dtype!r}; supported: {', '.join(KV_DTYPES)}")


_BLK = re.compile(r"^blk\.(\d+)\.(.+?)(\.weight|\.bias)?$")


def _weights_from_header(header: GGUFHeader) -> tuple[Weight, ...]:
    out = []
    for t in header.tensors:
        m = _BLK.match(t.name)
        if m:
            layer, role = int(m.group(1)), m.group(2) + ("" if m.group(3) in (None, ".weight") else "_bias")
        else:
            layer, role = None, re.sub(r"\.weight$", "", t.name)
        out.append(Weight(t.name, t.type_name, t.shape, t.n_bytes, layer, role))
    return tuple(out)


def hparams_from_header(header: GGUFHeader) -> tuple[dict[str, int | None], dict[str, str]]:
    """The integer dimensions of config.json (n_layer, n_embd, n_head, n_head_kv, head_dim,
    head_dim_v, n_ff, n_vocab, n_ctx_train, sliding_window, ...) and the GGUF key or derivation of
    each, as the convert stage records them."""
    hp = header.config["hparams"]
    keep = {k: v for k, v in hp.items() if v is None or (isinstance(v, int) and not isinstance(v, bool))}
    return keep, {k: header.config["sources"][k] for k in keep}


def _layer_windows(circuit, config: dict) -> list[int | None]:
    """Per-layer attention window from the circuit's ``layer_values.window`` (0 = global).

    Evaluated exactly as ``bringup ir`` does: the IR's namespace (config + circuit constants)
    and ``circuits.evaluate``.
    """
    from bringup.ir import circuits
    from bringup.ir import lower as ir

    ns, _ = ir.namespace(circuit, config, 1, 1, 1)
    lv = circuit.data["layer_values"]
    if "window" not in lv:
        raise BringupError(f"circuit {circuit.name!r} declares no layer_values.window")
    out = []
    for L in range(int(ns["n_layer"])):
        env = dict(ns, L=L)
        for name, spec in lv.items():
            env[name] = spec["value"] if "value" in spec else circuits.evaluate(spec["expr"], env)
        w = int(env["window"])
        out.append(None if w == 0 else w)
    return out


def kv_layers_uniform(n_layer: int, n_head_kv: int, head_dim_k: int, head_dim_v: int,
                      windows: list[int | None] | None = None) -> tuple[KVLayer, ...]:
    """KV geometry for ``n_layer`` identical layers; ``windows[L]`` is layer L's window or None."""
    windows = windows or [None] * n_layer
    if len(windows) != n_layer:
        raise BringupError(f"{len(windows)} windows for {n_layer} layers")
    return tuple(KVLayer(L, n_head_kv, head_dim_k, head_dim_v, windows[L]) for L in range(n_layer))


def spec_from_header(header: GGUFHeader, *, circuit=None, kv_ring_buffer: bool | None = None) -> ModelSpec:
    """Build the ModelSpec of a GGUF header.

    ``circuit`` (a ``bringup.circuits.Circuit``; default: the circuit that lists the architecture)
    gives the sliding-window pattern and the KV layout. Without a circuit the KV cache is sized only
    when the GGUF declares no sliding window (every layer global); otherwise it is left absent.
    ``kv_ring_buffer`` None means "as the circuit's kv_layout says" (ring-buffered only when it
    says so). Raises UnsupportedError for per-layer dimensions.
    """
    from bringup.ir import circuits

    hp, src = hparams_from_header(header)
    weights = _weights_from_header(header)
    if circuit is None:
        try:
            circuit = circuits.for_architecture(header.architecture)
        except UnsupportedError:
            circuit = None
    need = ["n_layer", "n_head_kv", "head_dim", "head_dim_v"]
    missing = [k for k in need if hp.get(k) is None]
    kv_layers = None
    if missing:
        kv_source = f"absent: GGUF lacks {', '.join(missing)}"
    elif circuit is not None:
        windows = _layer_windows(circuit, header.config)
        kv_layers = kv_layers_uniform(hp["n_layer"], hp["n_head_kv"], hp["head_dim"], hp["head_dim_v"], windows)
        n_local = sum(w is not None for w in windows)
        kv_source = (f"circuit {circuit.name} (sha256 {circuit.sha256[:12]}) layer_values.window: "
                     f"{n_local} sliding-window layers, {len(windows) - n_local} global; "
                     f"n_head_kv, head_dim, head_dim_v from {src['n_head_kv']}, {src['head_dim']}, {src['head_dim_v']}")
    elif hp.get("sliding_window") is None:
        kv_layers = kv_layers_uniform(hp["n_layer"], hp["n_head_kv"], hp["head_dim"], hp["head_dim_v"])
        kv_source = (f"GGUF: every layer global ({header.architecture}.attention.sliding_window absent; "
                     "no circuit for this architecture)")
    else:
        kv_source = ("absent: the GGUF declares a sliding window but no circuit gives the layer pattern "
                     f"for architecture {header.architecture!r}")
    if kv_ring_buffer is None:
        layout = circuit.data["contracts"]["attention"].get("kv_layout", "") if circuit is not None else ""
        kv_ring_buffer = "ring-buffer" in layout and "not ring-buffer" not in layout
        layout_src = (f"circuit {circuit.name} kv_layout: {layout!r}" if layout else
                      "no circuit kv_layout: full-length caches (docs/ir_format.md)")
    else:
        layout_src = "--swa-kv " + ("window" if kv_ring_buffer else "full")
    return ModelSpec(
        architecture=header.architecture, name=header.name, header_sha256=header.header_sha256,
        hparams=hp, sources=src, weights=weights, kv_layers=kv_layers, kv_source=kv_source,
        kv_ring_buffer=kv_ring_buffer, kv_layout_source=layout_src,
        circuit_sha256=circuit.sha256 if circuit is not None else None)


# --------------------------------------------------------------------------------------------
# The evaluator
# --------------------------------------------------------------------------------------------

def kv_row_bytes(n_head_kv: int, head_dim: int, kv_dtype: str) -> int:
    """Bytes of one position of one layer's K (or V) cache: n_head_kv rows of head_dim elements.

    Each head's vector is blocked on its own (q8_0: 34-byte blocks of 32), so head_dim must be a
    whole number of blocks. Raises BringupError otherwise.
    """
    fmt = formats.by_name(KV_DTYPES[kv_dtype])
    return n_head_kv * fmt.row_bytes(head_dim)


def kv_layer_rows(layer: KVLayer, ctx: int, ring_buffer: bool, chunk: int) -> int:
    """Positions a layer's cache holds per sequence.

    Global layers and masked full-length caches: C. A ring-buffered sliding-window layer:
    min(C, window + chunk - 1), because a prefill chunk of T tokens is written before it is
    attended, and its first query still needs the window - 1 positions before it (the same bound
    llama.cpp uses: n_swa + n_ubatch, src/llama-kv-cache-iswa.cpp). Decode (T = 1) needs the window.
    """
    if layer.window is not None and ring_buffer:
        return min(ctx, layer.window + chunk - 1)
    return ctx


def kv_cache_bytes(layers: Iterable[KVLayer], ctx: int, seqs: int, kv_dtype: str,
                   ring_buffer: bool = True, chunk: int = 1) -> int:
    """Total K+V cache bytes: seqs x sum over layers of rows x (K row + V row) bytes.

    ``chunk`` is the prefill chunk T (it widens ring-buffered window layers, see kv_layer_rows).
    """
    per_seq = 0
    for L in layers:
        rows = kv_layer_rows(L, ctx, ring_buffer, chunk)
        per_seq += rows * (kv_row_bytes(L.n_head_kv, L.head_dim_k, kv_dtype)
                           + kv_row_bytes(L.n_head_kv, L.head_dim_v, kv_dtype))
    return seqs * per_seq


def activation_estimate(hp: dict[str, int | None], tokens: int) -> int:
    """Upper bound of the activation arena when no plan exists (bytes, f32 activations).

    Every distinct activation of one transformer block at ``tokens`` tokens, without reuse:
    3 x n_embd (block input, normed, block output) + Q, K, V, attention output
    (n_head*head_dim + n_head_kv*(head_dim + head_dim_v) + n_head*head_dim_v) + 3 x n_ff (gate,
    up, product), plus one row of logits (n_vocab) and the token ids (I32). Raises BringupError if a
    dimension it needs is absent.
    """
    need = ["n_embd", "n_head", "n_head_kv", "head_dim", "head_dim_v", "n_ff", "n_vocab"]
    missing = [k for k in need if hp.get(k) is None]
    if missing:
        raise BringupError(f"activation estimate needs {', '.join(missing)}")
    per_tok = (3 * hp["n_embd"] + hp["n_head"] * hp["head_dim"] + hp["n_head_kv"] * (hp["head_dim"] + hp["head_dim_v"])
               + hp["n_head"] * hp["head_dim_v"] + 3 * hp["n_ff"])
    return 4 * tokens * per_tok + 4 * hp["n_vocab"] + 4 * tokens


def attention_scratch_estimate(hp: dict[str, int | None], tokens: int, ctx: int) -> int:
    """Scratch of a non-fused attention kernel: one f32 score matrix [n_head][tokens][ctx]."""
    if hp.get("n_head") is None:
        raise BringupError("attention scratch estimate needs n_head")
    return 4 * hp["n_head"] * tokens * ctx


def load_copy_bytes(weights: Iterable[Weight], rules: Iterable[dict]) -> tuple[int, list[dict]]:
    """Bytes of load-time copies: for each weight matched by a rule, the copy format's bytes.

    A weight matched by two rules is an error (a copy is made once). Returns (bytes, per-copy rows).
    """
    rows = []
    total = 0
    rules = list(rules)
    for w in weights:
        hits = [r for r in rules if fnmatch.fnmatchcase(w.name, r["tensor_glob"]) and w.type_name in r["types"]]
        if len(hits) > 1:
            raise BringupError(f"weight {w.name} matches {len(hits)} load-copy rules: {[r['name'] for r in hits]}")
        if hits:
            b = formats.by_name(hits[0]["copy_as"]).tensor_bytes(w.shape)
            rows.append({"tensor": w.name, "rule": hits[0]["name"], "bytes": b})
            total += b
    return total, rows


@dataclass
class Footprint:
    """The evaluator's answer for one RunParams: components in a fixed order and their total.

    ``total_bytes`` sums the components that count against the budget (weights are left out when
    ``weights_mapped``). ``complete`` is False when a component is absent.
    """
    params: RunParams
    components: list[dict]
    total_bytes: int
    complete: bool
    missing: list[str]
    estimated: list[str]
    kv_layers: list[dict] = field(default_factory=list)


def evaluate(spec: ModelSpec, p: RunParams) -> Footprint:
    """Footprint of ``spec`` at run parameters ``p``; the one function every query goes through."""
    hp = spec.hparams
    comps: list[dict] = []

    wbytes = sum(w.bytes for w in spec.weights)
    comps.append({"name": "weights", "bytes": wbytes, "status": "sized", "counted": not p.weights_mapped,
                  "source": f"GGUF tensor infos: {len(spec.weights)} tensors, bytes per config/ggml_formats.json"
                            + ("; mapped: evictable page cache, not counted" if p.weights_mapped else "")})

    cbytes, _ = load_copy_bytes(spec.weights, spec.load_copy_rules)
    comps.append({"name": "load_copies", "bytes": cbytes, "status": "sized", "counted": True,
                  "source": f"load-copy rule table ({len(spec.load_copy_rules)} rules)"})

    chunk = p.chunk
    if spec.arena is not None:
        if hp.get("n_vocab") is None:
            comps.append({"name": "activations", "bytes": 0, "status": "absent", "counted": True,
                          "source": "absent: n_vocab unknown (sizes the logits buffer beside the arena)"})
        else:
            same_ctx = spec.arena.n_ctx is None or spec.arena.n_ctx == p.ctx
            same_chunk = spec.arena.chunk is None or spec.arena.chunk == p.chunk
            note = "" if same_ctx and same_chunk else (
                f"; planned at C={spec.arena.n_ctx}, T={spec.arena.chunk}, used for C={p.ctx}, T={p.chunk}"
                + (" (an upper bound: kernel scratch grows with C)" if (spec.arena.n_ctx or 0) >= p.ctx
                   and same_chunk else ""))
            comps.append({"name": "activations", "bytes": spec.arena.arena_bytes + 4 * hp["n_vocab"],
                          "status": "sized" if same_ctx and same_chunk else "estimate", "counted": True,
                          "source": spec.arena.source + f" + the logits row the runtime holds "
                                                        f"(n_vocab {hp['n_vocab']} x 4){note}"})
        ws = sum(spec.arena.scratch_by_family.values())
        comps.append({"name": "workspace", "bytes": 0, "status": "sized", "counted": True,
                      "source": f"inside the arena: widest scratch per kernel family {spec.arena.scratch_by_family} "
                                f"({ws} bytes) is planned in the activation arena"})
    else:
        try:
            comps.append({"name": "activations", "bytes": activation_estimate(hp, chunk), "status": "estimate",
                          "counted": True,
                          "source": f"estimate, no memory plan ({spec.no_plan_reason}): all activations of one "
                                    f"block at T={chunk} tokens, f32, no reuse, + one logits row "
                                    "(bringup.memory_model.activation_estimate)"})
        except BringupError as e:
            comps.append({"name": "activations", "bytes": 0, "status": "absent", "counted": True,
                          "source": f"absent: {e}"})
        try:
            comps.append({"name": "workspace", "bytes": attention_scratch_estimate(hp, chunk, p.ctx),
                          "status": "estimate", "counted": True,
                          "source": f"estimate, no memory plan: attention family, f32 scores "
                                    f"[n_head][T={chunk}][C={p.ctx}] of a non-fused kernel"})
        except BringupError as e:
            comps.append({"name": "workspace", "bytes": 0, "status": "absent", "counted": True,
                          "source": f"absent: {e}"})

    kv_rows = []
    if spec.kv_layers is None:
        comps.append({"name": "kv_cache", "bytes": 0, "status": "absent", "counted": True, "source": spec.kv_source})
    else:
        kvb = kv_cache_bytes(spec.kv_layers, p.ctx, p.seqs, p.kv_dtype, spec.kv_ring_buffer, p.chunk)
        has_window = any(L.window for L in spec.kv_layers)
        layout = (("ring-buffered (window + chunk - 1 rows)" if spec.kv_ring_buffer else "full-length")
                  + f" window layers ({spec.kv_layout_source}); ") if has_window else ""
        comps.append({"name": "kv_cache", "bytes": kvb, "status": "sized", "counted": True,
                      "source": f"{spec.kv_source}; {layout}C={p.ctx}, S={p.seqs}, {p.kv_dtype}"})
        for L in spec.kv_layers:
            rows = kv_layer_rows(L, p.ctx, spec.kv_ring_buffer, p.chunk)
            kb = rows * kv_row_bytes(L.n_head_kv, L.head_dim_k, p.kv_dtype) * p.seqs
            vb = rows * kv_row_bytes(L.n_head_kv, L.head_dim_v, p.kv_dtype) * p.seqs
            kv_rows.append({"layer": L.layer, "window": L.window, "rows": rows, "k_bytes": kb, "v_bytes": vb})

    if spec.overheads is None:
        comps.append({"name": "runtime_overheads", "bytes": 0, "status": "absent", "counted": True,
                      "source": spec.overheads_source})
    else:
        comps.append({"name": "runtime_overheads", "bytes": sum(o.bytes for o in spec.overheads), "status": "sized",
                      "counted": True, "source": spec.overheads_source,
                      "items": [dataclasses.asdict(o) for o in spec.overheads]})

    total = sum(c["bytes"] for c in comps if c["counted"])
    missing = [c["name"] for c in comps if c["status"] == "absent"]
    estimated = [c["name"] for c in comps if c["status"] == "estimate"]
    return Footprint(p, comps, total, not missing, missing, estimated, kv_rows)


# --------------------------------------------------------------------------------------------
# Budget, inverse queries, alternatives
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Budget:
    """A memory budget: ``budget_bytes`` before headroom; ``usable_bytes`` what a plan may use."""
    source: str
    budget_bytes: int
    headroom_fraction: float
    headroom_source: str

    @property
    def usable_bytes(self) -> int:
        return int(math.floor(self.budget_bytes * (1.0 - self.headroom_fraction)))

    def fits(self, total: int) -> bool:
        return total <= self.usable_bytes


def load_devices(path: str | os.PathLike | None = None) -> dict[str, dict]:
    """Device profiles from config/devices.yaml, validated against devices.schema.json."""
    path = Path(path) if path else CONFIG / "devices.yaml"
    data = yaml.safe_load(path.read_text())
    validate(data, "devices", str(path))
    for name, d in data["devices"].items():
        if d["reserved_bytes"] >= d["ram_bytes"]:
            raise BringupError(f"{path}: device {name}: reserved_bytes >= ram_bytes")
    return data["devices"]


def device_budget(name: str, devices: dict[str, dict] | None = None) -> Budget:
    """Budget of a device profile: (ram - reserved) with the profile's headroom."""
    devices = devices if devices is not None else load_devices()
    if name not in devices:
        raise BringupError(f"unknown device {name!r}; config/devices.yaml has: {', '.join(sorted(devices))}")
    d = devices[name]
    return Budget(f"device {name}: {d['description']} (ram {d['ram_bytes']} - reserved {d['reserved_bytes']}; "
                  f"{d['reserved_source']})", d["ram_bytes"] - d["reserved_bytes"], float(d["headroom_fraction"]),
                  f"config/devices.yaml {name}.headroom_fraction")


_SIZE = re.compile(r"^\s*(\d+)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?\s*$")
_UNITS = {None: 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def parse_bytes(text: str) -> int:
    """``"2GiB"`` -> 2147483648; ``"500MB"`` -> 500000000; plain integers are bytes."""
    m = _SIZE.match(str(text))
    if not m:
        raise BringupError(f"not a byte size: {text!r} (an integer with an optional unit B, KB, MB, GB, KiB, MiB, GiB)")
    return int(m.group(1)) * _UNITS[m.group(2)]


def check_monotonic(f: Callable[[int], int], xs: Iterable[int], what: str) -> dict:
    """Evaluate ``f`` at ``xs`` and raise BringupError if it ever decreases as x grows.

    Bisection is only valid over a non-decreasing footprint; this is the check. Returns
    {"points": n, "range": [min, max], "monotonic": True}.
    """
    pts = sorted(set(int(x) for x in xs))
    prev = None
    for x in pts:
        y = f(x)
        if prev is not None and y < prev[1]:
            raise BringupError(f"footprint is not monotonic in {what}: {prev[1]} bytes at {prev[0]} but {y} at {x}; "
                               "bisection does not apply")
        prev = (x, y)
    return {"points": len(pts), "range": [pts[0], pts[-1]], "monotonic": True}


def _grid(lo: int, hi: int, n: int = 33) -> list[int]:
    if hi <= lo:
        return [lo]
    return sorted({lo, hi, *(lo + (hi - lo) * i // (n - 1) for i in range(n))})


def largest_fitting(f: Callable[[int], int], usable: int, lo: int, hi: int) -> tuple[int | None, list[int]]:
    """Largest x in [lo, hi] with f(x) <= usable, by bisection on a non-decreasing f.

    Returns (x or None when even lo does not fit, the probed xs).
    """
    probes = [lo]
    if f(lo) > usable:
        return None, probes
    probes.append(hi)
    if f(hi) <= usable:
        return hi, probes
    good, bad = lo, hi
    while bad - good > 1:
        mid = (good + bad) // 2
        probes.append(mid)
        if f(mid) <= usable:
            good = mid
        else:
            bad = mid
    return good, probes


def _with(p: RunParams, **kw) -> RunParams:
    return dataclasses.replace(p, **kw)


def _window_points(spec: ModelSpec, chunk: int) -> list[int]:
    """Contexts around each window's knee (where a ring-buffered layer stops growing)."""
    ws = {L.window + chunk - 1 for L in (spec.kv_layers or ()) if L.window}
    return sorted(w + d for w in ws for d in (-1, 0, 1) if w + d >= 1)


def longest_context(spec: ModelSpec, p: RunParams, budget: Budget) -> dict:
    """Longest C in [1, n_ctx_train] that fits at p.seqs (bisection, monotonicity checked)."""
    cap = spec.hparams.get("n_ctx_train") or _CTX_SEARCH_CAP
    cap_src = "n_ctx_train" if spec.hparams.get("n_ctx_train") else f"search cap {_CTX_SEARCH_CAP}"
    search = spec
    if spec.arena_at is not None:
        # Re-planning per probe costs seconds; the arena planned at the top of the range bounds
        # every smaller context from above (scratch grows with C), and the answer is re-checked
        # with the arena planned at that context.
        search = dataclasses.replace(spec, arena=spec.arena_at(cap))
    f = lambda c: evaluate(search, _with(p, ctx=c)).total_bytes  # noqa: E731
    best, probes = largest_fitting(f, budget.usable_bytes, 1, cap)
    mono = check_monotonic(f, probes + _grid(1, cap) + [x for x in _window_points(spec, p.chunk) if x <= cap], "context")
    total = None if best is None else f(best)
    if best is not None and spec.arena_at is not None:
        total = evaluate(dataclasses.replace(spec, arena=spec.arena_at(best)), _with(p, ctx=best)).total_bytes
        if not budget.fits(total):
            raise BringupError(f"longest-context check failed: C={best} needs {total} bytes with its own arena")
    return {"seqs": p.seqs, "kv_dtype": p.kv_dtype, "ctx": best, "searched": [1, cap], "upper_limit": cap_src,
            "monotonic_check": mono, "total_bytes": total}


def most_sequences(spec: ModelSpec, p: RunParams, budget: Budget) -> dict:
    """Most sequences S in [1, cap] that fit at p.ctx (doubling to bracket, then bisection)."""
    f = lambda s: evaluate(spec, _with(p, seqs=s)).total_bytes  # noqa: E731
    hi = 1
    while hi < _SEQ_SEARCH_CAP and f(hi) <= budget.usable_bytes:
        hi = min(hi * 2, _SEQ_SEARCH_CAP)
    best, probes = largest_fitting(f, budget.usable_bytes, 1, hi)
    mono = check_monotonic(f, probes + _grid(1, hi), "sequences")
    return {"ctx": p.ctx, "kv_dtype": p.kv_dtype, "seqs": best, "searched": [1, hi],
            "upper_limit": f"search cap {_SEQ_SEARCH_CAP}" if hi == _SEQ_SEARCH_CAP else "bracketed by doubling",
            "monotonic_check": mono, "total_bytes": None if best is None else f(best)}


def smallest_budget(spec: ModelSpec, p: RunParams, headroom_fraction: float) -> dict:
    """Smallest budget B (bytes, before headroom) whose usable part holds the footprint at p."""
    total = evaluate(spec, p).total_bytes

    def usable(b: int) -> int:
        return Budget("", b, headroom_fraction, "").usable_bytes

    # smallest b with usable(b) >= total  <=>  largest b with usable(b) < total, plus one
    g = lambda b: 0 if usable(b) >= total else 1  # noqa: E731  (1 = still too small)
    lo, hi = 0, _BUDGET_SEARCH_CAP
    if usable(lo) >= total:
        return {"ctx": p.ctx, "seqs": p.seqs, "kv_dtype": p.kv_dtype, "budget_bytes": 0, "total_bytes": total}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if g(mid):
            lo = mid
        else:
            hi = mid
    mono = check_monotonic(usable, _grid(0, hi * 2), "budget")
    return {"ctx": p.ctx, "seqs": p.seqs, "kv_dtype": p.kv_dtype, "budget_bytes": hi, "total_bytes": total,
            "headroom_fraction": headroom_fraction, "monotonic_check": mono}


# Candidate formats for "a smaller quantization of the same model", smallest bits per weight
# last. Only 2-D weights are re-quantized (norms and biases stay F32, as llama-quantize does).
REQUANT_CANDIDATES = ("Q8_0", "Q6_K", "Q5_0", "Q4_K", "Q4_0", "Q3_K", "Q2_K")


def requantized(spec: ModelSpec, target: str) -> tuple[ModelSpec, int, int]:
    """``spec`` with every 2-D weight stored at more bytes per weight than ``target`` re-quantized.

    A tensor whose row (ne0) is not a whole number of ``target`` blocks keeps its format (counted
    in the second return value); the third is the number of tensors changed.
    """
    fmt = formats.by_name(target)
    bpw_t = fmt.block_bytes / fmt.block_elems
    out, kept, changed = [], 0, 0
    for w in spec.weights:
        src = formats.by_name(w.type_name)
        if len(w.shape) >= 2 and src.block_bytes / src.block_elems > bpw_t:
            if w.shape[0] % fmt.block_elems:
                kept += 1
                out.append(w)
                continue
            out.append(dataclasses.replace(w, type_name=target, bytes=fmt.tensor_bytes(w.shape)))
            changed += 1
        else:
            out.append(w)
    return dataclasses.replace(spec, weights=tuple(out)), kept, changed


def alternatives(spec: ModelSpec, p: RunParams, budget: Budget) -> list[dict]:
    """Ways to make the run fit, each with the bytes it saves, ranked.

    Ranking: alternatives that make the run fit first, then by bytes saved (most first), then by
    name. Each is evaluated by ``evaluate`` with one change applied.
    """
    base = evaluate(spec, p).total_bytes
    alts: list[dict] = []

    def add(name: str, change: str, total: int, note: str):
        alts.append({"name": name, "change": change, "total_bytes": total, "bytes_saved": base - total,
                     "fits": budget.fits(total), "note": note})

    order = list(KV_DTYPES)
    for d in order[order.index(p.kv_dtype) + 1:]:
        add(f"kv_{d}", f"KV cache {p.kv_dtype} -> {d}", evaluate(spec, _with(p, kv_dtype=d)).total_bytes,
            "needs attention kernels that read this KV dtype")
    lc = longest_context(spec, p, budget)
    if lc["ctx"] is not None and lc["ctx"] < p.ctx:
        add("shorter_context", f"context {p.ctx} -> {lc['ctx']}", lc["total_bytes"],
            "the longest context that fits at this many sequences")
    if p.seqs > 1:
        ms = most_sequences(spec, p, budget)
        if ms["seqs"] is not None and ms["seqs"] < p.seqs:
            add("fewer_sequences", f"sequences {p.seqs} -> {ms['seqs']}", ms["total_bytes"],
                "the most sequences that fit at this context")
    if not p.weights_mapped:
        add("mapped_weights", "count weights as mapped, evictable page cache",
            evaluate(spec, _with(p, weights_mapped=True)).total_bytes,
            "the BUMP is already mmap'd read-only; under pressure its pages are dropped and re-read "
            "(major page faults, slower decode)")
    if spec.kv_layers and not spec.kv_ring_buffer and any(L.window for L in spec.kv_layers):
        add("ring_buffer_window_layers", "sliding-window layers keep only their window",
            evaluate(dataclasses.replace(spec, kv_ring_buffer=True), p).total_bytes,
            "needs a ring-buffered KV layout in the runtime and attention kernel")
    cur_bpw = _weights_bpw(spec)
    for t in REQUANT_CANDIDATES:
        f = formats.by_name(t)
        if f.block_bytes / f.block_elems >= cur_bpw:
            continue
        s2, kept, changed = requantized(spec, t)
        if changed == 0:
            continue
        add(f"requantize_{t.lower()}", f"re-quantize 2-D weights to {t}", evaluate(s2, p).total_bytes,
            f"{changed} tensors re-quantized, {kept} kept (row not a multiple of {f.block_elems}); "
            "needs the checkpoint re-quantized and kernels for the format; quality not checked")
    alts.sort(key=lambda a: (not a["fits"], -a["bytes_saved"], a["name"]))
    for i, a in enumerate(alts, 1):
        a["rank"] = i
    return alts


def _weights_bpw(spec: ModelSpec) -> float:
    """Mean bytes per weight of the 2-D weights (the ones a re-quantization changes)."""
    n = b = 0
    for w in spec.weights:
        if len(w.shape) >= 2:
            n += math.prod(w.shape)
            b += w.bytes
    return b / n if n else 0.0


# --------------------------------------------------------------------------------------------
# Planner arena and calibration inputs
# --------------------------------------------------------------------------------------------

def arena_from_plan(plan: dict, source: str) -> ArenaPlan:
    """ArenaPlan from a ``memory_plan.json`` (docs/ir_format.md): arena bytes, widest scratch.

    Scratch buffers are named ``<op id>.scratch.<name>``; the family is the op id without its
    ``layer.<L>.`` prefix. Raises BringupError if the plan lacks the arena.
    """
    try:
        arena_bytes = int(plan["arena"]["bytes"])
    except (KeyError, TypeError, ValueError):
        raise BringupError(f"{source}: memory plan has no arena.bytes") from None
    fam: dict[str, int] = {}
    for ph in plan.get("phases", {}).values():
        for b in ph.get("buffers", []):
            m = re.match(r"^(?:layer\.\d+\.|header\.|footer\.)?(.+?)\.scratch\.(.+)$", str(b.get("id", "")))
            if m:
                key = f"{m.group(1)}.{m.group(2)}"
                fam[key] = max(fam.get(key, 0), int(b["size"]))
    phases = plan.get("phases", {})
    state = plan.get("state", {})
    return ArenaPlan(arena_bytes, state.get("n_ctx"), None, dict(sorted(fam.items())),
                     f"planner arena from {source}: {arena_bytes} bytes = max over phases "
                     f"{ {k: v.get('arena_bytes') for k, v in sorted(phases.items())} } "
                     f"(planned at n_ctx={state.get('n_ctx')})")


def manifest_from_header(header: GGUFHeader) -> dict:
    """weights_manifest.json as the convert stage would write it, from the tensor infos alone.

    Same name map (``bringup.convert.map_tensors`` + ``tensor_maps/{arch}.json``) and rows; the
    tokenizer blob is left out of ``extra`` (it is not a weight the IR binds) and ``gguf_sha256``
    is the header hash. Raises IntegrityError for an unaccounted tensor, as convert does.
    """
    from bringup.convert.importer import load_tensor_map, map_tensors

    cfg = header.config
    tmap = load_tensor_map(cfg["architecture"])
    mapped, excluded, unaccounted = map_tensors([t.name for t in header.tensors], tmap, cfg["hparams"]["n_layer"])
    if unaccounted:
        raise IntegrityError(f"{len(unaccounted)} GGUF tensor(s) are neither mapped nor excluded by "
                             f"tensor_maps/{cfg['architecture']}.json: {', '.join(unaccounted[:10])}")
    rows = [{"gguf_name": t.name, "name": mapped[t.name], "dtype": t.type_name, "shape": list(t.shape),
             "bytes": t.n_bytes} for t in header.tensors if t.name in mapped]
    man = {"schema_version": 1, "architecture": cfg["architecture"], "gguf_sha256": header.header_sha256,
           "tensor_map": {"file": f"tensor_maps/{cfg['architecture']}.json", "sha256": canonjson.sha256(tmap)},
           "tensors": rows, "excluded": [{"gguf_name": n, "reason": r} for n, r in sorted(excluded.items())],
           "unaccounted": [], "tied": {"output": "tok_embd"} if cfg["tied_embeddings"] else {}, "extra": [],
           "counts": {"gguf": len(header.tensors), "mapped": len(mapped), "excluded": len(excluded), "unaccounted": 0},
           "weight_bytes": sum(r["bytes"] for r in rows)}
    validate(man, "weights_manifest", "weights manifest (from the GGUF header)")
    return man


def nodes_from_ir(irs: dict[str, dict]) -> list[dict]:
    """Per op node of the circuit, per layer: provider, weight bytes (each weight at its first
    use), activation bytes written (prefill), scratch (widest phase) and KV state bytes."""
    pre, dec = irs["prefill"], irs["decode"]
    dec_scratch = {op["id"]: sum(op.get("scratch", {}).values()) for op in dec["ops"]}
    state_bytes = {s["name"]: s["bytes"] for s in pre["state"]}
    seen: set[str] = set()
    rows = []
    for op in pre["ops"]:
        wb = 0
        for t in op.get("weights", {}).values():
            if t not in seen:
                seen.add(t)
                wb += pre["tensors"][t]["bytes"]
        rows.append({"node": op["circuit_op"], "layer": op["layer"], "op": op["op"], "provider": op["provider"],
                     "weight_bytes": wb,
                     "activation_bytes": sum(pre["tensors"][t]["bytes"] for t in op["outputs"].values()),
                     "scratch_bytes": max(sum(op.get("scratch", {}).values()), dec_scratch.get(op["id"], 0)),
                     "state_bytes": sum(state_bytes.get(s, 0) for s in op.get("state", {}).values())})
    return rows


def plan_in_process(header: GGUFHeader, ctx: int, chunk: int) -> tuple[ArenaPlan, dict[str, dict]]:
    """Compile the IR (``bringup.ir.compile_ir``) and plan it (``bringup.planner.plan_irs``) from
    the header alone, at context ``ctx`` and prefill chunk ``chunk``.

    Returns the ArenaPlan (max over phases, scratch included) and the IRs. Raises whatever the
    compiler raises (UnsupportedError for no circuit or provider).
    """
    from bringup.ir import lower as ir
    from bringup.plan import planner

    irs = ir.compile_ir(header.config, manifest_from_header(header), chunk=chunk, n_ctx=ctx)
    plan = planner.plan_irs(irs)
    a = arena_from_plan(plan, "in-process plan")
    return dataclasses.replace(
        a, chunk=chunk, nodes=tuple(nodes_from_ir(irs)), nodes_source="IR compiled in-process from the header",
        source=(f"planner arena (bringup.planner.plan_irs on the IR compiled in-process from the header "
                f"at C={ctx}, T={chunk}): {a.arena_bytes} bytes = max(prefill "
                f"{plan['phases']['prefill']['arena_bytes']}, decode {plan['phases']['decode']['arena_bytes']}), "
                "kernel scratch included")), irs


def _schema_defs() -> dict:
    return json.loads((SCHEMAS / "memory_model.schema.json").read_text())


def validate_calibration(obj: Any, what: str = "calibration") -> None:
    """Validate a runtime calibration record against ``$defs/calibration`` of the model schema."""
    s = _schema_defs()
    sub = {"$schema": s["$schema"], "$defs": s["$defs"], "$ref": "#/$defs/calibration"}
    errors = sorted(jsonschema.Draft202012Validator(sub).iter_errors(obj), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  at /{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:20]]
        raise BringupError(f"{what} is not a runtime calibration record:\n" + "\n".join(lines))


def overheads_from_calibration(cal: dict, source: str) -> tuple[tuple[Overhead, ...], str]:
    """Overheads of a validated calibration record, and the sentence naming their source."""
    validate_calibration(cal, source)
    ovs = tuple(Overhead(o["name"], int(o["bytes"]), o["what"]) for o in cal["overheads"])
    pts = ", ".join(f"C={q['ctx']}: {q['peak_rss_bytes']} measured - {q['predicted_bytes']} predicted"
                    for q in cal["points"])
    return ovs, (f"calibration {source} (bringup-run sha256 {cal['binary_sha256'][:12]}, "
                 f"header {cal['model_header_sha256'][:12]}): {cal['method']}; {pts}")


def calibrate(spec: ModelSpec, measurements: list[dict], *, binary_sha256: str, library_sha256: str,
              command: list[str]) -> dict:
    """A calibration record from measured runs of the native CLI on this model.

    ``measurements``: [{"ctx", "seqs", "kv_dtype", "chunk", "peak_rss_bytes"}]. The overhead is the
    mean of (measured peak RSS - predicted components without overheads) over the points, rounded
    to a page (4096 bytes); a spread larger than one page across points means the component model
    itself is off by that much, and is recorded. Raises BringupError when no point is given or a
    predicted component is absent.
    """
    if not measurements:
        raise BringupError("calibration needs at least one measured run")
    bare = dataclasses.replace(spec, overheads=None)
    points = []
    for m in measurements:
        fp = evaluate(bare, RunParams(m["ctx"], m["seqs"], m["kv_dtype"], m["chunk"]))
        absent = [x for x in fp.missing if x != "runtime_overheads"]
        if absent:
            raise BringupError(f"cannot calibrate: components {absent} are absent")
        points.append({"ctx": m["ctx"], "seqs": m["seqs"], "kv_dtype": m["kv_dtype"], "chunk": m["chunk"],
                       "peak_rss_bytes": int(m["peak_rss_bytes"]), "predicted_bytes": fp.total_bytes})
    diffs = [q["peak_rss_bytes"] - q["predicted_bytes"] for q in points]
    mean = sum(diffs) / len(diffs)
    overhead = max(0, int(round(mean / 4096)) * 4096)
    cal = {
        "kind": "bringup.runtime_calibration", "schema_version": SCHEMA_VERSION,
        "binary_sha256": binary_sha256, "library_sha256": library_sha256,
        "model_header_sha256": spec.header_sha256, "command": list(command),
        "method": "peak RSS (getrusage ru_maxrss) of bringup-run minus the predicted weights, load copies, "
                  "activations, workspace and KV cache at the same run parameters; mean over points, page-rounded",
        "points": points,
        "overheads": [{"name": "process", "bytes": overhead,
                       "what": "code and data of bringup-run + libmodel.so + libc, stacks, tokenizer tables, "
                               "allocator slack, BUMP header/table/tokenizer blob pages"}],
        "spread_bytes": max(diffs) - min(diffs),
    }
    validate_calibration(cal)
    return cal


def run_native(binary: str | os.PathLike, library: str | os.PathLike, weights: str | os.PathLike, *,
               ctx: int, prompt_tokens: list[int], max_tokens: int, extra: list[str] | None = None,
               timeout: float = 600) -> dict:
    """Run ``bringup-run LIBMODEL WEIGHTS --prompt-tokens IDS --max-tokens N --temperature 0 --ctx C
    --timing --json`` and return its JSON, with ``peak_rss_bytes`` (ru_maxrss KiB x 1024) and
    ``major_page_faults`` copied to the top level and the command under ``command``.

    Raises BringupError with the CLI's stderr when it fails, or when its JSON lacks the timing fields.
    """
    cmd = [str(binary), str(library), str(weights), "--prompt-tokens", ",".join(map(str, prompt_tokens)),
           "--max-tokens", str(max_tokens), "--temperature", "0", "--ctx", str(ctx), "--timing", "--json",
           *(extra or [])]
    # Linux keeps ru_maxrss across execve, and a child forked from this Python process starts with
    # Python's resident pages counted: its ru_maxrss would report Python's peak, not the CLI's. A
    # shell that forks again (the trailing `exit` keeps it from exec'ing in place) gives the CLI a
    # fresh process whose peak is its own.
    wrapped = ["/bin/sh", "-c", '"$@"; exit $?', "sh", *cmd]
    try:
        r = subprocess.run(wrapped, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BringupError(f"cannot run {cmd[0]}: {e}") from None
    if r.returncode != 0:
        raise BringupError(f"{' '.join(cmd[:3])} ... exited {r.returncode}: {r.stderr.strip()[-2000:]}")
    try:
        out = json.loads(r.stdout)
    except json.JSONDecodeError as e:
        raise BringupError(f"bringup-run --json printed no JSON ({e}): {r.stdout[:500]!r}") from None
    t = out.get("timing") if isinstance(out, dict) else None
    if not isinstance(t, dict) or RUN_TIMING_RSS_KIB not in t or RUN_TIMING_MAJFLT not in t:
        raise BringupError(f"bringup-run --json timing lacks {RUN_TIMING_RSS_KIB}/{RUN_TIMING_MAJFLT}: "
                           f"timing keys {sorted(t) if isinstance(t, dict) else t!r}")
    out["peak_rss_bytes"] = int(t[RUN_TIMING_RSS_KIB]) * 1024
    out["major_page_faults"] = int(t[RUN_TIMING_MAJFLT])
    out["minor_page_faults"] = int(t.get(RUN_TIMING_MINFLT, -1))
    out["command"] = cmd
    return out


# --------------------------------------------------------------------------------------------
# Report (memory_model.json) and table (Markdown)
# --------------------------------------------------------------------------------------------

def _weights_by_role(spec: ModelSpec) -> list[dict]:
    groups: dict[str, dict] = {}
    for w in spec.weights:
        g = groups.setdefault(w.role, {"node": w.role, "layers": set(), "types": set(), "tensors": 0, "bytes": 0})
        if w.layer is not None:
            g["layers"].add(w.layer)
        g["types"].add(w.type_name)
        g["tensors"] += 1
        g["bytes"] += w.bytes
    return [{"node": g["node"], "layers": len(g["layers"]), "types": sorted(g["types"]), "tensors": g["tensors"],
             "bytes": g["bytes"]} for g in sorted(groups.values(), key=lambda g: (-g["bytes"], g["node"]))]


def summed_nodes(nodes: Iterable[dict]) -> list[dict]:
    """Op nodes summed over the layers that instantiate them (scratch: the widest instance)."""
    out: dict[str, dict] = {}
    for n in nodes:
        g = out.setdefault(n["node"], {"node": n["node"], "op": n["op"], "layers": 0, "providers": set(),
                                       "weight_bytes": 0, "activation_bytes": 0, "scratch_bytes": 0,
                                       "state_bytes": 0})
        g["layers"] += n["layer"] is not None
        g["providers"].add(n["provider"])
        for k in ("weight_bytes", "activation_bytes", "state_bytes"):
            g[k] += n[k]
        g["scratch_bytes"] = max(g["scratch_bytes"], n["scratch_bytes"])
    return [dict(g, providers=sorted(g["providers"])) for g in out.values()]


def build_report(spec: ModelSpec, p: RunParams, budget: Budget | None, *, per_node: bool = False,
                 inputs: dict | None = None, headroom_for_min: float | None = None) -> dict:
    """The memory_model.json document (schema ``memory_model``) for one query."""
    fp = evaluate(spec, p)
    rep: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "model": {"architecture": spec.architecture, "name": spec.name, "header_sha256": spec.header_sha256,
                  "tensor_count": len(spec.weights), "hparams": spec.hparams, "hparam_sources": spec.sources},
        "inputs": inputs or {},
        "params": dataclasses.asdict(p),
        "components": fp.components,
        "total_bytes": fp.total_bytes,
        "complete": fp.complete,
        "missing": fp.missing,
        "estimated": fp.estimated,
        "kv_cache": {"layout": "ring-buffered window layers" if spec.kv_ring_buffer else "full-length caches",
                     "layout_source": spec.kv_layout_source, "source": spec.kv_source, "layers": fp.kv_layers},
        "weights": {"by_node": _weights_by_role(spec),
                    "by_type": {t: sum(w.bytes for w in spec.weights if w.type_name == t)
                                for t in sorted({w.type_name for w in spec.weights})}},
    }
    if spec.arena is not None and spec.arena.nodes:
        rep["nodes"] = {"source": f"{spec.arena.nodes_source} at C={spec.arena.n_ctx}, T={spec.arena.chunk}; prefill "
                                  "activations, widest scratch of the two phases, each weight at its first use",
                        "summed": summed_nodes(spec.arena.nodes)}
        if per_node:
            rep["nodes"]["per_layer"] = list(spec.arena.nodes)
    else:
        rep["nodes"] = None
    if per_node:
        rep["weights"]["tensors"] = [{"name": w.name, "layer": w.layer, "role": w.role, "type": w.type_name,
                                      "shape": list(w.shape), "bytes": w.bytes} for w in spec.weights]
    h = budget.headroom_fraction if budget else (headroom_for_min if headroom_for_min is not None else 0.0)
    queries: dict[str, Any] = {"smallest_budget": smallest_budget(spec, p, h)}
    if budget is not None:
        fits = budget.fits(fp.total_bytes)
        rep["budget"] = {"source": budget.source, "budget_bytes": budget.budget_bytes,
                         "headroom_fraction": budget.headroom_fraction, "headroom_source": budget.headroom_source,
                         "usable_bytes": budget.usable_bytes, "fits": fits,
                         "margin_bytes": budget.usable_bytes - fp.total_bytes,
                         "verdict": ("fits" if fits and fp.complete else
                                     "fits_lower_bound_only" if fits else "does_not_fit")}
        queries["longest_context"] = longest_context(spec, p, budget)
        queries["most_sequences"] = most_sequences(spec, p, budget)
        rep["alternatives"] = [] if fits else alternatives(spec, p, budget)
    else:
        rep["budget"] = None
        rep["alternatives"] = []
    rep["queries"] = queries
    validate(rep, "memory_model", "memory_model.json")
    return rep


def _mib(b: int | None) -> str:
    return "" if b is None else f"{b / 2**20:.2f}"


def _md_table(df) -> str:
    """``df.to_markdown`` with cell text made inert: pipes escaped, newlines flattened."""
    safe = df.copy()
    for col in safe.columns:
        if safe[col].dtype == object or str(safe[col].dtype).startswith("str"):
            safe[col] = safe[col].map(lambda v: v.replace("|", "\\|").replace("\n", " ") if isinstance(v, str) else v)
    return safe.to_markdown(index=False)


def render_markdown(rep: dict) -> str:
    """A readable Markdown page of a memory_model.json document (tables built with pandas)."""
    import pandas as pd

    m, p = rep["model"], rep["params"]
    parts = [f"# Memory model: {m['architecture']} ({m['tensor_count']} tensors)", "",
             f"Header SHA-256 `{m['header_sha256']}`. Context C={p['ctx']}, sequences S={p['seqs']}, "
             f"KV dtype {p['kv_dtype']}, prefill chunk T={p['chunk']}"
             + (", weights mapped (not counted)" if p["weights_mapped"] else "") + ".", ""]
    comp = pd.DataFrame([{"component": c["name"], "bytes": c["bytes"], "MiB": _mib(c["bytes"]),
                          "status": c["status"] + ("" if c["counted"] else " (not counted)"),
                          "source": c["source"]} for c in rep["components"]])
    total = pd.DataFrame([{"component": "**total**", "bytes": rep["total_bytes"], "MiB": _mib(rep["total_bytes"]),
                           "status": "complete" if rep["complete"] else "INCOMPLETE: " + ", ".join(rep["missing"]),
                           "source": ("estimated: " + ", ".join(rep["estimated"])) if rep["estimated"] else ""}])
    parts += ["## Footprint", "", _md_table(pd.concat([comp, total])), ""]
    b = rep.get("budget")
    if b:
        parts += ["## Budget", "", f"{b['source']}", "",
                  f"Usable {b['usable_bytes']} bytes ({_mib(b['usable_bytes'])} MiB) = budget {b['budget_bytes']} "
                  f"x (1 - headroom {b['headroom_fraction']}). Verdict: **{b['verdict']}** "
                  f"(margin {b['margin_bytes']} bytes).", ""]
    q = rep["queries"]
    rows = [{"query": "smallest budget for (C, S)", "answer": f"{q['smallest_budget']['budget_bytes']} bytes "
                                                              f"({_mib(q['smallest_budget']['budget_bytes'])} MiB)"}]
    if "longest_context" in q:
        rows.append({"query": f"longest context at S={p['seqs']}", "answer": str(q["longest_context"]["ctx"])})
        rows.append({"query": f"most sequences at C={p['ctx']}", "answer": str(q["most_sequences"]["seqs"])})
    parts += ["## Queries", "", _md_table(pd.DataFrame(rows)), ""]
    if rep["alternatives"]:
        alt = pd.DataFrame([{"rank": a["rank"], "alternative": a["change"], "bytes saved": a["bytes_saved"],
                             "MiB saved": _mib(a["bytes_saved"]), "fits": "yes" if a["fits"] else "no",
                             "note": a["note"]} for a in rep["alternatives"]])
        parts += ["## Alternatives (does not fit)", "", _md_table(alt), ""]
    kv = rep["kv_cache"]
    if kv["layers"]:
        df = pd.DataFrame(kv["layers"])
        df["kind"] = df["window"].map(lambda w: "global" if pd.isna(w) else f"window {int(w)}")
        g = df.groupby("kind", sort=True).agg(layers=("layer", "count"), rows=("rows", "max"),
                                              k_bytes=("k_bytes", "sum"), v_bytes=("v_bytes", "sum")).reset_index()
        parts += ["## KV cache", "", f"{kv['layout']} ({kv['layout_source']}).", "", _md_table(g), ""]
    if rep.get("nodes"):
        nd = pd.DataFrame([{"node": n["node"], "op": n["op"], "layers": n["layers"],
                            "provider": " ".join(n["providers"]), "weight bytes": n["weight_bytes"],
                            "activation bytes": n["activation_bytes"], "scratch bytes": n["scratch_bytes"],
                            "KV bytes": n["state_bytes"]} for n in rep["nodes"]["summed"]])
        parts += ["## Op nodes (summed over layers)", "", rep["nodes"]["source"] + ".", "",
                  _md_table(nd), ""]
    w = pd.DataFrame([{"node": r["node"], "layers": r["layers"], "types": " ".join(r["types"]),
                       "tensors": r["tensors"], "bytes": r["bytes"], "MiB": _mib(r["bytes"])}
                      for r in rep["weights"]["by_node"]])
    parts += ["## Weights by node (summed over layers)", "", _md_table(w), ""]
    return "\n".join(parts)


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="bringup plan memory",
        description="Footprint of a model run from the GGUF header alone (no tensor data is read), "
                    "against a device budget; inverse queries and ranked alternatives when it does not fit.")
    ap.add_argument("--gguf", required=True, help="GGUF file (only its header is read)")
    ap.add_argument("--ctx", type=int, required=True, help="context length C (positions per sequence)")
    ap.add_argument("--seqs", type=int, default=1, help="sequences S, each with its own KV cache (default 1)")
    ap.add_argument("--kv-dtype", choices=sorted(KV_DTYPES), required=True, help="KV cache element type")
    ap.add_argument("--chunk", type=int, required=True,
                    help="prefill chunk T in tokens (bringup ir --chunk; sizes the activation estimate)")
    ap.add_argument("--swa-kv", choices=["window", "full"], default=None,
                    help="sliding-window layers keep only their window (ring buffer) or a full-length cache; "
                         "default: as the circuit's kv_layout says")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--device", help="device profile name from config/devices.yaml")
    g.add_argument("--budget", help="explicit budget, bytes or with a unit (e.g. 2GiB, 500MB)")
    ap.add_argument("--headroom", type=float, default=None,
                    help="fraction of --budget kept free (required with --budget; a device has its own)")
    ap.add_argument("--devices", default=None, help="device profiles file (default config/devices.yaml)")
    ap.add_argument("--memory-plan", default=None,
                    help="use this memory_plan.json (bringup plan) for the activation arena instead of planning")
    ap.add_argument("--ir-dir", default=None,
                    help="with --memory-plan: the IR it was planned from (ir_prefill/decode.json), for the op-node table")
    ap.add_argument("--activations", choices=["auto", "plan", "estimate"], default="auto",
                    help="plan: compile the IR and plan the arena in-process from the header (fails if the "
                         "circuit or a provider is missing); estimate: hyperparameter upper bound; auto "
                         "(default): plan, or estimate when planning is impossible, recording why")
    ap.add_argument("--calibration", default=None, help="runtime calibration JSON (runtime overheads)")
    ap.add_argument("--per-node", action="store_true", help="also list every op node per layer and every weight tensor")
    c = ap.add_argument_group("calibration (measure runtime overheads with the native CLI instead of planning)")
    c.add_argument("--calibrate", metavar="OUT_JSON", default=None,
                   help="run bringup-run at --ctx and write a runtime calibration record here")
    c.add_argument("--bringup-run", default=None, help="the native CLI (results/{model}/build/bringup-run)")
    c.add_argument("--libmodel", default=None, help="its model library (results/{model}/build/libmodel.so)")
    c.add_argument("--weights", default=None, help="the BUMP weights (results/{model}/convert/weights.bump)")
    ap.add_argument("--fail-if-not-fit", action="store_true", help="exit 6 when the run does not fit the budget")
    ap.add_argument("--out", default=None, help="write memory_model.json here")
    ap.add_argument("--md", default=None, help="write the Markdown table here")
    return ap


def with_planned_arena(spec: ModelSpec, header: GGUFHeader, p: RunParams, *, required: bool) -> ModelSpec:
    """``spec`` with the arena planned in-process at (p.ctx, p.chunk) and a re-planner for other
    contexts. When planning is impossible: raise if ``required``, else keep the estimate and record
    the planner's reason in the activation source."""
    cache: dict[int, ArenaPlan] = {}

    def arena_at(ctx: int) -> ArenaPlan:
        if ctx not in cache:
            cache[ctx] = plan_in_process(header, ctx, p.chunk)[0]
        return cache[ctx]

    try:
        arena = arena_at(p.ctx)
    except BringupError as e:
        if required:
            raise
        return dataclasses.replace(spec, no_plan_reason=f"{type(e).__name__}: {str(e).splitlines()[0]}")
    return dataclasses.replace(spec, arena=arena, arena_at=arena_at)


def calibration_prompt(n_vocab: int, n: int) -> list[int]:
    """The fixed token ids a calibration run feeds (their values do not change the footprint)."""
    return [(100 + i) % n_vocab for i in range(n)]


def _cli_calibrate(a, spec: ModelSpec, header: GGUFHeader, p: RunParams) -> int:
    missing = [f for f in ("bringup_run", "libmodel", "weights") if not getattr(a, f)]
    if missing:
        raise BringupError("--calibrate needs " + ", ".join("--" + m.replace("_", "-") for m in missing))
    if p.seqs != 1:
        raise BringupError("--calibrate measures one sequence (the CLI runs one); use --seqs 1")
    if spec.arena is None:
        raise BringupError(f"--calibrate needs the planned arena (no plan: {spec.no_plan_reason})")
    n = min(64, max(1, p.ctx // 2))
    run = run_native(a.bringup_run, a.libmodel, a.weights, ctx=p.ctx,
                     prompt_tokens=calibration_prompt(spec.hparams["n_vocab"], n), max_tokens=4)
    cal = calibrate(spec, [{"ctx": p.ctx, "seqs": 1, "kv_dtype": p.kv_dtype, "chunk": p.chunk,
                            "peak_rss_bytes": run["peak_rss_bytes"]}],
                    binary_sha256=sha256_file(a.bringup_run), library_sha256=sha256_file(a.libmodel),
                    command=[Path(run["command"][0]).name, *(Path(x).name for x in run["command"][1:3]),
                             *run["command"][3:]])
    canonjson.write(a.calibrate, cal)
    ov = cal["overheads"][0]["bytes"]
    print(f"calibration: peak RSS {cal['points'][0]['peak_rss_bytes']} - predicted "
          f"{cal['points'][0]['predicted_bytes']} -> runtime overhead {ov} bytes ({ov / 2**20:.1f} MiB); "
          f"wrote {a.calibrate}")
    return 0




def cli_main(argv: list[str]) -> int:
    """``bringup plan memory``: see ``--help``. Exit 0, 2 bad input, 6 with --fail-if-not-fit."""
    a = _parser().parse_args(argv)
    budget = None
    if a.device:
        if a.headroom is not None:
            raise BringupError("--headroom applies to --budget; a device profile carries its own headroom")
        budget = device_budget(a.device, load_devices(a.devices) if a.devices else None)
    elif a.budget:
        if a.headroom is None:
            raise BringupError("--budget needs --headroom (fraction kept free, e.g. 0.1)")
        if not 0 <= a.headroom < 1:
            raise BringupError(f"--headroom must be in [0, 1), got {a.headroom}")
        budget = Budget(f"--budget {a.budget}", parse_bytes(a.budget), a.headroom, "--headroom")
    p = RunParams(a.ctx, a.seqs, a.kv_dtype, a.chunk)
    header = read_gguf_header(a.gguf)
    inputs: dict[str, Any] = {"gguf_header_sha256": header.header_sha256}
    ring = None if a.swa_kv is None else a.swa_kv == "window"
    spec = spec_from_header(header, kv_ring_buffer=ring)
    if spec.circuit_sha256:
        inputs["circuit_sha256"] = spec.circuit_sha256
    if a.memory_plan:
        if a.activations == "estimate":
            raise BringupError("--memory-plan and --activations estimate contradict each other")
        plan = canonjson.read(a.memory_plan, "memory plan")
        validate(plan, "memory_plan", a.memory_plan)
        arena = arena_from_plan(plan, Path(a.memory_plan).name)
        if a.ir_dir:
            from bringup.plan import planner
            irs = planner.load_irs(Path(a.ir_dir))
            if plan["inputs_sha256"] != {f"ir_{k}": canonjson.sha256(v) for k, v in irs.items()}:
                raise BringupError(f"{a.memory_plan} was not planned from the IR in {a.ir_dir} (inputs_sha256 differ)")
            arena = dataclasses.replace(arena, chunk=irs["prefill"]["dims"]["n_tokens"],
                                        nodes=tuple(nodes_from_ir(irs)), nodes_source=f"IR from {Path(a.ir_dir).name}/")
        spec = dataclasses.replace(spec, arena=arena)
        inputs["memory_plan_sha256"] = sha256_file(a.memory_plan)
    elif a.ir_dir:
        raise BringupError("--ir-dir goes with --memory-plan (without it the IR is compiled in-process)")
    elif a.activations != "estimate":
        spec = with_planned_arena(spec, header, p, required=a.activations == "plan")
    if a.calibration:
        cal = canonjson.read(a.calibration, "calibration")
        ovs, src = overheads_from_calibration(cal, Path(a.calibration).name)
        if cal["model_header_sha256"] != header.header_sha256:
            raise BringupError(f"{a.calibration} was measured on another model (header "
                               f"{cal['model_header_sha256'][:12]} != {header.header_sha256[:12]})")
        spec = dataclasses.replace(spec, overheads=ovs, overheads_source=src)
        inputs["calibration_sha256"] = sha256_file(a.calibration)
    if a.calibrate:
        return _cli_calibrate(a, spec, header, p)
    rep = build_report(spec, p, budget, per_node=a.per_node, inputs=inputs,
                       headroom_for_min=a.headroom if a.headroom is not None else 0.0)
    if a.out:
        canonjson.write(a.out, rep)
    md = render_markdown(rep)
    if a.md:
        write_text(a.md, md)
    total = rep["total_bytes"]
    line = (f"{spec.architecture}: {total} bytes ({total / 2**20:.1f} MiB) at C={p.ctx} S={p.seqs} {p.kv_dtype}"
            + ("" if rep["complete"] else f" [INCOMPLETE: {', '.join(rep['missing'])} absent]")
            + (f" [estimated: {', '.join(rep['estimated'])}]" if rep["estimated"] else ""))
    if budget:
        line += f"; {rep['budget']['verdict']} in {budget.usable_bytes} usable bytes"
    print(line)
    if not a.out and not a.md:
        print(md)
    if a.fail_if_not_fit and budget and not rep["budget"]["fits"]:
        raise GateError(f"does not fit: {total} > {budget.usable_bytes} usable bytes")
    return 0
