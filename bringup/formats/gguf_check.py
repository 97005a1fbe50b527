"""A bounded structural check of a GGUF file, run before gguf's reader allocates anything.

gguf.GGUFReader trusts the counts in the header: one array KV claiming 2^40 items makes it loop
(and allocate) for hours, and it maps tensor data at any offset, aligned or not, overlapping or
not. ``check`` walks the same header (format: ggml/docs/gguf.md, GGUF v2/v3, little-endian)
with every count bounded by the bytes that remain in the file, and refuses what llama.cpp's
gguf.cpp refuses: an unknown value type, a string that is not UTF-8, a duplicate key or tensor
name, a tensor name of 64 bytes or more (GGML_MAX_NAME), more than 4 dimensions
(GGML_MAX_DIMS), a row that is not a whole number of blocks, an alignment that is not a power of
two, a tensor offset that is not a multiple of it, tensors that overlap or lie past the end.

This is bringup's one walk of a GGUF header: the walk also records where each metadata KV and
tensor info lies (``Layout.kvs``, ``Layout.tensors``), which ``gguf_file`` uses to decode the
vocabulary arrays in one pass and to hand scalars to gguf's own parser, and which the structured
fuzzer uses to aim its mutations.

Exit classes: IntegrityError (3) for a truncated or malformed file, UnsupportedError (4) for a
GGUF version other than 2 or 3, a big-endian file, or a GGML type id this gguf package does not
know.
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import gguf

from bringup.core.errors import IntegrityError, UnsupportedError
from bringup.core.inputs import open_regular

SUPPORTED_VERSIONS = (2, 3)          # gguf.gguf_reader.READER_SUPPORTED_VERSIONS
GGML_MAX_NAME = 64                   # ggml.h: names are < 64 bytes (NUL included)
GGML_MAX_DIMS = 4                    # ggml.h
DEFAULT_ALIGNMENT = 32               # GGUF_DEFAULT_ALIGNMENT
MAX_ARRAY_DEPTH = 4                  # arrays of arrays: gguf allows them, no model needs deeper
# Bounds on the header's size, checked from the counts before anything is parsed for them: gguf's
# reader builds Python objects and numpy views per KV, per tensor info and per nested array item
# (a GGUF of a few million one-byte KVs took minutes and 7 GB). Each bound is far above what any
# model needs (docs/hostile_input.md "Limits"): released GGUFs carry < 100 KVs, < 2,000 tensors
# (a 405B llama: 1,138), vocabularies of < 300k tokens (gemma3: 262,144) and headers of < 20 MiB.
MAX_KVS = 4096                       # metadata KVs
MAX_TENSORS = 16384                  # tensor infos
MAX_ARRAY_ITEMS = 1 << 21            # items of one array (a vocabulary, its merges or scores)
MAX_NESTED_ITEMS = 4096              # items of arrays of arrays, summed over the file (no model has one)
MAX_HEADER_BYTES = 128 << 20         # metadata + tensor infos
_STRING, _ARRAY = 8, 9
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_SCALAR_SIZE = {t: struct.calcsize(f) for t, f in _SCALAR.items()}


@dataclass(frozen=True)
class MetadataKV:
    """One metadata KV: ``offset`` of its key (file offset of the u64 key length), its ``key``,
    value type ``vtype`` (gguf_metadata_value_type) and the value's encoded bytes ``[start, end)``."""
    offset: int
    key: str
    vtype: int
    start: int
    end: int


@dataclass(frozen=True)
class TensorEntry:
    """One tensor info as stored: ``offset`` of its name (file offset of the u64 name length),
    ``name``, ``dims`` (ne0 first), GGML type id, and ``data_offset`` (bytes from the start of
    the tensor-data section)."""
    offset: int
    name: str
    dims: tuple[int, ...]
    ggml_type: int
    data_offset: int


@dataclass(frozen=True)
class Layout:
    """What the check established: ``data_offset`` (start of the tensor-data section, bytes),
    ``alignment`` (bytes), the counts of KVs and tensors, every KV (``kvs``, file order) and
    tensor info (``tensors``, file order), and ``kvs_end`` (offset just past the last KV)."""
    version: int
    n_kv: int
    n_tensors: int
    alignment: int
    data_offset: int
    kvs: tuple[MetadataKV, ...] = ()
    tensors: tuple[TensorEntry, ...] = ()
    kvs_end: int = 24


class _Cursor:
    """Little-endian reads from a buffer that refuse to pass its end (IntegrityError)."""

    def __init__(self, buf, path: Path):
        self.buf, self.pos, self.path = buf, 0, path
        self.size = len(buf)
        self.nested = 0     # items of arrays of arrays so far (MAX_NESTED_ITEMS)

    def fail(self, why: str) -> IntegrityError:
        return IntegrityError(f"{self.path}: {why} (at byte {self.pos}); the GGUF file is truncated or corrupt")

    def need(self, n: int, what: str) -> None:
        if n > self.size - self.pos:
            raise self.fail(f"{what} needs {n} bytes, {self.size - self.pos} remain")

    def scalar(self, vtype: int, what: str):
        n = _SCALAR_SIZE[vtype]
        self.need(n, what)
        v = struct.unpack_from(_SCALAR[vtype], self.buf, self.pos)[0]
        self.pos += n
        return v

    def string(self, what: str) -> str:
        n = self.scalar(10, f"length of {what}")
        self.need(n, what)
        self.header_bytes(self.pos + n)
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        try:
            return str(raw, "utf-8")     # bytes from an mmap, a memoryview of a numpy memmap
        except UnicodeDecodeError as e:
            raise IntegrityError(f"{self.path}: {what} is not valid UTF-8 ({e.reason} at byte {e.start})") from None

    def count(self, item_bytes: int, what: str) -> int:
        """A u64 count of items of at least ``item_bytes`` each, bounded by the bytes left."""
        n = self.scalar(10, what)
        if n * item_bytes > self.size - self.pos:
            raise self.fail(f"{what} is {n}, more than the {self.size - self.pos} remaining bytes can hold")
        return n

    def bounded(self, n: int, limit: int, what: str) -> int:
        """``n`` when it is at most ``limit``; else IntegrityError (a header no model has)."""
        if n > limit:
            raise IntegrityError(f"{self.path}: {what} is {n}; bringup reads at most {limit} (no released "
                                 "model needs more: the GGUF header is implausible)")
        return n

    def header_bytes(self, end: int | None = None) -> None:
        """Refuse a header that has grown, or would grow to ``end``, past MAX_HEADER_BYTES
        (checked as the walk goes, before a string is decoded)."""
        end = self.pos if end is None else end
        if end > MAX_HEADER_BYTES:
            raise IntegrityError(f"{self.path}: the GGUF header is larger than {MAX_HEADER_BYTES >> 20} MiB "
                                 f"(byte {end}); no released model needs that much (the header is implausible)")


def _value(cur: _Cursor, vtype: int, what: str, depth: int = 0):
    """Skip (and check) one value of type ``vtype``; returns scalars and strings, None for arrays."""
    if vtype in _SCALAR:
        return cur.scalar(vtype, what)
    if vtype == _STRING:
        return cur.string(what)
    if vtype != _ARRAY:
        raise cur.fail(f"{what} has unknown GGUF value type {vtype}")
    if depth >= MAX_ARRAY_DEPTH:
        raise cur.fail(f"{what} nests arrays deeper than {MAX_ARRAY_DEPTH}")
    itype = cur.scalar(4, f"item type of {what}")
    if itype in _SCALAR:
        n = cur.bounded(cur.count(_SCALAR_SIZE[itype], f"item count of {what}"), MAX_ARRAY_ITEMS, f"item count of {what}")
        cur.pos += n * _SCALAR_SIZE[itype]
        return None
    if itype == _STRING:
        n = cur.bounded(cur.count(8, f"item count of {what}"), MAX_ARRAY_ITEMS, f"item count of {what}")
        _strings(cur, n, what)
        cur.header_bytes()
        return None
    if itype != _ARRAY:
        raise cur.fail(f"{what} has unknown GGUF item type {itype}")
    n = cur.count(12, f"item count of {what}")
    cur.nested = cur.bounded(cur.nested + n, MAX_NESTED_ITEMS, f"the item count of arrays of arrays (at {what})")
    for i in range(n):
        _value(cur, itype, f"{what}[{i}]", depth + 1)
    return None


_U64 = struct.Struct("<Q").unpack_from


def _strings(cur: _Cursor, n: int, what: str) -> None:
    """Skip and check an array of ``n`` strings (a vocabulary: up to ~10^6 items, so one tight
    loop). All lengths < 128 (the usual case) make every prefix byte ASCII, and then the whole
    region is UTF-8 exactly when each string is: one decode checks them all."""
    buf, pos, size, start, longest = cur.buf, cur.pos, cur.size, cur.pos, 0
    for _ in range(n):
        if size - pos < 8:
            cur.pos = pos
            raise cur.fail(f"{what}: the file ends inside its strings")
        (ln,) = _U64(buf, pos)
        pos += 8
        if ln > size - pos:
            cur.pos = pos
            raise cur.fail(f"{what}: a string of {ln} bytes is longer than the rest of the file")
        pos += ln
        if ln > longest:
            longest = ln
    cur.header_bytes(pos)
    if longest < 128:
        try:
            str(buf[start:pos], "utf-8")
        except UnicodeDecodeError:
            pass
        else:
            cur.pos = pos
            return
    cur.pos = start       # slow path: find the string that is not UTF-8, or check long ones
    for i in range(n):
        cur.string(f"{what}[{i}]")


def check(path: str | Path, with_data: bool = True) -> Layout:
    """Check the GGUF at ``path`` as described in the module docstring and return its Layout.

    ``with_data=False`` checks the header alone (a file cut after the header, as ``bringup plan
    memory`` reads); otherwise every tensor must lie inside the file. Reads the header through a
    memory map; nothing is allocated in proportion to a count before the count is bounded.
    """
    path = Path(path)
    with open_regular(path, "GGUF file") as fh:
        if os.fstat(fh.fileno()).st_size < 24:    # (mmap refuses an empty file)
            return walk(fh.read(), path, with_data)
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return walk(mm, path, with_data)


def walk(buf, path: str | Path = "<buffer>", with_data: bool = True) -> Layout:
    """The check of ``check`` on the bytes of a whole GGUF file already in memory (bytes, an mmap,
    a memoryview); ``path`` only names the file in messages. Raises as ``check``."""
    size = len(buf)
    cur = _Cursor(buf, Path(path))
    if size < 24:
        raise IntegrityError(f"{cur.path}: {size} bytes is too short for a GGUF header; "
                             "the GGUF file is truncated or corrupt")
    return _check(cur, size, with_data)


def _check(cur: _Cursor, size: int, with_data: bool) -> Layout:
    """The whole walk: header, metadata, tensor infos, then where each tensor's data lies."""
    version, n_kv, n_tensors = _header(cur, size)
    kvs, alignment = _metadata(cur, n_kv)
    kvs_end = cur.pos
    tensors = _tensor_infos(cur, n_tensors)
    data_offset = -(-cur.pos // alignment) * alignment
    _check_data(cur.path, tensors, alignment, data_offset, size, with_data)
    return Layout(version, n_kv, n_tensors, alignment, data_offset, tuple(kvs), tuple(tensors), kvs_end)


def _header(cur: _Cursor, size: int) -> tuple[int, int, int]:
    """(version, metadata KV count, tensor count), each count bounded by what the file can hold."""
    path = cur.path
    if bytes(cur.buf[:4]) != b"GGUF":
        raise IntegrityError(f"{path}: not a GGUF file (magic {bytes(cur.buf[:4])!r}, expected b'GGUF')")
    cur.pos = 4
    version = cur.scalar(4, "version")
    if version & 0xFFFF == 0 and version:
        raise UnsupportedError(f"{path}: big-endian GGUF (version bytes {version:#010x}); bringup reads "
                               "little-endian GGUF only")
    if version not in SUPPORTED_VERSIONS:
        raise UnsupportedError(f"{path}: GGUF version {version} is not supported (supported: "
                               f"{', '.join(map(str, SUPPORTED_VERSIONS))})")
    n_tensors = cur.scalar(10, "tensor count")
    n_kv = cur.count(8 + 4 + 1, "metadata KV count")   # key length, type, smallest value
    if n_tensors * (8 + 4 + 4 + 8) > size - cur.pos:
        raise cur.fail(f"tensor count {n_tensors} is more than the file can hold")
    cur.bounded(n_kv, MAX_KVS, "metadata KV count")
    cur.bounded(n_tensors, MAX_TENSORS, "tensor count")
    return version, n_kv, n_tensors


def _metadata(cur: _Cursor, n_kv: int) -> tuple[list[MetadataKV], int]:
    """The metadata KVs (each key once) and the data alignment (general.alignment: a UINT32 power
    of two, else the default)."""
    keys: set[str] = set()
    kvs = []
    alignment = DEFAULT_ALIGNMENT
    for i in range(n_kv):
        kv_offset = cur.pos
        key = cur.string(f"metadata key #{i}")
        if key in keys:
            raise IntegrityError(f"{cur.path}: metadata key {key!r} appears twice")
        keys.add(key)
        vtype = cur.scalar(4, f"value type of {key!r}")
        start = cur.pos
        v = _value(cur, vtype, f"metadata {key!r}")
        kvs.append(MetadataKV(kv_offset, key, vtype, start, cur.pos))
        cur.header_bytes()
        if key == "general.alignment":
            if vtype != 4 or v == 0 or v & (v - 1):
                raise IntegrityError(f"{cur.path}: general.alignment must be a UINT32 power of two, got "
                                     f"{v!r} (type {vtype})")
            alignment = v
    return kvs, alignment


def _tensor_infos(cur: _Cursor, n_tensors: int) -> list[TensorEntry]:
    """The tensor infos: unique names shorter than GGML_MAX_NAME, at most GGML_MAX_DIMS dimensions."""
    path = cur.path
    tensors = []
    names: set[str] = set()
    for i in range(n_tensors):
        t_offset = cur.pos
        name = cur.string(f"name of tensor #{i}")
        if len(name.encode()) >= GGML_MAX_NAME:
            raise IntegrityError(f"{path}: tensor name {name[:80]!r} is {len(name.encode())} bytes; "
                                 f"GGML names are shorter than {GGML_MAX_NAME}")
        if name in names:
            raise IntegrityError(f"{path}: tensor {name!r} appears twice in the GGUF tensor infos")
        names.add(name)
        n_dims = cur.scalar(4, f"dimension count of {name!r}")
        if n_dims > GGML_MAX_DIMS:
            raise IntegrityError(f"{path}: tensor {name!r} has {n_dims} dimensions; GGML allows at most {GGML_MAX_DIMS}")
        dims = [cur.scalar(10, f"dimension {d} of {name!r}") for d in range(n_dims)]
        ggml_type = cur.scalar(4, f"type of {name!r}")
        offset = cur.scalar(10, f"data offset of {name!r}")
        tensors.append(TensorEntry(t_offset, name, tuple(dims), ggml_type, offset))
        cur.header_bytes()
    return tensors


def _tensor_bytes(path: Path, t: TensorEntry) -> int:
    """Bytes of tensor ``t``'s data: whole blocks of its GGML type per row, times the rows."""
    try:
        block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(t.ggml_type)]
    except (ValueError, KeyError):
        raise UnsupportedError(f"{path}: tensor {t.name!r} has GGML type id {t.ggml_type}, which this "
                               "gguf package does not know") from None
    ne0 = t.dims[0] if t.dims else 1
    if ne0 % block:
        raise IntegrityError(f"{path}: tensor {t.name!r} has rows of {ne0} elements, not a multiple of "
                             f"the {block}-element blocks of its type")
    rows = 1
    for d in t.dims[1:]:
        rows *= d
    return rows * (ne0 // block) * type_size


def _check_data(path: Path, tensors: list[TensorEntry], alignment: int, data_offset: int, size: int,
                with_data: bool) -> None:
    """Each tensor's data aligned, inside the file (``with_data``) and overlapping no other."""
    spans = []
    for t in tensors:
        nbytes = _tensor_bytes(path, t)
        if t.data_offset % alignment:
            raise IntegrityError(f"{path}: tensor {t.name!r} data offset {t.data_offset} is not a multiple of the "
                                 f"alignment {alignment} (llama.cpp refuses such files)")
        end = data_offset + t.data_offset + nbytes
        if with_data and end > size:
            raise IntegrityError(f"{path}: tensor {t.name!r} ends at byte {end}, past the end of the "
                                 f"{size}-byte file (truncated)")
        spans.append((t.data_offset, t.data_offset + nbytes, t.name))
    spans.sort()
    for (_, a_end, a), (b_start, _, b) in zip(spans, spans[1:]):
        if b_start < a_end:
            raise IntegrityError(f"{path}: tensors {a!r} and {b!r} overlap in the data section "
                                 f"({b!r} starts at {b_start}, {a!r} ends at {a_end})")
