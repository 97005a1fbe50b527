"""GGML block formats: the single table of per-format facts, read from config/ggml_formats.json.

Source of the numbers: ggml/src/ggml-common.h (block_q4_0 ... block_q6_K) and gguf-py's
GGML_QUANT_SIZES (block sizes; a test checks them against gguf's independently), ggml-cpu.c
``type_traits_cpu`` (``vec_dot_type``; a test checks it against libggml-cpu). The same file gives
``ALIGN``, the byte alignment of every tensor offset (BUMP payload, activation arena); C reads
all of it from the generated ``csrc/include/bu_formats.h`` (``BU_ALIGN``, ``BU_<FMT>_BLOCK_*``).
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import gguf

from bringup.core.errors import BringupError, UnsupportedError
from bringup.core.atomic import write_text
from bringup.core.paths import CONFIG, CSRC


@dataclass(frozen=True)
class BlockFormat:
    name: str          # e.g. "Q4_K"
    ggml_type: int     # GGMLQuantizationType value
    block_elems: int   # weights per block
    block_bytes: int   # bytes per block
    # ggml-cpu's type_traits_cpu[type].vec_dot_type: the format llama.cpp's CPU backend converts
    # fp32 activations to before a dot product with this weight format (Q4_0 -> Q8_0, Q4_1 ->
    # Q8_1, K-quants -> Q8_K); None when the format has no dot product (I8, I32)
    vec_dot_type: str | None = None
    # bringup has integer-dot kernels (contract ggml-q8) for this weight format
    q8act: bool = False

    def row_bytes(self, n_elems: int) -> int:
        """Bytes of one row of ``n_elems`` weights. Raises BringupError if not a whole number of blocks."""
        if n_elems < 0 or n_elems % self.block_elems:
            raise BringupError(
                f"{self.name}: row of {n_elems} elements is not a multiple of the block size {self.block_elems}")
        return n_elems // self.block_elems * self.block_bytes

    def tensor_bytes(self, shape: tuple[int, ...] | list[int]) -> int:
        """Bytes of a tensor with GGUF shape (ne0 first, ne0 = contiguous row length)."""
        n_rows = 1
        for d in shape[1:]:
            n_rows *= int(d)
        return self.row_bytes(int(shape[0]) if shape else 1) * n_rows


@lru_cache(maxsize=1)
def _config() -> dict:
    return json.loads((CONFIG / "ggml_formats.json").read_text())


@lru_cache(maxsize=1)
def table() -> dict[str, BlockFormat]:
    """All supported formats by name."""
    return {f["name"]: BlockFormat(f["name"], f["ggml_type"], f["block_elems"], f["block_bytes"], f["vec_dot_type"],
                                   f["q8act"] is True)
            for f in _config()["formats"]}


def dot_formats() -> list[BlockFormat]:
    """The formats with a dot product (``vec_dot_type`` not None), in table order: the weight
    formats of the embed and linear kernels (C: ``BU_DOT_FORMATS``)."""
    return [f for f in table().values() if f.vec_dot_type]


def q8act_formats() -> list[BlockFormat]:
    """The formats with integer-dot kernels (``q8act``), in table order (C: ``BU_Q8ACT_FORMATS``)."""
    return [f for f in table().values() if f.q8act]


def x_rows(fmts: list[BlockFormat]) -> list[tuple[str, str, str, str]]:
    """The rows the C X-macros ``BU_DOT_FORMATS`` / ``BU_Q8ACT_FORMATS`` pass to ``X``:
    ``(NAME, name, VEC_DOT, vec_dot)``, e.g. ``("Q4_K", "q4_k", "Q8_K", "q8_k")``."""
    return [(f.name, f.name.lower(), str(f.vec_dot_type), str(f.vec_dot_type).lower()) for f in fmts]


#: Byte alignment of every tensor offset: BUMP payload tensors (bringup.formats.bump) and arena
#: buffers (bringup.plan.planner); config/ggml_formats.json ``alignment``.
ALIGN: int = int(_config()["alignment"])


def vec_dot_types() -> dict[str, str]:
    """Weight format -> the activation format ggml-cpu's dot product with it uses
    (``type_traits_cpu[type].vec_dot_type``, e.g. ``"Q4_0" -> "Q8_0"``), for every format that
    has a dot product."""
    return {f.name: f.vec_dot_type for f in table().values() if f.vec_dot_type is not None}


def by_name(name: str) -> BlockFormat:
    """Format by name (``"Q4_1"``). Raises BringupError naming the supported set if unknown."""
    try:
        return table()[name]
    except KeyError:
        raise UnsupportedError(f"unsupported quant type {name!r}; supported: {', '.join(table())}") from None


#: GGML formats whose quantizer needs an importance matrix (llama-quantize refuses them without
#: --imatrix); not supported yet, refused by name.
IMATRIX_FORMATS = ("IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S")


def by_ggml_type(t: int) -> BlockFormat:
    """Format by GGML type id. Raises UnsupportedError (exit 4) if the type is not supported, naming
    it when gguf knows the id and, for the importance-matrix IQ formats, saying so."""
    for f in table().values():
        if f.ggml_type == int(t):
            return f
    try:
        name = gguf.GGMLQuantizationType(int(t)).name
    except ValueError:
        name = None
    what = "" if name is None else f" ({name})" if name not in IMATRIX_FORMATS else \
        f" ({name}: the IQ formats that need an importance matrix, {', '.join(IMATRIX_FORMATS)}, are not supported yet)"
    raise UnsupportedError(f"unsupported GGML quant type id {int(t)}{what}; supported: {', '.join(table())}")


# C gets this table as a generated header, so the two cannot disagree (tests check it is current).
C_HEADER = CSRC / "include" / "bu_formats.h"


def render_c_header() -> str:
    """Text of ``csrc/include/bu_formats.h`` for the current ``config/ggml_formats.json``.

    Per format NAME: ``BU_TYPE_NAME`` (GGML type id), ``BU_NAME_BLOCK_ELEMS``, ``BU_NAME_BLOCK_BYTES``,
    plus ``BU_ALIGN`` (bytes; ``ALIGN``) and the X-macro ``BU_FORMATS(X)``
    listing ``X(NAME, type, block_elems, block_bytes)``, ``BU_TYPE_ID_MAX``, and the X-macros
    ``BU_DOT_FORMATS(X)`` / ``BU_Q8ACT_FORMATS(X)`` listing :func:`x_rows` (the kernels' per-format
    functions and prototypes are made from these, csrc/include/bu_kernels.h).
    The source file's SHA-256 is embedded so a stale header is recognisable.
    """
    src = CONFIG / "ggml_formats.json"
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    lines = [
        "/*",
        " * bu_formats.h - GGML block formats for C. GENERATED by bringup.formats.ggml.render_c_header()",
        " * from config/ggml_formats.json; do not edit (run `bringup kernels gen-formats`).",
        f" * source sha256: {digest}",
        " */",
        "#ifndef BU_FORMATS_H",
        "#define BU_FORMATS_H",
        "",
    ]
    fmts = list(table().values())
    for f in fmts:
        if not re.fullmatch(r"[A-Z0-9_]+", f.name):
            raise BringupError(f"format name {f.name!r} is not a valid C identifier part")
        lines += [
            f"#define BU_TYPE_{f.name} {int(f.ggml_type)}",
            f"#define BU_{f.name}_BLOCK_ELEMS {int(f.block_elems)}",
            f"#define BU_{f.name}_BLOCK_BYTES {int(f.block_bytes)}",
        ]
    lines += ["", f"#define BU_FORMATS_COUNT {len(fmts)}", "",
              "/* byte alignment of every tensor offset: BUMP payload, arena, runtime buffers */",
              f"#define BU_ALIGN {int(ALIGN)}", "", "#define BU_FORMATS(X) \\"]
    lines += [f"    X({f.name}, {int(f.ggml_type)}, {int(f.block_elems)}, {int(f.block_bytes)}) \\" for f in fmts]
    lines += ["", "/* the largest GGML type id of the table: the last index of a table by type */",
              f"#define BU_TYPE_ID_MAX {max(int(f.ggml_type) for f in fmts)}"]
    for macro, what, rows in (
            ("BU_DOT_FORMATS", "formats with a dot product (vec_dot_type not null): the weight formats of the "
                               "embed and linear kernels", x_rows(dot_formats())),
            ("BU_Q8ACT_FORMATS", "formats with integer-dot kernels (q8act: contract ggml-q8)", x_rows(q8act_formats()))):
        lines += ["", f"/* {what}; X(NAME, name, VEC_DOT, vec_dot), in table order */", f"#define {macro}(X) \\"]
        lines += [f"    X({', '.join(r)}) \\" for r in rows]
    lines += ["", "#endif /* BU_FORMATS_H */", ""]
    return "\n".join(lines)


def write_c_header(path: Path = C_HEADER) -> Path:
    """Write ``render_c_header()`` to ``path`` atomically; returns the path."""
    write_text(path, render_c_header())
    return path


def check_c_header(path: Path = C_HEADER) -> None:
    """Raise BringupError when ``path`` (``csrc/include/bu_formats.h``) is not what the format
    table gives today: C and Python must read the same table."""
    if not path.is_file() or path.read_text() != render_c_header():
        raise BringupError(f"{path} is not current; run `bringup kernels gen-formats`")
