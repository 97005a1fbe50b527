rule build:
    input:
        f"results/{MODEL}/build/bringup-run",


rule build_model:
    input:
        c=rules.codegen_model.output.c,
        h=rules.codegen_model.output.h,
        csrc=sorted(glob.glob("csrc/**/*.[ch]", recursive=True)),
    output:
        lib="results/{model}/build/libmodel.so",
        cli="results/{model}/build/bringup-run",
        provenance="results/{model}/build/provenance.json",
    threads: 1
    resources:
        mem_mb=512,  # one gcc at a time (measured < 160 MB)
    log:
        "results/{model}/logs/build.log",
    benchmark:
        "results/{model}/benchmarks/build.tsv"
    conda:
        "../environment.yml"
    script:
        "../scripts/build.py"
