"""Snakemake entry point: rule certify_model."""
from pathlib import Path

from bringup.smk import run_stage

i = snakemake.input
run_stage(snakemake, "certify", [
    "--model", snakemake.wildcards.model, "--results", Path(i.parity).parent.parent, "--gguf", i.gguf,
    "--out-dir", Path(snakemake.output.json).parent, "--threads", snakemake.params.threads,
    "--memory-model", i.memory_model])
