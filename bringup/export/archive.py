"""A bundle folder as a deterministic ``.tar.gz``, and its safe extraction.

Determinism (the same folder gives the same bytes, on any machine, at any time): entries sorted by
path, every mtime 0, uid/gid 0 with empty owner names, mode 0755 for folders and executables and
0644 for other files, ustar format (no pax headers carrying times), and a gzip header with mtime 0
and no file name (RFC 1952 MTIME = 0: "no time stamp is available") at a fixed compression level.
"""
from __future__ import annotations

import gzip
import os
import shutil
import tarfile
import zlib
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Mapping

from bringup.core.atomic import atomic_dir, atomic_open
from bringup.core.errors import BringupError, IntegrityError, UnavailableError
from bringup.core.inputs import open_regular

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


#: Members a bundle archive may hold. A bundle has about 13 (10 files, its top folder and 2 below); the bound keeps a
#: hostile archive of millions of empty members from costing minutes before it is refused.
MAX_MEMBERS = 256
#: Unpacked bytes per archive byte, and bytes on top, that the headers may add up to before the
#: manifest is read: a bundle's weights are quantized and barely compress (smollm2: 99.1 MB from
#: 93.1 MB, 1.06x), so 16x is far above any bundle and far below a decompression bomb's 200x+.
MAX_RATIO, SLACK = 16, 16 << 20
#: tar member types of a bundle: regular files and folders (ustar: no links, devices, FIFOs, no
#: GNU or pax extension headers, which bringup never writes and tarfile would read whole).
_KINDS = {tarfile.REGTYPE: "file", tarfile.AREGTYPE: "file", tarfile.DIRTYPE: "folder"}
_KIND_NAMES = {tarfile.SYMTYPE: "symbolic link", tarfile.LNKTYPE: "hard link", tarfile.CHRTYPE: "character device",
               tarfile.BLKTYPE: "block device", tarfile.FIFOTYPE: "FIFO", tarfile.CONTTYPE: "contiguous file",
               tarfile.GNUTYPE_SPARSE: "sparse file", tarfile.GNUTYPE_LONGNAME: "GNU long-name header",
               tarfile.GNUTYPE_LONGLINK: "GNU long-link header", tarfile.XHDTYPE: "pax header",
               tarfile.XGLTYPE: "pax global header", tarfile.SOLARIS_XHDTYPE: "Solaris pax header"}


class _Refused(Exception):
    """A member refused while tarfile reads the headers (propagates through TarFile.next)."""


class _UstarInfo(tarfile.TarInfo):
    """A TarInfo that refuses every extension header before tarfile reads its (unbounded) body."""

    def _proc_member(self, tarfile_):
        if self.type not in _KINDS:
            raise _Refused(f"member {self.name!r} is a {_KIND_NAMES.get(self.type, f'type {self.type!r}')}; "
                           "a bundle archive holds only regular files and folders")
        return super()._proc_member(tarfile_)


def _scan(tar: tarfile.TarFile, archive_bytes: int, what: str) -> tuple[list[tarfile.TarInfo], str, bytes]:
    """Read the headers only: (members, the one top folder, the bytes of its bundle.json).
    Raises IntegrityError past MAX_MEMBERS, past MAX_RATIO * archive_bytes + SLACK unpacked bytes,
    for a second top folder, a member outside it, or a bundle.json over 1 MiB or missing."""
    limit, total, members, top, manifest = MAX_RATIO * archive_bytes + SLACK, 0, [], None, None
    while (m := tar.next()) is not None:
        members.append(m)
        if len(members) > MAX_MEMBERS:
            raise IntegrityError(f"{what}: more than {MAX_MEMBERS} members; a bundle has about 13")
        parts = m.name.split("/")
        if top is None:
            top = parts[0]
        if parts[0] != top or m.name.startswith("/") or ".." in parts:
            raise IntegrityError(f"{what}: member {m.name!r} is outside its one top folder {top!r}")
        total += m.size
        if total > limit:
            raise IntegrityError(f"{what}: its members add up to more than {limit:,} bytes unpacked ({MAX_RATIO}x the "
                                 f"archive's {archive_bytes:,} bytes + {SLACK >> 20} MiB): refused before extraction")
        if m.name == f"{top}/bundle.json" and m.isfile():
            if m.size > 1 << 20:
                raise IntegrityError(f"{what}: bundle.json is {m.size:,} bytes; at most 1 MiB")
            manifest = tar.extractfile(m).read()
    if top is None or manifest is None:
        raise IntegrityError(f"{what}: no {'members' if top is None else 'bundle.json in ' + repr(top)}: not a bundle archive")
    return members, top, manifest


def _check_against(members: list[tarfile.TarInfo], top: str, sizes: Mapping[str, int], what: str) -> int:
    """Every member is a file ``sizes`` names (path -> exact bytes, or -max for an upper bound)
    or a folder above one; returns the unpacked bytes. Raises IntegrityError naming a member."""
    folders = {top} | {f"{top}/" + "/".join(p.split("/")[:i]) for p in sizes for i in range(1, p.count("/") + 1)}
    seen, total = set(), 0
    for m in members:
        rel = m.name.partition("/")[2]
        if m.isdir():
            if m.name.rstrip("/") not in folders:
                raise IntegrityError(f"{what}: unexpected folder {rel!r} (bundle.json lists no file in it)")
            continue
        want = sizes.get(rel)
        if want is None or rel in seen:
            raise IntegrityError(f"{what}: {'unexpected' if want is None else 'duplicate'} member {rel!r} "
                                 "(not a file bundle.json lists)")
        if m.size != want and not (want < 0 and m.size <= -want):
            raise IntegrityError(f"{what}: {rel!r} is {m.size:,} bytes, bundle.json says "
                                 + (f"{want:,}" if want >= 0 else f"at most {-want:,}"))
        seen.add(rel)
        total += m.size
    return total


def extract_bundle(archive: str | os.PathLike, into: str | os.PathLike,
                   sizes_of: Callable[[bytes], Mapping[str, int]]) -> Path:
    """Extract a bundle archive into the empty folder ``into`` and return its one top folder.

    Before anything is written, from the tar headers alone: at most MAX_MEMBERS members, only
    regular files and folders under one top folder, at most MAX_RATIO times the archive's size
    unpacked; then ``sizes_of(bundle.json bytes)`` (the caller parses and checks the manifest)
    gives each file's path and size (negative: an upper bound) and every member must be one of
    them with that size, and the filesystem of ``into`` must have room. Extraction then uses
    tarfile's ``data`` filter. Raises IntegrityError (3) for an unreadable archive or a refused
    member, UnavailableError (5) when the disk lacks the room.
    """
    what = Path(archive).name
    try:
        with open_regular(archive, "bundle archive") as raw, \
                tarfile.open(fileobj=raw, mode="r:gz", tarinfo=_UstarInfo) as tar:
            members, top, manifest = _scan(tar, os.fstat(raw.fileno()).st_size, what)
            total = _check_against(members, top, sizes_of(manifest), what)
            free = shutil.disk_usage(into).free
            if total + SLACK > free:
                raise UnavailableError(f"{what}: unpacking needs {total:,} bytes; {into} has {free:,} free")
            tar.extractall(into, members=members, filter="data")
    except _Refused as e:
        raise IntegrityError(f"{what}: {e}") from None
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise IntegrityError(f"{what}: not a readable bundle archive ({e})") from None
    top_dir = Path(into) / top
    if not top_dir.is_dir():
        raise IntegrityError(f"{what}: its top entry {top!r} is not a folder")
    return top_dir
