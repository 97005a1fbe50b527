"""Opening a GGUF file with the `gguf` package, turning its failures into clear errors.

gguf.GGUFReader parses the header and maps tensor data lazily (numpy memmap), so reading the
metadata of a large file touches only its header pages. ``open_gguf`` gives the full reader
(tensor data views included: convert, verify); ``read_header`` reads the header alone (metadata +
tensor-info table), which also works on a file cut right after the header (plan memory).

Format: GGUF v3 (ggml/docs/gguf.md): magic, version, counts, metadata KVs, tensor infos
(name, dims with ne0 first, GGML type id, offset from the start of the data section), padding to
``general.alignment``, then tensor data.
"""
from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf

from bringup.core.errors import BringupError, IntegrityError


def open_gguf(path: str | os.PathLike) -> gguf.GGUFReader:
    """A GGUFReader for ``path``. Raises IntegrityError (exit 3) for a truncated or corrupt file,
    including tensor data that would lie past the end of the file.

    Readers are cached per (path, size, mtime): parsing a 262k-token vocabulary takes the gguf
    package seconds, and convert, verify and the tests open the same file several times.
    """
    path = Path(path).resolve()
    st = path.stat()
    return _open_cached(path, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _open_cached(path: Path, size: int, mtime_ns: int) -> gguf.GGUFReader:
    try:
        r = gguf.GGUFReader(path, "r")
    except Exception as e:  # the gguf package raises ValueError, struct/numpy errors, IndexError
        raise IntegrityError(f"{path}: cannot read GGUF ({type(e).__name__}: {e}); "
                             "the file is truncated or corrupt") from None
    for t in r.tensors:
        if t.data_offset + t.n_bytes > size:
            raise IntegrityError(f"{path}: tensor {t.name} ends at byte {t.data_offset + t.n_bytes}, "
                                 f"past the end of the {size}-byte file (truncated)")
    return r


def field(reader: gguf.GGUFReader, key: str) -> Any | None:
    """The decoded value of metadata ``key`` (str, number, bool or list), or None when absent."""
    f = reader.fields.get(key)
    if f is None:
        return None
    return f.contents()


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the GGUF tensor-info table, as stored (no format lookup: a caller that needs
    the block format resolves ``ggml_type`` with ``bringup.formats.ggml.by_ggml_type``).

    ``shape`` is GGUF order (ne0, the contiguous row, first); ``offset`` is bytes from the start
    of the tensor-data section.
    """
    name: str
    ggml_type: int
    shape: tuple[int, ...]
    offset: int


class _HeaderOnlyReader(gguf.GGUFReader):
    """gguf's own parser for metadata and tensor infos, minus the per-tensor data views.

    GGUFReader builds a numpy view of every tensor's bytes, which fails on a file cut after the
    header; the tensor-info fields it has parsed by then hold everything a header reader needs.
    """

    def _build_tensors(self, start_offs, fields):  # gguf 0.19 internal hook (pinned)
        self.tensor_info_fields = fields
        self.tensors = []


def tensor_infos(reader: gguf.GGUFReader) -> tuple[TensorInfo, ...]:
    """The tensor-info table of ``reader`` in file order, from a full reader (``open_gguf``) or a
    header-only one (``read_header``). Raises IntegrityError for a tensor name that is not UTF-8."""
    if isinstance(reader, _HeaderOnlyReader):
        fields = reader.tensor_info_fields
    else:
        fields = [t.field for t in reader.tensors]
    out = []
    for tf in fields:
        _nlen, name_data, _ndims, dims, raw_type, off = tf.parts
        try:
            name = bytes(name_data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise IntegrityError(f"a GGUF tensor name is not UTF-8 ({e})") from None
        out.append(TensorInfo(name, int(raw_type[0]), tuple(int(d) for d in dims), int(off[0])))
    return tuple(out)


@dataclass(frozen=True, eq=False)
class GGUFHeader:
    """The header of a GGUF file: metadata, tensor infos and where the data section starts.

    ``reader`` holds the metadata fields only (``field(reader, key)``; its ``tensors`` is empty).
    ``sha256`` hashes bytes ``[0, data_offset)`` (metadata + tensor infos + padding): it names the
    header, identical for a full file and a copy cut after the header. Compared by identity:
    ``read_header`` returns the same object while the file is unchanged.
    """
    path: Path
    reader: gguf.GGUFReader
    tensors: tuple[TensorInfo, ...]
    data_offset: int
    sha256: str


def read_header(path: str | os.PathLike) -> GGUFHeader:
    """Parse the GGUF header of ``path`` (metadata + tensor infos) without reading tensor data.

    Parsing a large vocabulary with gguf's reader takes seconds, so the result is kept per
    (path, inode, size, mtime) for the life of the process. Raises BringupError (exit 2) if the
    file is missing, IntegrityError (exit 3) if the header is unreadable or cut.
    """
    path = Path(path)
    if not path.is_file():
        raise BringupError(f"GGUF file not found: {path}")
    st = path.stat()
    return _read_header(str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _read_header(path_s: str, _ino: int, _size: int, _mtime_ns: int) -> GGUFHeader:
    path = Path(path_s)
    try:
        reader = _HeaderOnlyReader(path, "r")
    except (ValueError, IndexError, KeyError, OSError, UnicodeDecodeError) as e:
        raise IntegrityError(f"{path}: not a readable GGUF header ({type(e).__name__}: {e})") from None
    tensors = tensor_infos(reader)
    # gguf's full reader refuses a repeated tensor name; the header-only one skips that step
    names = [t.name for t in tensors]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise IntegrityError(f"{path}: tensor {dup!r} appears twice in the GGUF tensor infos")
    with open(path, "rb") as fh:
        head = fh.read(int(reader.data_offset))
    if len(head) != reader.data_offset:
        raise IntegrityError(f"{path}: file ends inside the GGUF header")
    return GGUFHeader(path, reader, tensors, int(reader.data_offset), hashlib.sha256(head).hexdigest())
