"""Snakemake entry point: rule fetch_model."""
from bringup.core.smk import run_stage

run_stage(snakemake, "fetch", [snakemake.wildcards.model, "--out", snakemake.output.gguf,
                               "--provenance", snakemake.output.provenance])
