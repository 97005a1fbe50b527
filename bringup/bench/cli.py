"""``bringup bench``: the bench stage's jobs under one command.

``bringup bench run``: llama-bench-style speed of ``results/M/build/bringup-run`` against llama.cpp
(portable and native builds) on the same GGUF and threads, the host's DRAM read bandwidth and our
decode's share of it -> ``bench/bench.{json,md,png}``; ``bringup bench native``: build (once) or
find llama.cpp built for this host's ISA; ``bringup bench render``: redraw bench.md / bench.png
from a bench.json. Exit codes as every command: 2 bad input, 5 unavailable (no llama-cpp-python,
no cmake), 1 a bug. Speed is measured and reported, never judged here.
"""
from __future__ import annotations

import datetime
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Sequence

from bringup.bench import host, llama_native, report, rounds, traffic
from bringup.core import argtypes, canonjson, subcommands
from bringup.core.errors import BringupError, shown
from bringup.core.hashing import sha256_file
from bringup.core.inputs import regular_file
from bringup.core.native import NativeProgram
from bringup.core.paths import RESOURCES, SCHEMAS, rel
from bringup.core.schemas import validate
from bringup.core.subcommands import Parser

DEFAULT_TESTS = "pp512,tg128,tg128@d1024"
#: the caveat of a bench without llama.cpp's native build (``--no-native``; config bench.native false)
NO_NATIVE = ("llama.cpp's native build was not compared (--no-native; under snakemake, config bench.native: "
             "false): every ratio here is against the portable llama.cpp only, which is slower on most hosts.")
#: a load average above this share of the cores makes the numbers a loaded machine's (a caveat)
LOAD_CAVEAT_FRACTION = 0.5


def _thread_counts(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        n = min(os.cpu_count() or 1, argtypes.MAX_THREADS) if part == "all" else int(part) if part.isdigit() else 0
        if not 1 <= n <= argtypes.MAX_THREADS:
            raise BringupError(f"--threads: {part!r} is not a thread count 1..{argtypes.MAX_THREADS} or 'all'")
        if n not in out:
            out.append(n)
    return out


def _ours_engine(cli: Path, lib: Path, weights: Path, timeout_s: float, start: int, isa: str | None):
    # BU_ISA is set only for a forced level: an inherited one would silently force plain "ours"
    env = {k: v for k, v in os.environ.items() if k != "BU_ISA"} | ({"BU_ISA": isa} if isa else {})

    def run(threads: int, test: rounds.Test, prompt: list[int], depth: list[int]) -> dict[str, Any]:
        prog = NativeProgram(cli, lib, weights, threads=threads, timeout_s=timeout_s, env=env)
        return rounds.run_ours(prog, test, prompt, depth, start)
    return run


def _build_name_rule() -> tuple[str, list[str]]:
    """The name rule of another build, from the workflow config schema (bench.builds' propertyNames,
    one table for the workflow and this command): (its pattern, the ISA levels it may not be,
    since engine ``ours_<level>`` is a forced level of the measured build)."""
    rule = json.loads((SCHEMAS / "workflow_config.schema.json").read_text())["properties"]["bench"]["properties"][
        "builds"]["propertyNames"]
    return rule["pattern"], rule["not"]["enum"]


def _builds(specs: Sequence[str], res: Path, ir: dict) -> dict[str, Path]:
    """``--ours-build NAME=DIR`` -> {NAME: DIR}: another build of ours from the same weights (its
    ``build/`` and ``ir/`` under DIR, e.g. ``bringup ir --numerics ggml-q8``), run as engine
    ``ours_NAME``. ``ir``: the measured build's decode IR, whose weights manifest DIR's IR must
    name too. Raises BringupError on a malformed, repeated, incomplete or foreign one."""
    out: dict[str, Path] = {}
    want = ir.get("inputs_sha256", {}).get("weights_manifest")
    pattern, isa_levels = _build_name_rule()
    for spec in specs:
        name, sep, d = spec.partition("=")
        if not sep or not name or not d:
            raise BringupError(f"--ours-build {spec!r}: expected NAME=DIR")
        if not re.fullmatch(pattern, name) or name in isa_levels:
            raise BringupError(f"--ours-build {spec!r}: NAME is a lower-case letter then up to 15 lower-case letters "
                               f"or digits ({pattern}), and not an ISA level ({', '.join(isa_levels)})")
        if name in out:
            raise BringupError(f"--ours-build: {name!r} given twice")
        missing = [str(Path(d) / f) for f in ("build/bringup-run", "build/libmodel.so", "ir/ir_decode.json")
                   if not (Path(d) / f).is_file()]
        if missing:
            raise BringupError(f"--ours-build {name}: missing {', '.join(missing)}")
        if Path(d).resolve() == res.resolve():
            raise BringupError(f"--ours-build {name}: {d} is the measured build itself")
        have = canonjson.read(Path(d) / "ir" / "ir_decode.json", "ir_decode.json").get("inputs_sha256", {}) \
            .get("weights_manifest")
        if have != want:
            raise BringupError(f"--ours-build {name}: {d} was built from other weights (weights manifest "
                               f"{str(have)[:12]}, the measured build's {str(want)[:12]})")
        out[name] = Path(d)
    return out


def build_parity(d: Path, lib_sha256: str) -> dict[str, Any]:
    """What parity said of another build ``d`` (``d/parity/parity.json``, rule bench_parity): its
    verdict, which gate set and every gate's value. ``verdict`` "not checked" when there is no
    parity.json, "stale" when it checked another libmodel.so than the benched one (SHA-256
    ``lib_sha256``; never the old verdict for a new library). Raises BringupError for an invalid
    parity.json."""
    p = d / "parity" / "parity.json"
    if not p.is_file():
        return {"verdict": "not checked", "reason": f"no {rel(p)} (snakemake runs bringup parity on the build: "
                "rule bench_parity)"}
    doc = canonjson.read(p, "parity.json")
    validate(doc, "parity", str(p))
    if doc["program"].get("lib_sha256") != lib_sha256:
        return {"verdict": "stale", "path": rel(p), "reason": "it checked another libmodel.so than the one benched"}
    return {"verdict": doc["verdict"], "path": rel(p), "sha256": sha256_file(p),
            "gate_set": doc.get("reference", {}).get("gate_set"),
            "gates": [{k: g[k] for k in ("id", "kind", "against", "metric", "cmp", "measured", "threshold", "passed")}
                      for g in doc["gates"]]}


def check_gguf(gguf: Path, manifest_path: Path) -> str:
    """The SHA-256 of ``gguf`` (``--gguf``), checked before any measuring against the GGUF the
    results were converted from (``gguf_sha256`` of convert/weights_manifest.json at
    ``manifest_path``): llama.cpp would otherwise run another model, or fail rounds later on a
    file that is no GGUF. Raises BringupError (exit 2, one line) when they differ or ``gguf`` is
    not a readable regular file."""
    want = canonjson.read(manifest_path, "weights_manifest.json").get("gguf_sha256")
    have = sha256_file(gguf, "--gguf")
    if have != want:
        raise BringupError(f"--gguf {shown(gguf)} is not the GGUF {rel(manifest_path.parent.parent)} was converted "
                           f"from (its SHA-256 {have[:12]}..., weights_manifest.json names {str(want)[:12]}...)")
    return have


def _auto_isa() -> list[str]:
    """``--ours-isa auto``: the AVX2 run on an AVX-512 host (issue 12's forced-AVX2 figure), else none."""
    return ["avx2"] if "avx512f" in host.describe()["cpu"]["flags"] else []


def _llama_engine(gguf: Path, lib_dir: str | None, start: int):
    def run(threads: int, test: rounds.Test, prompt: list[int], depth: list[int]) -> dict[str, Any]:
        return rounds.run_llama(gguf, threads, test, prompt, depth, lib_dir, start)
    return run


def _native(a) -> tuple[dict | None, str | None]:
    """The native build's build.json (+ lib_dir), or (None, why it is not measured)."""
    if a.no_native:
        return None, NO_NATIVE
    if a.native_build:
        meta = canonjson.read(a.native_build, "native build record")   # a regular file, JSON
        return {**meta, "lib_dir": str(Path(a.native_build).parent / "lib"), "reused": True}, None
    return llama_native.ensure(a.native_root), None


def _caveats(before: list[float], after: list[float], cpus: int, skipped: str | None, rounds_: int,
             probe_bytes: int, own_threads: int, per_threads: Sequence[dict[str, Any]] = ()) -> list[str]:
    """What limits the numbers, in words: host load, few rounds, a probe buffer that fits in
    cache, an engine not measured. The 1-minute load average after the run still holds the
    bench's own last tests (``own_threads`` busy threads): only load beyond them counts."""
    out = []
    if before[0] > LOAD_CAVEAT_FRACTION * cpus or after[0] - own_threads > LOAD_CAVEAT_FRACTION * cpus:
        out.append(f"The host was loaded (1-minute load average {before[0]} before, {after[0]} after, on {cpus} "
                   f"CPUs): other processes shared the cores, so these numbers are not the machine's speed; "
                   f"the interleaved rounds spread the load over all engines, so the ratios are the better guide.")
    if rounds_ < 3:
        out.append(f"{rounds_} round(s): the min-max spread needs at least 3.")
    for p in per_threads:
        if not p["settled"]:
            out.append(f"{p['threads']} thread(s): the spread did not settle in {p['rounds']} rounds (worst cell's "
                       f"(max - min) / median / sqrt(rounds) = {p['spread_error']}): its medians are uncertain by "
                       f"about that share.")
    llc = host.llc_bytes()
    if llc and probe_bytes < host.BANDWIDTH_LLC_MULTIPLE * llc:
        out.append(f"The bandwidth probe's buffer ({probe_bytes >> 20} MiB) is under {host.BANDWIDTH_LLC_MULTIPLE}x "
                   f"the last-level cache ({llc >> 20} MiB): it measures caches too, not DRAM alone.")
    if skipped:
        out.append(skipped)
    return out


def run_main(argv: Sequence[str] | None = None) -> int:
    """``bringup bench run --model M --results results/M --gguf G``."""
    ap = subcommands.model_parser("bringup bench run", __doc__.split("\n")[2], out_default="RESULTS/bench",
                      results_help="results/{model}: build/, convert/, ir/ are read")
    ap.add_argument("--tests", default=DEFAULT_TESTS, help=f"comma-separated llama-bench tests (default {DEFAULT_TESTS})")
    ap.add_argument("--threads", default="1,all", help="thread counts 1..256, 'all' = os.cpu_count() up to 256 as bringup-run (default 1,all)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved rounds at least (>= 1; >= 3 for a median with spread)")
    ap.add_argument("--max-rounds", type=int, default=7,
                    help="rounds at most: after --rounds, one more while the spread is above --spread-target "
                         "(default 7; equal to --rounds for a fixed count)")
    ap.add_argument("--spread-target", type=float, default=rounds.SPREAD_TARGET,
                    help="stop adding rounds once every cell's (max - min) / median / sqrt(rounds) is at most this "
                         f"(default {rounds.SPREAD_TARGET})")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random token ids")
    ap.add_argument("--bandwidth-repeats", type=int, default=10, help="passes of the DRAM probe (best is reported)")
    ap.add_argument("--bandwidth-bytes", type=int, help="probe buffer bytes (default: 8 x LLC, >= 256 MiB)")
    ap.add_argument("--native-build", type=Path, help="build.json of a native llama.cpp build (bringup bench native)")
    ap.add_argument("--native-root", type=Path, default=RESOURCES / "llama_cpp_native",
                    help="where the native build is found or made when --native-build is not given")
    ap.add_argument("--no-native", action="store_true",
                    help="measure only the portable llama.cpp (bench.json and bench.md say the native build was not "
                         "compared); snakemake: --config bench='{native: false}'")
    ap.add_argument("--ours-isa", action="append", default=[], metavar="LEVEL",
                    help="also run our program with BU_ISA=LEVEL (e.g. avx2) as engine ours_LEVEL; repeatable. "
                         "'auto': avx2 when the host has AVX-512 (the level the program would not pick), else none")
    ap.add_argument("--ours-build", action="append", default=[], metavar="NAME=DIR",
                    help="also run another build of ours from the same weights (DIR/build/, DIR/ir/; e.g. the "
                         "ggml-q8 numerics, rule bench_build) as engine ours_NAME, compared with llama.cpp like "
                         "ours; NAME: a lower-case letter then up to 15 lower-case letters or digits, not an ISA "
                         "level; repeatable")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds one run of our CLI may take")
    ap.add_argument("--no-progress", action="store_true", help="no line per run (the round lines stay)")
    a = ap.parse_args(argv)
    if a.rounds < 1 or a.max_rounds < a.rounds:
        raise BringupError("--rounds must be >= 1 and --max-rounds >= --rounds")
    if not 0 < a.spread_target < 10:
        raise BringupError("--spread-target must be a number in (0, 10)")
    tests = [rounds.parse_test(t) for t in a.tests.split(",") if t.strip()]
    threads = _thread_counts(a.threads)
    regular_file(a.gguf, "--gguf")   # first: a mistyped path is the likeliest wrong input
    res = a.results
    cli, lib, weights = res / "build" / "bringup-run", res / "build" / "libmodel.so", res / "convert" / "weights.bump"
    ir_path, tok_path, cfg_path = res / "ir" / "ir_decode.json", res / "convert" / "tokenizer.json", res / "convert" / "config.json"
    manifest_path = res / "convert" / "weights_manifest.json"
    missing = [str(p) for p in (cli, lib, weights, ir_path, tok_path, cfg_path, manifest_path) if not p.is_file()]
    if missing:
        raise BringupError(f"bench: missing inputs: {', '.join(missing)}")
    gguf_sha256 = check_gguf(a.gguf, manifest_path)
    out_dir = a.out_dir or res / "bench"
    ir = canonjson.read(ir_path, "ir_decode.json")
    tok = canonjson.read(tok_path, "tokenizer.json")
    n_vocab = canonjson.read(cfg_path, "config.json")["hparams"]["n_vocab"]
    # a tg test without context starts from BOS (llama-bench's first token), or id 0 without one
    start = tok["special"]["bos"] if tok["special"].get("bos") is not None else 0
    bos = tok["special"]["bos"] if tok.get("add_bos") else None
    builds = _builds(a.ours_build, res, ir)
    levels = [x for lv in a.ours_isa for x in (_auto_isa() if lv == "auto" else [lv])]
    for level in dict.fromkeys(levels):
        if not re.fullmatch(r"[a-z0-9]+", level):
            raise BringupError(f"--ours-isa {level!r}: an ISA level name is lower-case letters and digits")
        if level in builds:
            raise BringupError(f"--ours-build {level}: engine ours_{level} is already the forced ISA level {level}")
    native, skipped = _native(a)

    before = host.load_average()
    with tempfile.TemporaryDirectory(prefix="bringup-bench-") as d:
        exe, probe_cmd = host.build_probe(Path(d))
        nbytes = a.bandwidth_bytes or host.probe_bytes()
        bandwidth = [host.measure_bandwidth(exe, th, nbytes, a.bandwidth_repeats) for th in threads]
    engines = {"ours": _ours_engine(cli, lib, weights, a.timeout, start, None)}
    for level in dict.fromkeys(levels):
        engines[f"ours_{level}"] = _ours_engine(cli, lib, weights, a.timeout, start, level)
    for name, d in builds.items():
        engines[f"ours_{name}"] = _ours_engine(d / "build" / "bringup-run", d / "build" / "libmodel.so", weights,
                                               a.timeout, start, None)
    build_irs = {f"ours_{n}": canonjson.read(d / "ir" / "ir_decode.json", "ir_decode.json") for n, d in builds.items()}
    engines["llama_cpp_portable"] = _llama_engine(a.gguf, None, start)
    if native:
        engines["llama_cpp_native"] = _llama_engine(a.gguf, native["lib_dir"], start)
    # one untimed run of ours first: the weights file enters the page cache before round 1
    NativeProgram(cli, lib, weights, threads=1, timeout_s=a.timeout).run(["--prompt-tokens", str(start), "--max-tokens", "1"])
    seeds = {t.name: a.seed * 1000 + i for i, t in enumerate(tests)}
    samples, last, per_threads = rounds.run_rounds(engines, tests, threads, a.rounds,
                                                   lambda t: rounds.test_tokens(n_vocab, t, seeds[t.name], bos),
                                                   progress=not a.no_progress, max_rounds=a.max_rounds,
                                                   target=a.spread_target)
    after = host.load_average()
    rows = rounds.summarize(samples)
    desc = host.describe()
    doc = {
        "schema_version": 1, "model": a.model,
        "measured_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "gguf": {"path": rel(a.gguf), "sha256": gguf_sha256},
        "settings": {"tests": [t.name for t in tests], "threads": threads, "rounds": max(p["rounds"] for p in per_threads),
                     "rounds_rule": {"rule": rounds.ROUNDS_RULE, "min": a.rounds, "max": a.max_rounds,
                                     "spread_target": a.spread_target, "per_threads": per_threads},
                     "seed": a.seed,
                     "order": "per round: every test, each on every engine, the engines' order rotated by the round",
                     "tokens": "random ids in [0, n_vocab) from the seed, first = BOS when the model adds one"},
        "host": {**{k: desc[k] for k in ("lscpu", "cpu", "cpu_count", "platform")},
                 "load_average_before": before, "load_average_after": after},
        "bandwidth": [{k: b[k] for k in ("threads", "bytes", "repeats", "best_gb_per_s", "median_gb_per_s",
                                         "passes_gb_per_s")} for b in bandwidth],
        "bandwidth_probe": {"source": "csrc/bench/bu_bandwidth.c", "command": probe_cmd},
        "engines": _engines(cli, lib, res, last, native, builds, build_irs),
        "results": rows, "ratios": rounds.ratios(rows),
        "effective_bandwidth": report.effective_bandwidth(rows, ir, bandwidth, build_irs),
        "samples": samples,
        "caveats": _caveats(before, after, desc["cpu_count"], skipped, a.rounds, nbytes, max(threads), per_threads)
        + [n for n in (traffic.moe_note(ir),) if n],
    }
    validate(doc, "bench", "bench.json")
    report.write_renderings(doc, out_dir)
    canonjson.write(out_dir / "bench.json", doc)  # last: bench.json present = the bench is complete
    for r in doc["ratios"]:
        if r["vs"] == "llama_cpp_best":
            print(f"bench {a.model} t={r['threads']} {r['test']}: {r['engine']} / llama.cpp ({r['best_is']}) "
                  f"{r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f})")
    if skipped:
        print(f"bench {a.model}: {skipped}")
    print(f"bench {a.model}: wrote {out_dir / 'bench.json'}, bench.md, bench.png")
    return 0


def _engines(cli: Path, lib: Path, res: Path, last: dict[str, dict], native: dict | None,
             builds: dict[str, Path], build_irs: dict[str, dict]) -> list[dict[str, Any]]:
    out = []
    for eng in (e for e in last if rounds.is_ours(e)):
        d = builds.get(eng[5:]) if eng != "ours" else None
        prov_path = (d or res) / "build" / "provenance.json"
        prov = json.loads(prov_path.read_text()) if prov_path.is_file() else {}
        if d is not None:
            dims = build_irs[eng]["dims"]
            what = (f"another build from the same weights ({rel(d)}: numerics {dims.get('numerics')}, KV cache "
                    f"{'/'.join(sorted({s['dtype'] for s in build_irs[eng].get('state', [])}))})")
            e_cli, e_lib = d / "build" / "bringup-run", d / "build" / "libmodel.so"
        else:
            what = f"BU_ISA={eng[5:]}" if eng != "ours" else ""
            e_cli, e_lib = cli, lib
        out.append({"id": eng, "description": f"bringup-run --json --timing{', ' + what if what else ''}: its "
                    f"prompt-eval clock (pp) and decode clock (tg; sampling and loading excluded); kernels ISA "
                    f"{last[eng].get('isa') or 'unreported'}, compiled with "
                    f"{' '.join(prov.get('isa_flags', ['unrecorded flags']))}",
                    "cli_sha256": sha256_file(e_cli), "lib_sha256": sha256_file(e_lib),
                    "isa_flags": prov.get("isa_flags", []), "runtime_isa": last[eng].get("isa"),
                    "runtime_isa_dispatch": last[eng].get("isa_dispatch")})
        if d is not None:
            out[-1]["parity"] = build_parity(d, out[-1]["lib_sha256"])
    p = last.get("llama_cpp_portable", {})
    out.append({"id": "llama_cpp_portable", "description": f"llama-cpp-python {p.get('package_version')} wheel library "
                f"(bootstrap.sh: GGML_NATIVE=OFF, AVX/AVX2/FMA/F16C); {p.get('system_info')}",
                "version": p.get("package_version"), "system_info": p.get("system_info"), "params": p.get("params")})
    if native:
        n = last.get("llama_cpp_native", {})
        out.append({"id": "llama_cpp_native", "description": f"llama.cpp {native['version']} built with GGML_NATIVE=ON "
                    f"for {native['isa']['march']} ({native['compiler']}); {n.get('system_info')}",
                    "version": native["version"], "system_info": n.get("system_info"), "params": n.get("params"),
                    "isa": native["isa"], "cmake_flags": native["cmake_flags"], "build_dir": rel(Path(native["lib_dir"]).parent)})
    return out


def native_main(argv: Sequence[str] | None = None) -> int:
    """``bringup bench native``: build or reuse llama.cpp for this host's ISA; prints build.json."""
    ap = Parser(prog="bringup bench native", description=llama_native.__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, default=RESOURCES / "llama_cpp_native")
    ap.add_argument("--expect", help="the folder name (<version>-<isa>) the caller expects; exit 2 when it differs")
    ap.add_argument("--jobs", type=int, help="parallel compile jobs (default: all cores)")
    ap.add_argument("--print-dir", action="store_true", help="print the folder name only (no build)")
    a = ap.parse_args(argv)
    if a.print_dir:
        print(llama_native.build_dir(a.root).name)
        return 0
    want = llama_native.build_dir(a.root)
    if a.expect and want.name != a.expect:
        raise BringupError(f"this host's native build is {want.name}, not {a.expect}")
    meta = llama_native.ensure(a.root, jobs=a.jobs)
    print(json.dumps(meta, indent=2, sort_keys=True))
    return 0


def render_main(argv: Sequence[str] | None = None) -> int:
    """``bringup bench render bench.json [--out-dir D]``: bench.md and bench.png again."""
    ap = Parser(prog="bringup bench render", description="redraw bench.md and bench.png from bench.json")
    ap.add_argument("bench_json", type=Path)
    ap.add_argument("--out-dir", type=Path, help="default: the folder of bench.json")
    a = ap.parse_args(argv)
    doc = canonjson.read(a.bench_json, "bench.json")
    validate(doc, "bench", str(a.bench_json))
    for p in report.write_renderings(doc, a.out_dir or a.bench_json.parent):
        print(p)
    return 0


JOBS = {
    "run": (run_main, "measure ours against llama.cpp (portable, native) and the DRAM bandwidth"),
    "native": (native_main, "build once (or find) llama.cpp for this host's ISA in resources/"),
    "render": (render_main, "redraw bench.md and bench.png from a bench.json"),
}


def cli_main(argv: list[str]) -> int:
    """Dispatch ``bringup bench JOB ...``; exit 2 on a missing or unknown job."""
    return subcommands.dispatch("bringup bench", JOBS, argv)
