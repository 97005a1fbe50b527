"""pyproject.toml and environment.yml pin the same packages at the same versions."""
import re
import tomllib

import yaml

from bringup.core.paths import ROOT


def _pins(reqs):
    out = {}
    for r in reqs:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)==([^\s;]+)", r.strip())
        if m:
            out[m[1].lower()] = m[2]
    return out


def test_pyproject_and_environment_yml_pin_the_same_set():
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    want = _pins(py["dependencies"])
    for extra in py["optional-dependencies"].values():
        want.update(_pins(extra))
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_list = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    got = _pins(pip_list)
    assert got == want


def test_every_dependency_is_pinned():
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(py["dependencies"]) + [r for e in py["optional-dependencies"].values() for r in e]
    assert all("==" in r for r in reqs), [r for r in reqs if "==" not in r]


def test_bootstrap_says_up_front_how_long_its_compile_takes(tmp_path):
    # a copy whose .venv python has no llama_cpp and whose pip fails at once: what is printed before
    import os
    import shutil
    import subprocess
    shutil.copy(ROOT / "bootstrap.sh", tmp_path / "bootstrap.sh")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    stub = tmp_path / ".venv" / "bin" / "python"
    stub.write_text("#!/bin/sh\nexit 1\n")
    stub.chmod(0o755)
    r = subprocess.run(["bash", "bootstrap.sh"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    first = r.stdout.splitlines()[0]
    n = len(os.sched_getaffinity(0))    # what nproc counts
    assert first == (f"bootstrap: the first run compiles llama.cpp from source, about {(8 + n - 1) // n} min "
                     f"on this machine's {n} core(s); later runs take seconds"), first
