"""Snakemake entry point: rule parity_model."""
from pathlib import Path

from bringup.core.smk import run_stage

i = snakemake.input
run_stage(snakemake, "parity", [
    "--model", snakemake.wildcards.model, "--gguf", i.gguf, "--cli", i.cli, "--lib", i.lib,
    "--weights", i.weights, "--ir", i.ir, "--profile", i.profile, "--prompts", i.prompts,
    "--threads", snakemake.params.threads, "--out-dir", Path(snakemake.output.parity).parent])
