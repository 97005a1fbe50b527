"""bringup.core.stamp: the version, git commit (and whether the tree is dirty) and UTC time that
certifications and regression history lines carry."""
from __future__ import annotations

import datetime as dt
import subprocess

from bringup import __version__
from bringup.core import stamp


def _git(d, *args):
    subprocess.run(["git", "-C", str(d), *args], check=True, capture_output=True,
                   env={"PATH": "/usr/bin:/bin", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(d)})


def test_commit_is_clean_then_dirty_for_an_edit_and_for_a_new_file(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.c").write_text("int a;\n")
    _git(tmp_path, "add", "a.c")
    _git(tmp_path, "commit", "-q", "-m", "one")
    c = stamp.git_commit(tmp_path)
    assert len(c["sha"]) == 40 and c["dirty"] is False
    (tmp_path / "b.c").write_text("int b;\n")          # an untracked source the build could compile
    assert stamp.git_commit(tmp_path) == {"sha": c["sha"], "dirty": True}
    (tmp_path / "b.c").unlink()
    (tmp_path / "a.c").write_text("int a2;\n")
    assert stamp.git_commit(tmp_path)["dirty"] is True


def test_outside_a_repository_the_commit_is_unknown_and_dirty(tmp_path):
    assert stamp.git_commit(tmp_path) == {"sha": "unknown", "dirty": True}


def test_issued_is_utc_to_the_second():
    t = dt.datetime(2026, 12, 1, 17, 30, 5, 123, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    s = stamp.issued(t, commit={"sha": "f" * 40, "dirty": False})
    assert s == {"bringup_version": __version__, "commit": {"sha": "f" * 40, "dirty": False},
                 "timestamp": "2026-12-01T15:30:05+00:00"}
