"""Run ``bringup ARGS`` and hold it at a chosen point of its output writing, so that
tests/test_interrupts.py can send a signal exactly there (no timing guesses).

    python -m tests.pause_at POINT MARKER ARGS...

POINT is where the process stops: ``temp`` right after its first temporary output (file or
folder, named ``.<name>.tmp-...`` by bringup.core.atomic) is created, still empty (at its
chmod); ``commit:N`` just before the N-th rename of such a temporary onto its destination
(inside a temporary folder, the first rename is one file of a half-built set). At the point it
writes MARKER and sleeps, so the test's SIGINT or SIGKILL lands there. ``none`` runs straight
through (for a kill timed by what appears on disk, e.g. while gcc runs). Exits with
``bringup``'s exit code.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from bringup.core import atomic
from bringup.core.cli import main

_count = {"commit": 0}


def _is_temp(path) -> bool:
    return ".tmp-" in Path(os.fsdecode(path)).name


def _hold(marker: str) -> None:
    Path(marker).write_text(str(os.getpid()))
    time.sleep(120)          # the test's signal ends this
    raise SystemExit("pause_at: nobody interrupted the held process")


def _install(point: str, marker: str) -> None:
    if point == "temp":
        orig_chmod = os.chmod

        def chmod(path, *a, **kw):   # bringup.core.atomic's first step on a new temporary
            if _is_temp(path):
                _hold(marker)
            return orig_chmod(path, *a, **kw)
        os.chmod = chmod
    elif point.startswith("commit:"):
        n = int(point.split(":")[1])

        def wrap(orig):
            def commit(src, dst, *a, **kw):
                if _is_temp(src):
                    _count["commit"] += 1
                    if _count["commit"] == n:
                        _hold(marker)
                return orig(src, dst, *a, **kw)
            return commit
        os.replace, os.rename = wrap(os.replace), wrap(os.rename)
        atomic._exchange = wrap(atomic._exchange)
    elif point != "none":
        raise SystemExit(f"pause_at: unknown point {point!r}")


if __name__ == "__main__":
    _install(sys.argv[1], sys.argv[2])
    sys.exit(main(sys.argv[3:]))
