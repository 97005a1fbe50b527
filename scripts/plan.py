"""Snakemake entry point: rule plan_model."""
from pathlib import Path

from bringup.smk import run_stage

run_stage(snakemake, "plan", ["--ir-dir", Path(snakemake.input.prefill).parent,
                              "--out", snakemake.output.plan, "--report", snakemake.output.report])
