rule ir:
    input:
        f"results/{MODEL}/ir/ir_prefill.json",
        f"results/{MODEL}/ir/ir_decode.json",


# A checkpoint: the build reads which providers the IR uses to name its exact sources (rules/build.smk).
checkpoint ir_model:
    input:
        code=code_inputs("ir"),  # the code it runs (rules/common.smk)
        config=rules.convert_model.output.config,
        manifest=rules.convert_model.output.manifest,
        circuits=sorted(glob.glob("circuits/*.json")),
        kernel_maps=sorted(glob.glob("kernel_maps/*.json")),
    output:
        prefill="results/{model}/ir/ir_prefill.json",
        decode="results/{model}/ir/ir_decode.json",
        code="results/{model}/code/ir_model.json",  # the code that produced the outputs (bringup.core.smk)
    params:
        chunk=config["prefill_chunk"],
        ctx=config["ctx"],
        # one setting for the program's KV cache and the memory model's (rules/plan.smk)
        kv_type=config["memory"]["kv_dtype"],
    threads: 1
    resources:
        mem_mb=256,  # JSON in and out (measured < 50 MB)
    log:
        "results/{model}/logs/ir.log",
    benchmark:
        "results/{model}/benchmarks/ir.tsv"
    conda:
        "../envs/core.yml"
    script:
        "../scripts/ir.py"
