# Target: the bench of the configured model (docs/bench.md): results/{model}/bench/bench.{json,md,png}.
# Not part of certify's DAG: run it on a quiet machine, `snakemake bench --config model=M`.
from bringup.bench import llama_native


rule bench:
    input:
        f"results/{MODEL}/bench/bench.json",


# Built once per host ISA and version, reused by every model's bench (and kept by `snakemake
# --delete-all-output` of a model). The compile uses every core.
rule bench_llama_native:
    output:
        build="resources/llama_cpp_native/{native}/build.json",
    threads: workflow.cores
    resources:
        mem_mb=4096,  # two g++ on llama.cpp's largest files (measured < 1.5 GB each)
    log:
        "results/logs/bench_llama_native_{native}.log",
    conda:
        "../envs/oracle.yml"
    script:
        "../scripts/bench.py"


# The bench wants the machine to itself: it declares every core (threads) and one bench slot
# (`--resources bench_slots=1` keeps two benches apart); speed of a loaded host is still recorded,
# with the load averages and a caveat in bench.json.
rule bench_model:
    input:
        gguf=rules.fetch_model.output.gguf,
        convert=rules.convert_model.output,
        ir=rules.ir_model.output.decode,
        build=rules.build_model.output,
        # llama.cpp built for this host's ISA at the installed llama-cpp-python's version
        # (<version>-<isa>: asks gcc what -march=native is, so only when a bench job is in the DAG)
        native=lambda wc: f"resources/llama_cpp_native/{llama_native.build_dir().name}/build.json",
        probe="csrc/bench/bu_bandwidth.c",
        memory_model=rules.plan_memory.output.json,  # sizes the job's memory request
    output:
        json="results/{model}/bench/bench.json",
        md="results/{model}/bench/bench.md",
        png="results/{model}/bench/bench.png",
    threads: workflow.cores
    resources:
        mem_mb=lambda wc, input: 2 * footprint_mb(input.memory_model) + 1536,  # ours + llama.cpp + the 256 MiB probe buffer
        bench_slots=1,
    log:
        "results/{model}/logs/bench.log",
    conda:
        "../envs/oracle.yml"
    script:
        "../scripts/bench.py"
