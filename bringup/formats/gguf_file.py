"""Opening a GGUF file with the `gguf` package, turning its failures into clear errors.

gguf.GGUFReader parses the header and maps tensor data lazily (numpy memmap), so reading the
metadata of a large file touches only its header pages. ``open_gguf`` gives the full reader
(tensor data views included: convert, verify); ``read_header`` reads the header alone (metadata +
tensor-info table), which also works on a file cut right after the header (plan memory).

Format: GGUF v3 (ggml/docs/gguf.md): magic, version, counts, metadata KVs, tensor infos
(name, dims with ne0 first, GGML type id, offset from the start of the data section), padding to
``general.alignment``, then tensor data.

The header is walked once, by ``gguf_check`` (bounded, checked): its record of where each KV
lies is what this module reads. Array values (a vocabulary: 10^5 tokens, scores, types and
merges) are decoded in one pass over the file's bytes (``decode_array``) instead of gguf's one
numpy view per item, which takes gguf's reader ~30 s on the 152k-token Qwen2 vocabulary; scalars
and strings still go through gguf's own parser. ``metadata_kvs`` gives KVs still encoded, for
writing them verbatim into another GGUF (``bringup.fetch.synth``).
"""
from __future__ import annotations

import functools
import hashlib
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from bringup.core.errors import IntegrityError
from bringup.core.inputs import open_regular, regular_file
from bringup.formats import gguf_check


def open_gguf(path: str | os.PathLike) -> gguf.GGUFReader:
    """A GGUFReader for ``path``. Raises BringupError (exit 2) unless ``path`` is a readable regular
    file, and what ``gguf_check.check`` raises: IntegrityError (exit 3) for a truncated or corrupt
    file (counts past the end, misaligned or overlapping tensors, strings that are not UTF-8),
    UnsupportedError (exit 4) for a GGUF version other than 2/3 or an unknown GGML type.

    Readers are cached per (path, size, mtime): parsing a 262k-token vocabulary takes the gguf
    package seconds, and convert, verify and the tests open the same file several times.
    """
    path = regular_file(path, "GGUF file").resolve()
    st = path.stat()
    return _open_cached(path, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _open_cached(path: Path, size: int, mtime_ns: int) -> gguf.GGUFReader:
    # every count, offset and string bounded and checked before gguf's reader allocates for it
    layout = gguf_check.check(path, with_data=True)
    try:
        r = _Reader(path, layout)
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


# -- metadata in one pass --------------------------------------------------------------------
# numpy dtypes of GGUF's fixed-size value types (ggml/docs/gguf.md, gguf_metadata_value_type);
# 8 is STRING (u64 length + UTF-8 bytes), 9 ARRAY (u32 item type, u64 count, items).
_FIXED = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8", 11: "<i8",
          12: "<f8"}
_STRING, _ARRAY = 8, 9
_U64 = struct.Struct("<Q").unpack_from
_U32 = struct.Struct("<I").unpack_from


def decode_array(buf, start: int) -> tuple[int, list]:
    """(item type, items as Python values) of the flat array value at ``start`` of ``buf``: numbers
    as ``ndarray.tolist`` gives them (float32 items as the doubles they equal), strings decoded
    as UTF-8. Raises ValueError for an array of arrays (callers use gguf's parser for those)."""
    sub, count = _U32(buf, start)[0], _U64(buf, start + 4)[0]
    off = start + 12
    if sub in _FIXED:
        return sub, np.frombuffer(buf, np.dtype(_FIXED[sub]), count, off).tolist()
    if sub != _STRING:
        raise ValueError(f"array of GGUF type {sub} is not a flat array")
    items = []
    for _ in range(count):
        (n,) = _U64(buf, off)
        items.append(str(buf[off + 8:off + 8 + n], "utf-8"))
        off += 8 + n
    return sub, items


def metadata_kvs(path: str | os.PathLike, prefix: str = "") -> list[tuple[str, gguf.GGUFValueType, bytes]]:
    """(key, value type, encoded value) of every metadata KV of GGUF ``path`` whose key starts
    with ``prefix``, the value bytes exactly as stored. Raises what ``gguf_check.check`` raises
    for the header (IntegrityError for a file that is not a GGUF or ends inside its metadata,
    UnsupportedError for a version other than 2/3 or a big-endian file)."""
    with open_regular(path, "GGUF file") as fh:
        data = fh.read()
    kvs = gguf_check.walk(data, path, with_data=False).kvs
    return [(kv.key, gguf.GGUFValueType(kv.vtype), data[kv.start:kv.end]) for kv in kvs if kv.key.startswith(prefix)]


class _ArrayField(gguf.ReaderField):
    """A flat array KV decoded by ``decode_array``: ``parts[0]`` is the list of its items."""
    __slots__ = ()

    def contents(self, index_or_slice: int | slice = slice(None)) -> Any:
        return self.parts[0][index_or_slice]


class _Reader(gguf.GGUFReader):
    """gguf.GGUFReader with flat array KVs decoded in one pass (``decode_array``) at the places
    ``gguf_check``'s walk of the header recorded (``layout``); every other KV, the tensor infos
    and the tensor data views are gguf's own (gguf 0.19 ``_build_fields``, pinned)."""

    def __init__(self, path: Path, layout: gguf_check.Layout):
        self._layout = layout
        super().__init__(path, "r")

    def _build_fields(self, offs: int, count: int) -> int:
        kvs = self._layout.kvs
        if (self.byte_order != "I" or sys.byteorder != "little" or len(kvs) != count
                or (kvs and kvs[0].offset != offs)):
            return super()._build_fields(offs, count)
        buf = self.data  # the numpy memmap of the file: indexing and struct reads touch no other page
        for kv in kvs:
            sub = _U32(buf, kv.start)[0] if kv.vtype == _ARRAY else None
            if sub is not None and sub != _ARRAY:
                sub, items = decode_array(memoryview(buf), kv.start)
                types = [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType(sub)]
                self._push_field(_ArrayField(kv.offset, kv.key, [items], [0], types), skip_sum=True)
            else:
                super()._build_fields(kv.offset, 1)
        return self._layout.kvs_end


class _HeaderOnlyReader(_Reader):
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
    file is missing or not a regular file, IntegrityError (exit 3) if the header is unreadable or
    cut, UnsupportedError (exit 4) for an unsupported version (``gguf_check.check``).
    """
    path = regular_file(path, "GGUF file")
    st = path.stat()
    return _read_header(str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _read_header(path_s: str, _ino: int, _size: int, _mtime_ns: int) -> GGUFHeader:
    path = Path(path_s)
    layout = gguf_check.check(path, with_data=False)
    try:
        reader = _HeaderOnlyReader(path, layout)
    except (ValueError, IndexError, KeyError, OSError, UnicodeDecodeError) as e:
        raise IntegrityError(f"{path}: not a readable GGUF header ({type(e).__name__}: {e})") from None
    # names, shapes, types and offsets as the walk read them (it refused repeated names)
    tensors = tuple(TensorInfo(t.name, t.ggml_type, t.dims, t.data_offset) for t in layout.tensors)
    with open(path, "rb") as fh:
        head = fh.read(int(reader.data_offset))
    # a vocabulary-only GGUF (no tensors, e.g. llama.cpp's models/ggml-vocab-*.gguf) may end
    # before the alignment padding that would precede a data section
    if len(head) != reader.data_offset and tensors:
        raise IntegrityError(f"{path}: file ends inside the GGUF header")
    return GGUFHeader(path, reader, tensors, int(reader.data_offset), hashlib.sha256(head).hexdigest())
