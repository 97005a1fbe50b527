"""Snakemake entry point of the certify stage: rules certify_model and certify_verdict.

certify_model writes the reports, pass or fail (they are the evidence), so a failed gate (exit 6)
still completes that job; certify_verdict writes PASSED only for a passing certification, so
`snakemake certify` fails (and reruns the check) until every gate passes.
"""
import json
from pathlib import Path

from bringup.core.errors import GateError
from bringup.core.hashing import sha256_file
from bringup.core.smk import run_stage

i, o = snakemake.input, snakemake.output
if snakemake.rule == "certify_model":
    run_stage(snakemake, "certify", [
        "--model", snakemake.wildcards.model, "--results", Path(i.parity).parent.parent,
        "--gguf", i.gguf, "--out-dir", Path(o.json).parent, "--threads", snakemake.params.threads,
        "--memory-model", i.memory_model], ok_codes=(0, GateError.exit_code))
else:  # certify_verdict
    cert = json.loads(Path(i.json).read_text())
    if cert["verdict"] != "pass":
        msg = (f"certification of {cert['model']} FAILED: {', '.join(cert['failed_gates'])} "
               f"(evidence: {i.md})")
        Path(snakemake.log[0]).write_text(msg + "\n")
        raise SystemExit(msg)
    Path(snakemake.log[0]).write_text(f"certification of {cert['model']} passed\n")
    Path(o[0]).write_text(f"pass {sha256_file(i.json)}\n")
