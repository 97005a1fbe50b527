"""The reference's weights, streamed: GGUF tensors dequantized to float64 only while they are used.

A whole model in float64 is 8 bytes per parameter (a 1B model: 10 GB), so nothing here holds one.
:class:`StreamedWeights` keeps the GGUF's tensor table and reads a tensor's bytes from the file
(``os.pread``, no mapping left resident) when an op needs them:

- :meth:`StreamedWeights.layer` gives one block's tensors as a mapping that dequantizes each on
  first use and keeps it until the mapping is dropped (the forward pass drops it after the block);
- :meth:`StreamedWeights.rows` dequantizes the rows of a table it is asked for (the embedding
  gathered by token id);
- :meth:`StreamedWeights.row_chunks` yields a matrix in blocks of :data:`HEAD_CHUNK_ROWS` rows
  (the output head, applied chunk by chunk);
- small tensors outside the blocks (the output norm) are dequantized once, at load.

Values are those of ``gguf.quants.dequantize`` over the whole tensor, widened to float64: it
dequantizes each block on its own, so a row range (a whole number of blocks) gives the same
numbers, and :data:`DEQUANT_CHUNK_ELEMS` bounds the dequantizer's temporaries. Fused tensors
(Phi-3's ``attn_qkv`` and ``ffn_up``) are served as their parts by row range, without the whole.
The predicted peak of this scheme is ``bringup.plan.memory.reference`` (docs/memory_model.md).
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
from gguf.quants import dequantize

from bringup.core.errors import BringupError, IntegrityError
from bringup.formats import ggml as formats

#: Rows of the output head dequantized at once (float64 [HEAD_CHUNK_ROWS, n_embd]: 134 MB at 2048 wide).
HEAD_CHUNK_ROWS = 8192
#: Elements dequantized per ``gguf.quants.dequantize`` call (its temporaries scale with the call).
DEQUANT_CHUNK_ELEMS = 1 << 20
#: Weights with a per-block minimum (value = d * q + m): Q8_1 activations need it apart.
MIN_FORMATS = ("Q4_1", "Q5_1")

_BLOCK = re.compile(r"^blk\.(\d+)\.")


class StreamedWeights:
    """Float64 views of a GGUF's tensors, dequantized on demand (module docstring).

    ``reader``: the checked ``gguf.GGUFReader`` of ``path`` (``bringup.formats.gguf_file.open_gguf``);
    ``parts``: fused tensor name -> ((part name, rows), ...) in row order, served as the parts.
    ``wtype``: tensor name (parts and the tied head included) -> GGML type name. Raises
    BringupError when a fused tensor's rows are not the sum of its parts.
    """

    def __init__(self, path: Path, reader, parts: Mapping[str, tuple[tuple[str, int], ...]] = (), tied_head: bool = False):
        self.path = Path(path)
        self._tensors = {t.name: t for t in reader.tensors}
        self._hidden: frozenset[str] = frozenset()
        #: name -> (GGUF tensor, first row, rows) for a part of a fused tensor
        self._slices: dict[str, tuple[object, int, int]] = {}
        self.wtype = {t.name: t.tensor_type.name for t in reader.tensors}
        for fused, pieces in dict(parts).items():
            t = self._tensors.pop(fused)
            wt = self.wtype.pop(fused)
            n = _rows(t)
            if n != sum(r for _, r in pieces):
                raise BringupError(f"{self.path.name}: {fused} has {n} rows, not "
                                   + " + ".join(f"{p.split('.')[-2]} {r}" for p, r in pieces))
            r0 = 0
            for name, r in pieces:
                self._slices[name], self.wtype[name] = (t, r0, r), wt
                r0 += r
        # one descriptor for the reference's life (its views share it; closed when the last goes): the
        # file the reader parsed, not whatever the path names later
        self._fh = open(self.path, "rb")  # noqa: SIM115
        if os.fstat(self._fh.fileno()).st_size != reader.data.size:
            raise IntegrityError(f"{self.path}: the file changed while it was being read")
        self.head = "output.weight"
        if tied_head and "output.weight" not in self._tensors:
            self.head = "token_embd.weight"   # tied head: the embedding table read as the head
            self.wtype["output.weight"] = self.wtype["token_embd.weight"]
        #: tensors outside the blocks and the head/embedding tables (norms): small, kept
        self.globals = {n: self.dequant(n) for n in self._tensors
                        if not _BLOCK.match(n) and n not in ("token_embd.weight", "output.weight")}

    def names(self) -> set[str]:
        """Every tensor name served (fused tensors as their parts; hidden ones left out)."""
        return (set(self._tensors) | set(self._slices)) - self._hidden

    def hiding(self, hidden) -> "StreamedWeights":
        """A view without the tensors named in ``hidden`` (tests: a block without a feature)."""
        other = object.__new__(StreamedWeights)
        other.__dict__.update(self.__dict__)
        other._hidden = frozenset(hidden) | self._hidden
        return other

    # -- reading -------------------------------------------------------------------------------
    def _locate(self, name: str):
        if name in self._hidden:
            raise KeyError(name)
        if name in self._slices:
            return self._slices[name]
        t = self._tensors[name]   # KeyError for an absent tensor, as a dict would
        return t, 0, _rows(t)

    def _raw(self, t, r0: int, r1: int) -> np.ndarray:
        """Rows [r0, r1) of tensor ``t``'s stored bytes, as the reader would give them (its dtype
        and row shape), read from the file."""
        row_shape = t.data.shape[-1:]   # leading dims flattened into rows; a 1-D tensor is one row
        per_row = t.n_bytes // _rows(t)
        buf = os.pread(self._fh.fileno(), (r1 - r0) * per_row, t.data_offset + r0 * per_row)
        if len(buf) != (r1 - r0) * per_row:
            raise IntegrityError(f"{self.path}: tensor {t.name} ends past the end of the file (truncated)")
        return np.frombuffer(buf, dtype=t.data.dtype).reshape((r1 - r0,) + tuple(row_shape))

    def _dequant_rows(self, t, r0: int, r1: int) -> np.ndarray:
        """Float64 [r1 - r0, row elements] of rows [r0, r1) of ``t`` (leading dims flattened)."""
        cols = int(t.shape[0]) if len(t.shape) > 1 else int(t.n_elements)
        out = np.empty((r1 - r0, cols), dtype=np.float64)
        step = max(1, DEQUANT_CHUNK_ELEMS // cols)
        for a in range(r0, r1, step):
            b = min(r1, a + step)
            out[a - r0:b - r0] = np.asarray(dequantize(self._raw(t, a, b), t.tensor_type)).reshape(b - a, cols)
        return out

    def dequant(self, name: str) -> np.ndarray:
        """Tensor ``name`` as float64, numpy order ([.., ne1, ne0]; a part: its rows of the fused one)."""
        t, r0, n = self._locate(name)
        a = self._dequant_rows(t, r0, r0 + n)
        if len(t.shape) == 1:
            return a.reshape(-1)
        if name in self._slices:
            return a
        return a.reshape(tuple(int(d) for d in reversed(t.shape.tolist())))

    def block_min(self, name: str) -> np.ndarray | None:
        """Per-block minimum m of a Q4_1 / Q5_1 weight (value = d * q + m; ggml-common.h
        block_q4_1 / block_q5_1 start with ggml_half d, then ggml_half m): its blocks dequantized
        with d set to 0. Float64 [rows, blocks per row]; None for other types."""
        t, r0, n = self._locate(name)
        return _block_min(self, t, r0, r0 + n) if t.tensor_type.name in MIN_FORMATS else None

    def expert(self, name: str, e: int) -> np.ndarray:
        """Float64 [rows, n_in] of expert ``e`` of a stacked expert tensor ``name`` (GGUF
        [n_in, rows, n_expert]; ``ffn_*_exps``): only that expert's rows are read and dequantized."""
        t, r0, n = self._locate(name)
        dims = [int(d) for d in t.shape.tolist()]
        if len(dims) != 3 or not 0 <= e < dims[2]:
            raise BringupError(f"{self.path.name}: {name} has no expert {e} (shape {dims})")
        return self._dequant_rows(t, r0 + e * dims[1], r0 + (e + 1) * dims[1])

    def rows(self, name: str, idx: np.ndarray) -> np.ndarray:
        """Float64 rows ``idx`` (int [T]) of 2-D table ``name``: only those rows are read."""
        t, r0, _ = self._locate(name)
        uniq, inv = np.unique(np.asarray(idx, dtype=np.int64), return_inverse=True)
        got = np.concatenate([self._dequant_rows(t, r0 + int(r), r0 + int(r) + 1) for r in uniq])
        return got[inv]

    def row_chunks(self, name: str) -> Iterator[tuple[int, int, np.ndarray, np.ndarray | None]]:
        """(r0, r1, float64 rows [r0, r1), their block minima or None) of matrix ``name`` (the head:
        ``output.weight``, the embedding when tied) in blocks of :data:`HEAD_CHUNK_ROWS`."""
        real = self.head if name == "output.weight" else name
        t, base, n = self._locate(real)
        has_min = t.tensor_type.name in MIN_FORMATS
        for a in range(0, n, HEAD_CHUNK_ROWS):
            b = min(n, a + HEAD_CHUNK_ROWS)
            wmin = _block_min(self, t, base + a, base + b) if has_min else None
            yield a, b, self._dequant_rows(t, base + a, base + b), wmin

    def layer(self, L: int) -> "LayerWeights":
        """Block ``L``'s tensors (``blk.{L}.*``) plus the globals, dequantized on first use."""
        return LayerWeights(self, L)

    def layer_names(self, L: int) -> list[str]:
        p = f"blk.{L}."
        return sorted(n for n in self.names() if n.startswith(p))


def _block_min(w: StreamedWeights, t, r0: int, r1: int) -> np.ndarray:
    """Float64 [r1 - r0, blocks per row]: the per-block minima of rows [r0, r1) of ``t``."""
    fmt = formats.by_name(t.tensor_type.name)
    raw = np.array(w._raw(t, r0, r1), dtype=np.uint8)
    blocks = raw.reshape(-1, fmt.block_bytes)
    blocks[:, 0:2] = 0   # d = +0.0 in float16
    m = np.asarray(dequantize(blocks.reshape(raw.shape), t.tensor_type), dtype=np.float64)
    return m.reshape(r1 - r0, -1, fmt.block_elems)[:, :, 0]


def _rows(t) -> int:
    """Rows of a GGUF tensor: the product of every dimension but ne0 (1-D: its elements as one row)."""
    dims = [int(d) for d in t.shape.tolist()]
    return int(np.prod(dims[1:])) if len(dims) > 1 else 1


class LayerWeights(Mapping):
    """One block's float64 tensors: ``w[name]`` dequantizes ``name`` on first use and keeps it while
    this mapping lives; ``w.block_min(name)`` likewise. Names outside the block come from the
    store's globals. ``get``/``in`` answer without dequantizing anything absent."""

    def __init__(self, store: StreamedWeights, L: int):
        self._store, self._prefix = store, f"blk.{L}."
        self._names = set(store.layer_names(L))
        self._cache: dict[str, np.ndarray] = {}
        self._mins: dict[str, np.ndarray | None] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self._store.globals and name not in self._store._hidden:
            return self._store.globals[name]
        if name not in self._names:
            raise KeyError(name)
        if name not in self._cache:
            self._cache[name] = self._store.dequant(name)
        return self._cache[name]

    def __contains__(self, name) -> bool:
        return name in self._names or (name in self._store.globals and name not in self._store._hidden)

    def __iter__(self):
        return iter(sorted(self._names))

    def __len__(self) -> int:
        return len(self._names)

    def expert(self, name: str, e: int) -> np.ndarray:
        """Expert ``e`` of stacked tensor ``name`` (StreamedWeights.expert), not kept: a layer
        of many experts never holds them all in float64."""
        if name not in self._names:
            raise KeyError(name)
        return self._store.expert(name, e)

    def block_min(self, name: str) -> np.ndarray | None:
        if name not in self._mins:
            self._mins[name] = self._store.block_min(name)
        return self._mins[name]
