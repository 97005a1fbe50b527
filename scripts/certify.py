"""Snakemake entry point: rule certify_model.

The reports are the evidence, pass or fail, so a failed gate (exit 6) still completes this job;
rule certify_verdict turns the verdict into the workflow's exit status.
"""
from pathlib import Path

from bringup.errors import GateError
from bringup.smk import run_stage

i, o = snakemake.input, snakemake.output
run_stage(snakemake, "certify", [
    "--model", snakemake.wildcards.model, "--results", Path(i.parity).parent.parent, "--gguf", i.gguf,
    "--out-dir", Path(o.json).parent, "--threads", snakemake.params.threads,
    "--memory-model", i.memory_model], ok_codes=(0, GateError.exit_code))
