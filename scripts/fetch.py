"""Snakemake entry point: rule fetch_model."""
from bringup.core.smk import run_stage

# --registry: the workflow's configured registry (--config registry=...), the one its params pin
run_stage(snakemake, "fetch", [snakemake.wildcards.model, "--registry", snakemake.config["registry"],
                               "--out", snakemake.output.gguf, "--provenance", snakemake.output.provenance])
