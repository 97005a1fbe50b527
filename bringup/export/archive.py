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
from typing import BinaryIO, Callable, Iterable

from bringup.core.atomic import atomic_dir, atomic_open
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
    with atomic_open(dest, "wb") as raw:
        _write_tar_gz(raw, Path(folder), Path(folder).name)


def _write_tar_gz(raw: BinaryIO, folder: Path, top: str) -> None:
    """``folder`` as a deterministic .tar.gz of ``top/...`` into the open file ``raw``."""
    entries = [folder, *sorted(folder.rglob("*"), key=lambda p: p.relative_to(folder).as_posix())]
    for p in entries:
        if p.is_symlink() or not (p.is_file() or p.is_dir()):
            raise BringupError(f"bundle entry {p} is not a regular file or folder")
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=LEVEL) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for p in entries:
            arc = Path(top, p.relative_to(folder)).as_posix()
            tar.add(p, arcname=arc, recursive=False, filter=_normalize)


def write_folder_and_archive(folder: str | os.PathLike, dest: str | os.PathLike, owned: Iterable[str],
                             fill: Callable[[Path], None]) -> None:
    """Write a bundle ``folder`` and its archive ``dest`` (``write_tar_gz``'s format) as a pair:
    ``fill(tmp)`` fills a temporary sibling folder, the archive is written from it to a temporary
    file, then the folder is swapped in (``atomic_dir``) and the archive renamed onto ``dest``
    (``atomic_open``). A failure or interrupt before that leaves the previous folder and archive
    as they were; the two renames follow each other directly. ``owned``: the top-level names an
    existing ``folder`` may hold (the previous bundle); anything else there is refused (exit 2).
    """
    folder = Path(folder)
    with atomic_open(dest, "wb") as raw:
        with atomic_dir(folder, owned, "bundle folder") as tmp:
            fill(tmp)
            os.chmod(tmp, 0o755)
            _write_tar_gz(raw, tmp, folder.name)


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
