"""A scratch copy of the workflow in which every output exists and is up to date, and what
`snakemake -n` then plans: shared by tests/test_build_inputs.py (C sources are build inputs) and
tests/test_code_inputs.py (a stage's Python code is its jobs' input)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bringup.core.paths import ROOT

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")


def _ir(path: Path, providers: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # the providers as header ops of an IR with no layers (what build_inputs reads: every op's provider)
    ops = [{"index": i, "id": f"op{i}", "provider": p} for i, p in enumerate(providers)]
    path.write_text(json.dumps({"header": ops, "block": {"n_layer": 0, "ops": [], "layers": []}, "footer": []}))


#: What the dry run plans: (rule, model or None) pairs.
JOB = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):\n(?:    .*\n)*?    wildcards: model=(\w+)", re.M)


def _config(models: tuple[str, ...]) -> list[str]:
    return ["--config", f"regression={{models: [{', '.join(models)}]}}", f"model={models[0]}"]


def _jobs(wf: Path, models: tuple[str, ...], target: str = "regression") -> set[tuple[str, str]]:
    """(rule, model) of every job `snakemake -n target` plans for ``models``."""
    out = subprocess.run([SNAKEMAKE, "-n", target, *_config(models)],
                         capture_output=True, text=True, cwd=wf, timeout=1800)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout + out.stderr
    return {(m[1], m[2]) for m in JOB.finditer(text)} | ({("nothing", "")} if "Nothing to be done" in text else set())


def _outputs(wf: Path, models: tuple[str, ...], target: str = "regression") -> list[str]:
    r = subprocess.run([SNAKEMAKE, "-n", "--forceall", target, *_config(models)],
                       capture_output=True, text=True, cwd=wf, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return sorted({o.strip() for line in re.findall(r"^    output: (.*)$", r.stdout, re.M) for o in line.split(",")})


def scratch_workflow(tmp_path: Path, irs: dict[str, list[str]], target: str = "regression") -> Path:
    """A scratch copy of the workflow (and of bringup/, whose modules are the jobs' code inputs)
    where every output of the DAG of ``target`` for the models of ``irs`` (model -> the providers
    its IR uses) exists and is newer than every source: `snakemake -n` has nothing to do."""
    models = tuple(irs)
    wf = tmp_path / "wf"
    for d in ("rules", "scripts", "config", "reports", "profiles", "envs", "csrc", "kernel_maps", "circuits",
              "tensor_maps", "bringup"):
        shutil.copytree(ROOT / d, wf / d, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("Snakefile", "environment.yml"):
        shutil.copy(ROOT / name, wf / name)
    for m, provs in irs.items():
        for ph in ("prefill", "decode"):
            _ir(wf / "results" / m / "ir" / f"ir_{ph}.json", provs)
    outputs = _outputs(wf, models, target)
    old, new = time.time() - 3600, time.time() - 60
    for p in wf.rglob("*"):
        if p.is_file():
            os.utime(p, (old, old))
    for o in outputs:
        p = wf / o
        p.parent.mkdir(parents=True, exist_ok=True)
        if not p.exists():
            # the memory model sizes the model-running jobs' memory requests (rules/common.smk:
            # the footprint, and for parity the vocabulary)
            p.write_text('{"total_bytes": 1, "model": {"hparams": {"n_vocab": 1}}}\n'
                         if p.name.startswith("memory_model") else "{}\n")
        os.utime(p, (new, new))
    assert _jobs(wf, models, target) == {("nothing", "")}
    return wf


def edit(path: Path, text: str = "\n# edited\n") -> None:
    """Append ``text`` to ``path`` (so it is newer than every output)."""
    path.write_text(path.read_text() + text)
