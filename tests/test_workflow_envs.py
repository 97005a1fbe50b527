"""The per-rule conda environments (envs/*.yml): every rule that runs code names one that exists
and parses, pinned as pyproject.toml pins, with no path-relative install (Snakemake copies env
files into .snakemake/conda/ before creating them); llama.cpp only where a rule runs it.

Structure only: creating the environments needs conda and the network (`snakemake --use-conda`),
which the test machine does not have."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

from bringup.core.paths import ROOT

#: Rules that run llama.cpp (the oracle), and so the only ones whose environment has it.
ORACLE_RULES = {"parity_model", "certify_model", "certify_verdict", "bench_llama_native", "bench_parity", "bench_model"}
PIN = re.compile(r"([A-Za-z0-9_.-]+)==([^\s;]+)")


@pytest.fixture(scope="module")
def rules():
    """Every rule of the workflow, parsed by Snakemake itself: {name: (conda env path or None, runs code)}."""
    saved = os.environ.get("PYTHONPATH")
    try:
        with SnakemakeApi(OutputSettings()) as api:
            wf = api.workflow(resource_settings=ResourceSettings(cores=1), snakefile=ROOT / "Snakefile",
                              workdir=ROOT, config_settings=ConfigSettings())._workflow
            pythonpath = os.environ.get("PYTHONPATH", "")
            out = {r.name: ((Path(r.snakefile).parent / r.conda_env).resolve() if r.conda_env else None,
                            not r.norun)
                   for r in wf.rules}
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    out["_pythonpath"] = pythonpath
    return out


def _pyproject_pins() -> dict[str, str]:
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(py["dependencies"]) + [r for extra in py["optional-dependencies"].values() for r in extra]
    return {m[1].lower(): m[2] for m in (PIN.fullmatch(r.strip()) for r in reqs) if m}


def _pip(env: Path) -> list[str]:
    doc = yaml.safe_load(env.read_text())
    assert set(doc) >= {"channels", "dependencies"}, env
    pips = [d["pip"] for d in doc["dependencies"] if isinstance(d, dict)]
    assert len(pips) == 1, env
    return pips[0]


def test_every_rule_that_runs_code_names_an_existing_env_under_envs(rules):
    jobs = {n: v for n, v in rules.items() if n != "_pythonpath" and v[1]}
    assert len(jobs) >= 17
    for name, (env, _) in jobs.items():
        assert env is not None, f"rule {name} has no conda: directive"
        assert env.is_file() and env.parent == ROOT / "envs", (name, env)
    assert {rules[n][0].name for n in ORACLE_RULES} == {"oracle.yml"}
    assert {v[0].name for n, v in jobs.items() if n not in ORACLE_RULES} == {"core.yml"}


@pytest.mark.parametrize("env", sorted((ROOT / "envs").glob("*.yml")), ids=lambda p: p.name)
def test_env_files_parse_and_pin_what_pyproject_pins(env):
    pins = _pyproject_pins()
    for req in _pip(env):
        m = PIN.fullmatch(req.strip())
        assert m, f"{env.name}: {req!r} is not name==version (no -e, no paths: the file is copied before use)"
        assert pins.get(m[1].lower()) == m[2], f"{env.name}: {req} differs from pyproject.toml"


def test_llama_cpp_only_where_a_rule_runs_it(rules):
    core = {PIN.fullmatch(r)[1].lower() for r in _pip(ROOT / "envs" / "core.yml")}
    oracle = {PIN.fullmatch(r)[1].lower() for r in _pip(ROOT / "envs" / "oracle.yml")}
    assert rules["fetch_model"][0].name == "core.yml"
    assert "llama-cpp-python" not in core and "llama-cpp-python" in oracle
    assert core <= oracle   # the oracle rules also run bringup's core code


def test_jobs_import_bringup_from_the_workflow_folder(rules):
    assert rules["_pythonpath"].split(os.pathsep)[0] == str(ROOT)


def test_core_commands_need_nothing_outside_the_core_env():
    """Every command a core rule runs loads with llama_cpp, matplotlib and snakemake unimportable."""
    code = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] in ("llama_cpp", "matplotlib", "snakemake"):
            raise ImportError("not in envs/core.yml: " + name)
sys.meta_path.insert(0, Block())
from bringup.core.cli import main
import bringup.core.smk
for c in ("fetch", "convert", "ir", "plan", "codegen", "build", "export", "regression"):
    try:
        main([c, "--help"])
    except SystemExit as e:
        assert e.code == 0, (c, e.code)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
