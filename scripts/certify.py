"""Snakemake entry point of the certify stage: rules certify_model and certify_verdict.

certify_model writes the reports, pass or fail (they are the evidence), so a failed gate (exit 6)
still completes that job; certify_verdict writes PASSED only for a passing certification, so
`snakemake certify` fails (and reruns the check) until every gate passes.
"""
from pathlib import Path

from bringup.certify.cli import record_verdict
from bringup.core.errors import GateError
from bringup.core.smk import run_stage

i, o = snakemake.input, snakemake.output
if snakemake.rule == "certify_model":
    run_stage(snakemake, "certify", [
        "--model", snakemake.wildcards.model, "--results", Path(i.parity).parent.parent,
        "--gguf", i.gguf, "--out-dir", Path(o.json).parent, "--threads", snakemake.params.threads,
        "--memory-model", i.memory_model], ok_codes=(0, GateError.exit_code))
else:  # certify_verdict: the verdict and the certification's path on the terminal and in the log
    if not record_verdict(Path(i.json), Path(snakemake.log[0]), Path(o[0])):
        raise SystemExit(f"certification failed (evidence: {i.md})")
