"""Progress of the long stages (issue 14): on stderr as plain lines when stderr is a file (a rule's
log), never a flood, and never on stdout, where the data outputs go."""
from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bringup.bench import rounds
from bringup.core import progress
from bringup.core.hashing import sha256_file
from bringup.core.paths import CONFIG, ROOT
from bringup.fetch import registry
from bringup.fetch import sources as fetch
from tests.helpers import parity as synthetic_parity
from tests.helpers import pipeline

LINE = re.compile(r"^\[(\w+)\] ")


def _bringup(args: list, tmp_path: Path) -> tuple[str, str]:
    """Run ``bringup args`` with stdout and stderr in files (not terminals); returns (stdout, log)."""
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.log"
    with open(out, "w") as o, open(err, "w") as e:
        rc = subprocess.run([sys.executable, "-m", "bringup", *map(str, args)], stdout=o, stderr=e,
                            cwd=ROOT, timeout=300).returncode
    assert rc == 0, err.read_text()[-2000:]
    return out.read_text(), err.read_text()


def _progress_lines(log: str, stage: str, what: str) -> list[str]:
    return [ln for ln in log.splitlines() if ln.startswith(f"[{stage}] {what}")]


def test_plain_lines_are_throttled_and_the_last_step_is_always_written():
    buf = io.StringIO()
    with progress.Progress("convert", "tensor", 1000, unit="tensor", stream=buf) as p:
        for i in range(1000):
            p.step(f"t{i}")
    lines = buf.getvalue().splitlines()
    assert len(lines) <= progress.MAX_LINES + 2
    assert any(ln.startswith("[convert] tensor 1000/1000: t999 (") for ln in lines)
    assert re.match(r"^\[convert\] tensor: 1000 tensor\(s\) in [\d.]+ s$", lines[-1])
    buf = io.StringIO()
    with progress.Progress("parity", "run", 5, stream=buf) as p:
        for i in range(5):
            p.step(f"p{i}")
    assert [ln.split(":")[0] for ln in buf.getvalue().splitlines()[:5]] == [f"[parity] run {i}/5" for i in range(1, 6)]


def test_a_terminal_gets_a_bar_not_lines():
    class Tty(io.StringIO):
        def isatty(self):
            return True
    buf = Tty()
    with progress.Progress("convert", "tensor", 3, stream=buf) as p:
        for i in range(3):
            p.step(f"t{i}")
    assert "\r" in buf.getvalue() and "3/3" in buf.getvalue() and "[convert] tensor 1/3:" not in buf.getvalue()


def test_convert_reports_tensors_in_the_log_not_on_stdout(tmp_path):
    gguf = pipeline.write_tiny_gguf(tmp_path / "tiny.gguf")
    out, log = _bringup(["convert", gguf, "--out-dir", tmp_path / "convert", "--verify"], tmp_path)
    assert out == ""
    written, verified = _progress_lines(log, "convert", "tensor written"), _progress_lines(log, "convert", "tensor verified")
    assert written and verified and len(written) <= progress.MAX_LINES + 2
    assert any(re.search(r"tensor written: \d+ tensor\(s\) in", ln) for ln in written)
    # the plan on stdout is data only
    out, log = _bringup(["convert", gguf, "--out-dir", tmp_path / "plan", "--plan-only"], tmp_path)
    assert "architecture llama" in out and not any(LINE.match(ln) for ln in out.splitlines())


@pytest.mark.slow   # builds another whole (tiny) model: the fast lane builds one per session
def test_codegen_and_build_report_phases_and_units(tmp_path):
    p = pipeline.run_pipeline(tmp_path, pipeline.write_tiny_gguf(tmp_path / "tiny.gguf"), build_it=False)
    out, log = _bringup(["codegen", "--ir-dir", p["ir"], "--plan", p["plan"], "--manifest", p["manifest"],
                         "--out-dir", tmp_path / "gen"], tmp_path)
    steps = _progress_lines(log, "codegen", "phase or file")
    assert [s.split(":")[1].strip().split(" (")[0] for s in steps[:4]] == [
        "prefill phase emitted", "decode phase emitted", "model.h rendered", "model.c rendered"]
    assert "model.c (" in out and "phase or file" not in out   # stdout: the loop report only
    out, log = _bringup(["build", "--codegen-dir", tmp_path / "gen", "--out-dir", tmp_path / "bin",
                         "--ir", p["ir"] / "ir_prefill.json", "--ir", p["ir"] / "ir_decode.json"], tmp_path)
    for unit in ("libmodel.so", "bringup-run"):
        assert re.search(rf"^\[build\] compiling {unit} \(\d+ C files\) \.\.\.$", log, re.M)
        assert re.search(rf"^\[build\] compiling {unit} \(\d+ C files\): done in [\d.]+ s$", log, re.M)
    assert out.startswith("built ") and "compiling" not in out


def test_parity_reports_each_prompt_and_program(capsys):
    small = {**synthetic_parity.SMALL_GREEDY, "min_prompts": 1, "min_positions": 1}
    synthetic_parity.run_synthetic(synthetic_parity.Synthetic(noise=1e-6, seed=4),
                                   prompts=synthetic_parity.synthetic_prompts(n=3), profile=small)
    cap = capsys.readouterr()
    assert cap.out == ""
    steps = _progress_lines(cap.err, "parity", "prompt x program")
    labels = [s.split(": ", 1)[1].rsplit(" (", 1)[0] for s in steps[:-1]]
    assert labels[:5] == [f"prompt p0 (130 tokens): {w}" for w in (
        "ours", "llama.cpp", "llama.cpp F32 KV cache", "float64 reference", "float64 reference under ggml-q8")]
    assert len(labels) == 15 and steps[-1].startswith("[parity] prompt x program: 15 run(s) in")


def test_bench_writes_one_line_per_round(capsys):
    def engine(threads, test, prompt, depth):
        return {"ms": 1.0, "tokens": test.n, "tok_per_s": 1000.0 * test.n}
    tests = [rounds.parse_test("pp8"), rounds.parse_test("tg2")]
    rounds.run_rounds({"ours": engine, "llama.cpp": engine}, tests, [1], 3, lambda t: ([1] * t.n, []), progress=False)
    cap = capsys.readouterr()
    assert cap.out == ""
    assert [ln.split(":")[0] for ln in cap.err.splitlines()] == [f"threads 1 round {r}/3" for r in (1, 2, 3)]


def test_fetch_reports_each_part(tmp_path, capsys):
    parts = [tmp_path / "a.part", tmp_path / "b.part"]
    for i, p in enumerate(parts):
        p.write_bytes(bytes([i]) * 5000)
    whole = tmp_path / "whole"
    whole.write_bytes(b"".join(p.read_bytes() for p in parts))
    data = yaml.safe_load((CONFIG / "models.yaml").read_text())
    entry = {k: v for k, v in data["models"]["gemma3"].items() if k not in ("requires", "uri")}
    data["models"]["gemma3"] = {**entry, "parts": [f"file://{p}" for p in parts], "sha256": sha256_file(whole)}
    (tmp_path / "models.yaml").write_text(yaml.safe_dump(data))
    fetch.fetch_model("gemma3", registry.load(tmp_path / "models.yaml"), dest=tmp_path / "m.gguf")
    cap = capsys.readouterr()
    assert cap.out == ""
    assert [ln.split(" (")[0] for ln in _progress_lines(cap.err, "fetch", "part ")] == [
        "[fetch] part 1/2: a.part", "[fetch] part 2/2: b.part"]


def test_every_step_of_a_short_progress_has_its_line_and_an_estimate_of_what_remains():
    # parity's 45 runs once printed 2/45 ... but never 1/45 or 22/45 (throttled to 40 lines)
    buf = io.StringIO()
    with progress.Progress("parity", "prompt x program", 45, unit="run", stream=buf) as p:
        for i in range(45):
            p.step(f"r{i}")
    counts = [int(m.group(1)) for m in re.finditer(r"^\[parity\] prompt x program (\d+)/45: ", buf.getvalue(), re.M)]
    assert counts == list(range(1, 46))
    lines = buf.getvalue().splitlines()
    assert re.search(r"\(\d+\.\d s; about \d+ s left\)$", lines[0]), lines[0]
    assert lines[44].endswith(" s)") and "left" not in lines[44]    # the last step: nothing left


def test_the_estimate_reads_in_seconds_minutes_or_hours():
    assert progress.remaining(1, 45, 10.0) == "about 7 min left"    # 44 steps of 10 s
    assert progress.remaining(9, 10, 9.0) == "about 1 s left"
    assert progress.remaining(1, 1000, 30.0) == "about 8.3 h left"
    assert progress.remaining(0, 10, 0.0) == progress.remaining(10, 10, 5.0) == ""


def test_echo_to_copies_lines_but_never_a_bar_and_survives_a_closed_terminal():
    log, term = io.StringIO(), io.StringIO()
    with progress.echo_to(term):
        with progress.Progress("build", "unit", 2, stream=log) as p:
            p.step("a")
            p.step("b")
        with progress.Timed("build", "compiling"):
            pass
    assert term.getvalue().splitlines()[:2] == log.getvalue().splitlines()[:2]
    assert "[build] unit 2/2: b" in term.getvalue() and "\r" not in term.getvalue()
    assert "[build] compiling: done in" in term.getvalue()
    gone = io.StringIO()
    gone.close()
    with progress.echo_to(gone), progress.Progress("build", "unit", 2, stream=log) as p:
        p.step("a")    # a terminal that went away costs nothing: the log keeps every line
        p.step("b")
    assert log.getvalue().count("[build] unit 2/2: b") == 2
    assert progress._echo is None


def test_under_snakemake_progress_reaches_the_terminal_as_well_as_the_log(tmp_path):
    # a rule whose stderr is its log (log: + run_stage): Snakemake's own stderr still shows the steps
    pipeline.write_tiny_gguf(tmp_path / "tiny.gguf")
    (tmp_path / "conv.py").write_text(
        "from bringup.core.smk import run_stage\n"
        "run_stage(snakemake, 'convert', [snakemake.input[0], '--out-dir', 'out'])\n")
    (tmp_path / "Snakefile").write_text(
        "rule conv:\n    input: 'tiny.gguf'\n    output: 'out/weights.bump'\n"
        "    log: 'logs/convert.log'\n    script: 'conv.py'\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([str(Path(sys.executable).parent / "snakemake"), "-c1", "--quiet"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    log = (tmp_path / "logs" / "convert.log").read_text()
    n = len(_progress_lines(log, "convert", "tensor written")) - 1
    assert n >= 5
    shown = _progress_lines(p.stderr, "convert", "tensor written")
    assert shown == _progress_lines(log, "convert", "tensor written")
    assert re.search(rf"^\[convert\] tensor written {n}/{n}: ", p.stderr, re.M)
