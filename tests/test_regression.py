"""The nightly regression: `bringup regression` on fake certifications (a pass and a fail), its
history, the Snakemake target around it (dry runs, and a real run of the summary jobs in a copy of
the workflow), model selection and the unknown-model error."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from bringup.core import canonjson
from bringup.core.cli import main
from bringup.core.errors import BringupError
from bringup.core.paths import ROOT
from bringup.core.schemas import validate
from bringup.fetch import registry
from bringup.regression import models as selection

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
SHA = "0" * 64
ISSUED = {"bringup_version": "0.1.0", "commit": {"sha": "1" * 40, "dirty": False}, "timestamp": "2026-12-01T12:00:00+00:00"}


def _gate(gid, measured, threshold, cmp=">="):
    passed = measured >= threshold if cmp == ">=" else measured <= threshold
    return {"id": gid, "source": "parity", "metric": gid, "cmp": cmp, "threshold": threshold,
            "measured": measured, "passed": passed, "reason": "test gate"}


def fake_certification(model, top1=0.999, kl=1e-6, prefill=0.3, decode=0.25, profile=None):
    """A schema-valid certification.json with the shape of a real one (results/<m>/certify/):
    two parity gates and one certify gate; the verdict follows the gates."""
    gates = [_gate("reference_top1", top1, 0.99), _gate("reference_kl", kl, 1e-5, "<="),
             {**_gate("standalone_run", 1, 1), "source": "certify"}]
    failed = [g["id"] for g in gates if not g["passed"]]
    f = {"path": "x", "sha256": SHA}
    cert = {
        "schema_version": 1, "model": model, "verdict": "fail" if failed else "pass",
        "failed_gates": failed, "gates": gates,
        "provenance": {"model": {"uris": ["pypi://x==1/y"], "sha256": SHA, "pinned_sha256": SHA,
                                 "sha256_matches_pin": True},
                       "bump": {**f, "payload_sha256": SHA, "header_sha256": SHA}, "convert": {},
                       "circuit": {}, "kernel_maps": {}, "ir": {}, "plan": f, "generated_c": {},
                       "build": {"compiler": "gcc", "cflags": [], "isa_flags": [], "artifacts": {},
                                 "artifacts_match": True},
                       "isa": "x86_64", "toolchain": {}, "oracles": {"llama.cpp": {}}},
        "parity": {"overall": {}, "verdict": "pass", "prompts": [], "settings": {},
                   "inputs": {"profile": {"path": profile or f"config/parity_profiles/{model}.json",
                                          "sha256": SHA}},
                   "parity_json": f},
        "memory_plan": {"arena": {}, "phases": {}}, "memory_model": None,
        # certify times nothing: the bench's headline of the certified library (pp and tg tests)
        "speed": {"lib_sha256": SHA, "not_benched": None, "method": "test",
                  "bench": {"path": f"results/{model}/bench/bench.json", "sha256": SHA,
                            "measured_at": "2026-12-01T10:00:00Z", "threads": 2, "lib_sha256": SHA,
                            "ratios": {"pp512": prefill, "tg128": decode},
                            "best_is": {"pp512": "llama_cpp_native", "tg128": "llama_cpp_native"},
                            "load_average_before": [0.1, 0.1, 0.1], "load_average_after": [0.9, 0.3, 0.1],
                            "cpu_count": 2, "caveats": [], "tok_per_s": {}, "decode_share_of_dram": {}}},
        "code": {"stages": {"parity": {"sha256": SHA, "files": 3}}, "parity_matches": True, "records_match": None, "bench": None},
        "standalone": {"ldd": {}, "run": {"exit_code": 0, "ok": True, "expected_tokens": [1],
                                          "generated_tokens": [1]}},
        "host": {},
        "issued": ISSUED,
    }
    validate(cert, "certification", "fake certification")
    return cert


def _write_cert(results: Path, model: str, **kw) -> Path:
    path = results / model / "certify" / "certification.json"
    canonjson.write(path, fake_certification(model, **kw))
    return path


def _regression(results: Path, *models: str) -> int:
    return main(["regression", "--models", *models, "--results", str(results)])


def _history(results: Path) -> list[dict]:
    return [json.loads(line) for line in (results / "regression" / "history.jsonl").read_text().splitlines()]


def _summary(results: Path) -> dict:
    return json.loads((results / "regression" / "summary.json").read_text())


def test_a_pass_and_a_fail_give_exit_6_a_summary_and_one_history_line(tmp_path, capsys):
    _write_cert(tmp_path, "smollm2")
    _write_cert(tmp_path, "gemma3", top1=0.95, profile="config/parity_profiles/default.json")
    assert _regression(tmp_path, "smollm2", "gemma3") == 6
    assert "gates failed for gemma3" in capsys.readouterr().err
    s = _summary(tmp_path)
    validate(s, "regression_summary")
    assert (s["verdict"], s["exit_code"], s["previous"]) == ("fail", 6, None)
    by = {m["model"]: m for m in s["models"]}
    assert by["smollm2"]["status"] == "pass" and by["gemma3"]["status"] == "fail"
    assert by["gemma3"]["failed_gates"] == ["reference_top1"]
    assert by["gemma3"]["gates"]["reference_top1"] == {"measured": 0.95, "threshold": 0.99, "cmp": ">=",
                                                       "passed": False}
    assert by["smollm2"]["speed_ratio"] == {"prefill": 0.3, "decode": 0.25}
    assert by["smollm2"]["issued"] == ISSUED   # each certification's own version, commit and time
    # the code of every stage the certification names, and its short hash in the table
    assert by["smollm2"]["code"] == {"parity": SHA}
    assert (by["smollm2"]["profile_is_default"], by["gemma3"]["profile_is_default"]) == (False, True)
    assert re.fullmatch(r"[0-9a-f]{40}|unknown", s["run"]["commit"]["sha"])
    assert s["run"]["timestamp"].endswith("+00:00")
    md = (tmp_path / "regression" / "summary.md").read_text()
    assert "| gemma3" in md and "FAIL" in md and "default.json (default)" in md
    # every speed figure says how it was measured: build compared with, date, threads, load
    assert ("pp512 0.30x (vs llama_cpp_native), tg128 0.25x (vs llama_cpp_native); bench 2026-12-01T10:00:00Z, "
            "2 threads, load 0.1 before, 0.9 after on 2 CPUs") in md
    assert "reference_top1" in (tmp_path / "regression" / "summary.html").read_text()
    assert canonjson.sha256({"parity": SHA})[:12] in md
    hist = _history(tmp_path)
    assert len(hist) == 1 and hist[0]["certifications_sha256"] == s["run"]["certifications_sha256"]
    validate(hist[0], "regression_history")


def test_the_same_certifications_again_append_nothing_and_reproduce_the_summary(tmp_path):
    _write_cert(tmp_path, "smollm2")
    _write_cert(tmp_path, "gemma3", top1=0.95)
    assert _regression(tmp_path, "smollm2", "gemma3") == 6
    first = (tmp_path / "regression" / "summary.json").read_bytes()
    assert _regression(tmp_path, "smollm2", "gemma3") == 6
    assert len(_history(tmp_path)) == 1
    assert (tmp_path / "regression" / "summary.json").read_bytes() == first


def test_the_next_night_reports_verdict_flips_and_gate_deltas(tmp_path):
    _write_cert(tmp_path, "smollm2")
    _write_cert(tmp_path, "gemma3", top1=0.95, decode=0.25)
    assert _regression(tmp_path, "smollm2", "gemma3") == 6
    night1 = _summary(tmp_path)["run"]
    _write_cert(tmp_path, "gemma3", top1=0.995, decode=0.5)
    assert _regression(tmp_path, "smollm2", "gemma3") == 0
    s = _summary(tmp_path)
    assert s["verdict"] == "pass" and s["previous"] == night1 and len(_history(tmp_path)) == 2
    by = {m["model"]: m["change"] for m in s["models"]}
    assert by["gemma3"]["previous_status"] == "fail" and by["gemma3"]["verdict_flipped"]
    top1 = by["gemma3"]["gates"]["reference_top1"]
    assert top1["previous"] == 0.95 and top1["verdict_flipped"] and top1["delta"] == pytest.approx(0.045)
    assert by["gemma3"]["speed_ratio_delta"]["decode"] == pytest.approx(0.25)
    assert not by["smollm2"]["verdict_flipped"] and not by["smollm2"]["certification_changed"]
    assert by["smollm2"]["gates"]["reference_top1"]["delta"] == 0


def test_a_missing_certification_is_exit_7_with_the_summary_written(tmp_path, capsys):
    _write_cert(tmp_path, "smollm2", top1=0.5)
    assert _regression(tmp_path, "smollm2", "gemma3") == 7
    assert "no valid certification for gemma3" in capsys.readouterr().err
    s = _summary(tmp_path)
    assert s["verdict"] == "incomplete"
    assert [m["status"] for m in s["models"]] == ["fail", "missing"]


def test_a_corrupt_certification_is_invalid_not_a_traceback(tmp_path):
    path = _write_cert(tmp_path, "smollm2")
    path.write_text("{not json")
    assert _regression(tmp_path, "smollm2") == 7
    assert _summary(tmp_path)["models"][0]["status"] == "invalid"


def test_a_corrupt_history_is_an_integrity_error(tmp_path, capsys):
    _write_cert(tmp_path, "smollm2")
    (tmp_path / "regression").mkdir()
    (tmp_path / "regression" / "history.jsonl").write_text('{"schema_version": 1}\n')
    assert _regression(tmp_path, "smollm2") == 3
    assert "line 1 is not a history record" in capsys.readouterr().err


def test_html_escapes_what_the_certifications_say(tmp_path):
    cert = fake_certification("smollm2", top1=0.5)
    cert["gates"][0]["id"] = cert["failed_gates"][0] = "<script>x</script>"
    canonjson.write(tmp_path / "smollm2" / "certify" / "certification.json", cert)
    assert _regression(tmp_path, "smollm2") == 6
    html = (tmp_path / "regression" / "summary.html").read_text()
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_an_unmeasured_gate_and_a_recorded_default_profile_are_summarized(tmp_path):
    cert = fake_certification("qwen2_synth", top1=0.5)
    cert["gates"][0].update(measured=None, threshold=None)  # a statistical gate without its floor
    cert["parity"]["profile"] = {"path": "config/parity_profiles/default.json", "sha256": SHA,
                                 "default": True}
    canonjson.write(tmp_path / "qwen2_synth" / "certify" / "certification.json", cert)
    assert _regression(tmp_path, "qwen2_synth") == 6
    _write_cert(tmp_path, "qwen2_synth")  # the next night measures it
    assert _regression(tmp_path, "qwen2_synth") == 0
    (m,) = _summary(tmp_path)["models"]
    assert m["change"]["gates"]["reference_top1"] == {"previous": None, "measured": 0.999, "delta": None,
                                                      "verdict_flipped": True}
    assert _history(tmp_path)[0]["models"][0]["profile_is_default"] is True


def test_default_selection_is_every_fetchable_registry_model():
    reg = registry.load()
    chosen = selection.select(reg, None)
    assert {"smollm2", "gemma3", "qwen2_synth", "qwen3_synth", "mistral3_synth", "phi3_synth",
            "gemma2_synth"} <= set(chosen)
    for name, entry in reg.models.items():
        hub = any(u.scheme == "hf" for u in entry.sources)
        assert (name in chosen) == (entry.unverified is None and not hub), name
    # an entry whose architecture convert does not support is not fetchable (not reported missing)
    unsupported = dataclasses.replace(reg.models["gemma2_synth"], architecture="falcon")
    assert selection.fetchable(reg.models["gemma2_synth"]) and not selection.fetchable(unsupported)
    assert selection.select(reg, ["gemma3", "smollm2"]) == ["gemma3", "smollm2"]
    with pytest.raises(BringupError, match="unknown model.*'nosuch'.*smollm2"):
        selection.select(reg, ["smollm2", "nosuch"])


def test_the_large_night_is_left_out_of_the_nightly_selection():
    """config regression.large (the billion-parameter models) leaves the default night; the large
    night's config file names them; an unknown name there is an error, not ignored."""
    reg = registry.load()
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())["regression"]
    large = yaml.safe_load((ROOT / "config/regression_large.yaml").read_text())["regression"]["models"]
    assert cfg["large"] == large == ["llama1b_synth", "qwen3moe_big_synth"] and set(large) <= set(reg.models)
    nightly = selection.select(reg, cfg["models"], cfg["large"])
    assert not set(large) & set(nightly) and {"smollm2", "gemma3"} <= set(nightly)
    assert selection.select(reg, large, cfg["large"]) == ["llama1b_synth", "qwen3moe_big_synth"]
    with pytest.raises(BringupError, match="regression.large: unknown model.*'nosuch'"):
        selection.select(reg, None, ["nosuch"])


def _smk(*args, cwd=ROOT, timeout=600):
    return subprocess.run([SNAKEMAKE, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def _job_counts(dry_run_output: str) -> dict[str, int]:
    table = dry_run_output.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


def test_dry_run_certifies_each_configured_model_once_then_summarizes():
    r = _smk("-n", "--forceall", "regression", "--config", "regression={models: [smollm2, gemma3]}")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    jobs = _job_counts(r.stdout)
    assert jobs["certify_model"] == 2 and jobs["parity_model"] == 2
    assert jobs["regression_summary"] == jobs["regression_verdict"] == jobs["regression"] == 1
    assert "certify_verdict" not in jobs  # the summary needs the evidence, not the PASSED marker
    assert "results/gemma3/certify/certification.json" in r.stdout


def test_dry_run_default_covers_every_fetchable_model():
    r = _smk("-n", "--forceall", "regression")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    large = yaml.safe_load((ROOT / "config/config.yaml").read_text())["regression"]["large"]
    assert _job_counts(r.stdout)["certify_model"] == len(selection.select(registry.load(), None, large))


@pytest.mark.parametrize("override", ["model=nosuch", "regression={models: [smollm2, nosuch]}"])
def test_unknown_model_fails_at_parse_time_listing_the_known_ones(override):
    r = _smk("-n", "certify", "--config", override)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert re.search(r"unknown model.*'nosuch'.*has: .*gemma3.*smollm2", out), out
    assert "parity profile" not in out and "Traceback" not in out


def test_lint_passes_with_the_regression_rules():
    r = _smk("--lint")
    assert r.returncode == 0, r.stdout + r.stderr


# --- the summary jobs for real, in a copy of the workflow (never in the project's results/) ---

def _workflow_copy(tmp_path: Path) -> Path:
    wf = tmp_path / "wf"
    for d in ("rules", "scripts", "config", "reports", "profiles", "envs"):
        shutil.copytree(ROOT / d, wf / d)
    for f in ("Snakefile", "environment.yml"):
        shutil.copy(ROOT / f, wf / f)
    for d in ("csrc", "kernel_maps"):  # the build rule's inputs are read from the IR's providers' maps
        os.symlink(ROOT / d, wf / d)
    (wf / "bringup").mkdir()
    os.symlink(ROOT / "bringup" / "regression", wf / "bringup" / "regression")
    return wf


# Only the regression's own jobs may run; the certifications are given.
ONLY_SUMMARY = ["--allowed-rules", "regression", "regression_summary", "regression_verdict"]


def test_workflow_summary_fails_after_writing_then_reruns_nothing_but_the_verdict(tmp_path):
    wf = _workflow_copy(tmp_path)
    _write_cert(wf / "results", "smollm2")
    _write_cert(wf / "results", "gemma3", top1=0.95)
    cfg = ["--config", "regression={models: [smollm2, gemma3]}"]
    r = _smk("regression", *ONLY_SUMMARY, *cfg, cwd=wf)
    assert r.returncode != 0 and "regression FAILED for gemma3" in r.stdout + r.stderr
    assert _summary(wf / "results")["exit_code"] == 6 and len(_history(wf / "results")) == 1
    again = _smk("-n", "regression", *ONLY_SUMMARY, *cfg, cwd=wf)
    planned = set(re.findall(r"^rule (\w+):", again.stdout, re.M))
    assert planned == {"regression_verdict", "regression"}, again.stdout  # not the summary
    # every gate passing: PASSED is written, and a second run has nothing to do
    _write_cert(wf / "results", "gemma3")
    r = _smk("regression", *ONLY_SUMMARY, *cfg, cwd=wf)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (wf / "results" / "regression" / "PASSED").exists() and len(_history(wf / "results")) == 2
    r = _smk("regression", *ONLY_SUMMARY, *cfg, cwd=wf)
    assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr


# certify_model's inputs, upstream first (their mtimes increase in this order, so nothing before
# certify_model is out of date): stand-ins that make `bringup certify` fail like a crashed stage.
CERTIFY_INPUTS = [
    "resources/models/{m}.gguf", "results/{m}/fetch/provenance.json",
    "results/{m}/convert/weights.bump", "results/{m}/convert/weights_manifest.json",
    "results/{m}/convert/config.json", "results/{m}/convert/tokenizer.json",
    "results/{m}/ir/ir_prefill.json", "results/{m}/ir/ir_decode.json",
    "results/{m}/plan/memory_plan.json", "results/{m}/reports/ir_report.html",
    "results/{m}/codegen/model.c", "results/{m}/codegen/model.h",
    "results/{m}/build/libmodel.so", "results/{m}/build/bringup-run", "results/{m}/build/provenance.json",
    "results/{m}/plan/runtime_calibration.json", "results/{m}/plan/memory_model_calibrated.json",
    "results/{m}/plan/memory_model_calibrated.md",
    "results/{m}/parity/parity.json", "results/{m}/parity/parity_kl.png",
]


def test_workflow_crash_still_writes_the_summary_with_the_model_missing(tmp_path):
    wf = _workflow_copy(tmp_path)
    _write_cert(wf / "results", "smollm2")
    t0 = time.time() + 1000  # newer than every source, so only certify_model is out of date
    for n, pattern in enumerate(CERTIFY_INPUTS):
        f = wf / pattern.format(m="gemma3")
        f.parent.mkdir(parents=True, exist_ok=True)
        # an IR with no ops: the build rule reads the IR's providers to name its kernel sources
        # the memory model sizes certify_model's memory request (rules/common.smk footprint_mb)
        f.write_text('{"header": [], "block": {"n_layer": 0, "ops": [], "layers": []}, "footer": []}\n' if "/ir/" in pattern else
                     '{"total_bytes": 1}\n' if pattern.endswith("memory_model_calibrated.json") else "not an artifact\n")
        os.utime(f, (t0 + n, t0 + n))
    r = _smk("regression", *ONLY_SUMMARY, "certify_model",
             "--config", "regression={models: [smollm2, gemma3]}", cwd=wf)
    assert r.returncode != 0, r.stdout[-3000:] + r.stderr[-3000:]
    s = _summary(wf / "results")
    assert (s["verdict"], s["exit_code"]) == ("incomplete", 7)
    assert [m["status"] for m in s["models"]] == ["pass", "missing"]
    assert not (wf / "results" / "regression" / "PASSED").exists()
