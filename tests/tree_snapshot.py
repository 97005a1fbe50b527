"""A folder tree's state for "nothing changed" checks (the hostile-input and interrupt tests)."""
from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``, by relative path: its file type, and for regular files their
    SHA-256 (special files are never opened)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath, n)
            st = os.lstat(p)
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if stat.S_ISREG(st.st_mode) else None
            out[str(p.relative_to(root))] = (stat.S_IFMT(st.st_mode), digest)
    return out
