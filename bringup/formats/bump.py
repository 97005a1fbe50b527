"""BUMP weights file: the one writer and the one Python reader. Format: docs/bump_format.md.

The file is mmap-able: every tensor lies at a 64-byte aligned offset and is used in place. The
payload and the header (metadata + tensor table) each carry a SHA-256 that readers check.
"""
from __future__ import annotations

import hashlib
import json
import mmap
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from bringup.core import canonjson
from bringup.formats import ggml as formats
from bringup.core.atomic import atomic_open
from bringup.core.inputs import open_regular
from bringup.core.errors import BringupError, IntegrityError

MAGIC = b"BUMP"
VERSION = 1
ALIGN = formats.ALIGN      # every tensor offset (config/ggml_formats.json alignment)
HEADER_BYTES = 256
ENTRY_BYTES = 160
NAME_BYTES = 96
DIM_FIELDS = ("n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "head_dim_v", "n_ff",
              "n_vocab", "n_ctx_train")
NAME_RE = re.compile(r"^[A-Za-z0-9_.]{1,95}$")

# <4s magic, u32 version, 7 x u64 (file_size meta_offset meta_size table_offset n_tensors
#  payload_offset payload_size), 32s payload sha, 32s header sha, 16 x u32 dims, 64s reserved>
_HEADER = struct.Struct("<4sI7Q32s32s16I64s")
# <96s name, u32 ggml type, u32 n_dims, 4 x u64 shape, u64 offset, u64 size, u64 reserved>
_ENTRY = struct.Struct("<96sII4QQQQ")
assert _HEADER.size == HEADER_BYTES and _ENTRY.size == ENTRY_BYTES


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a BUMP file. ``shape`` is GGUF order (ne0 = contiguous row length first);
    ``offset`` is relative to the payload start; ``size`` in bytes."""
    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    size: int


@dataclass
class TensorSource:
    """A tensor to write: canonical name, format name, GGUF-order shape, raw bytes (any buffer)."""
    name: str
    dtype: str
    shape: tuple[int, ...]
    data: Any


def write(path: str | os.PathLike, tensors: Iterable[TensorSource], metadata: dict,
          dims: dict[str, int], on_tensor: Callable[[str], None] | None = None) -> dict:
    """Write a BUMP file atomically. Returns {"payload_sha256", "header_sha256", "file_size"}.
    ``on_tensor(name)`` is called after each tensor's bytes are written (progress).

    Raises BringupError for a bad name, an unknown format, a size that does not match the shape,
    or a duplicate name. Nothing is left at ``path`` on failure.
    """
    tensors = list(tensors)
    seen: set[str] = set()
    entries: list[TensorEntry] = []
    off = 0
    for t in tensors:
        if not NAME_RE.match(t.name):
            raise BringupError(f"BUMP tensor name {t.name!r} does not match {NAME_RE.pattern}")
        if t.name in seen:
            raise BringupError(f"duplicate BUMP tensor name {t.name!r}")
        seen.add(t.name)
        if not 1 <= len(t.shape) <= 4:
            raise BringupError(f"{t.name}: {len(t.shape)} dims; BUMP holds 1 to 4")
        fmt = formats.by_name(t.dtype)
        size = fmt.tensor_bytes(t.shape)
        got = memoryview(t.data).nbytes
        if got != size:
            raise BringupError(f"{t.name}: {got} bytes given, {t.dtype} {list(t.shape)} needs {size}")
        off = _align(off)
        entries.append(TensorEntry(t.name, t.dtype, tuple(int(d) for d in t.shape), off, size))
        off += size
    payload_size = off
    meta = canonjson.dumps(metadata, compact=True).encode("ascii")
    meta_offset = HEADER_BYTES
    table_offset = _align(meta_offset + len(meta))
    payload_offset = _align(table_offset + ENTRY_BYTES * len(entries))
    file_size = payload_offset + payload_size

    table = b"".join(
        _ENTRY.pack(e.name.encode("ascii"), formats.by_name(e.dtype).ggml_type, len(e.shape),
                    *(list(e.shape) + [1] * (4 - len(e.shape))), e.offset, e.size, 0)
        for e in entries)
    region = (meta + b"\0" * (table_offset - meta_offset - len(meta)) + table
              + b"\0" * (payload_offset - table_offset - len(table)))
    header_sha = hashlib.sha256(region).digest()
    dim_values = []
    for k in DIM_FIELDS:
        v = int(dims.get(k) or 0)
        if not 0 <= v < 2**32:
            raise BringupError(f"BUMP header dim {k}={v} does not fit u32")
        dim_values.append(v)
    dim_values += [0] * (16 - len(dim_values))

    h = hashlib.sha256()
    with atomic_open(path, "wb") as fh:
        fh.write(b"\0" * HEADER_BYTES)
        fh.write(region)
        pos = 0
        for t, e in zip(tensors, entries):
            pad = b"\0" * (e.offset - pos)
            fh.write(pad)
            h.update(pad)
            data = memoryview(t.data).cast("B")
            fh.write(data)
            h.update(data)
            pos = e.offset + e.size
            if on_tensor is not None:
                on_tensor(e.name)
        payload_sha = h.digest()
        fh.seek(0)
        fh.write(_HEADER.pack(MAGIC, VERSION, file_size, meta_offset, len(meta), table_offset,
                              len(entries), payload_offset, payload_size, payload_sha, header_sha,
                              *dim_values, b"\0" * 64))
    return {"payload_sha256": payload_sha.hex(), "header_sha256": header_sha.hex(),
            "file_size": file_size}


class BumpFile:
    """A validated, mmap'd BUMP file.

    Raises IntegrityError (exit code 3) for a truncated or corrupt file: bad magic, unsupported
    version, regions outside the file or overlapping, a bad tensor entry, or a hash mismatch.
    ``verify_payload=False`` skips only the payload hash (the header hash is always checked).
    """

    def __init__(self, path: str | os.PathLike, verify_payload: bool = True):
        self.path = Path(path)
        self._fh = open_regular(self.path, "BUMP file")   # a FIFO or device would block or never end
        size = os.fstat(self._fh.fileno()).st_size
        if size < HEADER_BYTES:
            self.close()
            raise IntegrityError(f"{self.path}: {size} bytes, shorter than the {HEADER_BYTES}-byte "
                                 "BUMP header (truncated?)")
        self._mm = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            self._parse(size, verify_payload)
        except BaseException:
            self.close()
            raise

    def _fail(self, why: str) -> IntegrityError:
        return IntegrityError(f"{self.path}: corrupt BUMP file: {why}")

    def _parse(self, size: int, verify_payload: bool) -> None:
        (magic, version, file_size, meta_off, meta_size, table_off, n, pay_off, pay_size,
         pay_sha, head_sha, *rest) = _HEADER.unpack_from(self._mm, 0)
        if magic != MAGIC:
            raise self._fail(f"magic {magic!r}, expected {MAGIC!r}")
        if version != VERSION:
            raise self._fail(f"version {version}; this reader supports {VERSION}")
        if file_size != size:
            raise self._fail(f"header says {file_size} bytes, file has {size} (truncated or appended)")
        if not (meta_off == HEADER_BYTES and meta_off + meta_size <= table_off
                and table_off % ALIGN == 0 and n < 2**24 and table_off + n * ENTRY_BYTES <= pay_off
                and pay_off % ALIGN == 0 and pay_off + pay_size == file_size):
            raise self._fail("header regions are out of order, overlap or lie outside the file")
        if hashlib.sha256(self._mm[meta_off:pay_off]).digest() != head_sha:
            raise self._fail("metadata/tensor-table SHA-256 mismatch")
        try:
            self.metadata = canonjson_loads(bytes(self._mm[meta_off:meta_off + meta_size]))
        except ValueError as e:
            raise self._fail(f"metadata is not JSON: {e}") from None
        self.dims = dict(zip(DIM_FIELDS, rest[:len(DIM_FIELDS)]))
        self.payload_offset, self.payload_size = pay_off, pay_size
        self.payload_sha256, self.header_sha256 = pay_sha.hex(), head_sha.hex()
        self.tensors: dict[str, TensorEntry] = {}
        end = 0
        for i in range(n):
            raw_name, gt, nd, s0, s1, s2, s3, off, sz, _ = _ENTRY.unpack_from(self._mm, table_off + i * ENTRY_BYTES)
            name = raw_name.rstrip(b"\0").decode("ascii", "replace")
            if not NAME_RE.match(name) or name in self.tensors:
                raise self._fail(f"tensor #{i}: bad or duplicate name {name!r}")
            try:
                fmt = formats.by_ggml_type(gt)
            except BringupError:
                raise self._fail(f"tensor {name}: unknown type id {gt}") from None
            if not 1 <= nd <= 4:
                raise self._fail(f"tensor {name}: n_dims {nd}")
            shape = (s0, s1, s2, s3)[:nd]
            try:
                want = fmt.tensor_bytes(shape)
            except BringupError as e:
                raise self._fail(f"tensor {name}: {e}") from None
            if sz != want or off % ALIGN or off < end or off + sz > pay_size:
                raise self._fail(f"tensor {name}: offset {off} size {sz} (expected size {want}, "
                                 f"aligned, after byte {end}, inside the {pay_size}-byte payload)")
            end = off + sz
            self.tensors[name] = TensorEntry(name, fmt.name, shape, off, sz)
        if verify_payload:
            h = hashlib.sha256()
            step = 1 << 24
            for s in range(pay_off, file_size, step):
                h.update(self._mm[s:min(s + step, file_size)])
            if h.digest() != pay_sha:
                raise self._fail("payload SHA-256 mismatch (a weight byte changed)")

    def tensor_bytes(self, name: str) -> memoryview:
        """The tensor's bytes, in place (no copy)."""
        e = self.tensors[name]
        start = self.payload_offset + e.offset
        return memoryview(self._mm)[start:start + e.size]

    def close(self) -> None:
        mm = getattr(self, "_mm", None)
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                pass  # a caller still holds a view; the mapping goes with the last reference
        self._fh.close()

    def __enter__(self) -> "BumpFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def canonjson_loads(raw: bytes) -> dict:
    obj = json.loads(raw.decode("ascii"))
    if not isinstance(obj, dict):
        raise ValueError("metadata is not an object")
    return obj
