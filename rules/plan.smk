# Target: the arena plan and the (header-only) memory model of the configured model.
rule plan:
    input:
        f"results/{MODEL}/plan/memory_plan.json",
        f"results/{MODEL}/plan/memory_model.json",


rule plan_model:
    input:
        code=code_inputs("plan"),  # the code it runs (rules/common.smk)
        prefill=rules.ir_model.output.prefill,
        decode=rules.ir_model.output.decode,
    output:
        plan="results/{model}/plan/memory_plan.json",
        report=report("results/{model}/reports/ir_report.html", category="IR and memory plan",
                      caption="../reports/ir_report.rst"),
        code="results/{model}/code/plan_model.json",  # the code that produced the outputs (bringup.core.smk)
    threads: 1
    resources:
        mem_mb=512,  # liveness over the IR (measured < 140 MB)
    log:
        "results/{model}/logs/plan.log",
    benchmark:
        "results/{model}/benchmarks/plan.tsv"
    conda:
        "../envs/core.yml"
    script:
        "../scripts/plan.py"


rule plan_memory:
    input:
        code=code_inputs("plan"),  # the code it runs (rules/common.smk)
        gguf=rules.fetch_model.output.gguf,
        plan=rules.plan_model.output.plan,
        ir=rules.ir_model.output,
        devices="config/devices.yaml",
    output:
        json="results/{model}/plan/memory_model.json",
        md="results/{model}/plan/memory_model.md",
        code="results/{model}/code/plan_memory.json",  # the code that produced the outputs (bringup.core.smk)
    params:
        ctx=config["ctx"],
        chunk=config["prefill_chunk"],
        seqs=config["memory"]["seqs"],
        kv_dtype=config["memory"]["kv_dtype"],
        device=config["memory"]["device"],
    threads: 1
    resources:
        mem_mb=1024,  # GGUF header + IR (measured < 480 MB on gemma3)
    log:
        "results/{model}/logs/plan_memory.log",
    benchmark:
        "results/{model}/benchmarks/plan_memory.tsv"
    conda:
        "../envs/core.yml"
    script:
        "../scripts/plan.py"


# Runtime overheads (tokenizer tables, code, stacks) are measured, not guessed: one run of the
# native CLI at a small context calibrates them; the calibrated model is what certify reports.
rule plan_calibrate:
    input:
        code=code_inputs("plan"),  # the code it runs (rules/common.smk)
        gguf=rules.fetch_model.output.gguf,
        plan=rules.plan_model.output.plan,
        # build.smk is included after this file (codegen needs plan_model), so the program is
        # named by its path pattern rather than rules.build_model.output.
        cli="results/{model}/build/bringup-run",
        lib="results/{model}/build/libmodel.so",
        weights=rules.convert_model.output.bump,
        memory_model=rules.plan_memory.output.json,  # sizes the job's memory request
    output:
        "results/{model}/plan/runtime_calibration.json",
        code="results/{model}/code/plan_calibrate.json",  # the code that produced the outputs (bringup.core.smk)
    params:
        ctx=128,
        chunk=config["prefill_chunk"],
        kv_dtype=config["memory"]["kv_dtype"],
    # It times nothing but runs the native program: with as many threads as parity and certify
    # declare, `--cores 2` never runs it beside them (they would share the cores they measure on).
    threads: config["threads"]
    resources:
        mem_mb=lambda wc, input: footprint_mb(input.memory_model) + 512,  # one native run (+ Python)
    log:
        "results/{model}/logs/plan_calibrate.log",
    benchmark:
        "results/{model}/benchmarks/plan_calibrate.tsv"
    conda:
        "../envs/core.yml"
    script:
        "../scripts/plan.py"


use rule plan_memory as plan_memory_calibrated with:
    input:
        code=code_inputs("plan"),  # the code it runs (rules/common.smk)
        gguf=rules.fetch_model.output.gguf,
        plan=rules.plan_model.output.plan,
        ir=rules.ir_model.output,
        devices="config/devices.yaml",
        calibration=rules.plan_calibrate.output[0],
    output:
        json="results/{model}/plan/memory_model_calibrated.json",
        md=report("results/{model}/plan/memory_model_calibrated.md", category="Memory model"),
        code="results/{model}/code/plan_memory_calibrated.json",  # the code that produced the outputs (bringup.core.smk)
    log:
        "results/{model}/logs/plan_memory_calibrated.log",
    benchmark:
        "results/{model}/benchmarks/plan_memory_calibrated.tsv"
