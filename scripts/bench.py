"""Snakemake entry point of the bench stage: rules bench_llama_native and bench_model."""
from pathlib import Path

from bringup.core.smk import run_stage

i, o = snakemake.input, snakemake.output
if snakemake.rule == "bench_llama_native":
    run_stage(snakemake, "bench", ["native", "--root", Path(o.build).parent.parent,
                                   "--expect", snakemake.wildcards.native, "--jobs", snakemake.threads])
else:  # bench_model: 1 thread and every core the job was given
    run_stage(snakemake, "bench", [
        "run", "--model", snakemake.wildcards.model, "--results", Path(i.ir).parent.parent, "--gguf", i.gguf,
        "--out-dir", Path(o.json).parent, "--threads", f"1,{snakemake.threads}", "--native-build", i.native,
        "--ours-isa", "auto", "--no-progress"])
