rule parity:
    input:
        f"results/{MODEL}/parity/parity.json",


rule parity_model:
    input:
        code=code_inputs("parity"),  # the code it runs (rules/common.smk)
        gguf=rules.fetch_model.output.gguf,
        weights=rules.convert_model.output.bump,
        lib=rules.build_model.output.lib,
        cli=rules.build_model.output.cli,
        ir=rules.ir_model.output.prefill,
        prompts=parity_prompts,
        profile=parity_profile,
        memory_model=rules.plan_memory.output.json,  # sizes the job's memory request
    output:
        parity=report("results/{model}/parity/parity.json", category="Parity"),
        plot=report("results/{model}/parity/parity_kl.png", category="Parity",
                    caption="../reports/parity_plot.rst"),
    params:
        threads=config["threads"],
        oracle_threads=config["parity"]["oracle_threads"],
    # Both programs run with config threads (params.threads): the job must own those cores.
    threads: config["threads"]
    resources:
        # ours and llama.cpp's footprints plus the logits over the vocabulary (rules/common.smk)
        mem_mb=lambda wc, input: parity_mem_mb(input.memory_model),
    log:
        "results/{model}/logs/parity.log",
    benchmark:
        "results/{model}/benchmarks/parity.tsv"
    conda:
        "../envs/oracle.yml"
    script:
        "../scripts/parity.py"
