"""The thin glue between Snakemake `script:` entry points and bringup's command modules.

A rule's script calls ``run_stage(snakemake, "convert", [...])``: the command runs in-process with
stdout/stderr going to the rule's log, and a non-zero exit fails the job with the log's last lines.
Its progress lines go to the log and also to the job's own stderr (bringup.core.progress.echo_to):
the terminal Snakemake runs in, so a 7-minute parity is seen where the person is looking.
A rule with an output named ``code`` (``results/<model>/code/<rule>.json``, schema ``code_record``)
gets the record of the code that produced its other outputs: the stage's code hash
(bringup.core.codedeps) and each output's sha256. It is a file beside the artifacts, never inside
them: an artifact that embedded its code's hash would change with every comment and rerun parity
downstream (bringup.core.reuse).
"""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from bringup.core import canonjson, codedeps, progress, reuse, schemas
from bringup.core.cli import main
from bringup.core.hashing import sha256_file


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
    if "code" in smk.output.keys():
        record_code(smk, command)
    return rc


def record_code(smk, stage: str) -> dict:
    """Write ``smk.output.code``: {schema_version, rule, stage, code: codedeps.code_record(stage),
    outputs: {name: sha256}} over the job's other named outputs. Returns the record."""
    rec = {"schema_version": 1, "rule": smk.rule, "stage": stage, "code": codedeps.code_record(stage),
           "outputs": {name: sha256_file(p, f"output {name}") for name, p in smk.output.items() if name != "code"}}
    schemas.validate(rec, "code_record", "code record")
    canonjson.write(Path(smk.output.code), rec)
    return rec


def parity_argv(smk) -> list:
    """``bringup parity``'s arguments for a rule with parity_model's inputs, params and output
    (parity_model, and bench_parity on another build of the bench)."""
    i = smk.input
    return ["--model", smk.wildcards.model, "--gguf", i.gguf, "--cli", i.cli, "--lib", i.lib,
            "--weights", i.weights, "--ir", i.ir, "--profile", i.profile, "--prompts", i.prompts,
            "--threads", smk.params.threads, "--oracle-threads", smk.params.oracle_threads,
            "--prompt-set", smk.params.prompt_set,
            "--out-dir", Path(smk.output.parity).parent]


def bench_argv(smk) -> list:
    """``bringup bench run``'s arguments for rule bench_model: every core the job was given and 1,
    the other builds of config bench.builds (params ``builds``), and the native llama.cpp build
    (input ``native``) unless config bench.native is false (params ``native``): then
    ``--no-native``, which bench.json and bench.md state."""
    i, p = smk.input, smk.params
    res = Path(i.ir).parent.parent
    builds = [a for name in p.builds for a in ("--ours-build", f"{name}={res / 'bench' / name}")]
    native = ["--native-build", i.native] if p.native else ["--no-native"]
    return ["run", "--model", smk.wildcards.model, "--results", res, "--gguf", i.gguf,
            "--out-dir", Path(smk.output.json).parent, "--threads", f"1,{smk.threads}", *native,
            "--ours-isa", "auto", *builds]


def run_reused(smk, run, skip: tuple[str, ...] = (), extra: dict | None = None) -> int:
    """Run ``run()`` (the job's commands, returning an exit code) unless the job's content key
    (bringup.core.reuse.job_key over its rule, wildcards, params, ``extra`` settings and input
    files, code included) is stored in ``<results of the model>/.reuse/<rule>/``: then its stored
    outputs are copied back and the log says "reused: inputs identical to <key>". ``skip``: names
    of inputs left out of the key (a file the job reads only for what its other inputs already
    determine; the rule says why). Returns the exit code."""
    outputs = {name: Path(p) for name, p in smk.output.items()}
    first = smk.output.code if "code" in smk.output.keys() else smk.output[0]
    store = Path(first).parents[1] / ".reuse" / smk.rule
    inputs = [p for name, files in _named_inputs(smk) if name not in skip for p in files]
    key = reuse.job_key(smk.rule, dict(smk.wildcards.items()), {**dict(smk.params.items()), **(extra or {})}, inputs)
    rc, _ = reuse.reuse_or_run(key, store, outputs, Path(smk.log[0]) if smk.log else None, run)
    return rc


def _named_inputs(smk) -> list[tuple[str | None, list[str]]]:
    """(name, files) of every input of the job; unnamed inputs have the name None."""
    named = {name: [files] if isinstance(files, str) else list(files) for name, files in smk.input.items()}
    seen = {f for files in named.values() for f in files}
    return [*named.items(), *((None, [f]) for f in smk.input if f not in seen)]
