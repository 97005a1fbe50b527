"""The real program under AddressSanitizer + UBSan: libmodel.so and bringup-run of smollm2 and
gemma3 built with `bringup build --sanitize address,undefined` (the generated model.c, the runtime,
the kernels, the tokenizer and the CLI, all instrumented) run prefill, decode on two threads, a
chat turn read from stdin and --dump-hidden with no report. Leaks count as errors (LeakSanitizer)."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from bringup.build import program
from bringup.core.paths import ROOT

from conftest import _snakemake_target

ENV = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=86:strict_string_checks=1:"
                       "detect_stack_use_after_return=1:check_initialization_order=1",
       "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=87"}
PROMPT = "The capital of France is Paris. The capital of Italy is"


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def asan_build(request, tmp_path_factory):
    model = request.param
    _snakemake_target("codegen", model)
    res = ROOT / "results" / model
    out = tmp_path_factory.mktemp(f"asan_{model}")
    prov = program.build(res / "codegen", out, sanitize=["address", "undefined"])
    assert prov["sanitize"] == ["address", "undefined"]
    assert "-fsanitize=address,undefined" in prov["commands"]["libmodel.so"]
    return {"cli": out / "bringup-run", "lib": out / "libmodel.so", "weights": res / "convert" / "weights.bump",
            "model": model}


def _run(b, *args, stdin: str | None = None):
    r = subprocess.run([str(b["cli"]), str(b["lib"]), str(b["weights"]), *args], input=stdin,
                       capture_output=True, text=True, timeout=900, env={**os.environ, **ENV})
    for marker in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
        assert marker not in r.stderr, r.stderr[-4000:]
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    return r


def test_prefill_and_decode(asan_build):
    r = _run(asan_build, "-p", PROMPT, "-n", "12", "-t", "2", "--json", "--no-stop")
    out = json.loads(r.stdout)
    assert len(out["generated_tokens"]) == 12 and len(out["prompt_tokens"]) > 8


def test_chat_turn_from_stdin(asan_build):
    r = _run(asan_build, "-n", "8", "-t", "1", stdin="Say hello.\n")
    assert r.stdout.strip()


def test_dump_hidden(asan_build, tmp_path):
    _run(asan_build, "-p", PROMPT, "-n", "0", "--dump-hidden", str(tmp_path / "hidden"))
    manifest = json.loads((tmp_path / "hidden" / "manifest.json").read_text())
    assert manifest and any(p.suffix == ".f32" for p in (tmp_path / "hidden").iterdir())
