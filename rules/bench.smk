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


# Other builds of ours the bench runs beside the certified one (config bench.builds, engine
# ours_<build>): the certified build's stages (ir, plan arena, codegen, build) from the same
# converted weights, with the build's own `bringup ir` settings; parity-checked (bench_parity, with
# the gates of its activation numerics), not certified.
BENCH_BUILDS = config.get("bench", {}).get("builds", {})
# config bench.native (default true): false leaves llama.cpp's native build out of the bench's
# DAG (no 10-40 min compile) and runs `bringup bench run --no-native`, which the results state
# (`--config bench='{native: false}'` gives the string "false": Snakemake reads a nested value as
# text; the schema admits exactly true, false, "true", "false")
BENCH_NATIVE = config.get("bench", {}).get("native", True) in (True, "true")


rule bench_build:
    input:
        code=code_inputs("bench_build"),  # the code it runs (rules/common.smk)
        config=rules.convert_model.output.config,
        manifest=rules.convert_model.output.manifest,
        circuits=sorted(glob.glob("circuits/*.json")),
        kernel_maps=sorted(glob.glob("kernel_maps/*.json")),
        templates=sorted(glob.glob("bringup/codegen/templates/*.j2")),
        csrc=sorted(glob.glob("csrc/**/*.[ch]", recursive=True)),
    output:
        decode="results/{model}/bench/{build}/ir/ir_decode.json",
        prefill="results/{model}/bench/{build}/ir/ir_prefill.json",
        plan="results/{model}/bench/{build}/plan/memory_plan.json",
        lib="results/{model}/bench/{build}/build/libmodel.so",
        cli="results/{model}/bench/{build}/build/bringup-run",
    wildcard_constraints:
        build="[a-z][a-z0-9]*",
    params:
        chunk=config["prefill_chunk"],
        ctx=config["ctx"],
        kv_type=lambda wc: BENCH_BUILDS[wc.build].get("kv_type", config["memory"]["kv_dtype"]),
        numerics=lambda wc: BENCH_BUILDS[wc.build].get("numerics", ""),  # "": the circuit's own
    threads: 1
    resources:
        mem_mb=512,  # the largest of the four steps (plan, build: measured < 160 MB)
    log:
        ir="results/{model}/logs/bench_build_{build}_ir.log",
        plan="results/{model}/logs/bench_build_{build}_plan.log",
        codegen="results/{model}/logs/bench_build_{build}_codegen.log",
        build="results/{model}/logs/bench_build_{build}_build.log",
    conda:
        "../envs/core.yml"
    script:
        "../scripts/bench.py"


# parity_model's job on another build: the bench reports its verdict beside the
# build's speed. A build with quantized activations meets the profile's quantized_activations gates.
rule bench_parity:
    input:
        code=code_inputs("parity"),  # the code it runs (rules/common.smk)
        gguf=rules.fetch_model.output.gguf,
        weights=rules.convert_model.output.bump,
        lib=rules.bench_build.output.lib,
        cli=rules.bench_build.output.cli,
        ir=rules.bench_build.output.prefill,
        prompts=parity_prompts,  # sized per model by its profile (rules/common.smk)
        profile=parity_profile,
        memory_model=rules.plan_memory.output.json,  # sizes the job's memory request
    output:
        parity="results/{model}/bench/{build}/parity/parity.json",
        plot="results/{model}/bench/{build}/parity/parity_kl.png",
    wildcard_constraints:
        build="[a-z][a-z0-9]*",
    params:
        threads=config["threads"],
        oracle_threads=config["parity"]["oracle_threads"],
        prompt_set=parity_prompt_size(),
    threads: config["threads"]
    resources:
        mem_mb=lambda wc, input: parity_mem_mb(input.memory_model),
    log:
        "results/{model}/logs/bench_parity_{build}.log",
    conda:
        "../envs/oracle.yml"
    script:
        "../scripts/bench.py"


# Content-addressed like parity (bringup.core.smk.run_reused): a rerun whose library, weights,
# GGUF, llama.cpp build, bench code, threads and settings are all byte-identical (a comment in a C
# source, a refactor that changes no artifact) copies the stored bench back, and its log says so.
# The bench wants the machine to itself: it declares every core (threads) and one bench slot
# (`--resources bench_slots=1` keeps two benches apart); speed of a loaded host is still recorded,
# with the load averages and a caveat in bench.json.
rule bench_model:
    input:
        code=code_inputs("bench"),  # the code it runs (rules/common.smk)
        gguf=rules.fetch_model.output.gguf,
        weights=rules.convert_model.output.bump,
        manifest=rules.convert_model.output.manifest,
        model_config=rules.convert_model.output.config,
        tokenizer=rules.convert_model.output.tokenizer,
        ir=rules.ir_model.output.decode,
        lib=rules.build_model.output.lib,
        cli=rules.build_model.output.cli,
        # read for the compile flags it records beside each engine; not in the job's content key
        # (scripts/bench.py): a comment in a C source rewrites it and leaves the library's bytes
        build_provenance=rules.build_model.output.provenance,
        # llama.cpp built for this host's ISA at the installed llama-cpp-python's version
        # (<version>-<isa>: asks gcc what -march=native is, so only when a bench job is in the DAG)
        # (none with config bench.native false)
        native=lambda wc: [f"resources/llama_cpp_native/{llama_native.build_dir().name}/build.json"] if BENCH_NATIVE else [],
        probe="csrc/bench/bu_bandwidth.c",
        memory_model=rules.plan_memory.output.json,  # sizes the job's memory request
        builds=expand("results/{{model}}/bench/{build}/build/bringup-run", build=sorted(BENCH_BUILDS)),
        build_libs=expand("results/{{model}}/bench/{build}/build/libmodel.so", build=sorted(BENCH_BUILDS)),
        build_irs=expand("results/{{model}}/bench/{build}/ir/ir_decode.json", build=sorted(BENCH_BUILDS)),
        parities=expand("results/{{model}}/bench/{build}/parity/parity.json", build=sorted(BENCH_BUILDS)),
    output:
        json="results/{model}/bench/bench.json",
        md="results/{model}/bench/bench.md",
        png="results/{model}/bench/bench.png",
        code="results/{model}/code/bench_model.json",  # the code that produced the outputs (bringup.core.smk)
    threads: workflow.cores
    resources:
        mem_mb=lambda wc, input: 2 * footprint_mb(input.memory_model) + 1536,  # ours + llama.cpp + the 256 MiB probe buffer
        bench_slots=1,
    params:
        builds=sorted(BENCH_BUILDS),
        native=BENCH_NATIVE,
    log:
        "results/{model}/logs/bench.log",
    conda:
        "../envs/oracle.yml"
    script:
        "../scripts/bench.py"
