"""A fresh clone of this checkout for workflow tests: ``git clone`` plus the working tree's
uncommitted changes and new files, so the clone runs the code under test."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from bringup.core.paths import ROOT


def _git(*args: str, cwd: Path = ROOT, stdin: bytes | None = None) -> bytes:
    return subprocess.run(["git", "-C", str(cwd), *args], input=stdin, capture_output=True, check=True,
                          timeout=300).stdout


def clone_checkout(dest: Path) -> Path:
    """Clone ROOT into ``dest`` (a new folder), then apply the uncommitted changes and copy the
    untracked, not ignored files. Returns ``dest``."""
    subprocess.run(["git", "clone", "-q", str(ROOT), str(dest)], check=True, timeout=300)
    diff = _git("diff", "HEAD", "--binary")
    if diff.strip():
        _git("apply", "--whitespace=nowarn", cwd=dest, stdin=diff)
    for name in _git("ls-files", "--others", "--exclude-standard", "-z").decode().split("\0"):
        if name:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest
