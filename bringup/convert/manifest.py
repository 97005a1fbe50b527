"""weights_manifest.json from a GGUF's tensor-info table alone: the name map and the one builder.

Tensor names are mapped by per-architecture data (``tensor_maps/{arch}.json``: ``global`` names,
``per_layer`` patterns with ``{L}``, ``exclude`` patterns with a reason). Every GGUF tensor is
mapped or excluded with a recorded reason; an unaccounted tensor fails. A fused GGUF tensor maps
onto several canonical ones by row ranges (``{"split_rows": [[name, rows_expr], ...]}``, the row
counts written in the circuit expression language over config.json's hparams, e.g. Phi-3's
``attn_qkv`` = rows Q, K, V): each part is a manifest row with ``rows`` [first, end) of the GGUF
tensor, whose bytes are ``[first * row_bytes, end * row_bytes)``, exact because every GGML block
format stores a row as a whole number of independent blocks. Only the header is needed
(names, GGML types, shapes), so ``bringup convert`` and ``bringup plan memory`` (which plans from
a header-only file) build the manifest with the same two calls::

    wmap = map_weights(config, gguf_file.tensor_infos(reader))
    manifest = weights_manifest(config, wmap, gguf_sha256=..., extra=[...])

Format of the manifest: ``config/schemas/weights_manifest.schema.json`` and docs/architecture.md.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from bringup.core import canonjson
from bringup.core import schemas
from bringup.core.errors import BringupError, IntegrityError, UnsupportedError
from bringup.core.paths import TENSOR_MAPS
from bringup.formats import ggml as formats
from bringup.formats.gguf_file import TensorInfo
from bringup.ir import circuits


def supported_architectures() -> list[str]:
    """Architectures with a name map: the stems of ``tensor_maps/*.json``, sorted."""
    return sorted(p.stem for p in TENSOR_MAPS.glob("*.json"))


def load_tensor_map(arch: str) -> dict:
    """The name map for ``arch``; UnsupportedError naming the supported set if there is none."""
    if not re.fullmatch(r"[a-z0-9_]+", arch or ""):
        raise UnsupportedError(f"architecture name {arch!r} is not a plain identifier")
    p = TENSOR_MAPS / f"{arch}.json"
    if not p.exists():
        raise UnsupportedError(f"unknown architecture {arch!r} (general.architecture); supported: "
                               f"{', '.join(supported_architectures())}")
    return json.loads(p.read_text())


def _name_matcher(pattern: str) -> re.Pattern:
    return re.compile("^" + re.escape(pattern).replace(re.escape("{L}"), r"(?P<L>\d+)") + "$")


def _with_layer(target: str | dict, L: str) -> str | list[list[str]]:
    """A per_layer target with ``{L}`` filled in: a canonical name, or a split's [name, rows_expr] parts."""
    if isinstance(target, str):
        return target.replace("{L}", L)
    return [[name.replace("{L}", L), rows] for name, rows in target["split_rows"]]


def map_tensors(names: Iterable[str], tmap: dict,
                n_layer: int) -> tuple[dict[str, str | list[list[str]]], dict[str, str], list[str]]:
    """Map GGUF names to canonical names. Returns (mapped gguf->target, excluded gguf->reason,
    unaccounted gguf names); a target is a canonical name, or for a split tensor its parts
    ``[[canonical name, rows expression], ...]`` in row order. A layer index >= n_layer is unaccounted."""
    rules = [(_name_matcher(k), v) for k, v in tmap["per_layer"].items()]
    excl = [(_name_matcher(k), v) for k, v in tmap.get("exclude", {}).items()]
    mapped, excluded, unaccounted = {}, {}, []
    for n in names:
        if n in tmap["global"]:
            mapped[n] = tmap["global"][n]
            continue
        for rx, target in rules:
            m = rx.match(n)
            if m and int(m["L"]) < n_layer:
                mapped[n] = _with_layer(target, m["L"])
                break
        else:
            for rx, reason in excl:
                if rx.match(n):
                    excluded[n] = reason
                    break
            else:
                unaccounted.append(n)
    return mapped, excluded, unaccounted


def split_rows(gguf_name: str, parts: list[list[str]], shape: tuple[int, ...], hparams: dict) -> list[tuple[str, int, int]]:
    """The row ranges of a split tensor: [(canonical name, first row, end row)] in row order.

    ``parts`` are [name, rows expression] (evaluated over ``hparams``); ``shape`` is the GGUF
    shape (ne0 = row length, ne1 = rows). Raises IntegrityError when the tensor is not 2-D or
    the parts do not add up to its rows, BringupError for an expression that is not a positive
    integer.
    """
    if len(shape) != 2:
        raise IntegrityError(f"{gguf_name}: a row split needs a 2-D tensor, the GGUF has shape {list(shape)}")
    out, r0 = [], 0
    for name, expr in parts:
        n = circuits.evaluate(expr, hparams)
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            raise BringupError(f"{gguf_name}: rows of {name} ({expr!r}) = {n!r} is not a positive integer")
        out.append((name, r0, r0 + n))
        r0 += n
    if r0 != shape[1]:
        raise IntegrityError(f"{gguf_name}: its {shape[1]} rows do not split into "
                             + " + ".join(f"{name} {e - b}" for name, b, e in out) + f" = {r0}")
    return out


@dataclass(frozen=True)
class WeightMap:
    """How the tensors of one GGUF map onto BUMP names.

    ``rows`` are the manifest rows of the mapped tensors in file order: ``gguf_name``, ``name``
    (canonical), ``dtype`` (GGML format name), ``shape`` (GGUF order, ne0 first), ``bytes`` (as
    stored: ``formats.tensor_bytes(shape)``, blocks and scales included), and for a part of a
    split tensor ``rows`` [first, end) of the GGUF tensor (``shape`` is then the part's).
    """
    tensor_map: dict
    rows: tuple[dict, ...]
    excluded: dict[str, str]
    unaccounted: tuple[str, ...]
    n_gguf: int


def map_weights(config: dict, tensors: Sequence[TensorInfo]) -> WeightMap:
    """Map the tensor-info table with the architecture's name map and size each mapped tensor.

    ``config`` is config.json (``architecture``, ``hparams``). Raises UnsupportedError for
    an architecture without a name map or a mapped tensor whose GGML type is not in
    ``config/ggml_formats.json``, BringupError (exit 2) for a row that is not a whole number of
    blocks or a split whose parts do not add up (``split_rows``). Unaccounted tensors are
    recorded, not raised: ``weights_manifest`` raises.
    """
    tmap = load_tensor_map(config["architecture"])
    mapped, excluded, unaccounted = map_tensors((t.name for t in tensors), tmap, config["hparams"]["n_layer"])
    rows = []
    for t in tensors:
        if t.name not in mapped:
            continue
        fmt = formats.by_ggml_type(t.ggml_type)
        target = mapped[t.name]
        if isinstance(target, str):
            rows.append({"gguf_name": t.name, "name": target, "dtype": fmt.name,
                         "shape": list(t.shape), "bytes": fmt.tensor_bytes(t.shape)})
            continue
        for name, r0, r1 in split_rows(t.name, target, t.shape, config["hparams"]):
            rows.append({"gguf_name": t.name, "name": name, "dtype": fmt.name, "shape": [t.shape[0], r1 - r0],
                         "bytes": fmt.tensor_bytes((t.shape[0], r1 - r0)), "rows": [r0, r1]})
    return WeightMap(tmap, tuple(rows), excluded, tuple(unaccounted), len(tensors))


def weights_manifest(config: dict, wmap: WeightMap, *, gguf_sha256: str, extra: list[dict]) -> dict:
    """weights_manifest.json (schema ``weights_manifest``) of a mapped GGUF.

    ``gguf_sha256`` names the source (convert: the whole file; plan memory: the header bytes);
    ``extra`` lists the non-weight tensors the BUMP carries (``name``, ``dtype``, ``bytes``,
    ``reason``). Raises IntegrityError when a tensor is neither mapped nor excluded.
    """
    arch = config["architecture"]
    manifest = {
        "schema_version": 1,
        "architecture": arch,
        "gguf_sha256": gguf_sha256,
        "tensor_map": {"file": f"tensor_maps/{arch}.json", "sha256": canonjson.sha256(wmap.tensor_map)},
        "tensors": list(wmap.rows),
        "excluded": [{"gguf_name": n, "reason": r} for n, r in sorted(wmap.excluded.items())],
        "unaccounted": sorted(wmap.unaccounted),
        "tied": {"output": "tok_embd"} if config["tied_embeddings"] else {},
        "extra": extra,
        # mapped counts GGUF tensors (a split one once), so mapped + excluded + unaccounted = gguf
        "counts": {"gguf": wmap.n_gguf, "mapped": len({r["gguf_name"] for r in wmap.rows}),
                   "excluded": len(wmap.excluded),
                   "unaccounted": len(wmap.unaccounted)},
        "weight_bytes": sum(r["bytes"] for r in wmap.rows),
    }
    schemas.validate(manifest, "weights_manifest", what="weights manifest")
    if wmap.unaccounted:
        raise IntegrityError(f"{len(wmap.unaccounted)} GGUF tensor(s) are neither mapped nor excluded by "
                             f"tensor_maps/{arch}.json: {', '.join(wmap.unaccounted[:10])}")
    return manifest
