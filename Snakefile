# bringup: pinned GGUF -> BUMP -> IR -> plan -> C -> native program -> parity -> certification.
# `snakemake certify --config model=smollm2` (profile: profiles/default); `snakemake` alone means
# `snakemake all` (= certify), and `snakemake --report report.html` reports that run.
import os

from snakemake.utils import min_version, validate

min_version("9.0")

# Jobs import bringup from this checkout (the rules' scripts run in other processes, perhaps in
# the per-rule conda environments envs/*.yml, which hold third-party packages only): so an
# environment serves any clone, and never runs an installed copy older than the code here.
# (A write, not a variable the workflow requires: so no `envvars:`.)
os.environ.update(PYTHONPATH=os.pathsep.join(p for p in (workflow.basedir, os.environ.get("PYTHONPATH")) if p))


configfile: "config/config.yaml"


validate(config, "config/schemas/workflow_config.schema.json")


report: "reports/workflow.rst"

# Target rules (one per stage, rules/X.smk) build this model; the jobs behind them take {model}.
MODEL = config["model"]

# A model is a registry name (config/schemas/models.schema.json), never a path: so that
# results/M/bench/<build>/build/... (rule bench_build) is not also results/<M/bench/build>/build/...
wildcard_constraints:
    model="[a-z][a-z0-9_]*",


include: "rules/common.smk"
include: "rules/fetch.smk"
include: "rules/convert.smk"
include: "rules/ir.smk"
include: "rules/plan.smk"
include: "rules/codegen.smk"
include: "rules/build.smk"
include: "rules/parity.smk"
include: "rules/certify.smk"
include: "rules/export.smk"
include: "rules/bench.smk"
include: "rules/regression.smk"


# The default target: the certification of the configured model (config model), what `snakemake`
# and `snakemake --report report.html` without a target mean. Here, in the main Snakefile, because
# Snakemake keeps a `default_target:` set inside an included file only until that include ends
# (the first rule, fetch, was the default: `snakemake --report` then found no job and crashed).
rule all:
    default_target: True
    input:
        rules.certify.input,
