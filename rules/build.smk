from bringup.build.sources import build_inputs


rule build:
    input:
        f"results/{MODEL}/build/bringup-run",


rule build_model:
    input:
        code=code_inputs("build"),  # the code it runs (rules/common.smk)
        c=rules.codegen_model.output.c,
        h=rules.codegen_model.output.h,
        prefill=rules.ir_model.output.prefill,
        decode=rules.ir_model.output.decode,
        # Exactly the csrc files this build reads (bringup.build.sources.build_inputs): the kernel
        # files of the providers its IR uses, never the others, so editing one kernel source reruns
        # only the builds (and their parity and certification) whose IR uses a provider from it.
        # The IR is a checkpoint: its providers are known once it exists.
        csrc=lambda wc: build_inputs([(o := checkpoints.ir_model.get(model=wc.model).output).prefill, o.decode]),
    output:
        lib="results/{model}/build/libmodel.so",
        cli="results/{model}/build/bringup-run",
        provenance="results/{model}/build/provenance.json",
        code="results/{model}/code/build_model.json",  # the code that produced the outputs (bringup.core.smk)
    threads: 1
    resources:
        mem_mb=512,  # one gcc at a time (measured < 160 MB)
    log:
        "results/{model}/logs/build.log",
    benchmark:
        "results/{model}/benchmarks/build.tsv"
    conda:
        "../envs/core.yml"
    script:
        "../scripts/build.py"
