"""Snakemake entry point: rule parity_model."""
from bringup.core.smk import parity_argv, run_stage

run_stage(snakemake, "parity", parity_argv(snakemake))
