"""Snakemake entry point: rule calibrate_memory."""
from bringup.smk import run_stage

i, p = snakemake.input, snakemake.params
run_stage(snakemake, "plan-memory", [
    "--gguf", i.gguf, "--ctx", p.ctx, "--seqs", 1, "--kv-dtype", p.kv_dtype, "--chunk", p.chunk,
    "--memory-plan", i.plan, "--bringup-run", i.cli, "--libmodel", i.lib, "--weights", i.weights,
    "--calibrate", snakemake.output[0]])
