"""Snakemake entry point: rule build_model."""
from pathlib import Path

from bringup.core.smk import run_stage

i = snakemake.input
run_stage(snakemake, "build", ["--codegen-dir", Path(i.c).parent, "--out-dir", Path(snakemake.output.lib).parent,
                               "--ir", i.prefill, "--ir", i.decode])
