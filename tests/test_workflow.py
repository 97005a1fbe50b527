"""The Snakemake DAG: lint, a stage target per model, and a second run that has nothing to do."""
import subprocess
import sys
from pathlib import Path

import pytest

from bringup.paths import ROOT

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")


def _smk(*args, timeout=1800):
    return subprocess.run([SNAKEMAKE, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def test_lint_passes():
    r = _smk("--lint")
    assert r.returncode == 0, r.stdout + r.stderr


def test_config_is_schema_validated():
    r = _smk("convert", "--config", "model=Bad Name", "-n")
    assert r.returncode != 0 and "model" in (r.stdout + r.stderr)


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_convert_target_then_nothing_to_do(model):
    r = _smk("convert", "--config", f"model={model}")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = ROOT / "results" / model / "convert"
    for f in ("weights.bump", "weights_manifest.json", "config.json", "tokenizer.json"):
        assert (out / f).stat().st_size > 0
    again = _smk("convert", "--config", f"model={model}", "-n")
    assert again.returncode == 0
    assert "Nothing to be done" in again.stdout + again.stderr
