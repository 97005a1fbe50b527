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
