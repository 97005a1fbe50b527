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
