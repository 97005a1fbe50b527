"""Opening a GGUF file with the `gguf` package, turning its failures into clear errors.

gguf.GGUFReader parses the header and maps tensor data lazily (numpy memmap), so reading the
metadata of a large file touches only its header pages.
"""
from __future__ import annotations

import os
from pathlib import Path
from functools import lru_cache
from typing import Any

import gguf

from bringup.core.errors import IntegrityError


def open_gguf(path: str | os.PathLike) -> gguf.GGUFReader:
    """A GGUFReader for ``path``. Raises IntegrityError (exit 3) for a truncated or corrupt file,
    including tensor data that would lie past the end of the file.

    Readers are cached per (path, size, mtime): parsing a 262k-token vocabulary takes the gguf
    package seconds, and convert, verify and the tests open the same file several times.
    """
    path = Path(path).resolve()
    st = path.stat()
    return _open_cached(path, st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=4)
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
