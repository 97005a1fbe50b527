"""GGML block formats: the single table of block sizes, read from config/ggml_formats.json.

Source of the numbers: ggml/src/ggml-common.h (block_q4_0 ... block_q6_K) and gguf-py's
GGML_QUANT_SIZES. A test checks this table against gguf's independently.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from bringup.core.errors import BringupError, UnsupportedError
from bringup.core.paths import CONFIG


@dataclass(frozen=True)
class BlockFormat:
    name: str          # e.g. "Q4_K"
    ggml_type: int     # GGMLQuantizationType value
    block_elems: int   # weights per block
    block_bytes: int   # bytes per block

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
def table() -> dict[str, BlockFormat]:
    """All supported formats by name."""
    data = json.loads((CONFIG / "ggml_formats.json").read_text())
    return {f["name"]: BlockFormat(f["name"], f["ggml_type"], f["block_elems"], f["block_bytes"])
            for f in data["formats"]}


def by_name(name: str) -> BlockFormat:
    """Format by name (``"Q4_1"``). Raises BringupError naming the supported set if unknown."""
    try:
        return table()[name]
    except KeyError:
        raise UnsupportedError(f"unsupported quant type {name!r}; supported: {', '.join(table())}") from None


def by_ggml_type(t: int) -> BlockFormat:
    """Format by GGML type id. Raises BringupError if the type is not supported."""
    for f in table().values():
        if f.ggml_type == int(t):
            return f
    raise UnsupportedError(f"unsupported GGML quant type id {int(t)}; supported: {', '.join(table())}")
