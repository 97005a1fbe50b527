"""Snakemake entry point of the plan stage: rules plan_model, plan_memory, plan_calibrate and
plan_memory_calibrated (``bringup plan arena|memory``)."""
from pathlib import Path

from bringup.core.smk import run_stage

i, o, p = snakemake.input, snakemake.output, snakemake.params
if snakemake.rule == "plan_model":
    run_stage(snakemake, "plan", ["arena", "--ir-dir", Path(i.prefill).parent, "--out", o.plan,
                                  "--report", o.report, "--model", snakemake.wildcards.model])
elif snakemake.rule == "plan_calibrate":
    run_stage(snakemake, "plan", [
        "memory", "--gguf", i.gguf, "--ctx", p.ctx, "--seqs", 1, "--kv-dtype", p.kv_dtype,
        "--chunk", p.chunk, "--memory-plan", i.plan, "--bringup-run", i.cli, "--libmodel", i.lib,
        "--weights", i.weights, "--calibrate", o[0]])
else:  # plan_memory, plan_memory_calibrated
    argv = ["memory", "--gguf", i.gguf, "--ctx", p.ctx, "--seqs", p.seqs, "--kv-dtype", p.kv_dtype,
            "--chunk", p.chunk, "--device", p.device, "--devices", i.devices,
            "--memory-plan", i.plan, "--ir-dir", Path(i.ir[0]).parent, "--out", o.json, "--md", o.md]
    if "calibration" in i.keys():
        argv += ["--calibration", i.calibration]
    run_stage(snakemake, "plan", argv)
