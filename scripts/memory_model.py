"""Snakemake entry point: rule memory_model."""
from bringup.smk import run_stage

p = snakemake.params
run_stage(snakemake, "plan-memory", [
    "--gguf", snakemake.input.gguf, "--ctx", p.ctx, "--seqs", p.seqs, "--kv-dtype", p.kv_dtype,
    "--chunk", p.chunk, "--device", p.device, "--devices", snakemake.input.devices,
    "--memory-plan", snakemake.input.plan, "--out", snakemake.output.json, "--md", snakemake.output.md])
