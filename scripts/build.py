"""Snakemake entry point: rule build_model."""
from pathlib import Path

from bringup.core.smk import run_stage

run_stage(snakemake, "build", ["--codegen-dir", Path(snakemake.input.c).parent,
                               "--out-dir", Path(snakemake.output.lib).parent])
