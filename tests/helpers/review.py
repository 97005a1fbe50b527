"""A small generated model certified the way the workflow does it, in one process: the stage
commands with the arguments the rules' scripts pass, under a small workflow config (one prompt, a
profile that accepts it, ctx 256). Used in fresh clones by test_review and test_interrupts_workflow
(``python -c "from tests.helpers.review import produce; produce()"``)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml

from bringup.core.cli import main
from bringup.core.hashing import sha256_file
from bringup.core.paths import ROOT

MODEL = "mistral3_synth"

PROMPTS = {"schema_version": 1, "name": "review", "prompts": [
    {"id": "prose", "kind": "prose", "text": "The lighthouse keeper climbed the stairs"}]}

def small_config(clone: Path) -> None:
    """One prompt, a profile that accepts it (config parity.profiles_dir), ctx 256."""
    prof = json.loads((clone / "config/parity_profiles/default.json").read_text())
    prof.update(prompt_set="config/prompts/review.json", min_prompts=1, min_positions=1,
                greedy={"max_tokens": 8, "min_prefix": 1})
    (clone / "config/parity_profiles_review").mkdir()
    (clone / "config/parity_profiles_review/default.json").write_text(json.dumps(prof, indent=2))
    (clone / "config/prompts/review.json").write_text(json.dumps(PROMPTS, indent=2))
    cfg = (clone / "config/config.yaml").read_text()
    for old, new in (("prompts: full", "prompts: config/prompts/review.json"),
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


def run_in(clone: Path, *argv: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``argv`` in the clone with the clone's bringup first on the path."""
    return subprocess.run(list(argv), cwd=clone, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(clone)})
