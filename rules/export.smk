# Target: the certified program of the configured model as a relocatable bundle,
# results/{model}/export/{model}-{isa}/ and its deterministic .tar.gz (docs/export.md).
from bringup.build import compiler as build_compiler
from bringup.export import bundle as export_bundle
from bringup.core import isa as export_isa

# The ISA in the name comes from the build's -march (bringup.build.compiler) and the ISA of the
# providers the IR selected; rules/ir.smk resolves without --isa, so no provider adds one.
# `bringup export --name` fails if the certified build says otherwise (never a silent rename).
EXPORT_ISA = export_isa.name_of(build_compiler.isa_flags())
# The bundle's files, declared one by one rather than as a directory() output: Snakemake marks a
# directory() output with a .snakemake_timestamp file inside it, which would make the bundle fail
# its own check (verify refuses any file bundle.json does not list).
EXPORT_FILES = export_bundle.bundle_files([os.path.basename(rules.parity_model.output.plot)])


rule export:
    input:
        f"results/{MODEL}/export/{MODEL}-{EXPORT_ISA}.tar.gz",


rule export_model:
    input:
        code=code_inputs("export"),  # the code it runs (rules/common.smk)
        certification=rules.certify_model.output.json,
        html=rules.certify_model.output.html,
        passed=rules.certify_verdict.output[0],
        cli=rules.build_model.output.cli,
        lib=rules.build_model.output.lib,
        weights=rules.convert_model.output.bump,
        parity=rules.parity_model.output.parity,
        plot=rules.parity_model.output.plot,
        memory_model=rules.plan_memory_calibrated.output.json,
        templates=sorted(glob.glob("bringup/export/templates/*.j2")),
    output:
        bundle=[f"results/{{model}}/export/{{model}}-{EXPORT_ISA}/{name}" for name in EXPORT_FILES],
        tar=f"results/{{model}}/export/{{model}}-{EXPORT_ISA}.tar.gz",
    params:
        # the model's registry entry (not the whole file): its pin is part of the provenance
        entry=lambda wc: registry_entry(wc.model),
        registry=config["registry"],
        threads=config["threads"],
        name=lambda wc: f"{wc.model}-{EXPORT_ISA}",
    threads: 1
    resources:
        mem_mb=512,  # hashes and gzips the files in 1 MiB blocks; readelf, bringup-run --help
    log:
        "results/{model}/logs/export.log",
    benchmark:
        "results/{model}/benchmarks/export.tsv"
    conda:
        "../envs/core.yml"
    script:
        "../scripts/export.py"
