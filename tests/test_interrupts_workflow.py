"""Kill `snakemake certify` in every stage, then rerun: nothing partial, and the same artifacts.

A fresh clone under a small workflow config (tests/test_review.py: one prompt, ctx 256) certifies
a small generated model. The workflow is started again and again; each time it is killed as soon
as the next stage's job has started (SIGINT and SIGKILL in turn, to the whole process group, as a
terminal's Ctrl-C or an out-of-memory killer would), until a last run completes. After every kill
each stage's outputs are a whole set or absent (and after SIGINT no temporary is left); after the
last run no temporary is left anywhere and every deterministic artifact (convert, IR, plan,
generated C, binaries) is byte-identical to an uninterrupted run of the same stages in the same
clone. A killed run's lock is cleared with `snakemake --unlock` and its half-run job redone with
`--rerun-incomplete`, the documented recovery (docs/hostile_input.md).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bringup.core.hashing import sha256_file
from tests.clone import clone_checkout
from tests.sigint import terminal_sigint
from tests.helpers.review import MODEL, ensure_synth_gguf, small_config

pytestmark = pytest.mark.slow   # runs `snakemake certify` again and again in a fresh clone

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
#: the jobs of `snakemake certify` in DAG order, each killed once just after it starts
JOBS = ["convert_model", "ir_model", "plan_model", "codegen_model", "build_model", "parity_model", "certify_model"]
#: each stage's output set under results/<model>/ (all or none)
SETS = {
    "convert": ["weights.bump", "weights_manifest.json", "config.json", "tokenizer.json"],
    "ir": ["ir_prefill.json", "ir_decode.json"],
    "codegen": ["model.c", "model.h"],
    "build": ["libmodel.so", "bringup-run", "provenance.json"],
    "certify": ["certification.json", "certification.md", "certification.html"],
}
#: byte-identical to an uninterrupted run (no timings, no paths)
DETERMINISTIC = [f"convert/{f}" for f in SETS["convert"]] + [f"ir/{f}" for f in SETS["ir"]] + [
    "plan/memory_plan.json", "codegen/model.c", "codegen/model.h", "build/libmodel.so", "build/bringup-run"]
TEMPORARY = re.compile(r"(\.tmp-|\.tmp$)")


def _env(clone: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(clone)}


def _snakemake(clone: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen([SNAKEMAKE, "certify", "-c2", "--rerun-incomplete", "--config", f"model={MODEL}"],
                            cwd=clone, env=_env(clone), stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=terminal_sigint)


def _wait_for_job(proc: subprocess.Popen, log: Path, job: str, timeout: float = 900) -> None:
    started = re.compile(rf"^(?:local)?(?:rule|checkpoint) {job}:", re.M)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if started.search(log.read_text(errors="replace")):
            return
        assert proc.poll() is None, f"snakemake ended before {job} started:\n" + log.read_text()[-3000:]
        time.sleep(0.05)
    raise AssertionError(f"{job} did not start within {timeout} s:\n" + log.read_text()[-3000:])


def _temporaries(results: Path) -> list[Path]:
    return [p for p in results.rglob("*") if TEMPORARY.search(p.name)]


def _check_whole_sets(results: Path) -> None:
    for stage, names in SETS.items():
        present = [n for n in names if (results / stage / n).exists()]
        assert present in ([], names), f"{stage}: a partial set {present}"
    for p in results.rglob("*.json"):
        if not TEMPORARY.search(p.name):
            json.loads(p.read_text())      # every JSON that exists is whole
    parity = results / "parity"
    if (parity / "parity.json").exists():  # the plot is written first, then the JSON
        assert (parity / "parity_kl.png").exists()


def test_killing_snakemake_certify_in_every_stage_loses_nothing(tmp_path):
    clone = clone_checkout(tmp_path / "clone")
    small_config(clone)
    (clone / "resources" / "models").mkdir(parents=True)
    shutil.copy2(ensure_synth_gguf(MODEL, tmp_path), clone / "resources" / "models")
    results = clone / "results" / MODEL
    log = tmp_path / "snakemake.log"

    for i, job in enumerate(JOBS):
        sig = signal.SIGINT if i % 2 == 0 else signal.SIGKILL
        proc = _snakemake(clone, log)
        _wait_for_job(proc, log, job)
        time.sleep(1.0)                    # into the job's work (its Python or compiler is running)
        os.killpg(proc.pid, sig)           # its own session: Snakemake and every job process
        proc.wait(timeout=300)
        if sig == signal.SIGKILL:
            # the job's own processes were in the group too; the lock outlives a killed Snakemake
            r = subprocess.run([SNAKEMAKE, "--unlock", "--config", f"model={MODEL}"], cwd=clone, env=_env(clone),
                               capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, r.stderr[-2000:]
        else:
            assert not _temporaries(results), _temporaries(results)
        _check_whole_sets(results)

    proc = _snakemake(clone, log)
    assert proc.wait(timeout=1800) == 0, log.read_text()[-3000:]
    assert not _temporaries(results), _temporaries(results)
    _check_whole_sets(results)
    assert (results / "certify" / "PASSED").exists()
    interrupted = {f: sha256_file(results / f) for f in DETERMINISTIC}

    # the same stages, uninterrupted, in the same clone (same paths, same compiler)
    results.rename(clone / "results" / "interrupted")
    r = subprocess.run([sys.executable, "-c", "from tests.helpers.review import produce; produce(until='build')"],
                       cwd=clone, env=_env(clone), capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert {f: sha256_file(results / f) for f in DETERMINISTIC} == interrupted
