"""Snakemake entry point: rule codegen_model."""
from pathlib import Path

from bringup.core.smk import run_stage

run_stage(snakemake, "codegen", [
    "--ir-dir", Path(snakemake.input.prefill).parent, "--plan", snakemake.input.plan,
    "--manifest", snakemake.input.manifest, "--out-dir", Path(snakemake.output.c).parent])
