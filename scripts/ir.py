"""Snakemake entry point: rule ir_model."""
from pathlib import Path

from bringup.core.smk import run_stage

run_stage(snakemake, "ir", [
    "--config", snakemake.input.config, "--manifest", snakemake.input.manifest,
    "--out-dir", Path(snakemake.output.prefill).parent,
    "--chunk", snakemake.params.chunk, "--ctx", snakemake.params.ctx, "--kv-type", snakemake.params.kv_type])
