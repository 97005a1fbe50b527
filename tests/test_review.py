"""The reviewer's recipe (docs/regression.md, "Reviewing evidence"): a fresh clone with a copied
results folder, `bringup verify-results --touch`, then `snakemake -n certify` has nothing to do;
a changed input fails the check and nothing is touched.

The results are those of a small generated model (mistral3_synth, 2 layers) under a small
workflow config (one prompt, a profile that accepts it, ctx 256), made by the stage commands with
the arguments the rules' scripts pass (in one process: the workflow's per-job start-up would
take minutes here); certify times nothing (its speed section cites the bench).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from bringup.core.cli import main
from bringup.core.hashing import sha256_file
from bringup.core.paths import ROOT
from tests.clone import clone_checkout

MODEL = "mistral3_synth"
PROMPTS = {"schema_version": 1, "name": "review", "prompts": [
    {"id": "prose", "kind": "prose", "text": "The lighthouse keeper climbed the stairs"}]}


def _small_config(clone: Path) -> None:
    """One prompt, a profile that accepts it (config parity.profiles_dir), ctx 256."""
    prof = json.loads((clone / "config/parity_profiles/default.json").read_text())
    prof.update(prompt_set="config/prompts/review.json", min_prompts=1, min_positions=1,
                greedy={"max_tokens": 8, "min_prefix": 1})
    (clone / "config/parity_profiles_review").mkdir()
    (clone / "config/parity_profiles_review/default.json").write_text(json.dumps(prof, indent=2))
    (clone / "config/prompts/review.json").write_text(json.dumps(PROMPTS, indent=2))
    cfg = (clone / "config/config.yaml").read_text()
    for old, new in (("prompts: config/prompts/default.json", "prompts: config/prompts/review.json"),
                     ("profiles_dir: config/parity_profiles", "profiles_dir: config/parity_profiles_review"),
                     ("ctx: 2048", "ctx: 256")):
        assert old in cfg
        cfg = cfg.replace(old, new)
    (clone / "config/config.yaml").write_text(cfg)


def produce(model: str = MODEL, until: str | None = None) -> None:
    """Run every job of `snakemake certify` for ``model`` in this checkout (cwd), in-process,
    with the arguments of scripts/*.py under config/config.yaml; with ``until`` (a command name,
    e.g. "build"), stop after that command's first step and write no verdict marker."""
    cfg = yaml.safe_load(Path("config/config.yaml").read_text())
    r, g = f"results/{model}", f"resources/models/{model}.gguf"
    ctx, chunk, th, mem = str(cfg["ctx"]), str(cfg["prefill_chunk"]), str(cfg["threads"]), cfg["memory"]
    steps = [
        ["fetch", model, "--registry", cfg["registry"], "--out", g, "--provenance", f"{r}/fetch/provenance.json"],
        ["convert", g, "--out-dir", f"{r}/convert", "--expect-arch", "mistral3", "--verify"],
        ["ir", "--config", f"{r}/convert/config.json", "--manifest", f"{r}/convert/weights_manifest.json",
         "--out-dir", f"{r}/ir", "--chunk", chunk, "--ctx", ctx, "--kv-type", mem["kv_dtype"]],
        ["plan", "arena", "--ir-dir", f"{r}/ir", "--out", f"{r}/plan/memory_plan.json",
         "--report", f"{r}/reports/ir_report.html"],
        ["codegen", "--ir-dir", f"{r}/ir", "--plan", f"{r}/plan/memory_plan.json",
         "--manifest", f"{r}/convert/weights_manifest.json", "--out-dir", f"{r}/codegen"],
        ["build", "--codegen-dir", f"{r}/codegen", "--out-dir", f"{r}/build", "--ir", f"{r}/ir/ir_prefill.json",
         "--ir", f"{r}/ir/ir_decode.json"],
        ["plan", "memory", "--gguf", g, "--ctx", "128", "--seqs", "1", "--kv-dtype", mem["kv_dtype"], "--chunk", chunk,
         "--memory-plan", f"{r}/plan/memory_plan.json", "--bringup-run", f"{r}/build/bringup-run",
         "--libmodel", f"{r}/build/libmodel.so", "--weights", f"{r}/convert/weights.bump",
         "--calibrate", f"{r}/plan/runtime_calibration.json"],
        ["plan", "memory", "--gguf", g, "--ctx", ctx, "--seqs", str(mem["seqs"]), "--kv-dtype", mem["kv_dtype"],
         "--chunk", chunk, "--device", mem["device"], "--devices", "config/devices.yaml",
         "--memory-plan", f"{r}/plan/memory_plan.json", "--ir-dir", f"{r}/ir",
         "--out", f"{r}/plan/memory_model_calibrated.json", "--md", f"{r}/plan/memory_model_calibrated.md",
         "--calibration", f"{r}/plan/runtime_calibration.json"],
        ["parity", "--model", model, "--gguf", g, "--cli", f"{r}/build/bringup-run", "--lib", f"{r}/build/libmodel.so",
         "--weights", f"{r}/convert/weights.bump", "--ir", f"{r}/ir/ir_prefill.json",
         "--profile", f"{cfg['parity']['profiles_dir']}/default.json", "--prompts", cfg["parity"]["prompts"],
         "--threads", th, "--out-dir", f"{r}/parity"],
        ["certify", "--model", model, "--results", r, "--gguf", g, "--out-dir", f"{r}/certify", "--threads", th,
         "--memory-model", f"{r}/plan/memory_model_calibrated.json",
         "--standalone-tokens", "8"],
    ]
    for argv in steps:
        assert main(argv) == 0, argv
        if argv[0] == until:
            return
    Path(f"{r}/certify/PASSED").write_text(f"pass {sha256_file(f'{r}/certify/certification.json')}\n")


def ensure_synth_gguf(model: str, scratch: Path) -> Path:
    """resources/models/<model>.gguf of this checkout, generated by `bringup fetch` when absent
    (deterministic: the generator is pinned), so no test skips for want of it."""
    gguf = ROOT / "resources" / "models" / f"{model}.gguf"
    if not gguf.is_file():
        assert main(["fetch", model, "--registry", str(ROOT / "config" / "models.yaml"), "--out", str(gguf),
                     "--provenance", str(scratch / "provenance.json")]) == 0
    return gguf


def _run(clone: Path, *argv: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), cwd=clone, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(clone)})


def _planned(clone: Path) -> str:
    r = _run(clone, str(Path(sys.executable).parent / "snakemake"), "-n", "certify", "--config", f"model={MODEL}")
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout + r.stderr


@pytest.fixture(scope="module")
def reviewed_clone(tmp_path_factory) -> Path:
    """A fresh clone whose results/ folder was copied in with its original (older) times."""
    gguf = ensure_synth_gguf(MODEL, tmp_path_factory.mktemp("fetch"))
    clone = clone_checkout(tmp_path_factory.mktemp("review") / "clone")
    _small_config(clone)
    (clone / "resources" / "models").mkdir(parents=True)
    shutil.copy2(gguf, clone / "resources" / "models")
    r = _run(clone, sys.executable, "-c", "from tests.test_review import produce; produce()", timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    # as a copy made with `cp -p` or from an archive: results older than every file of the clone
    old = time.time() - 86400
    for p in [*(clone / "results").rglob("*"), *(clone / "resources").rglob("*")]:
        os.utime(p, (old, old), follow_symlinks=False)
    return clone


def test_verified_results_are_up_to_date_for_snakemake(reviewed_clone):
    clone = reviewed_clone
    assert "Nothing to be done" not in _planned(clone)   # the problem: every job would rerun
    r = _run(clone, sys.executable, "-m", "bringup", "verify-results", "--model", MODEL, "--touch")
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
    r = _run(clone, sys.executable, "-m", "bringup", "verify-results", "--model", MODEL, "--touch", "--no-rerun")
    assert r.returncode == 3, (r.stdout + r.stderr)[-3000:]
    assert "DIFF  parity: prompt set" in r.stdout and "nothing was touched" in r.stderr
    assert passed.stat().st_mtime_ns == before   # not touched: Snakemake still sees the change
