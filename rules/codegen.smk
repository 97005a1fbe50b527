rule codegen:
    input:
        f"results/{MODEL}/codegen/model.c",


rule codegen_model:
    input:
        code=code_inputs("codegen"),  # the code it runs (rules/common.smk)
        prefill=rules.ir_model.output.prefill,
        decode=rules.ir_model.output.decode,
        plan=rules.plan_model.output.plan,
        manifest=rules.convert_model.output.manifest,
        templates=sorted(glob.glob("bringup/codegen/templates/*.j2")),
    output:
        c="results/{model}/codegen/model.c",
        h="results/{model}/codegen/model.h",
        code="results/{model}/code/codegen_model.json",  # the code that produced the outputs (bringup.core.smk)
    threads: 1
    resources:
        mem_mb=256,  # templates over the IR (measured < 60 MB)
    log:
        "results/{model}/logs/codegen.log",
    benchmark:
        "results/{model}/benchmarks/codegen.tsv"
    conda:
        "../envs/core.yml"
    script:
        "../scripts/codegen.py"
