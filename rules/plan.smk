rule plan_model:
    input:
        prefill="results/{model}/ir/ir_prefill.json",
        decode="results/{model}/ir/ir_decode.json",
    output:
        plan="results/{model}/plan/memory_plan.json",
        report=report("results/{model}/reports/ir_report.html", category="IR and memory plan",
                      caption="../reports/ir_report.rst"),
    log:
        "results/{model}/logs/plan.log",
    benchmark:
        "results/{model}/benchmarks/plan.tsv"
    conda:
        "../environment.yml"
    script:
        "../scripts/plan.py"


rule memory_model:
    input:
        gguf="resources/models/{model}.gguf",
        plan="results/{model}/plan/memory_plan.json",
        devices="config/devices.yaml",
    output:
        json="results/{model}/plan/memory_model.json",
        md="results/{model}/plan/memory_model.md",
    params:
        ctx=config["ctx"],
        chunk=config["prefill_chunk"],
        seqs=config["memory"]["seqs"],
        kv_dtype=config["memory"]["kv_dtype"],
        device=config["memory"]["device"],
    log:
        "results/{model}/logs/memory_model.log",
    benchmark:
        "results/{model}/benchmarks/memory_model.tsv"
    conda:
        "../environment.yml"
    script:
        "../scripts/memory_model.py"
