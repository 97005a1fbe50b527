"""The regression through a real single-node Slurm (profiles/slurm, docs/slurm.md).

Brings up Debian's Slurm on this machine (profiles/slurm/local_cluster.sh: munged, slurmctld,
slurmd; root only), runs `snakemake regression` for two small generated models once locally and
once through the Slurm profile, each in its own copy of the workflow (so results/ of the checkout
is untouched), checks that every job ran as a Slurm job with its own log, and that the two
summaries agree model by model and gate by gate (speed ratios aside: they are timings). Tears
the cluster down. Needs the `slurm` extra (pip install -e '.[slurm]').
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bringup.core.paths import ROOT
from tests.test_review import _small_config

pytestmark = pytest.mark.slow

MODELS = ["qwen2_synth", "qwen3_synth"]
CLUSTER = ROOT / "profiles" / "slurm" / "local_cluster.sh"
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
#: what the copy of the workflow holds: the sources, not results/ or the package caches
SKIP = {"results", ".venv", "resources", ".snakemake", ".git", ".pytest_cache", ".hypothesis", "bringup.egg-info"}


def _need_slurm() -> None:
    if os.geteuid() != 0:
        pytest.skip("the local Slurm runs its daemons as root")
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        pytest.skip("the Slurm executor plugin is not installed: pip install -e '.[slurm]'")
    if not shutil.which("slurmctld") and not Path("/usr/sbin/slurmctld").exists():
        r = subprocess.run(["sh", str(CLUSTER), "install"], capture_output=True, text=True, timeout=1800)
        assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    _need_slurm()
    d = tmp_path_factory.mktemp("slurm")
    r = subprocess.run(["sh", str(CLUSTER), "up", str(d)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    try:
        yield d
    finally:
        subprocess.run(["sh", str(CLUSTER), "down", str(d)], capture_output=True, timeout=120)


def _workflow_copy(dst: Path) -> Path:
    """A copy of the workflow under the small config of tests/test_review.py (one prompt, ctx
    256): the check is about where jobs run, not about the prompt set, and the full set made one
    local run of two generated models take over an hour on 2 loaded cores."""
    shutil.copytree(ROOT, dst, ignore=lambda d, names: [n for n in names if Path(d) == ROOT and n in SKIP])
    _small_config(dst)
    (dst / ".venv").symlink_to(ROOT / ".venv")
    (dst / "resources").mkdir()
    for sub in ("sdist", "pypi"):  # pinned package caches (llama.cpp's vocabularies), read only
        if (ROOT / "resources" / sub).is_dir():
            (dst / "resources" / sub).symlink_to(ROOT / "resources" / sub)
    return dst


def _regression(wd: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(wd)}  # the copy's bringup, with its own ROOT
    return subprocess.run([SNAKEMAKE, "regression", "--config", f"regression={{models: [{', '.join(MODELS)}]}}", *extra],
                          capture_output=True, text=True, cwd=wd, env=env, timeout=5400)


def _gates(summary: dict) -> dict:
    """model -> (status, {gate id: (passed, measured)}) without the timed gates."""
    out = {}
    for m in summary["models"]:
        gates = {gid: (g["passed"], g["measured"]) for gid, g in m["gates"].items() if "speed" not in gid}
        out[m["model"]] = (m["status"], gates)
    return out


def test_regression_through_slurm_matches_the_local_run(cluster, tmp_path):
    local = _workflow_copy(tmp_path / "local")
    r = _regression(local, "--cores", "2")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]

    on_slurm = _workflow_copy(tmp_path / "slurm")
    r = _regression(on_slurm, "--workflow-profile", "profiles/slurm", "--slurm-status-command", "squeue",
                    "--slurm-no-account", "--slurm-init-seconds-before-status-checks", "10")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-5000:]
    # every job went through sbatch, and each has its own Slurm log
    submitted = [ln for ln in out.splitlines() if "has been submitted with SLURM jobid" in ln]
    logs = sorted((on_slurm / "results" / "slurm_logs").rglob("*.log"))
    assert len(submitted) >= 10 * len(MODELS) and len(logs) == len(submitted), (len(submitted), len(logs))
    q = subprocess.run(["squeue", "--states=all", "--noheader", "--format=%i|%T"], capture_output=True, text=True)
    states = dict(ln.split("|") for ln in q.stdout.split())
    ids = [ln.split("SLURM jobid ")[1].split()[0] for ln in submitted]
    assert all(states.get(i) == "COMPLETED" for i in ids), {i: states.get(i) for i in ids}

    got = json.loads((on_slurm / "results/regression/summary.json").read_text())
    want = json.loads((local / "results/regression/summary.json").read_text())
    assert _gates(got) == _gates(want)
