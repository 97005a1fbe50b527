"""bringup-run on the smollm2 build, shared by the native CLI tests (tests/test_cli_native.py,
tests/test_cli_llama_habits.py): the build fixtures (``tree``, ``native_build``, ``cli_only``; registered
through conftest's pytest_plugins) and the helpers that run the program and read its one-line errors.

The program is the workflow's results/smollm2/build when its provenance lists exactly today's
sources, else it is built once from them (libmodel.so from results/smollm2/codegen, read-only)
into a temporary folder laid out as the workflow does; BRINGUP_TEST_SMOLLM2_BUILD=DIR names an
already built folder (libmodel.so + bringup-run) to use instead."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from bringup.build import compiler, program, sources
from bringup.core.hashing import sha256_file
from bringup.core.paths import RESULTS, ROOT

SMOLLM2 = RESULTS / "smollm2"
FAST = ("--no-verify", "-c", "256")


def _built_from_current_sources(build: Path) -> bool:
    """Whether build/provenance.json lists every C file and header a build compiles now, each with
    the SHA-256 it has now (then the workflow's build can be used as it is)."""
    try:
        recorded = json.loads((build / "provenance.json").read_text())["sources"]
    except (OSError, ValueError, KeyError):
        return False
    now = sources.paths(sources.KERNELS, sources.COMMON, sources.RUNTIME, sources.TOKENIZER, sources.CLI)
    now += sources.program_headers(SMOLLM2 / "codegen")
    if not {str(p.relative_to(ROOT)) for p in now} <= set(recorded):
        return False
    return all((ROOT / k).is_file() and sha256_file(ROOT / k) == v for k, v in recorded.items())


@pytest.fixture(scope="session")
def tree(smollm2_build, tmp_path_factory) -> Path:
    """A results folder holding smollm2/build (built now) and smollm2/convert (the real one, made
    by the workflow)."""
    root = tmp_path_factory.mktemp("results")
    build = root / "smollm2" / "build"
    given = os.environ.get("BRINGUP_TEST_SMOLLM2_BUILD")
    given = given or (SMOLLM2 / "build" if _built_from_current_sources(SMOLLM2 / "build") else None)
    if given:
        build.mkdir(parents=True)
        for name in ("libmodel.so", "bringup-run"):
            (build / name).symlink_to(Path(given, name).resolve())
    else:
        program.build(SMOLLM2 / "codegen", build)
    (root / "smollm2" / "convert").symlink_to(SMOLLM2 / "convert")
    return root


@pytest.fixture(scope="session")
def native_build(tree) -> Path:
    """results/smollm2/build of ``tree`` (libmodel.so + bringup-run). Test modules name it ``build``
    locally: the plugin-wide ``build`` is the kernel library's (tests/helpers/kernels.py)."""
    return tree / "smollm2" / "build"


@pytest.fixture(scope="session")
def cli_only(tmp_path_factory) -> Path:
    """A folder with bringup-run alone (for what is refused before a library is loaded): the
    given or current build's, else compiled now (seconds, not the library's minutes)."""
    given = os.environ.get("BRINGUP_TEST_SMOLLM2_BUILD")
    if given:
        return Path(given)
    if _built_from_current_sources(SMOLLM2 / "build"):
        return SMOLLM2 / "build"
    out = tmp_path_factory.mktemp("cli")
    compiler.gcc(sources.paths(sources.COMMON, sources.CLI), out / "bringup-run", sources.include_dirs(),
                 program.CLI_LDFLAGS)
    return out


def cli(build: Path, *args, input=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([str(build / "bringup-run"), *map(str, args)], capture_output=True, input=input,
                          timeout=timeout)


def err_of(r) -> str:
    return r.stderr.decode("utf-8", "replace")


def one_line_error(r, code: int, *needles: str) -> str:
    e = err_of(r)
    assert r.returncode == code, (r.returncode, e)
    lines = [x for x in e.splitlines() if x.strip()]
    errors = [x for x in lines if x.startswith("bringup-run: error: ")]
    assert len(errors) == 1 and all(x.startswith("bringup-run: ") for x in lines), e   # warnings may precede it
    for n in needles:
        assert n in e, (n, e)
    return e
