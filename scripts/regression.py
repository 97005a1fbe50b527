"""Snakemake entry point of the regression: rules regression_summary and regression_verdict.

regression_summary runs `bringup regression`, which writes the summary pass or fail (exit 6, a
failed gate, still completes the job; a missing certification cannot reach it, the DAG stops
first); regression_verdict writes PASSED only when every model passed, so `snakemake regression`
exits non-zero, after the summary is written, while any gate fails.
"""
import json
from pathlib import Path

from bringup.core.errors import GateError
from bringup.core.hashing import sha256_file
from bringup.core.smk import run_stage

i, o = snakemake.input, snakemake.output
if snakemake.rule == "regression_summary":
    # results/<model>/certify/certification.json -> results/
    results = Path(i.certifications[0]).parents[2] if i.certifications else Path("results")
    run_stage(snakemake, "regression", [
        "--models", *snakemake.params.models, "--registry", snakemake.params.registry, "--results", results,
        "--out-dir", Path(o.json).parent], ok_codes=(0, GateError.exit_code))
else:  # regression_verdict
    summary = json.loads(Path(i.json).read_text())
    failed = [m["model"] for m in summary["models"] if m["status"] != "pass"]
    if failed:
        msg = f"regression FAILED for {', '.join(failed)} (evidence: {i.md})"
        Path(snakemake.log[0]).write_text(msg + "\n")
        raise SystemExit(msg)
    Path(snakemake.log[0]).write_text("regression passed\n")
    Path(o[0]).write_text(f"pass {sha256_file(i.json)}\n")
