rule parity_model:
    input:
        gguf="resources/models/{model}.gguf",
        weights="results/{model}/convert/weights.bump",
        lib="results/{model}/build/libmodel.so",
        cli="results/{model}/build/bringup-run",
        ir="results/{model}/ir/ir_prefill.json",
        prompts=config["parity"]["prompts"],
        profile=lambda wc: f"{config['parity']['profiles_dir']}/{wc.model}.json",
    output:
        parity=report("results/{model}/parity/parity.json", category="Parity"),
        plot=report("results/{model}/parity/parity_kl.png", category="Parity",
                    caption="../reports/parity_plot.rst"),
    params:
        threads=config["threads"],
    log:
        "results/{model}/logs/parity.log",
    benchmark:
        "results/{model}/benchmarks/parity.tsv"
    conda:
        "../environment.yml"
    script:
        "../scripts/parity.py"
