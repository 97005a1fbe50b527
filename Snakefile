# bringup: pinned GGUF -> BUMP -> IR -> plan -> C -> native program -> parity -> certification.
# `snakemake certify --config model=smollm2` (profile: profiles/default).
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


validate(config, "config/schemas/workflow_config.schema.json")


report: "reports/workflow.rst"

MODEL = config["model"]
RES = f"results/{MODEL}"


include: "rules/common.smk"
include: "rules/fetch.smk"
include: "rules/convert.smk"
include: "rules/ir.smk"
include: "rules/plan.smk"
include: "rules/codegen.smk"
include: "rules/build.smk"
include: "rules/parity.smk"
include: "rules/certify.smk"


# Target rules: one per stage, for the model named in config.
rule fetch:
    input:
        gguf_path(MODEL),


rule convert:
    input:
        f"{RES}/convert/weights.bump",


rule ir:
    input:
        f"{RES}/ir/ir_prefill.json",
        f"{RES}/ir/ir_decode.json",


rule plan:
    input:
        f"{RES}/plan/memory_plan.json",
        f"{RES}/plan/memory_model.json",


rule codegen:
    input:
        f"{RES}/codegen/model.c",


rule build:
    input:
        f"{RES}/build/bringup-run",


rule parity:
    input:
        f"{RES}/parity/parity.json",


rule certify:
    default_target: True
    input:
        f"{RES}/certify/certification.json",
        f"{RES}/certify/PASSED",
