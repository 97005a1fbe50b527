rule certify_model:
    input:
        gguf="resources/models/{model}.gguf",
        fetch="results/{model}/fetch/provenance.json",
        parity="results/{model}/parity/parity.json",
        plan="results/{model}/plan/memory_plan.json",
        memory_model="results/{model}/plan/memory_model_calibrated.md",
        build="results/{model}/build/provenance.json",
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
    log:
        "results/{model}/logs/certify.log",
    benchmark:
        "results/{model}/benchmarks/certify.tsv"
    conda:
        "../environment.yml"
    script:
        "../scripts/certify.py"


rule certify_verdict:
    input:
        json="results/{model}/certify/certification.json",
        md="results/{model}/certify/certification.md",
    output:
        "results/{model}/certify/PASSED",
    log:
        "results/{model}/logs/certify_verdict.log",
    conda:
        "../environment.yml"
    script:
        "../scripts/certify_verdict.py"
