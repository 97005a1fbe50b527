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


# Runtime overheads (tokenizer tables, code, stacks) are measured, not guessed: one run of the
# native CLI at a small context calibrates them; the calibrated model is what certify reports.
rule calibrate_memory:
    input:
        gguf="resources/models/{model}.gguf",
        plan="results/{model}/plan/memory_plan.json",
        cli="results/{model}/build/bringup-run",
        lib="results/{model}/build/libmodel.so",
        weights="results/{model}/convert/weights.bump",
    output:
        "results/{model}/plan/runtime_calibration.json",
    params:
        ctx=128,
        chunk=config["prefill_chunk"],
        kv_dtype=config["memory"]["kv_dtype"],
    log:
        "results/{model}/logs/calibrate_memory.log",
    benchmark:
        "results/{model}/benchmarks/calibrate_memory.tsv"
    conda:
        "../environment.yml"
    script:
        "../scripts/calibrate_memory.py"


use rule memory_model as memory_model_calibrated with:
    input:
        gguf="resources/models/{model}.gguf",
        plan="results/{model}/plan/memory_plan.json",
        devices="config/devices.yaml",
        calibration="results/{model}/plan/runtime_calibration.json",
    output:
        json="results/{model}/plan/memory_model_calibrated.json",
        md=report("results/{model}/plan/memory_model_calibrated.md", category="Memory model"),
    log:
        "results/{model}/logs/memory_model_calibrated.log",
    benchmark:
        "results/{model}/benchmarks/memory_model_calibrated.tsv"
