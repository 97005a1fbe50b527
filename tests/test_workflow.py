"""The Snakemake DAG: lint, a stage target per model, and a second run that has nothing to do."""
import subprocess
import sys
from pathlib import Path

import pytest

from bringup.core.paths import ROOT

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")


def _smk(*args, timeout=1800):
    return subprocess.run([SNAKEMAKE, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def test_lint_passes():
    r = _smk("--lint")
    assert r.returncode == 0, r.stdout + r.stderr


def test_config_is_schema_validated():
    r = _smk("convert", "--config", "model=Bad Name", "-n")
    assert r.returncode != 0 and "model" in (r.stdout + r.stderr)


@pytest.mark.slow   # runs the workflow's convert on both real models
@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_convert_target_then_nothing_to_do(model):
    r = _smk("convert", "--config", f"model={model}")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = ROOT / "results" / model / "convert"
    for f in ("weights.bump", "weights_manifest.json", "config.json", "tokenizer.json"):
        assert (out / f).stat().st_size > 0
    again = _smk("convert", "--config", f"model={model}", "-n")
    assert again.returncode == 0
    assert "Nothing to be done" in again.stdout + again.stderr


def _planned_rules(dry_run_output: str) -> set[str]:
    import re
    # ir_model is a checkpoint (the build's inputs are read from the IR): Snakemake prints it as such
    return set(re.findall(r"^(?:local)?(?:rule|checkpoint) (\w+):", dry_run_output, re.M))


def test_certify_dag_order_and_a_prompt_change_reruns_only_parity_and_certify(smollm2_build, tmp_path):
    import json
    import os
    import time

    r = _smk("certify", "--config", "model=smollm2", "-n", "--forceall")
    rules = _planned_rules(r.stdout + r.stderr)
    assert {"fetch_model", "convert_model", "ir_model", "plan_model", "codegen_model",
            "build_model", "plan_calibrate", "plan_memory_calibrated", "parity_model",
            "certify_model", "certify_verdict"} <= rules, rules
    # Everything certify needs except the parity evidence is made (cheap once the program is built)...
    r = _smk("results/smollm2/plan/memory_model_calibrated.md", "results/smollm2/fetch/provenance.json",
             "--config", "model=smollm2")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # A touched but unchanged prompt set reruns nothing upstream (Snakemake compares checksums of
    # small inputs, not only mtimes); the verdict check runs while there is no PASSED marker.
    prompts = ROOT / "config" / "prompts" / "default.json"
    now = time.time()
    os.utime(prompts, (now, now))
    r = _smk("certify", "--config", "model=smollm2", "-n")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert _planned_rules(r.stdout + r.stderr) <= {"parity_model", "certify_model", "certify_verdict", "certify"}
    # A changed prompt set (one prompt's text edited) reruns only parity and certify.
    data = json.loads(prompts.read_text())
    edited = next(p for p in data["prompts"] if "text" in p)
    edited["text"] += "\n# one more line\n"
    changed = tmp_path / "prompts.json"
    changed.write_text(json.dumps(data))
    override = json.dumps({"prompts": str(changed), "profiles_dir": "config/parity_profiles"})
    r = _smk("certify", "--config", "model=smollm2", f"parity={override}", "-n")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert _planned_rules(r.stdout + r.stderr) == {"parity_model", "certify_model", "certify_verdict", "certify"}


def _job_mem_mb(dry_run_output: str, rule: str) -> str:
    import re
    block = re.search(rf"^(?:local)?rule {rule}:\n((?:    .*\n)+)", dry_run_output, re.M)
    assert block, dry_run_output[-3000:]
    return re.search(r"mem_mb=([^,\s]+)", block.group(1)).group(1)


def test_model_jobs_request_the_memory_models_footprint(smollm2_build):
    """parity, certify and the calibration run ask the scheduler (local --resources, Slurm --mem) for
    the memory model's footprint (parity also for its logits over the model's vocabulary), not a guess; before the memory model exists the request is
    'to be determined' and Snakemake evaluates it when the job is ready."""
    import json
    r = _smk("results/smollm2/plan/memory_model.json", "results/smollm2/plan/memory_model_calibrated.json",
             "--config", "model=smollm2")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    plan = ROOT / "results" / "smollm2" / "plan"
    mm = json.loads((plan / "memory_model.json").read_text())
    fp = -(-mm["total_bytes"] // 2**20)
    vocab_mb = -(-mm["model"]["hparams"]["n_vocab"] * 24 // 1024)    # parity's logits (rules/common.smk)
    fp_cal = -(-json.loads((plan / "memory_model_calibrated.json").read_text())["total_bytes"] // 2**20)
    r = _smk("certify", "--config", "model=smollm2", "-n", "--forcerun", "parity_model", "plan_calibrate")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert _job_mem_mb(out, "parity_model") == str(2 * fp + vocab_mb + 4096)
    assert _job_mem_mb(out, "plan_calibrate") == str(fp + 512)
    assert _job_mem_mb(out, "certify_model") == str(2 * fp_cal + 1024)


def test_snakemake_without_a_target_means_certify():
    # `snakemake` and `snakemake --report report.html` alone: rule all (the Snakefile), the
    # certification of the configured model, not the first included rule (fetch)
    r = _smk("-n", "--forceall")
    rules = _planned_rules(r.stdout + r.stderr)
    assert r.returncode == 0 and {"all", "certify_verdict", "parity_model", "fetch_model"} <= rules, r.stdout[-2000:]


@pytest.mark.slow   # the certified smollm2 (`snakemake certify` in CI, as test_export's fixture)
def test_report_without_a_target_reports_the_certification(tmp_path):
    import os
    if os.environ.get("CI"):
        r = _smk("certify", "--config", "model=smollm2", timeout=7200)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    if not (ROOT / "results" / "smollm2" / "certify" / "PASSED").is_file():
        pytest.skip("results/smollm2 has no passing certification: run `snakemake certify --config model=smollm2`")
    out = tmp_path / "report.html"
    r = _smk("--report", str(out))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout[-3000:] + r.stderr[-3000:]
    page = out.read_text(errors="replace")
    assert "certification.json" in page and "parity.json" in page
