# Target: the certification of the configured model; PASSED exists only when every gate passed.
rule certify:
    input:
        f"results/{MODEL}/certify/certification.json",
        f"results/{MODEL}/certify/PASSED",


# The reports are the evidence, pass or fail: a failed gate still completes this job, and
# certify_verdict turns the verdict into the workflow's exit status. Every file that
# `bringup certify` reads under results/{model}/ is declared here, so a change to any reruns it.
rule certify_model:
    input:
        code=code_inputs("certify"),  # the code it runs (rules/common.smk)
        gguf=rules.fetch_model.output.gguf,
        fetch=rules.fetch_model.output.provenance,
        convert=rules.convert_model.output,
        ir=rules.ir_model.output,
        plan=rules.plan_model.output.plan,
        memory_model=rules.plan_memory_calibrated.output.json,
        codegen=rules.codegen_model.output,
        build=rules.build_model.output,
        parity=rules.parity_model.output.parity,
        templates=sorted(glob.glob("reports/certification.*.j2")),
        # The speed section cites the bench of this exact library when `snakemake bench` has run
        # (matched by the library's sha256, else "not benched"): a newer bench re-certifies.
        # Not a dependency: the bench wants a quiet machine and runs on its own.
        bench=lambda wc: [p] if Path(p := f"results/{wc.model}/bench/bench.json").exists() else [],
    output:
        json=report(
            "results/{model}/certify/certification.json",
            category="Certification",
        ),
        md="results/{model}/certify/certification.md",
        html=report(
            "results/{model}/certify/certification.html",
            category="Certification",
        ),
    params:
        threads=config["threads"],
    # Certify times nothing (its speed section cites the bench); the standalone run of the program
    # uses config threads (params.threads), declared so it does not oversubscribe the cores.
    threads: config["threads"]
    resources:
        mem_mb=lambda wc, input: 2 * footprint_mb(input.memory_model) + 1024,  # ours + llama.cpp (measured 390 MB)
    log:
        "results/{model}/logs/certify.log",
    benchmark:
        "results/{model}/benchmarks/certify.tsv"
    conda:
        "../envs/oracle.yml"
    script:
        "../scripts/certify.py"


rule certify_verdict:
    input:
        code=code_inputs("certify"),  # the code it runs (rules/common.smk)
        json=rules.certify_model.output.json,
        md=rules.certify_model.output.md,
    output:
        "results/{model}/certify/PASSED",
    threads: 1
    resources:
        mem_mb=256,  # reads certification.json
    log:
        "results/{model}/logs/certify_verdict.log",
    conda:
        "../envs/oracle.yml"
    script:
        "../scripts/certify.py"
