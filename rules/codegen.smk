rule codegen_model:
    input:
        prefill="results/{model}/ir/ir_prefill.json",
        decode="results/{model}/ir/ir_decode.json",
        plan="results/{model}/plan/memory_plan.json",
        manifest="results/{model}/convert/weights_manifest.json",
        templates=sorted(glob.glob("bringup/templates/*.j2")),
    output:
        c="results/{model}/codegen/model.c",
        h="results/{model}/codegen/model.h",
    log:
        "results/{model}/logs/codegen.log",
    benchmark:
        "results/{model}/benchmarks/codegen.tsv"
    conda:
        "../environment.yml"
    script:
        "../scripts/codegen.py"
