"""Snakemake entry point: rules memory_model and memory_model_calibrated."""
from pathlib import Path

from bringup.smk import run_stage

i, p = snakemake.input, snakemake.params
argv = ["--gguf", i.gguf, "--ctx", p.ctx, "--seqs", p.seqs, "--kv-dtype", p.kv_dtype,
        "--chunk", p.chunk, "--device", p.device, "--devices", i.devices,
        "--memory-plan", i.plan, "--ir-dir", Path(i.plan).parent.parent / "ir",
        "--out", snakemake.output.json, "--md", snakemake.output.md]
if "calibration" in i.keys():
    argv += ["--calibration", i.calibration]
run_stage(snakemake, "plan-memory", argv)
