"""Snakemake entry point of the bench stage: rules bench_llama_native, bench_build, bench_parity and
bench_model."""
from pathlib import Path

from bringup.core.smk import bench_argv, parity_argv, run_reused, run_stage

i, o, p, lg = snakemake.input, snakemake.output, snakemake.params, snakemake.log
if snakemake.rule == "bench_llama_native":
    run_stage(snakemake, "bench", ["native", "--root", Path(o.build).parent.parent,
                                   "--expect", snakemake.wildcards.native, "--jobs", snakemake.threads])
elif snakemake.rule == "bench_build":  # the certified build's stages, with the build's own ir settings
    ir_dir, plan = Path(o.decode).parent, Path(o.plan)
    numerics = ["--numerics", p.numerics] if p.numerics else []  # none: the circuit's own
    run_stage(snakemake, "ir", ["--config", i.config, "--manifest", i.manifest, "--out-dir", ir_dir, "--chunk", p.chunk,
                                "--ctx", p.ctx, "--kv-type", p.kv_type, *numerics], log=lg.ir)
    run_stage(snakemake, "plan", ["arena", "--ir-dir", ir_dir, "--out", plan, "--report", plan.parent / "ir_report.html",
                                  "--model", snakemake.wildcards.model], log=lg.plan)
    run_stage(snakemake, "codegen", ["--ir-dir", ir_dir, "--plan", plan, "--manifest", i.manifest,
                                     "--out-dir", plan.parent.parent / "codegen"], log=lg.codegen)
    run_stage(snakemake, "build", ["--codegen-dir", plan.parent.parent / "codegen", "--out-dir", Path(o.lib).parent,
                                   "--ir", ir_dir / "ir_prefill.json", "--ir", o.decode], log=lg.build)
elif snakemake.rule == "bench_parity":  # parity_model's job on that build (content-addressed, as it is)
    run_reused(snakemake, lambda: run_stage(snakemake, "parity", parity_argv(snakemake)))
else:  # bench_model: 1 thread and every core the job was given
    # content-addressed (rules/bench.smk): the key leaves out build/provenance.json, whose flags the
    # library's bytes already determine, and adds the threads the job was given
    run_reused(snakemake, lambda: run_stage(snakemake, "bench", bench_argv(snakemake)),
               skip=("build_provenance",), extra={"threads": snakemake.threads})
