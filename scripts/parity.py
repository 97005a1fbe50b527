"""Snakemake entry point: rule parity_model (content-addressed: bringup.core.smk.run_reused)."""
from bringup.core.smk import parity_argv, run_reused, run_stage

run_reused(snakemake, lambda: run_stage(snakemake, "parity", parity_argv(snakemake)))
