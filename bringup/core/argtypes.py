"""argparse ``type=`` functions shared by the CLIs, so a bad value is a usage error (exit 2)
at parse time, never a failed gate or a silently ignored value later.
"""
from __future__ import annotations

import argparse

#: most threads bringup-run accepts (csrc/runtime/bu_threadpool.h BU_POOL_MAX_THREADS)
MAX_THREADS = 256


def threads(text: str) -> int:
    """``--threads N``: an integer 1 .. MAX_THREADS (what the native runtime accepts). Raises
    argparse.ArgumentTypeError otherwise (argparse: one usage line, exit 2)."""
    try:
        n = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of threads") from None
    if not 1 <= n <= MAX_THREADS:
        raise argparse.ArgumentTypeError(f"{n} threads is outside 1..{MAX_THREADS} (the native runtime's limit)")
    return n
