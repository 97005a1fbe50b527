"""Who made a result and when: the project version, its git commit and a UTC timestamp.

Certifications and regression history lines carry this stamp in one separate field (``issued``),
so every other field stays byte-identical for the same inputs.
"""
from __future__ import annotations

import datetime as dt
import importlib.metadata
import subprocess
from pathlib import Path

from bringup.core.paths import ROOT


def version() -> str:
    """The installed bringup distribution's version (pyproject.toml ``version``). Read from the
    package metadata, not ``bringup.__version__``, so it holds wherever ``bringup`` is imported from."""
    return importlib.metadata.version("bringup")


def git_commit(root: Path = ROOT) -> dict:
    """The project's commit: ``{"sha": 40-hex or "unknown", "dirty": bool}``. ``dirty``: a tracked
    file differs from the commit or a file git does not ignore is untracked (a new source), so the
    sha alone does not reproduce the run. ``unknown`` when git or the repository is unavailable."""
    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain")
    return {"sha": sha or "unknown", "dirty": bool(status) or sha is None}


def utc_now(now: dt.datetime | None = None) -> str:
    """ISO 8601 UTC timestamp to the second (``2026-12-01T15:30:00+00:00``) of ``now`` (default: now)."""
    return (now or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc).isoformat(timespec="seconds")


def issued(now: dt.datetime | None = None, commit: dict | None = None) -> dict:
    """The stamp of a result made now: ``{"bringup_version", "commit": {"sha", "dirty"},
    "timestamp"}`` (timestamp: :func:`utc_now`; commit: :func:`git_commit` unless given)."""
    return {"bringup_version": version(), "commit": commit or git_commit(), "timestamp": utc_now(now)}
