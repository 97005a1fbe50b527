"""Headless chromium for the tests that open our pages in a real browser (Debian's chromium;
`bash bootstrap.sh --test` installs it): the executable as a session fixture, and one way to run
it. Registered in tests/conftest.py ``pytest_plugins``."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

#: No network, no first-run work, no background services; a virtual time budget lets the pages'
#: scripts finish before the DOM is dumped or the screenshot taken.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--hide-scrollbars",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--virtual-time-budget=10000"]


@pytest.fixture(scope="session")
def browser_chromium() -> str:
    """The chromium executable; its absence fails the test (not a skip: the suite's setup provides it)."""
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("chromium not found: run `bash bootstrap.sh --test` (installs Debian's chromium)")
    return exe


def run_chromium(exe: str, profile: Path, *args: str, width: int = 1400, height: int = 1000) -> str:
    """Run ``exe`` headless at ``width`` x ``height`` with its profile in ``profile``; returns its
    stdout (``--dump-dom``'s DOM). Fails the test on a non-zero exit."""
    r = subprocess.run([exe, *FLAGS, f"--window-size={width},{height}", f"--user-data-dir={profile}", *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout
