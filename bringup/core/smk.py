"""The thin glue between Snakemake `script:` entry points and bringup's command modules.

A rule's script calls ``run_stage(snakemake, "convert", [...])``: the command runs in-process with
stdout/stderr going to the rule's log, and a non-zero exit fails the job with the log's last lines.
Its progress lines go to the log and also to the job's own stderr (bringup.core.progress.echo_to):
the terminal Snakemake runs in, so a 7-minute parity is seen where the person is looking.
"""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from bringup.core import progress, reuse
from bringup.core.cli import main


def run_stage(smk, command: str, argv: list[str], ok_codes: tuple[int, ...] = (0,), log: str | None = None) -> int:
    """Run ``bringup <command> argv`` for a rule; ``ok_codes`` are the exit codes that still make
    the job a success (certify's 6, a failed gate, leaves its reports as evidence); ``log``: this
    command's log when a job runs several (default: the rule's first). Returns the code."""
    log = Path(log) if log else Path(smk.log[0]) if smk.log else None
    argv = [str(a) for a in argv]
    if log is None:
        rc = main([command, *argv])
    else:
        log.parent.mkdir(parents=True, exist_ok=True)
        with (open(log, "w") as fh, progress.echo_to(sys.stderr), contextlib.redirect_stdout(fh),
              contextlib.redirect_stderr(fh)):
            print(f"$ bringup {command} {' '.join(argv)}", flush=True)
            rc = main([command, *argv])
    if rc not in ok_codes:
        tail = log.read_text().splitlines()[-15:] if log else []
        sys.stderr.write("\n".join(tail) + "\n")
        raise SystemExit(f"bringup {command} failed with exit code {rc}")
    return rc


def parity_argv(smk) -> list:
    """``bringup parity``'s arguments for a rule with parity_model's inputs, params and output
    (parity_model, and bench_parity on another build of the bench)."""
    i = smk.input
    return ["--model", smk.wildcards.model, "--gguf", i.gguf, "--cli", i.cli, "--lib", i.lib,
            "--weights", i.weights, "--ir", i.ir, "--profile", i.profile, "--prompts", i.prompts,
            "--threads", smk.params.threads, "--oracle-threads", smk.params.oracle_threads,
            "--out-dir", Path(smk.output.parity).parent]


def run_reused(smk, run) -> int:
    """Run ``run()`` (the job's commands, returning an exit code) unless the job's content key
    (bringup.core.reuse.job_key over its rule, wildcards, params and input files, code included)
    is stored in ``<results of the model>/.reuse/<rule>/``: then its stored outputs are copied back
    and the log says "reused: inputs identical to <key>". Returns the exit code."""
    outputs = {name: Path(p) for name, p in smk.output.items()}
    store = Path(smk.output[0]).parents[1] / ".reuse" / smk.rule
    key = reuse.job_key(smk.rule, dict(smk.wildcards.items()), dict(smk.params.items()), list(smk.input))
    rc, _ = reuse.reuse_or_run(key, store, outputs, Path(smk.log[0]) if smk.log else None, run)
    return rc
