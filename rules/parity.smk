rule parity:
    input:
        f"results/{MODEL}/parity/parity.json",


rule parity_model:
    input:
        gguf=rules.fetch_model.output.gguf,
        weights=rules.convert_model.output.bump,
        lib=rules.build_model.output.lib,
        cli=rules.build_model.output.cli,
        ir=rules.ir_model.output.prefill,
        prompts=config["parity"]["prompts"],
        profile=parity_profile,
        memory_model=rules.plan_memory.output.json,  # sizes the job's memory request
    output:
        parity=report("results/{model}/parity/parity.json", category="Parity"),
        plot=report("results/{model}/parity/parity_kl.png", category="Parity",
                    caption="../reports/parity_plot.rst"),
    params:
        threads=config["threads"],
    # Both programs run with config threads (params.threads): the job must own those cores.
    threads: config["threads"]
    resources:
        # ours and llama.cpp's footprints, plus both sides' logits at every position and the
        # Python around them: a constant 4 GB (smollm2 measured 2.3 GB in all; its logits
        # 1408 positions x 49152 x 4 B x 2 = 0.55 GB; gemma3's vocabulary is 5.3x larger)
        mem_mb=lambda wc, input: 2 * footprint_mb(input.memory_model) + 4096,
    log:
        "results/{model}/logs/parity.log",
    benchmark:
        "results/{model}/benchmarks/parity.tsv"
    conda:
        "../envs/oracle.yml"
    script:
        "../scripts/parity.py"
