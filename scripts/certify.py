"""Snakemake entry point: rule certify_model.

A failed gate is a failed job (bringup certify exits 6), and Snakemake removes a failed job's
outputs; the evidence is kept by copying the reports to certify/failed/ first (not an output).
"""
import shutil
from pathlib import Path

from bringup.smk import run_stage

i, o = snakemake.input, snakemake.output
out_dir = Path(o.json).parent
try:
    run_stage(snakemake, "certify", [
        "--model", snakemake.wildcards.model, "--results", Path(i.parity).parent.parent, "--gguf", i.gguf,
        "--out-dir", out_dir, "--threads", snakemake.params.threads, "--memory-model", i.memory_model])
except SystemExit:
    kept = out_dir / "failed"
    reports = [Path(p) for p in (o.json, o.md, o.html) if Path(p).exists()]
    if reports:
        kept.mkdir(parents=True, exist_ok=True)
        for p in reports:
            shutil.copy2(p, kept / p.name)
        print(f"certification failed; the reports are kept in {kept}/", flush=True)
    raise
