"""The reviewer's recipe (docs/regression.md, "Reviewing evidence"): a fresh clone with a copied
results folder, `bringup verify-results --touch`, then `snakemake -n certify` has nothing to do;
a changed input fails the check and nothing is touched.

The results are those of a small generated model (mistral3_synth, 2 layers) under a small
workflow config (one prompt, a profile that accepts it, ctx 256), made by the stage commands with
the arguments the rules' scripts pass (in one process: the workflow's per-job start-up would
take minutes here); certify times nothing (its speed section cites the bench).
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from tests.clone import clone_checkout
from tests.helpers.review import MODEL, ensure_synth_gguf, run_in, small_config

pytestmark = pytest.mark.slow   # certifies a generated model (parity included) in a fresh clone


def _planned(clone: Path) -> str:
    r = run_in(clone, str(Path(sys.executable).parent / "snakemake"), "-n", "certify", "--config", f"model={MODEL}")
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout + r.stderr


@pytest.fixture(scope="module")
def reviewed_clone(tmp_path_factory) -> Path:
    """A fresh clone whose results/ folder was copied in with its original (older) times."""
    gguf = ensure_synth_gguf(MODEL, tmp_path_factory.mktemp("fetch"))
    clone = clone_checkout(tmp_path_factory.mktemp("review") / "clone")
    small_config(clone)
    (clone / "resources" / "models").mkdir(parents=True)
    shutil.copy2(gguf, clone / "resources" / "models")
    r = run_in(clone, sys.executable, "-c", "from tests.helpers.review import produce; produce()", timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    # as a copy made with `cp -p` or from an archive: results older than every file of the clone
    old = time.time() - 86400
    for p in [*(clone / "results").rglob("*"), *(clone / "resources").rglob("*")]:
        os.utime(p, (old, old), follow_symlinks=False)
    return clone


def test_verified_results_are_up_to_date_for_snakemake(reviewed_clone):
    clone = reviewed_clone
    assert "Nothing to be done" not in _planned(clone)   # the problem: every job would rerun
    r = run_in(clone, sys.executable, "-m", "bringup", "verify-results", "--model", MODEL, "--touch")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "DIFF" not in r.stdout and "all " in r.stdout and "nothing to be done" in r.stdout
    for check in ("GGUF sha256 = registry pin", "ir: both phases", "codegen: model.c", "parity: prompt set",
                  "certify: the pages", "rerun: 8 recorded tokens"):
        assert f"ok    {check}" in r.stdout, check
    # every stage's code is this clone's (code is an input: the touch makes the code inputs older too)
    assert "ok    code: parity (" in r.stdout and "ok    code: parity.json written by this parity code" in r.stdout
    # verify-results --touch ends with `snakemake -n certify` and fails unless it has nothing to do
    assert r.stdout.rstrip().endswith("snakemake -n certify: nothing to be done")


def test_a_changed_input_fails_the_review_and_touches_nothing(reviewed_clone):
    clone = reviewed_clone
    prompts = clone / "config/prompts/review.json"
    prompts.write_text(prompts.read_text().replace("stairs", "stairs slowly"))
    passed = clone / f"results/{MODEL}/certify/PASSED"
    before = passed.stat().st_mtime_ns
    r = run_in(clone, sys.executable, "-m", "bringup", "verify-results", "--model", MODEL, "--touch", "--no-rerun")
    assert r.returncode == 3, (r.stdout + r.stderr)[-3000:]
    assert "DIFF  parity: prompt set" in r.stdout and "nothing was touched" in r.stderr
    assert passed.stat().st_mtime_ns == before   # not touched: Snakemake still sees the change
