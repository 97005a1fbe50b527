"""The exception types the CLI turns into a clear one-line error and a non-zero exit.

``one_line`` makes any message safe to print as one line (text from a model file may hold
newlines or terminal escapes), ``shown`` is the same rule for one string inside a message or a
report line (bounded in length); ``from_os_error`` gives an operating-system failure (disk full,
read-only folder, missing file) its exit class instead of a traceback.
"""
from __future__ import annotations

import errno
import unicodedata


class BringupError(Exception):
    """A user-facing error: bad input, hash mismatch, unsupported format, failed gate.

    ``exit_code`` follows bringup's convention: 2 bad input / usage, 3 integrity (hash, corrupt
    file), 4 unsupported (architecture, quant type, no provider), 5 resource unavailable
    (network, missing dependency, disk full), 6 gate failed (parity, certification, budget),
    7 incomplete (a result is missing).
    """

    exit_code = 2

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class IntegrityError(BringupError):
    exit_code = 3


class UnsupportedError(BringupError):
    exit_code = 4


class UnavailableError(BringupError):
    exit_code = 5


class GateError(BringupError):
    exit_code = 6


class IncompleteError(BringupError):
    """A result that should exist does not (a model's pipeline crashed: no certification)."""
    exit_code = 7


# Unicode categories that could break a message across lines or rewrite the terminal: control
# (Cc: \n, \r, ESC), format (Cf: bidi overrides), line/paragraph separators, lone surrogates
# (undecodable bytes kept by surrogateescape).
_UNSAFE = frozenset(("Cc", "Cf", "Zl", "Zp", "Cs"))


def one_line(text: str) -> str:
    """``text`` with every control, format and separator character written as its Python escape
    (a newline becomes the two characters ``\\n``), so one message is exactly one line and no
    attacker-written text can start a line of its own."""
    return "".join(ch.encode("unicode_escape", "backslashreplace").decode("ascii")
                   if unicodedata.category(ch) in _UNSAFE else ch for ch in text)


#: characters of one string from a file or the command line that a message shows (``shown``): a
#: tensor or architecture name is < 64 bytes in any real model, a path < 4096; a hostile one may
#: be megabytes, which no reader of a message wants on their terminal.
SHOWN_MAX = 300


def shown(value: object, limit: int = SHOWN_MAX) -> str:
    """``value`` (str() of it) as a message shows a string that came from a file or the command
    line: escaped by ``one_line`` (the one escaping rule: no newline, no terminal escape, no bidi
    override) and, past ``limit`` characters, cut with the count of what was left out said in the
    text (never silently)."""
    text = str(value)
    if len(text) > limit:
        text = f"{text[:limit]}...[{len(text) - limit} more characters]"
    return one_line(text)


# errno -> exit class of an operating-system failure: the machine lacks a resource (5), or the
# path given cannot be used as asked (2, the default for any errno not listed).
_OS_UNAVAILABLE = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
                   errno.EFBIG: "file size limit exceeded", errno.EIO: "input/output error",
                   errno.ENOMEM: "out of memory"}


def from_os_error(e: OSError, doing: str = "") -> BringupError:
    """A BringupError (exit 5 for a full disk, quota, file-size limit or I/O error; exit 2 for a
    missing, unreadable, read-only, looping or wrong-kind path) describing ``e``. ``doing``
    names the operation ("writing weights.bump")."""
    reason = _OS_UNAVAILABLE.get(e.errno) or e.strerror or type(e).__name__
    where = f" {e.filename}" if e.filename else ""
    head = f"{doing}: " if doing else ""
    if e.errno in _OS_UNAVAILABLE:
        return UnavailableError(f"{head}{reason}{where}")
    return BringupError(f"{head}{reason}{where}")
