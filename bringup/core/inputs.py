"""Every input file is a regular, readable file before it is hashed, parsed or mapped.

A FIFO blocks a reader forever, ``/dev/zero`` never ends, a directory or a symlink loop fails
deep inside a parser: each is refused here in one line (exit 2). ``open_regular`` opens without
blocking and checks the opened descriptor itself, so a path swapped between the check and the
open cannot slip a FIFO in.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from bringup.core.errors import BringupError, from_os_error


def kind(mode: int) -> str:
    """What a ``st_mode`` names, in words ("regular file", "directory", "FIFO", ...)."""
    for test, name in ((stat.S_ISREG, "regular file"), (stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISLNK, "symbolic link")):
        if test(mode):
            return name
    return "special file"


def _refuse(path: os.PathLike | str, what: str, mode: int) -> BringupError:
    return BringupError(f"{what} {path} is a {kind(mode)}, not a regular file; bringup reads only "
                        "regular files (a FIFO or device never ends, a directory is no file)")


def regular_file(path: str | os.PathLike, what: str = "input") -> Path:
    """Return ``path`` when it names a readable regular file (a symlink to one is fine).

    Raises BringupError (exit 2) for a missing path, a directory, a FIFO, socket or device, a
    symlink loop or an unreadable file; the message names ``what`` and the path.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise BringupError(f"{what} not found: {path}") from None
    except OSError as e:
        raise from_os_error(e, f"cannot use {what} {path}") from None
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, what, st.st_mode)
    if not os.access(path, os.R_OK):
        raise BringupError(f"{what} {path} is not readable (permission denied)")
    return Path(path)


def open_regular(path: str | os.PathLike, what: str = "input") -> BinaryIO:
    """Open ``path`` for binary reading, refusing anything but a regular file (see
    ``regular_file``). The open never blocks: O_NONBLOCK is set for the open and cleared after
    the descriptor is known to be a regular file."""
    regular_file(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise from_os_error(e, f"cannot open {what} {path}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refuse(path, what, mode)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
