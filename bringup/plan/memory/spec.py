"""The model spec: everything the footprint evaluator needs from a GGUF header, independent of the
run parameters; and the run parameters themselves.

The header is read with the project's one GGUF reader (``bringup.formats.gguf_file.read_header``,
header only: a file cut after the header gives the same spec); hyperparameters come from the
convert stage's ``extract_config`` (one derivation of config.json for the whole project); the
sliding-window pattern and KV layout come from the circuit (``layer_values.window``,
``contracts.attention.kv_layout``; Gemma3: llama.cpp ``set_swa_pattern``).
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from typing import Callable

from bringup.convert.importer import extract_config
from bringup.core.errors import BringupError, UnsupportedError
from bringup.formats import ggml as formats
from bringup.formats import gguf_file
from bringup.ir import circuits
from bringup.ir import lower as ir

# Version of the two documents of config/schemas/memory_model.schema.json: memory_model.json and
# the runtime calibration record.
SCHEMA_VERSION = 1

# KV cache element types a run may choose; values are names in the one block-format table.
KV_DTYPES = {"f32": "F32", "f16": "F16", "q8_0": "Q8_0"}

# Load-time copies: rules that say which weights the runtime copies at load (e.g. a repack into
# an interleaved layout) and in which format the copy is held. Empty today: every kernel reads the
# GGML block layout in place from the mmap'd BUMP (docs/architecture.md, Kernel ABI). A rule is
# {"name": str, "tensor_glob": fnmatch pattern on the GGUF name, "types": [GGML type names],
#  "copy_as": GGML type name of the copy (its bytes are that format's bytes for the same shape)}.
LOAD_COPY_RULES: tuple[dict, ...] = ()


@dataclass(frozen=True)
class Weight:
    """A stored weight: GGUF name, GGML type name, GGUF shape (ne0 first), bytes as stored
    (blocks and scales included), layer (or None), role (GGUF name without ``blk.L.`` and
    ``.weight``; ``_bias`` appended for a bias)."""
    name: str
    type_name: str
    shape: tuple[int, ...]
    bytes: int
    layer: int | None
    role: str


@dataclass(frozen=True, eq=False)
class ModelHeader:
    """What plan-memory needs from a GGUF file, read without touching tensor data.

    ``gguf`` is the header as read (tensor infos, ``data_offset``, ``sha256`` of bytes
    ``[0, data_offset)``, which names the header identically for a full file and a truncated copy).
    ``config`` is config.json as the convert stage derives it; its ``gguf_sha256`` is the header
    hash here, since the full-file hash would read tensor data. ``weights`` is every tensor with
    its format and bytes, in file order.
    """
    gguf: gguf_file.GGUFHeader
    config: dict
    weights: tuple[Weight, ...]

    @property
    def architecture(self) -> str:
        return self.config["architecture"]

    @property
    def name(self) -> str | None:
        return self.config["name"] or None

    @property
    def header_sha256(self) -> str:
        return self.gguf.sha256

    @property
    def data_offset(self) -> int:
        return self.gguf.data_offset


_BLK = re.compile(r"^blk\.(\d+)\.(.+?)(\.weight|\.bias)?$")


def _weight(t: gguf_file.TensorInfo) -> Weight:
    try:
        fmt = formats.by_ggml_type(t.ggml_type)
        n_bytes = fmt.tensor_bytes(t.shape)
    except BringupError as e:
        raise UnsupportedError(f"tensor {t.name!r}: {e}") from None
    m = _BLK.match(t.name)
    if m:
        layer, role = int(m.group(1)), m.group(2) + ("" if m.group(3) in (None, ".weight") else "_bias")
    else:
        layer, role = None, re.sub(r"\.weight$", "", t.name)
    return Weight(t.name, fmt.name, t.shape, n_bytes, layer, role)


def read_model_header(path: str | os.PathLike) -> ModelHeader:
    """Read the GGUF header of ``path`` (no tensor data) into a ModelHeader.

    Kept per header for the life of the process (the header parse is cached by ``read_header``).
    Raises BringupError (exit 2) if the file is missing, IntegrityError if the header is unreadable
    or cut, UnsupportedError for a tensor type outside ``config/ggml_formats.json`` or an
    architecture name that is not a plain identifier.
    """
    return _model_header(gguf_file.read_header(path))


@functools.lru_cache(maxsize=4)
def _model_header(header: gguf_file.GGUFHeader) -> ModelHeader:
    weights = tuple(_weight(t) for t in header.tensors)
    arch = header.reader.fields.get("general.architecture")
    arch_s = bytes(arch.parts[-1]).decode("utf-8", "replace") if arch is not None else ""
    if not re.fullmatch(r"[a-z0-9_]{1,64}", arch_s):
        # the architecture names files and keys and reaches the reports: a plain identifier only
        raise UnsupportedError(f"{header.path}: general.architecture {arch_s[:80]!r} is not a plain identifier")
    return ModelHeader(header, extract_config(header.reader, header.sha256), weights)


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
    Raises BringupError for a value below 1 or an unknown KV dtype.
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


def hparams_from_header(header: ModelHeader) -> tuple[dict[str, int | None], dict[str, str]]:
    """The integer dimensions of config.json (n_layer, n_embd, n_head, n_head_kv, head_dim,
    head_dim_v, n_ff, n_vocab, n_ctx_train, sliding_window, ...) and the GGUF key or derivation of
    each, as the convert stage records them."""
    hp = header.config["hparams"]
    keep = {k: v for k, v in hp.items() if v is None or (isinstance(v, int) and not isinstance(v, bool))}
    return keep, {k: header.config["sources"][k] for k in keep}


def _layer_windows(circuit: circuits.Circuit, config: dict) -> list[int | None]:
    """Per-layer attention window from the circuit's ``layer_values.window`` (0 = global).

    Evaluated exactly as ``bringup ir`` does: the IR's namespace (config + circuit constants)
    and ``circuits.evaluate``.
    """
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
    """KV geometry for ``n_layer`` identical layers; ``windows[L]`` is layer L's window or None.
    Raises BringupError when ``windows`` does not have one entry per layer."""
    windows = windows or [None] * n_layer
    if len(windows) != n_layer:
        raise BringupError(f"{len(windows)} windows for {n_layer} layers")
    return tuple(KVLayer(L, n_head_kv, head_dim_k, head_dim_v, windows[L]) for L in range(n_layer))


def spec_from_header(header: ModelHeader, *, circuit: circuits.Circuit | None = None,
                     kv_ring_buffer: bool | None = None) -> ModelSpec:
    """Build the ModelSpec of a GGUF header.

    ``circuit`` (default: the circuit that lists the architecture) gives the sliding-window
    pattern and the KV layout. Without a circuit the KV cache is sized only when the GGUF declares
    no sliding window (every layer global); otherwise it is left absent. ``kv_ring_buffer`` None
    means "as the circuit's kv_layout says" (ring-buffered only when it says so). Raises
    UnsupportedError for per-layer dimensions.
    """
    hp, src = hparams_from_header(header)
    if circuit is None:
        try:
            circuit = circuits.for_architecture(header.architecture, hparams=header.config["hparams"])
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
        hparams=hp, sources=src, weights=header.weights, kv_layers=kv_layers, kv_source=kv_source,
        kv_ring_buffer=kv_ring_buffer, kv_layout_source=layout_src,
        circuit_sha256=circuit.sha256 if circuit is not None else None)
