# Target: the verified GGUF of the configured model.
rule fetch:
    input:
        f"resources/models/{MODEL}.gguf",


rule fetch_model:
    output:
        gguf="resources/models/{model}.gguf",
        provenance="results/{model}/fetch/provenance.json",
    params:
        # The pinned source and hash: editing either in the registry reruns this rule.
        pin=lambda wc: [registry_entry(wc.model).get("uri") or registry_entry(wc.model)["parts"],
                        registry_entry(wc.model)["sha256"]],
    threads: 1
    resources:
        mem_mb=lambda wc: fetch_mem_mb(wc.model),  # a download streams; a synth:// model is made in memory
    log:
        "results/{model}/logs/fetch.log",
    benchmark:
        "results/{model}/benchmarks/fetch.tsv"
    conda:
        "../envs/core.yml"
    script:
        "../scripts/fetch.py"
