"""Snakemake entry point: rule ir_model."""
from pathlib import Path

from bringup.smk import run_stage

run_stage(snakemake, "compile", [
    "--config", snakemake.input.config, "--manifest", snakemake.input.manifest,
    "--out-dir", Path(snakemake.output.prefill).parent,
    "--chunk", snakemake.params.chunk, "--ctx", snakemake.params.ctx])
