"""The layout is a contract: from a target rule's name X a newcomer finds rules/X.smk,
scripts/X.py, `bringup X` and the package bringup/X/; modules stay small, imports sit at the top
of modules, and no package imports another in a cycle."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bringup.core.cli import COMMANDS
from bringup.core.paths import CSRC, ROOT
from tests.helpers.names import stale_names

PKG = ROOT / "bringup"
# Lazy imports that are allowed, each for a reason: optional extras and heavy plotting backends.
LAZY_OK = {"llama_cpp", "huggingface_hub", "matplotlib", "matplotlib.pyplot", "matplotlib.patches"}


def target_rules() -> list[str]:
    """Rules without wildcards in rules/*.smk: the stage targets (`snakemake X`)."""
    names = []
    for smk in sorted((ROOT / "rules").glob("*.smk")):
        for m in re.finditer(r"^rule (\w+):\n((?:[ \t]+.*\n|\n)*)", smk.read_text(), re.M):
            if "{model}" not in m.group(2) and "output:" not in m.group(2):
                names.append(m.group(1))
    return names


def test_every_stage_has_one_name_everywhere():
    stages = target_rules()
    assert {"fetch", "convert", "ir", "plan", "codegen", "build", "parity", "certify"} <= set(stages)
    for x in stages:
        assert f"rule {x}:" in (ROOT / "rules" / f"{x}.smk").read_text(), x
        assert (ROOT / "scripts" / f"{x}.py").is_file(), x
        init = PKG / x / "__init__.py"
        assert init.is_file() and ast.get_docstring(ast.parse(init.read_text())), x
        assert x in COMMANDS and COMMANDS[x][0].startswith(f"bringup.{x}."), (x, COMMANDS.get(x))


def test_every_rule_runs_its_own_stage_script():
    for smk in sorted((ROOT / "rules").glob("*.smk")):
        for script in re.findall(r'script:\s*\n\s*"\.\./scripts/(\w+)\.py"', smk.read_text()):
            assert script == smk.stem, (smk.name, script)


@pytest.mark.parametrize("cmd", sorted(COMMANDS))
def test_every_command_has_help(cmd):
    r = subprocess.run([sys.executable, "-m", "bringup", cmd, "--help"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0 and "usage:" in r.stdout, (cmd, r.stderr[-500:])


def _py_modules():
    return sorted(PKG.rglob("*.py"))


def test_modules_are_small():
    big = {str(p.relative_to(ROOT)): n for p in _py_modules() if (n := len(p.read_text().splitlines())) > 500}
    big |= {str(p.relative_to(ROOT)): n for p in sorted(CSRC.rglob("*.c"))
            if (n := len(p.read_text().splitlines())) > 600}
    assert not big, f"over 500 lines (Python) / 600 (C): {big}"


def _inline_imports(tree: ast.AST):
    """Modules imported inside a function body (absolute imports only; bringup uses no relative)."""
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for n in ast.walk(fn):
                if isinstance(n, ast.Import):
                    yield from (a.name for a in n.names)
                elif isinstance(n, ast.ImportFrom):
                    yield n.module


def test_imports_sit_at_the_top_of_modules():
    inline = {}
    for p in _py_modules():
        names = set(_inline_imports(ast.parse(p.read_text()))) - LAZY_OK
        if names:
            inline[str(p.relative_to(ROOT))] = sorted(names)
    assert not inline, f"imports inside functions: {inline}"


def _module_name(p: Path) -> str:
    parts = p.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_import_cycles():
    mods = {_module_name(p): p for p in _py_modules()}
    graph: dict[str, set[str]] = {}
    for name, p in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bringup"):
                for a in node.names:  # `from bringup.<pkg> import y`: y may be a module or a name in x
                    deps.add(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in mods}
        graph[name] = {d for d in deps if d in mods and d != name}
    state: dict[str, int] = {}

    def visit(n, path):
        state[n] = 1
        for d in sorted(graph[n]):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(d):] + [d]))
            if not state.get(d):
                visit(d, path + [d])
        state[n] = 2

    for n in sorted(graph):
        if not state.get(n):
            visit(n, [n])


def test_every_module_and_file_named_in_code_data_and_docs_exists():
    # tests/helpers/names.py: what counts as a name, the patterns left alone, the exemptions
    stale = stale_names()
    assert not stale, "names of modules or files that do not exist:\n" + "\n".join(stale)


def test_ruff_finds_nothing():
    # the rule set is pyproject.toml's [tool.ruff]; ruff comes with the test extra (a missing ruff fails)
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", str(ROOT)], capture_output=True,
                       text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_test_modules_import_no_other_test_module():
    # what several test modules share lives in tests/helpers/ (a package); a test module imported by
    # another would also be collected twice under two names, its fixtures and caches doubled
    folder = ROOT / "tests"
    importers = {}
    for p in sorted(folder.glob("*.py")) + sorted((folder / "helpers").glob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                     if isinstance(node, ast.ImportFrom) else [])
            bad = [n for n in names if re.match(r"(tests\.)?test_\w+$", n)]
            if bad:
                importers[str(p.relative_to(ROOT))] = bad
    assert not importers, importers
