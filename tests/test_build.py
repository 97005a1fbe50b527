"""Build stage (bringup.build) on a tiny synthetic llama model taken through the whole pipeline:
a GGUF written here with random weights -> convert -> compile -> plan -> codegen -> build.

``tiny_pipeline()`` (tests/helpers/pipeline.py) is shared with the tests of other stages (built
once per test session, in a temporary folder). The numerical check of the built program against an
independent float64 numpy forward pass (bringup.parity.oracles.reference.NumpyReference) is in tests/test_cli.py.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bringup.build import program as build
from bringup.build import kernel_lib, sources
from bringup.core import schemas
from bringup.core.hashing import sha256_file
from tests.helpers.pipeline import tiny_pipeline


def test_build_writes_library_cli_and_provenance():
    p = tiny_pipeline()
    prov = json.loads(p["provenance"].read_text())
    schemas.validate(prov, "build_provenance")
    assert prov["artifacts"]["libmodel.so"] == sha256_file(p["lib"])
    assert prov["artifacts"]["bringup-run"] == sha256_file(p["cli"])
    assert "-march=x86-64-v2" in prov["isa_flags"] and "-ffp-contract=off" in prov["cflags"]
    # one driver: the kernel library's flags are the program's, which only adds to them
    assert prov["cflags"][:len(kernel_lib.DEFAULT_FLAGS)] == list(kernel_lib.DEFAULT_FLAGS)
    assert prov["compiler"]["version"].startswith("gcc")
    # provenance names exactly the C files compiled: the source lists and the generated model
    compiled = {k for k in prov["sources"] if k.endswith(".c")}
    assert {k for k in compiled if k.startswith("csrc/")} == \
        {f"csrc/{f}" for f in (*sources.KERNELS, *sources.COMMON, *sources.RUNTIME, *sources.TOKENIZER, *sources.CLI)}
    assert [k for k in compiled if not k.startswith("csrc/")] == [f"{p['codegen'].name}/model.c"]
    lib_cmd, cli_cmd = prov["commands"]["libmodel.so"], prov["commands"]["bringup-run"]
    assert {a for a in lib_cmd if a.endswith(".c")} == \
        {f"./csrc/{f}" for f in (*sources.KERNELS, *sources.COMMON, *sources.RUNTIME, *sources.TOKENIZER)} | \
        {"$CODEGEN/model.c"}
    assert [a for a in cli_cmd if a.endswith(".c")] == [f"./csrc/{f}" for f in (*sources.COMMON, *sources.CLI)]
    for k, v in prov["sources"].items():
        if k.startswith("csrc/"):
            assert sha256_file(build.ROOT / k) == v
    assert {k for k in prov["sources"] if k.endswith(".h") and k.startswith("csrc/")} == \
        {f"csrc/{h.relative_to(build.ROOT / 'csrc')}"
         for h in sources.program_headers()}


def test_every_c_file_belongs_to_one_binary():
    """A C file under csrc/ is in exactly one source list (or is a test driver), so a new file is
    never silently left out of a build, and a test driver is never linked into one."""
    lists = (sources.KERNELS, sources.COMMON, sources.RUNTIME, sources.TOKENIZER, sources.CLI, sources.TEST_DRIVERS,
             sources.BENCH, sources.FUZZ)
    named = [f for group in lists for f in group]
    assert len(named) == len(set(named)), sorted(f for f in named if named.count(f) > 1)
    on_disk = {str(p.relative_to(build.ROOT / "csrc")) for p in (build.ROOT / "csrc").rglob("*.c")}
    assert set(named) == on_disk, (set(named) ^ on_disk)


def _dynamic(path: Path) -> str:
    return subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout


def test_origin_rpath_and_no_absolute_paths():
    p = tiny_pipeline()
    for art in (p["lib"], p["cli"]):
        dyn = _dynamic(art)
        assert "[$ORIGIN]" in dyn, dyn
        data = art.read_bytes()
        assert str(build.ROOT).encode() not in data, f"{art.name} contains the checkout path"
        assert str(p["build"].parent).encode() not in data, f"{art.name} contains the build path"


@pytest.mark.slow   # builds another whole (tiny) model: the fast lane builds one per session
def test_build_is_reproducible(tmp_path):
    p = tiny_pipeline()
    prov = build.build(p["codegen"], tmp_path / "again")
    first = json.loads(p["provenance"].read_text())
    assert prov["artifacts"] == first["artifacts"]
    assert (tmp_path / "again" / "provenance.json").read_bytes() == p["provenance"].read_bytes()


def test_library_exports_the_runtime_and_tokenizer():
    p = tiny_pipeline()
    syms = subprocess.run(["nm", "-D", "--defined-only", str(p["lib"])], capture_output=True, text=True,
                          check=True).stdout
    for name in ("bu_api_get", "bu_open", "bu_tok_load", "bu_tok_encode", "bu_sampler_new",
                 "bu_model_descriptor", "bu_linear_q8_0_scalar"):
        assert f" {name}\n" in syms, name


def test_missing_model_c_is_a_clear_error(tmp_path):
    with pytest.raises(build.BringupError, match="run `bringup codegen` first"):
        build.build(tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow   # compiles every source of a model before model.c fails
def test_compile_error_is_a_clear_error_and_leaves_nothing(tmp_path):
    (tmp_path / "model.c").write_text("this is not C\n")
    with pytest.raises(build.BringupError, match="gcc failed building libmodel.so"):
        build.build(tmp_path, tmp_path / "out")
    assert not (tmp_path / "out" / "libmodel.so").exists()
    assert not any((tmp_path / "out").glob(".*tmp"))
