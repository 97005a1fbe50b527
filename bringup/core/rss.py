"""The resident-set growth of this process during a piece of work (Linux /proc), in bytes.

``PeakGrowth`` trims the C heap (glibc ``malloc_trim``), resets the kernel's high-water mark of the resident set (writing ``5`` to
``/proc/self/clear_refs``, Linux >= 4.0, proc(5)), runs the work, then reads ``VmHWM`` and
subtracts the ``VmRSS`` it found before: the most memory the work added at any instant, file
pages it touched included. The reset also resets this process's ``getrusage`` ``ru_maxrss``
(the kernel keeps one high-water mark), so a caller that wants the whole run's peak records it
before. Where /proc cannot do this the result is None with the reason (never a guessed number).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import re
from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR = Path("/proc/self/clear_refs")


def _trim() -> None:
    """Return the C heap's free memory to the system (glibc ``malloc_trim(0)``), so that VmRSS is
    what is live: otherwise memory freed before the work sits in the heap, counts in VmRSS, and the
    work reuses it without growing the resident set. A libc without it: nothing to trim."""
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def _status_kib(key: str) -> int:
    m = re.search(rf"^{key}:\s+(\d+) kB$", _STATUS.read_text(), re.M)
    if m is None:
        raise OSError(f"{_STATUS} has no {key}")
    return int(m.group(1))


class PeakGrowth:
    """Context manager: ``with PeakGrowth() as g: work()``; then ``g.bytes`` is the peak resident-set
    growth during ``work`` (bytes, int) or None, and ``g.unavailable`` says why it is None."""

    method = ("VmHWM after resetting it (/proc/self/clear_refs 5) minus VmRSS before (after malloc_trim), "
              "from /proc/self/status, in bytes")

    def __init__(self):
        self.bytes: int | None = None
        self.unavailable: str | None = None
        self._before: int | None = None

    def __enter__(self) -> "PeakGrowth":
        try:
            _trim()
            self._before = _status_kib("VmRSS")
            _CLEAR.write_text("5")
        except OSError as e:
            self.unavailable = f"cannot measure the resident set here: {e.strerror or e}"
        return self

    def __exit__(self, *exc) -> None:
        if self._before is None or self.unavailable:
            return
        try:
            self.bytes = max(0, _status_kib("VmHWM") - self._before) * 1024
        except OSError as e:
            self.unavailable = f"cannot read the resident set's peak: {e.strerror or e}"
