"""Progress of the long stages (issue 14): on stderr as plain lines when stderr is a file (a rule's
log), never a flood, and never on stdout, where the data outputs go."""
from __future__ import annotations

import io
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
