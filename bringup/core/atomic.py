"""Atomic outputs: a file appears complete or not at all, a folder of files appears as a whole.

``atomic_open`` writes a temporary sibling, fsyncs it and renames it onto the destination;
``atomic_dir`` builds a multi-file output in a temporary sibling folder and swaps it with the
destination folder in one rename, so an old good set survives a failed or interrupted rerun.
Both create only regular files and folders of their own: a destination that is a symlink, a
FIFO, a device or any other non-regular file is refused (renaming over ``/dev/null`` would
replace the device). Temporary names carry the writer's host and pid; leftovers of a killed writer
(its pid gone from this host) are removed by the next writer of the same destination.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import shutil
import signal
import socket
import stat
import tempfile
from pathlib import Path
from typing import IO, Iterable, Iterator

from bringup.core.errors import BringupError, from_os_error
from bringup.core.inputs import kind

# errnos raised while writing that belong to the destination's device, not to the caller's code
_WRITE_ERRNOS = frozenset((errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO, errno.EACCES,
                           errno.EPERM))


def check_output_path(path: str | os.PathLike, what: str = "output") -> Path:
    """Return ``path`` when bringup may create or replace it: it does not exist, or it is a
    regular file that is not a symlink. Creates the parent folders. Raises BringupError (exit 2)
    for a symlink, FIFO, device, socket or folder at ``path``, a parent that is a file or a
    symlink loop, or a read-only parent (exit 5 for a full disk)."""
    path = Path(path)
    st = _lstat(path, what)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise BringupError(f"{what} {path} exists and is a {kind(st.st_mode)}; bringup replaces only "
                           "regular files it wrote (remove it or choose another path)")
    _make_parent(path.parent, what)
    return path


def _lstat(path: Path, what: str) -> os.stat_result | None:
    """``os.lstat(path)``, None when nothing is there; a looping or non-folder parent is a BringupError."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise from_os_error(e, f"cannot use {what} {path}") from None


def _make_parent(parent: Path, what: str) -> None:
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise BringupError(f"cannot create the folder of {what}: {parent} exists and is not a folder") from None
    except OSError as e:
        raise from_os_error(e, f"cannot create the folder of {what} {parent}") from None


def _tag() -> str:
    """``<host>-<pid>-``: whose temporary a name is. The host keeps a writer on another machine
    (a shared filesystem, another pid namespace) from having its live temporaries swept."""
    return f"{socket.gethostname()}-{os.getpid()}-"


def _sweep(parent: Path, prefix: str) -> None:
    """Remove temporaries ``<prefix><host>-<pid>-...`` in ``parent`` written on this host by a
    process that is gone (killed by SIGKILL or the OOM killer: nothing else skips the cleanup)."""
    rx = re.compile(re.escape(prefix + socket.gethostname()) + r"-(\d+)-")
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            m = rx.match(entry.name)
            if m and not _alive(int(m[1])):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO]:
    """Open a temporary sibling of ``path`` for writing; on success rename it onto ``path``.

    ``path`` is checked first (``check_output_path``). On any exception the temporary file is
    removed and ``path`` is left as it was; a full disk or read-only folder is a one-line
    BringupError naming ``path`` (exit 5 / exit 2).
    """
    path = check_output_path(path)
    prefix = f".{path.name}.tmp-"
    _sweep(path.parent, prefix)
    tmp = None
    try:
        with _signals_held():
            fd, tmp = tempfile.mkstemp(prefix=prefix + _tag(), dir=path.parent)
        with os.fdopen(fd, mode) as fh:
            # mkstemp creates 0600; an artifact gets the permissions a plain open() would give it
            os.chmod(tmp, 0o666 & ~_umask())
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        check_output_path(path)   # nothing special was put there while we wrote
        os.replace(tmp, path)
    except OSError as e:
        _unlink(tmp)
        if tmp is None or e.errno in _WRITE_ERRNOS:
            raise from_os_error(e, f"cannot write {path}") from None
        raise
    except BaseException:
        _unlink(tmp)
        raise


def _unlink(tmp: str | None) -> None:
    if tmp is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM while a temporary is created: Python runs its handlers between
    two bytecodes, so an interrupt landing after mkstemp/mkdtemp made the file but before its name
    reached the cleanup would leave it behind. Held signals are delivered right after."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_open(path, "wb") as fh:
        fh.write(data)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    write_bytes(path, text.encode("utf-8"))


def _is_temporary_of(name: str, owned: set[str]) -> bool:
    """A leftover temporary of one of ``owned``: ``atomic_open``'s ``.<file>.tmp-<tag>`` or the
    compiler driver's ``.<file>.<random>.tmp`` (bringup/build/compiler.py), left by a writer
    killed before it could rename or remove it. Such files are ours to discard."""
    return any(name.startswith(f".{o}.tmp-") or (name.startswith(f".{o}.") and name.endswith(".tmp"))
               for o in owned)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, owned: Iterable[str], what: str = "output folder") -> Iterator[Path]:
    """Yield an empty temporary sibling folder of ``path``; when the block succeeds, it becomes
    ``path`` in one rename (the previous folder, if any, is swapped out and removed).

    ``owned`` names the files this output set consists of: an existing ``path`` may hold only
    those (and temporaries), so the swap never discards a file someone else put there. On any
    exception the temporary folder is removed and ``path`` keeps its previous contents. Raises
    BringupError (exit 2) when ``path`` is a symlink, not a folder, or holds other files.
    """
    path = Path(path)
    owned = set(owned)
    st = _lstat(path, what)
    if st is not None:
        if not stat.S_ISDIR(st.st_mode):
            raise BringupError(f"{what} {path} exists and is a {kind(st.st_mode)}, not a folder")
        foreign = sorted(n for n in os.listdir(path) if n not in owned and not _is_temporary_of(n, owned))
        if foreign:
            raise BringupError(f"{what} {path} holds files this stage does not write ({', '.join(foreign[:5])}); "
                               "give the stage a folder of its own")
    _make_parent(path.parent, what)
    prefix = f".{path.name}.tmp-"
    _sweep(path.parent, prefix)
    tmp = None
    try:
        with _signals_held():
            tmp = Path(tempfile.mkdtemp(prefix=prefix + _tag(), dir=path.parent))
        os.chmod(tmp, 0o777 & ~_umask())
        yield tmp
        _fsync_dir(tmp)
        if st is None:
            os.rename(tmp, path)
        else:
            _exchange(tmp, path)       # tmp now holds the previous set
            shutil.rmtree(tmp, ignore_errors=True)
        _fsync_dir(path.parent)
    except OSError as e:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if tmp is None or e.errno in _WRITE_ERRNOS:
            raise from_os_error(e, f"cannot write {what} {path}") from None
        raise
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise


_RENAME_EXCHANGE = 2   # linux/fs.h
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> None:
    """Swap folders ``a`` and ``b`` atomically (Linux renameat2 RENAME_EXCHANGE). Where the
    kernel or filesystem lacks it, two renames: ``b`` moves aside, ``a`` takes its place, the old
    folder moves to ``a``; the moment between them has ``b`` missing, never half-written."""
    libc = ctypes.CDLL(None, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is not None:
        if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(err, os.strerror(err), str(b))
    aside = a.with_name(a.name + ".old")
    os.rename(b, aside)
    os.rename(a, b)
    os.rename(aside, a)


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
