"""Kill at any point (issue 13, docs/hostile_input.md "Interrupts"): every stage of a small model's
pipeline (convert, ir, plan, codegen, build), run as ``bringup <stage>`` into a results folder that
already holds a complete good pipeline, is stopped mid-stage by SIGINT and by SIGKILL (sent to its
process group, as a terminal or a batch system does), and then rerun.

After each kill: no half-written file anywhere; the stage's outputs are the previous good ones
(a folder-level stage: the whole previous set, byte-identical; plan's two single files: each one
the previous or the new file, never a part); every other stage's outputs untouched; after SIGINT
no temporary is left, after SIGKILL only the dead writer's dot-named temporaries, which the rerun
removes. The rerun completes and gives the new outputs.

Where the kill lands is not left to timing: tests/pause_at.py holds the process right after its
first temporary output is created, or right before its N-th rename of a temporary; the build is
killed while gcc is writing libmodel.so. The reruns take different inputs (the same model
with other weights), so "the previous set survived" is not confused with "the same set again".
"""
from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bringup.build.program import BUILD_FILES
from bringup.core.cli import main
from bringup.core.paths import ROOT
from sigint import terminal_sigint
from tree_snapshot import snapshot
from tests.helpers.pipeline import write_tiny_gguf

CHUNK, CTX = "4", "64"


def _argv(stage: str, src: Path, dst: Path) -> list[str]:
    """``bringup`` arguments of ``stage`` reading the previous stages' outputs under ``src`` and
    writing under ``dst`` (the layout of results/{model}/)."""
    c, i, p, g = src / "convert", src / "ir", src / "plan", src / "codegen"
    return {
        "convert": ["convert", str(src / "model.gguf"), "--out-dir", str(dst / "convert")],
        "ir": ["ir", "--config", str(c / "config.json"), "--manifest", str(c / "weights_manifest.json"),
               "--out-dir", str(dst / "ir"), "--chunk", CHUNK, "--ctx", CTX],
        "plan": ["plan", "arena", "--ir-dir", str(i), "--out", str(dst / "plan" / "memory_plan.json"),
                 "--report", str(dst / "reports" / "ir_report.html")],
        "codegen": ["codegen", "--ir-dir", str(i), "--plan", str(p / "memory_plan.json"),
                    "--manifest", str(c / "weights_manifest.json"), "--out-dir", str(dst / "codegen")],
        "build": ["build", "--codegen-dir", str(g), "--out-dir", str(dst / "build"),
                  "--ir", str(i / "ir_prefill.json"), "--ir", str(i / "ir_decode.json")],
    }[stage]


# the folders each stage writes, and whether it swaps them as a whole (bringup.core.atomic.atomic_dir)
OUTPUTS = {"convert": (("convert",), True), "ir": (("ir",), True), "plan": (("plan", "reports"), False),
           "codegen": (("codegen",), True), "build": (("build",), True)}


def _pipeline(root: Path, seed: int, stages) -> Path:
    write_tiny_gguf(root / "model.gguf", seed)
    for s in stages:
        assert main(_argv(s, root, root)) == 0, s
    return root


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    """A pipeline of the tiny model (seed 0) up to codegen: the previous good outputs (the build
    test adds the build, the slow part, itself)."""
    return _pipeline(tmp_path_factory.mktemp("good"), 0, ("convert", "ir", "plan", "codegen"))


@pytest.fixture(scope="module")
def other(tmp_path_factory) -> Path:
    """The same model with other weights (seed 1) up to codegen: the reruns' inputs."""
    return _pipeline(tmp_path_factory.mktemp("other"), 1, ("convert", "ir", "plan", "codegen"))


def _temps(snap: dict) -> list[str]:
    return sorted(k for k in snap if ".tmp-" in k or k.endswith(".tmp"))


def _without_temps(snap: dict) -> dict:
    return {k: v for k, v in snap.items() if not any(".tmp-" in part or part.endswith(".tmp")
                                                     for part in Path(k).parts)}


def _part(snap: dict, folders) -> dict:
    return {k: v for k, v in snap.items() if Path(k).parts[0] in folders}


def _held_run(argv: list[str], sig: int, point: str, marker: Path, root: Path) -> tuple[int, str]:
    """Run ``bringup argv`` through tests/pause_at.py, send ``sig`` to its process group once it is
    held at ``point`` (``gcc:<name>``: once gcc's temporary for <name> exists under ``root``)."""
    hold = "none" if point.startswith("gcc:") else point
    p = subprocess.Popen([sys.executable, "-m", "tests.pause_at", hold, str(marker), *argv], cwd=ROOT,
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, start_new_session=True,
                         preexec_fn=terminal_sigint)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None:
        if point.startswith("gcc:"):
            hit = any(root.rglob(f".{point[4:]}.*.tmp"))
        else:
            hit = marker.exists()
        if hit:
            os.killpg(p.pid, sig)
            break
        time.sleep(0.01)
    _, err = p.communicate(timeout=120)
    marker.unlink(missing_ok=True)
    assert hit, f"{argv[0]} never reached {point}: exit {p.returncode}\n{err}"
    return p.returncode, err


# (signal, where): the first temporary just created; a set half-built (one file renamed into the
# temporary folder, or for plan the first of its two files in place); gcc writing libmodel.so (the
# process group is signalled, so gcc dies with it)
KILLS = {
    "convert": [(signal.SIGINT, "temp"), (signal.SIGKILL, "commit:2")],
    "ir": [(signal.SIGINT, "commit:1"), (signal.SIGKILL, "temp")],
    "plan": [(signal.SIGINT, "temp"), (signal.SIGKILL, "commit:2")],
    "codegen": [(signal.SIGINT, "commit:2"), (signal.SIGKILL, "temp")],
    "build": [(signal.SIGINT, "gcc:libmodel.so"), (signal.SIGKILL, "gcc:libmodel.so")],
}


# the build stage's run compiles a whole (tiny) model: slow
@pytest.mark.parametrize("stage", [pytest.param(s, marks=pytest.mark.slow) if s == "build" else s for s in KILLS])
def test_kill_mid_stage_keeps_the_previous_outputs_and_a_rerun_completes(stage, good, other, tmp_path):
    folders, whole = OUTPUTS[stage]
    if stage == "build":
        # the previous set: what matters is that its bytes survive, and a real build costs ~20 s
        (good / "build").mkdir()
        for n in BUILD_FILES:
            (good / "build" / n).write_text(f"previous {n}\n")
    argv = _argv(stage, other, good)
    new = _part(snapshot(other), folders)
    for sig, point in KILLS[stage]:
        before = snapshot(good)
        rc, err = _held_run(argv, sig, point, tmp_path / "held", good)
        after = snapshot(good)
        if sig == signal.SIGINT:
            assert rc == 130 and "Traceback" not in err, err
            assert err.strip().splitlines()[-1] == f"bringup {stage}: error: interrupted", err
            assert not _temps(after), f"SIGINT left temporaries: {_temps(after)}"
        else:
            assert rc == -signal.SIGKILL, err
        after = _without_temps(after)
        # every other stage's outputs are untouched
        assert {k: v for k, v in after.items() if k not in _part(after, folders)} == \
               {k: v for k, v in before.items() if k not in _part(before, folders)}
        if whole:
            assert _part(after, folders) == _part(before, folders), f"{stage} lost or mixed its previous set"
        else:
            assert _part(after, folders).keys() == _part(before, folders).keys()
            for k, v in _part(after, folders).items():
                assert v in (before[k], new.get(k)), f"{k} is neither the previous nor the new file"
    rc = main(argv)
    assert rc == 0
    done = snapshot(good)
    assert not _temps(done), f"the rerun left temporaries: {_temps(done)}"
    if stage == "build":
        prov = (good / "build" / "provenance.json").read_text()
        for n in ("libmodel.so", "bringup-run"):
            assert hashlib.sha256((good / "build" / n).read_bytes()).hexdigest() in prov
    else:
        assert _part(done, folders) == {**_part(done, folders), **new}
        assert {k for k in _part(done, folders)} == set(new), "the rerun left files of the previous set"
