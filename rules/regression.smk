# Target: the nightly regression (docs/regression.md). Certifies every model of
# config regression.models (default: every registry entry fetchable here) in one DAG, then
# summarizes: results/regression/summary.{json,md,html} and one line of history.jsonl per new
# certification set. PASSED exists only when every model passed, so a failed gate makes
# `snakemake regression` exit non-zero after the summary is written (as certify_verdict does).
rule regression:
    input:
        "results/regression/summary.json",
        "results/regression/PASSED",


# The certifications, not their PASSED markers: certify_model completes on a failed gate, so the
# summary is written whatever the verdicts. history.jsonl is not an output (Snakemake would delete
# it before the job); `bringup regression` appends to it once per certification set.
rule regression_summary:
    input:
        code=code_inputs("regression"),  # the code it runs (rules/common.smk)
        certifications=expand("results/{model}/certify/certification.json", model=REGRESSION_MODELS),
        templates=sorted(glob.glob("bringup/regression/templates/*.j2")),
    output:
        json=report("results/regression/summary.json", category="Regression"),
        md="results/regression/summary.md",
        html=report("results/regression/summary.html", category="Regression"),
    params:
        models=REGRESSION_MODELS,
        registry=config["registry"],
    threads: 1
    resources:
        mem_mb=512,  # reads the certification JSONs only (pandas + jinja2)
    log:
        "results/regression/logs/summary.log",
    conda:
        "../envs/core.yml"
    script:
        "../scripts/regression.py"


rule regression_verdict:
    input:
        code=code_inputs("regression"),  # the code it runs (rules/common.smk)
        json=rules.regression_summary.output.json,
        md=rules.regression_summary.output.md,
    output:
        "results/regression/PASSED",
    threads: 1
    resources:
        mem_mb=256,  # reads summary.json
    log:
        "results/regression/logs/verdict.log",
    conda:
        "../envs/core.yml"
    script:
        "../scripts/regression.py"


# A model whose pipeline crashed leaves no certification, so regression_summary cannot run; the
# night still gets its summary (that model "missing", exit class 7 in summary.json) while the
# workflow keeps its own non-zero status. Run with --keep-going so the other models finish first.
onerror:
    if "regression" in workflow.dag_settings.targets and not all(
        Path(f).exists() for f in rules.regression_summary.input.certifications
    ):
        bringup_main(["regression", "--models", *REGRESSION_MODELS,
                      "--registry", config["registry"], "--results", "results",
                      "--out-dir", "results/regression"])
