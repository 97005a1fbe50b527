"""Fuzzing smoke tests (docs/fuzzing.md): a short libFuzzer campaign per target from the committed
corpus, a replay of every regression input, and the GGUF importer's structured fuzzer with a
fixed seed. Long campaigns are run by hand with tests/fuzz/run.py (figures in docs/fuzzing.md).

A missing clang or libFuzzer is a failure, not a skip: `bash bootstrap.sh --test` installs them."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bringup.core.errors import BringupError
from tests.fuzz import run as fuzz_run

HERE = Path(__file__).resolve().parent
PY = sys.executable


def test_fuzz_targets_smoke(tmp_path):
    """Each campaign (BUMP reader, tokenizer blob loader, the CLI's chat-format parser, encode/decode on smollm2's and gemma3's
    vocabularies) replays tests/fuzz/regressions and then runs 20,000 executions or 5 s from the
    committed corpus under ASan + UBSan: 0 crashes, leaks, timeouts or broken promises."""
    missing = None
    try:
        fuzz_run.require_clang()
    except BringupError as e:  # the message says how to install clang and libFuzzer
        missing = str(e)
    if missing:
        pytest.fail(missing)
    out = tmp_path / "results.json"
    r = subprocess.run([PY, str(HERE / "fuzz" / "run.py"), "--runs", "20000", "--max-time", "5",
                        "--work", str(tmp_path), "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    results = json.loads(out.read_text())
    assert [c["campaign"] for c in results] == list(fuzz_run.CAMPAIGNS)
    for c in results:
        assert c["executions"] > 0 and c["crashes"] == [] and c["ok"], c


def test_fuzz_corpora_are_committed_and_small():
    """Every campaign has a seed corpus under tests/fuzz/corpus/<campaign>/, 2 MB in all at most."""
    total = 0
    for name in fuzz_run.CAMPAIGNS:
        files = [p for p in (fuzz_run.CORPUS / name).iterdir() if p.is_file()]
        assert files, name
        total += sum(p.stat().st_size for p in files)
    assert total < 2 << 20, total


def test_gguf_structured_fuzz():
    """150 mutated GGUFs (fixed seed) through read_header, plan_conversion and convert: each ends
    in success or a BringupError of exit class 2/3/4, never another exception, a hang or a
    MemoryError; then every GGUF of tests/fuzz/regressions/gguf/ the same way."""
    r = subprocess.run([PY, str(HERE / "fuzz" / "gguf_fuzz.py"), "--examples", "150", "--seed", "0"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-3000:]
    reg = HERE / "fuzz" / "regressions" / "gguf"
    if any(reg.glob("*.gguf")):
        r = subprocess.run([PY, str(HERE / "fuzz" / "gguf_fuzz.py"), "--replay", str(reg)],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-3000:]
