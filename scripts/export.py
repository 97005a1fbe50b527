"""Snakemake entry point of the export stage: rule export_model (`bringup export`)."""
from pathlib import Path

from bringup.core.smk import run_stage

i, o, p = snakemake.input, snakemake.output, snakemake.params
run_stage(snakemake, "export", [
    "--model", snakemake.wildcards.model, "--results", Path(i.certification).parent.parent,
    "--out-dir", Path(o.tar).parent, "--memory-model", i.memory_model, "--registry", p.registry,
    "--threads", p.threads, "--name", p.name])
