rule convert:
    input:
        f"results/{MODEL}/convert/weights.bump",


rule convert_model:
    input:
        code=code_inputs("convert"),  # the code it runs (rules/common.smk)
        gguf=rules.fetch_model.output.gguf,
        # the chat format stored in the BUMP is circuit data
        circuits=sorted(glob.glob("circuits/*.json")),
    output:
        bump="results/{model}/convert/weights.bump",
        manifest="results/{model}/convert/weights_manifest.json",
        config="results/{model}/convert/config.json",
        tokenizer="results/{model}/convert/tokenizer.json",
        code="results/{model}/code/convert_model.json",  # the code that produced the outputs (bringup.core.smk)
    params:
        arch=lambda wc: registry_entry(wc.model)["architecture"],
    threads: 1
    resources:
        # measured max RSS about 6x the GGUF (smollm2 615 MB, gemma3 1401 MB)
        mem_mb=lambda wc, input: max(1024, 6 * int(input.size_mb)),
    log:
        "results/{model}/logs/convert.log",
    benchmark:
        "results/{model}/benchmarks/convert.tsv"
    conda:
        "../envs/core.yml"
    script:
        "../scripts/convert.py"
