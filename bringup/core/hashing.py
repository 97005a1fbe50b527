"""SHA-256 of files and byte strings (hex), read in 1 MiB chunks."""
from __future__ import annotations

import hashlib
import os

from bringup.core.inputs import open_regular


def sha256_file(path: str | os.PathLike, what: str = "input") -> str:
    """Hex SHA-256 of the file's bytes. Raises BringupError (exit 2) unless ``path`` is a
    readable regular file (``bringup.core.inputs``: a FIFO or /dev/zero would never end)."""
    h = hashlib.sha256()
    with open_regular(path, what) as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
