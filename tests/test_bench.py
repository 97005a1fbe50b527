"""The bench stage (docs/bench.md): its schema, its renderings from a fabricated bench.json, the
decode traffic model against hand-computed sums, the DRAM probe, and one tiny real run.
Speed is never asserted: only that numbers exist, are positive and are wired through."""
from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from bringup.bench import cli as bench_cli
from bringup.bench import host, llama_native, report, rounds, traffic
from bringup.formats import bench_summary
from bringup.core.errors import BringupError
from bringup.regression import render as regression_render
from bringup.core.paths import ROOT
from bringup.core.schemas import validate
from bringup.core import smk
from bringup.core.cli import main as cli_main
from tests.helpers.parity import Synthetic, run_synthetic

# A decode IR of two layers: each has a 1000-byte linear weight and an attention op over a K and a
# V cache of 8 + 8 bytes per position; layer 1 attends over a 4-position window. Plus a 10-row
# embedding table of 500 bytes, read as one row (50 bytes), and a 300-byte head.
TINY_IR = {
    "tensors": {"tok_embd": {"kind": "weight", "bytes": 500, "shape": [10, 25]},
                "w0": {"kind": "weight", "bytes": 1000, "shape": [10, 10]},
                "w1": {"kind": "weight", "bytes": 1000, "shape": [10, 10]},
                "out": {"kind": "weight", "bytes": 300, "shape": [10, 10]}},
    "state": [{"name": f"k{i}", "dtype": "F32", "bytes_per_position": 8} for i in (0, 1)]
    + [{"name": f"v{i}", "dtype": "F32", "bytes_per_position": 8} for i in (0, 1)],
    # the ops as the header alone (index: the place in the expanded op list, bringup.ir.block)
    "header": [{"index": i, **op} for i, op in enumerate([
        {"id": "embed", "op": "embed", "weights": {"table": "tok_embd"}},
        {"id": "l0.q", "op": "linear", "weights": {"w": "w0"}},
        {"id": "l0.attn", "op": "attention", "params": {"window": None}, "state": {"k": "k0", "v": "v0"}},
        {"id": "l1.q", "op": "linear", "weights": {"w": "w1"}},
        {"id": "l1.attn", "op": "attention", "params": {"window": 4}, "state": {"k": "k1", "v": "v1"}},
        {"id": "head", "op": "linear", "weights": {"w": "out"}}])],
    "block": {"n_layer": 0, "ops": [], "layers": []}, "footer": [],
}


def test_traffic_counts_weights_once_the_embedding_row_and_windowed_kv():
    w = traffic.weight_bytes(TINY_IR)
    assert w == {"weights": 2300, "embed_row": 50, "tensors": 3}
    # steps at positions 2, 3, 4, 5: layer 0 reads 3, 4, 5, 6 positions; layer 1 min(p + 1, 4)
    kv0 = 16 * (3 + 4 + 5 + 6) / 4
    kv1 = 16 * (3 + 4 + 4 + 4) / 4
    b = traffic.decode_bytes(TINY_IR, 2, 4)
    assert b == {"weights": 2350.0, "kv": kv0 + kv1, "total": 2350.0 + kv0 + kv1}
    assert traffic.decode_bytes(TINY_IR, 2, 4, kv_bytes_scale=0.5)["kv"] == (kv0 + kv1) / 2
    with pytest.raises(BringupError):
        traffic.decode_bytes(TINY_IR, 0, 0)
    bad = copy.deepcopy(TINY_IR)
    bad["header"][1]["weights"]["w"] = "nope"
    with pytest.raises(BringupError, match="nope"):
        traffic.weight_bytes(bad)


def test_traffic_counts_only_the_active_experts():
    """A routed FFN (moe_ffn) reads n_used of n_expert experts per token: 2 of 8 of each stacked tensor."""
    ir = copy.deepcopy(TINY_IR)
    ir["tensors"].update({n: {"kind": "weight", "bytes": 8000, "shape": [8, 10, 100]} for n in ("eg", "eu", "ed")})
    ir["header"].insert(2, {"id": "l0.experts", "op": "moe_ffn", "dims": {"n_expert": 8, "n_used": 2},
                            "weights": {"w_gate": "eg", "w_up": "eu", "w_down": "ed"}})
    ir["header"] = [dict(op, index=i) for i, op in enumerate(ir["header"])]
    assert traffic.weight_bytes(ir) == {"weights": 2300 + 3 * 2000, "embed_row": 50, "tensors": 6}
    note = traffic.moe_note(ir)
    assert "2 active experts of 8" in note and "6,000 of the 24,000" in note
    assert traffic.moe_note(TINY_IR) is None


def test_test_names_parse_and_tokens_are_shared_and_seeded():
    assert rounds.parse_test("tg128@d1024") == rounds.Test("tg", 128, 1024)
    assert rounds.parse_test("pp512").name == "pp512"
    for bad in ("pp0", "xx5", "tg4@d", "pp-1"):
        with pytest.raises(BringupError):
            rounds.parse_test(bad)
    prompt, depth = rounds.test_tokens(100, rounds.Test("pp", 8), seed=3, bos=1)
    assert len(prompt) == 8 and depth == [] and prompt[0] == 1 and all(0 <= t < 100 for t in prompt)
    assert rounds.test_tokens(100, rounds.Test("pp", 8), seed=3, bos=1) == (prompt, depth)
    prompt, depth = rounds.test_tokens(100, rounds.Test("tg", 4, 16), seed=3, bos=None)
    assert prompt == [] and len(depth) == 16


def _samples():
    """Three rounds, two tests, three engines, two thread counts, with known numbers."""
    out = []
    speeds = {"ours": [10.0, 12.0, 11.0], "llama_cpp_portable": [20.0, 25.0, 30.0], "llama_cpp_native": [40.0, 35.0, 45.0]}
    for th in (1, 2):
        for r in range(3):
            for test in ("pp16", "tg4@d8"):
                for i, (eng, v) in enumerate(speeds.items()):
                    tps = v[r] * th * (0.5 if test.startswith("tg") else 1)
                    out.append({"threads": th, "round": r, "test": test, "engine": eng, "ms": 1000 * 4 / tps,
                                "tokens": 4, "tok_per_s": tps, "order": i})
    return out


def test_summary_and_ratios_are_median_min_max():
    rows = rounds.summarize(_samples())
    cell = next(r for r in rows if (r["threads"], r["test"], r["engine"]) == (1, "pp16", "llama_cpp_portable"))
    assert cell["rounds"] == 3 and cell["tok_per_s"]["median"] == statistics.median([20.0, 25.0, 30.0])
    assert (cell["tok_per_s"]["min"], cell["tok_per_s"]["max"]) == (20.0, 30.0)
    rat = {(r["threads"], r["test"], r["vs"]): r for r in rounds.ratios(rows)}
    best = rat[(1, "pp16", "llama_cpp_best")]
    assert best["best_is"] == "llama_cpp_native" and best["median"] == pytest.approx(11.0 / 40.0)
    assert best["min"] == pytest.approx(10.0 / 45.0) and best["max"] == pytest.approx(12.0 / 35.0)
    assert rat[(2, "pp16", "llama_cpp_portable")]["median"] == pytest.approx(22.0 / 50.0)


def fabricated_doc() -> dict:
    """A complete bench.json from the fabricated samples (no program runs)."""
    rows = rounds.summarize(_samples())
    bandwidth = [{"threads": 1, "bytes": 1 << 28, "repeats": 3, "best_gb_per_s": 20.0, "median_gb_per_s": 19.0,
                  "passes_gb_per_s": [18.0, 19.0, 20.0]},
                 {"threads": 2, "bytes": 1 << 28, "repeats": 3, "best_gb_per_s": 30.0, "median_gb_per_s": 29.0,
                  "passes_gb_per_s": [28.0, 29.0, 30.0]}]
    return {
        "schema_version": 1, "model": "tiny", "measured_at": "2026-12-01T00:00:00Z",
        "gguf": {"path": "resources/models/tiny.gguf", "sha256": "0" * 64},
        "settings": {"tests": ["pp16", "tg4@d8"], "threads": [1, 2], "rounds": 3, "seed": 0, "order": "rotated",
                     "tokens": "random"},
        "host": {"lscpu": {"Model name": "Test CPU"}, "cpu": {"flags": ["avx2"], "model_name": "Test CPU"},
                 "cpu_count": 2, "platform": "test", "load_average_before": [0.1, 0.1, 0.1],
                 "load_average_after": [0.2, 0.1, 0.1]},
        "bandwidth": bandwidth, "bandwidth_probe": {"source": "csrc/bench/bu_bandwidth.c", "command": ["gcc"]},
        "engines": [{"id": e, "description": f"engine {e}"} for e in rounds.ENGINES],
        "results": rows, "ratios": rounds.ratios(rows),
        "effective_bandwidth": report.effective_bandwidth(rows, TINY_IR, bandwidth),
        "samples": _samples(), "caveats": ["fabricated"],
    }


def test_schema_accepts_a_bench_and_rejects_a_broken_one():
    doc = fabricated_doc()
    validate(doc, "bench")
    for breaks in (lambda d: d.pop("results"), lambda d: d["results"][0].update(engine="vllm"),
                   lambda d: d["settings"].update(tests=["pp0"]), lambda d: d["bandwidth"][0].update(best_gb_per_s=0)):
        bad = copy.deepcopy(doc)
        breaks(bad)
        with pytest.raises(BringupError, match="bench"):
            validate(bad, "bench")


def test_effective_bandwidth_is_bytes_times_median_over_dram():
    doc = fabricated_doc()
    e = next(x for x in doc["effective_bandwidth"] if (x["threads"], x["engine"]) == (2, "ours"))
    # ours tg4@d8 at 2 threads: median 11 * 2 * 0.5 = 11 tok/s; steps at positions 8..11
    b = traffic.decode_bytes(TINY_IR, 8, 4)
    assert e["bytes_per_token"] == b and e["gb_per_s"] == pytest.approx(b["total"] * 11.0 / 1e9)
    assert e["share_of_dram"] == pytest.approx(e["gb_per_s"] / 30.0)
    llama = next(x for x in doc["effective_bandwidth"] if (x["threads"], x["engine"]) == (2, "llama_cpp_native"))
    assert llama["bytes_per_token"]["kv"] == pytest.approx(b["kv"] / 2)  # its F16 cache
    assert not any(x["test"] == "pp16" for x in doc["effective_bandwidth"])


def test_renderings_from_a_fabricated_bench_json(tmp_path):
    doc = fabricated_doc()
    (tmp_path / "bench.json").write_text(json.dumps(doc))
    assert bench_cli.cli_main(["render", str(tmp_path / "bench.json")]) == 0
    md = (tmp_path / "bench.md").read_text()
    assert "| pp16 | 11.0 (10.0–12.0) | 25.0 (20.0–30.0) | 40.0 (35.0–45.0) | 0.44 (0.33–0.60) | 0.28 (0.22–0.34) | 0.28 (0.22–0.34) |" in md
    assert "## 2 threads" in md and "**Caveat:** fabricated" in md and "| 2 | 30.00 | 29.00 | 256 | 3 |" in md
    png = (tmp_path / "bench.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_startup_of_each_engine_is_reported_when_the_runs_carry_it():
    doc = fabricated_doc()
    assert "## Start-up" not in report.render_md(doc)      # older bench.json: no section, nothing invented
    for i, s in enumerate(doc["samples"]):
        s["load_ms"] = 100.0 + i if s["engine"] == "ours" else 50.0
    validate(doc, "bench")
    md = report.render_md(doc)
    ours = sorted(100.0 + i for i, s in enumerate(doc["samples"]) if s["engine"] == "ours")
    assert f"| {report.label('ours')} | {len(ours)} | {statistics.median(ours):.1f} ({ours[0]:.1f}–{ours[-1]:.1f}) |" in md
    assert "SHA-256 check of the whole weights file" in md and "checks no hash" in md
    doc["samples"][0]["load_ms"] = -1.0
    with pytest.raises(BringupError, match="bench"):
        validate(doc, "bench")


def test_bandwidth_probe_builds_and_measures(tmp_path):
    exe, argv = host.build_probe(tmp_path)
    assert exe.is_file() and "-march=x86-64-v2" in argv
    out = host.measure_bandwidth(exe, 2, 8 << 20, repeats=2)
    assert out["threads"] == 2 and out["bytes"] == 8 << 20 and out["best_gb_per_s"] > 0
    assert len(out["passes_gb_per_s"]) == 2
    r = subprocess.run([str(exe), "--bytes", "100", "--threads", "1", "--repeats", "1"], capture_output=True, text=True)
    assert r.returncode == 2 and "4096" in r.stderr


def test_native_build_is_named_by_version_and_resolved_isa():
    isa = llama_native.native_isa()
    assert isa["march"] and isa["flags"] and isa["key"].startswith(isa["march"] + "-")
    name = llama_native.build_dir().name
    assert name == f"{llama_native.installed_version()}-{isa['key']}"
    uri, sha = llama_native.pinned_source(llama_native.installed_version())
    assert uri.path == "vendor/llama.cpp" and len(sha) == 64
    with pytest.raises(BringupError, match="pins 0"):
        llama_native.pinned_source("0.0.0")


def test_rounds_follow_the_measured_spread():
    """rounds.ROUNDS_RULE: a steady cell stops at --rounds; a noisy one runs to --max-rounds, reported
    unsettled; a cell that settles after a noisy start stops there."""
    def steady(threads, test, prompt, depth):
        return {"ms": 1.0, "tokens": test.n, "tok_per_s": 100.0}
    noisy_vals = iter([50.0, 150.0] * 10)
    settling_vals = iter([100.0, 110.0] + [100.0] * 7)   # 0.1 / sqrt(n) <= 0.05 from n = 4

    def of(vals):
        def run(threads, test, prompt, depth):
            return {"ms": 1.0, "tokens": test.n, "tok_per_s": next(vals)}
        return run
    tests, tok = [rounds.parse_test("tg2")], (lambda t: ([], []))
    for engine, want in ((steady, (3, True)), (of(noisy_vals), (7, False)), (of(settling_vals), (4, True))):
        samples, _, per = rounds.run_rounds({"ours": engine}, tests, [2], 3, tok, progress=False, max_rounds=7)
        assert per == [{"threads": 2, "rounds": want[0], "spread_error": pytest.approx(rounds.spread_error(samples),
                                                                                      abs=1e-4),
                        "settled": want[1]}] and len(samples) == want[0], per
    caveats = bench_cli._caveats([0.1] * 3, [0.1] * 3, 2, None, 3, 1 << 30, 1,
                                 [{"threads": 2, "rounds": 7, "spread_error": 0.3, "settled": False}])
    assert any("did not settle in 7 rounds" in c for c in caveats), caveats


def test_bad_arguments_are_one_line_errors(tmp_path):
    (tmp_path / "x.gguf").write_bytes(b"GGUF")
    r = subprocess.run([sys.executable, "-m", "bringup", "bench", "run", "--model", "x", "--results", str(tmp_path),
                        "--gguf", str(tmp_path / "x.gguf"), "--no-native"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "missing inputs" in r.stderr and "Traceback" not in r.stderr
    with pytest.raises(BringupError, match="thread count"):
        bench_cli._thread_counts("1,zero")
    assert bench_cli._thread_counts("1,all,1") == sorted({1, bench_cli.os.cpu_count()})


def test_the_gguf_is_checked_before_any_work(tmp_path, monkeypatch, capsys):
    """``--gguf``: a missing path, a folder, or a file that is not the GGUF the results were
    converted from (weights_manifest.json's gguf_sha256) is one line, exit 2, before the bandwidth
    probe, the native build or a round runs."""
    res = tmp_path / "results"
    for f in ("build/bringup-run", "build/libmodel.so", "convert/weights.bump", "ir/ir_decode.json",
              "convert/tokenizer.json", "convert/config.json"):
        (res / f).parent.mkdir(parents=True, exist_ok=True)
        (res / f).write_text("{}")
    good, other = tmp_path / "m.gguf", tmp_path / "other.gguf"
    good.write_bytes(b"GGUF the model")
    other.write_bytes(b"GGUF another model")
    (res / "convert" / "weights_manifest.json").write_text(json.dumps({"gguf_sha256": hashlib.sha256(
        good.read_bytes()).hexdigest()}))

    def no_work(*a, **k):
        raise AssertionError("work started before --gguf was checked")
    monkeypatch.setattr(host, "build_probe", no_work)
    monkeypatch.setattr(llama_native, "ensure", no_work)
    monkeypatch.setattr(rounds, "run_rounds", no_work)
    for gguf, says in ((tmp_path / "typo.gguf", "--gguf not found: "), (tmp_path, "--gguf .* is a directory"),
                       (other, r"--gguf .*other\.gguf is not the GGUF .* was converted from \(its SHA-256 ")):
        rc = cli_main(["bench", "run", "--model", "m", "--results", str(res), "--gguf", str(gguf)])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and re.match(r"bringup bench: error: " + says, err), err
    assert bench_cli.check_gguf(good, res / "convert" / "weights_manifest.json") == hashlib.sha256(
        good.read_bytes()).hexdigest()


def test_another_build_of_ours_is_checked_and_gets_its_own_traffic(tmp_path):
    ir = {"inputs_sha256": {"weights_manifest": "a" * 64}}
    res = tmp_path / "res"
    for spec, why in (("Q8=x", "lower-case letter"), ("8q=x", "lower-case letter"), ("avx2=x", "not an ISA level"),
                      ("q8", "expected NAME=DIR"), ("q8=", "expected NAME=DIR"), (f"q8={tmp_path}", "missing")):
        with pytest.raises(BringupError, match=why):
            bench_cli._builds([spec], res, ir)
    twin = tmp_path / "twin"
    for f in ("build/bringup-run", "build/libmodel.so", "ir/ir_decode.json"):
        (twin / f).parent.mkdir(parents=True, exist_ok=True)
        (twin / f).write_text("")
    (twin / "ir" / "ir_decode.json").write_text(json.dumps(ir))
    assert bench_cli._builds([f"q8act={twin}"], res, ir) == {"q8act": twin}
    with pytest.raises(BringupError, match="twice"):
        bench_cli._builds([f"q8act={twin}", f"q8act={twin}"], res, ir)
    with pytest.raises(BringupError, match="measured build itself"):
        bench_cli._builds([f"q8act={twin}"], twin, ir)
    with pytest.raises(BringupError, match="built from other weights"):  # another model's build
        bench_cli._builds([f"q8act={twin}"], res, {"inputs_sha256": {"weights_manifest": "b" * 64}})
    # an F16-cache build: its own decode IR's KV bytes, half the F32 build's
    samples = _samples() + [{**s, "engine": "ours_f16kv"} for s in _samples() if s["engine"] == "ours"]
    rows = rounds.summarize(samples)
    f16_ir = {**TINY_IR, "state": [{**st, "dtype": "F16", "bytes_per_position": 4} for st in TINY_IR["state"]]}
    eff = report.effective_bandwidth(rows, TINY_IR, fabricated_doc()["bandwidth"], {"ours_f16kv": f16_ir})
    by = {(e["threads"], e["engine"]): e["bytes_per_token"] for e in eff}
    assert by[(2, "ours_f16kv")]["kv"] == pytest.approx(by[(2, "ours")]["kv"] / 2)
    assert by[(2, "ours_f16kv")]["weights"] == by[(2, "ours")]["weights"]


def test_another_build_carries_its_parity_verdict(tmp_path):
    """bench.json records each other build's parity (rule bench_parity) for the library it benched,
    and bench.md lists its gates; none, or one of another library, is said, never passed on."""
    d = tmp_path / "q8act"
    lib = hashlib.sha256(b"lib").hexdigest()   # the benched libmodel.so
    assert bench_cli.build_parity(d, lib)["verdict"] == "not checked"
    par, _ = run_synthetic(Synthetic(noise=1e-6, seed=4))   # a parity document of a synthetic program
    par["program"] = {"lib_sha256": lib}
    (d / "parity").mkdir(parents=True)
    (d / "parity" / "parity.json").write_text(json.dumps(par))
    got = bench_cli.build_parity(d, lib)
    assert got["verdict"] == "pass" and [g["id"] for g in got["gates"]] == [g["id"] for g in par["gates"]]
    doc = fabricated_doc()
    doc["engines"].append({"id": "ours_q8act", "description": "another build", "parity": got})
    validate(doc, "bench")
    md = report.render_md(doc)
    assert "## Parity of the other builds" in md and "- **ours (q8act)**: pass" in md
    assert "  - reference_kl (exact): " in md and " <= 1e-05" in md
    assert bench_cli.build_parity(d, hashlib.sha256(b"rebuilt").hexdigest())["verdict"] == "stale"
    (d / "parity" / "parity.json").write_text("{}")
    with pytest.raises(BringupError):
        bench_cli.build_parity(d, lib)


def test_the_load_caveat_discounts_the_benchs_own_threads():
    def loaded(before, after):
        return any("host was loaded" in c for c in bench_cli._caveats([before], [after], 2, None, 3, 1 << 40, 2))
    # after a 2-thread test the 1-minute average is about 2 on a quiet 2-CPU host: not a loaded host
    assert not loaded(0.3, 1.9) and loaded(1.5, 1.9) and loaded(0.3, 3.5)


def _bench_job(native: bool) -> SimpleNamespace:
    """The ``snakemake`` object scripts/bench.py sees in a bench_model job (the parts bench_argv reads)."""
    r = "results/m"
    inp = SimpleNamespace(ir=f"{r}/ir/ir_decode.json", gguf="resources/models/m.gguf",
                          native="resources/llama_cpp_native/v-isa/build.json" if native else [])
    return SimpleNamespace(input=inp, params=SimpleNamespace(builds=["q8act"], native=native), threads=4,
                           wildcards=SimpleNamespace(model="m"), output=SimpleNamespace(json=f"{r}/bench/bench.json"))


def test_config_bench_native_false_runs_the_bench_without_the_native_build():
    """``snakemake bench --config bench='{native: false}'``: rule bench_model runs ``bringup bench run
    --no-native`` (no --native-build), and the results say the native build was not compared."""
    on, off = ([str(x) for x in smk.bench_argv(_bench_job(n))] for n in (True, False))
    assert on[on.index("--native-build") + 1] == "resources/llama_cpp_native/v-isa/build.json"
    assert "--no-native" not in on and "--native-build" not in off and "--no-native" in off
    # the rest of the command line is the same
    assert [x for x in on if "native" not in x] == [x for x in off if x != "--no-native"]
    assert off[off.index("--threads") + 1] == "1,4" and "q8act=results/m/bench/q8act" in off
    assert bench_cli._native(SimpleNamespace(no_native=True)) == (None, bench_cli.NO_NATIVE)
    caveats = bench_cli._caveats([0.1], [0.1], 2, bench_cli.NO_NATIVE, 3, 1 << 40, 1)
    assert caveats == [bench_cli.NO_NATIVE] and "native build was not compared" in caveats[0]


def test_config_bench_native_is_in_the_schema_and_the_dag():
    """The switch is a documented config key (schema, config.yaml, docs/bench.md) and leaves rule
    bench_llama_native (the 10-40 min compile) out of `snakemake bench`'s DAG."""
    schema = json.loads((ROOT / "config" / "schemas" / "workflow_config.schema.json").read_text())
    assert schema["properties"]["bench"]["properties"]["native"]["enum"] == [True, False, "true", "false"]
    assert "bench='{native: false}'" in (ROOT / "docs" / "bench.md").read_text()
    smk_bin = str(Path(sys.executable).parent / "snakemake")
    for native, want in (("true", True), ("false", False)):
        r = subprocess.run([smk_bin, "bench", "-n", "--forceall", "--config", "model=smollm2",
                            f"bench={{native: {native}, builds: {{}}}}"], capture_output=True, text=True, cwd=ROOT,
                           timeout=600)
        planned = set(re.findall(r"^(?:local)?rule (\w+):", r.stdout + r.stderr, re.M))
        assert r.returncode == 0 and "bench_model" in planned, r.stdout[-2000:] + r.stderr[-2000:]
        assert ("bench_llama_native" in planned) == want, (native, planned)
    r = subprocess.run([smk_bin, "bench", "-n", "--config", "model=smollm2", "bench={native: no}"],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode != 0 and "native" in r.stdout + r.stderr   # not a silent default


def tiny_run(build: dict, out_dir, extra: tuple[str, ...] = ()) -> dict:
    """One round of pp16 and tg4 at 1 thread on the built program, portable llama.cpp only."""
    rc = bench_cli.cli_main(["run", "--model", "smollm2", "--results", str(build["root"]), "--gguf", str(build["gguf"]),
                             "--out-dir", str(out_dir), "--tests", "pp16,tg4", "--threads", "1", "--rounds", "1",
                             "--no-native", "--bandwidth-bytes", str(16 << 20), "--bandwidth-repeats", "2",
                             "--no-progress", *extra])
    assert rc == 0
    return json.loads((out_dir / "bench.json").read_text())


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python (the oracle extra) not installed")
def test_tiny_real_bench_of_smollm2(smollm2_build, tmp_path):
    t0 = time.monotonic()
    # the same build once more as "another build of ours" (rule bench_build's q8act is one): its own engine
    twin = tmp_path / "twin"
    twin.mkdir()
    for d in ("build", "ir"):
        (twin / d).symlink_to(smollm2_build["root"] / d)
    doc = tiny_run(smollm2_build, tmp_path, ("--ours-build", f"twin={twin}"))
    validate(doc, "bench")
    cells = {(r["test"], r["engine"]) for r in doc["results"]}
    assert cells == {(t, e) for t in ("pp16", "tg4") for e in ("ours", "ours_twin", "llama_cpp_portable")}
    assert "another build from the same weights" in next(e for e in doc["engines"] if e["id"] == "ours_twin")["description"]
    assert all(r["tok_per_s"]["median"] > 0 for r in doc["results"])
    assert bench_cli.NO_NATIVE in doc["caveats"] and "native build was not compared" in bench_cli.NO_NATIVE
    llc = host.llc_bytes()
    assert any("measures caches too" in c for c in doc["caveats"]) == bool(llc and (16 << 20) < 8 * llc)
    eff = [e for e in doc["effective_bandwidth"] if e["engine"] == "ours"]
    assert len(eff) == 1 and eff[0]["bytes_per_token"]["weights"] > 90e6 and eff[0]["share_of_dram"] > 0
    assert (tmp_path / "bench.md").is_file() and (tmp_path / "bench.png").is_file()
    print(f"tiny bench took {time.monotonic() - t0:.1f} s")


def test_headline_for_certification_and_regression(tmp_path):
    doc = fabricated_doc()
    next(e for e in doc["engines"] if e["id"] == "ours")["lib_sha256"] = "a" * 64   # the library it timed
    assert bench_summary.headline_of(tmp_path / "absent.json") is None and bench_summary.one_line(None) == "not benched"
    (tmp_path / "bench.json").write_text(json.dumps(doc))
    h = bench_summary.headline_of(tmp_path / "bench.json")
    assert h["threads"] == 2 and h["best_is"]["pp16"] == "llama_cpp_native"
    assert h["ratios"]["pp16"] == pytest.approx(22.0 / 80.0) and h["tok_per_s"]["tg4@d8"] == 11.0
    assert set(h["decode_share_of_dram"]) == {"tg4@d8"} and len(h["sha256"]) == 64
    lib = next(e["lib_sha256"] for e in doc["engines"] if e["id"] == "ours")
    assert h["lib_sha256"] == lib
    before, after = doc["host"]["load_average_before"][0], doc["host"]["load_average_after"][0]
    assert bench_summary.one_line(h) == (f"pp16 0.28x (vs llama_cpp_native), tg4@d8 0.28x (vs llama_cpp_native); bench "
                                         f"{doc['measured_at']}, 2 threads, load {before:g} before, {after:g} after on "
                                         f"{doc['host']['cpu_count']} CPUs")
    # a report cites the bench only for the library it timed
    assert bench_summary.for_library(tmp_path / "bench.json", lib) == (h, None)
    other, why = bench_summary.for_library(tmp_path / "bench.json", "f" * 64)
    assert other is None and "timed another libmodel.so" in why
    assert bench_summary.for_library(tmp_path / "absent.json", lib)[1].startswith("not benched: no ")
    assert bench_summary.prefill_decode(h) == {"prefill": h["ratios"]["pp16"], "decode": h["ratios"]["tg4@d8"]}
    doc["results"] = []
    (tmp_path / "bench.json").write_text(json.dumps(doc))
    with pytest.raises(BringupError, match="bench"):
        bench_summary.headline_of(tmp_path / "bench.json")


def test_a_forced_isa_engine_is_compared_and_rendered(tmp_path):
    samples = _samples() + [{**s, "engine": "ours_avx2", "tok_per_s": s["tok_per_s"] / 2}
                            for s in _samples() if s["engine"] == "ours"]
    doc = fabricated_doc()
    doc["samples"] = samples
    doc["results"] = rounds.summarize(samples)
    doc["ratios"] = rounds.ratios(doc["results"])
    doc["effective_bandwidth"] = report.effective_bandwidth(doc["results"], TINY_IR, doc["bandwidth"])
    validate(doc, "bench")
    r = next(x for x in doc["ratios"] if (x["threads"], x["test"], x["engine"], x["vs"]) == (1, "pp16", "ours_avx2", "llama_cpp_best"))
    assert r["median"] == pytest.approx(5.5 / 40.0)
    md = report.render_md(doc)
    assert "| test | ours | ours (avx2) | llama.cpp (portable) | llama.cpp (native) |" in md
    assert "ours (avx2) / faster llama.cpp" in md and "| 1 | tg4@d8 | ours (avx2) |" in md
    assert bench_summary.headline(doc)["ratios"]["pp16"] == pytest.approx(22.0 / 80.0)  # plain ours only


def test_regression_table_shows_the_bench_headline(tmp_path):
    (tmp_path / "bench.json").write_text(json.dumps(fabricated_doc()))
    h = bench_summary.headline_of(tmp_path / "bench.json")
    rec = {"model": "tiny", "status": "pass", "error": None, "failed_gates": [], "speed_ratio": {"prefill": 0.3, "decode": 0.2},
           "bench": h, "parity_profile": None, "profile_is_default": None, "change": None}
    table = regression_render.models_table({"models": [rec, {**rec, "model": "other", "bench": None},
                                                        {**rec, "model": "gone", "status": "missing", "bench": None}]})
    assert list(table["speed measured"]) == [bench_summary.one_line(h), "not benched", ""]



def test_llama_runner_times_one_small_test_and_refuses_what_names_no_test(smollm2_gguf):
    """The bench's llama.cpp side in its own process (bringup.bench.llama_runner, as rounds.run_llama
    starts it): a 2-token generation test on the portable build, and one line, exit 2, for
    arguments that name no test (the bench itself runs in the slow lane: test_tiny_real_bench_of_smollm2)."""
    runner = [sys.executable, "-m", "bringup.bench.llama_runner", "--gguf", str(smollm2_gguf), "--threads", "1"]
    r = subprocess.run([*runner, "--n-gen", "2"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["tokens"] == 2 and out["tok_per_s"] > 0 and out["params"]["n_threads"] == 1
    r = subprocess.run(runner, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "exactly one of --prompt, --n-gen" in r.stderr
