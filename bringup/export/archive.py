"""A bundle folder as a deterministic ``.tar.gz``, and its safe extraction.

Determinism (the same folder gives the same bytes, on any machine, at any time): entries sorted by
path, every mtime 0, uid/gid 0 with empty owner names, mode 0755 for folders and executables and
0644 for other files, ustar format (no pax headers carrying times), and a gzip header with mtime 0
and no file name (RFC 1952 MTIME = 0: "no time stamp is available") at a fixed compression level.
"""
from __future__ import annotations

import gzip
import os
import tarfile
from pathlib import Path

from bringup.core.atomic import atomic_open
from bringup.core.errors import BringupError, IntegrityError

#: gzip compression level (fixed: the level changes the bytes).
LEVEL = 6


def _normalize(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o755 if info.isdir() or info.mode & 0o100 else 0o644
    return info


def write_tar_gz(folder: str | os.PathLike, dest: str | os.PathLike) -> None:
    """Write ``folder`` (regular files and folders only) to ``dest`` as ``<folder name>/...``,
    deterministically and atomically. Raises BringupError for a symlink or special file."""
    folder = Path(folder)
    entries = [folder, *sorted(folder.rglob("*"), key=lambda p: p.relative_to(folder).as_posix())]
    for p in entries:
        if p.is_symlink() or not (p.is_file() or p.is_dir()):
            raise BringupError(f"bundle entry {p} is not a regular file or folder")
    with atomic_open(dest, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=LEVEL) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for p in entries:
            arc = Path(folder.name, p.relative_to(folder)).as_posix()
            tar.add(p, arcname=arc, recursive=False, filter=_normalize)


def extract_bundle(archive: str | os.PathLike, into: str | os.PathLike) -> Path:
    """Extract a bundle archive into the empty folder ``into`` and return its one top folder.

    Uses tarfile's ``data`` filter (no absolute paths, no ``..``, no links out of the tree, no
    device files). Raises IntegrityError for an unreadable archive, a refused member or an
    archive that is not exactly one top folder.
    """
    try:
        with tarfile.open(archive, "r:gz") as tar:
            tops = {Path(m.name).parts[0] for m in tar.getmembers() if m.name not in ("", ".")}
            if len(tops) != 1:
                raise IntegrityError(f"{archive}: a bundle archive holds one top folder; found {sorted(tops)}")
            tar.extractall(into, filter="data")
    except (tarfile.TarError, EOFError, OSError, gzip.BadGzipFile) as e:
        raise IntegrityError(f"{archive}: not a readable bundle archive ({e})") from None
    top = Path(into) / tops.pop()
    if not top.is_dir():
        raise IntegrityError(f"{archive}: its top entry {top.name} is not a folder")
    return top
