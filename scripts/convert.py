"""Snakemake entry point: rule convert_model."""
from pathlib import Path

from bringup.core.smk import run_stage

run_stage(snakemake, "convert", [snakemake.input.gguf, "--out-dir", Path(snakemake.output.bump).parent,
                                 "--expect-arch", snakemake.params.arch, "--verify"])
