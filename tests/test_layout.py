"""The layout is a contract: from a target rule's name X a newcomer finds rules/X.smk,
scripts/X.py, `bringup X` and the package bringup/X/; modules stay small, functions short, imports sit at the top
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


def test_bringup_and_every_command_answer_version():
    """``bringup --version`` and ``bringup <command> --version`` (answered in one place, core.cli);
    after ``--`` the words are another program's."""
    from bringup.core import cli
    want = re.compile(r"bringup \d+\.\d+\.\d+\S* \(commit ([0-9a-f]{12}|unknown)(\+dirty)?\)")
    for argv in (["--version"], *([c, "--version"] for c in sorted(COMMANDS)), ["plan", "arena", "--version"]):
        r = subprocess.run([sys.executable, "-m", "bringup", *argv], capture_output=True, text=True, cwd=ROOT,
                           timeout=120)
        assert r.returncode == 0 and want.fullmatch(r.stdout.strip()), (argv, r.stdout, r.stderr[-300:])
    assert not cli._asks_version(["serve", "--model", "m", "--", "--version"])
    assert not cli._asks_version(["frobnicate", "--version"])   # an unknown command stays an error


def test_a_reader_that_goes_away_is_no_error():
    """``bringup --help | true``: stdout's reader is gone before the text is written; exit 141 as a
    shell tool, no traceback and no error line (it was a BrokenPipeError traceback, exit 1)."""
    r = subprocess.run(["bash", "-c", f"set -o pipefail; '{sys.executable}' -m bringup --help | true"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 141 and r.stderr == "", (r.returncode, r.stderr[-500:])


#: A stage package's command-line modules: ``cli.py``, or ``<job>_cli.py`` where a package serves
#: two commands (build: ``bringup kernels``; parity: ``bringup xray``; certify and export: the
#: reviewer's ``verify-results`` / ``verify``).
def _is_cli_module(path: Path) -> bool:
    return path.name == "cli.py" or path.name.endswith("_cli.py")


#: Algorithm modules that still hold their stage's command line, each with the reason.
CLI_INSIDE_OK = {
    # `bringup chat` / `bringup serve`: two-line entries of the run package that call run/cli.py
    "bringup.run.chat": "a two-line entry calling bringup.run.cli",
    "bringup.run.serve": "a two-line entry calling bringup.run.cli",
}
#: Modules of a stage package that import argparse though not a cli module, each with the reason.
ARGPARSE_OK = {
    # a process of its own (`python -m bringup.bench.llama_runner`): one llama.cpp build per process
    "bringup/bench/llama_runner.py": "its own process's entry (python -m), not a stage command",
}


def _imports_argparse(tree: ast.AST) -> bool:
    return any(isinstance(n, ast.Import) and any(a.name.split(".")[0] == "argparse" for a in n.names)
               or isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "argparse"
               for n in ast.walk(tree))


def test_each_stage_entry_lives_in_its_own_cli_module():
    """Every command's module is a cli module of its package (or a stated exception), and no other
    module of a stage package imports argparse: parsing is the entry's, the algorithm takes values."""
    for cmd, (module, _) in COMMANDS.items():
        if module in CLI_INSIDE_OK:
            continue
        assert _is_cli_module(Path(module.replace(".", "/") + ".py")), (cmd, module)
    stage_pkgs = {m.split(".")[1] for m, _ in COMMANDS.values()} - {"core", "formats"}
    offenders = []
    for pkg in sorted(stage_pkgs):
        for path in sorted((PKG / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if _is_cli_module(path) or rel in ARGPARSE_OK:
                continue
            if _imports_argparse(ast.parse(path.read_bytes(), rel)):
                offenders.append(rel)
    assert not offenders, f"algorithm modules importing argparse (move the parsing to the stage's cli.py): {offenders}"
    for name in CLI_INSIDE_OK:
        assert (ROOT / (name.replace(".", "/") + ".py")).is_file(), name


def _py_modules():
    return sorted(PKG.rglob("*.py"))


def test_modules_are_small():
    big = {str(p.relative_to(ROOT)): n for p in _py_modules() if (n := len(p.read_text().splitlines())) > 500}
    big |= {str(p.relative_to(ROOT)): n for p in sorted(CSRC.rglob("*.c"))
            if (n := len(p.read_text().splitlines())) > 600}
    assert not big, f"over 500 lines (Python) / 600 (C): {big}"


#: The house limit on a function's length: its ``def`` line to its last line, docstring included.
FUNCTION_LINES = 80
#: Functions over FUNCTION_LINES for now, as ``path:name``; an entry whose function is no longer
#: long fails the test too, so the entry goes when the split lands.
LONG_FUNCTIONS_OK: set[str] = set()   # stated exceptions, each with its reason: none today


def _function_lengths(path: Path) -> list[tuple[str, int]]:
    """(``path:name``, lines) of every function and method of a module, nested ones included."""
    rel = path.relative_to(ROOT).as_posix()
    return [(f"{rel}:{n.name}", n.end_lineno - n.lineno + 1) for n in ast.walk(ast.parse(path.read_text(), rel))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_functions_are_short():
    long = [(name, n) for p in _py_modules() for name, n in _function_lengths(p) if n > FUNCTION_LINES]
    over = [f"{name} ({n} lines)" for name, n in long if name not in LONG_FUNCTIONS_OK]
    assert not over, f"functions over {FUNCTION_LINES} lines (split them into named steps):\n" + "\n".join(over)
    no_longer = sorted(LONG_FUNCTIONS_OK - {name for name, _ in long})
    assert not no_longer, f"LONG_FUNCTIONS_OK entries no longer over {FUNCTION_LINES} lines (remove them): {no_longer}"


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


# C includes run one way (issue 31 section 4). A folder of csrc/ may include the headers of the
# folders listed for it and nothing else: public headers (csrc/include/) include only public
# headers, so the runtime's API cannot pull in the generated code's ABI (bu_model_abi.h) or a
# component's internals; the CLI sees the public headers, common/ and its own; the fuzz targets
# may reach anything they fuzz.
C_INCLUDE_RULES = {
    "include": {"include"},
    "common": {"common"},
    "kernels": {"include", "kernels"},
    "runtime": {"include", "common", "runtime"},
    "tokenizer": {"include", "common", "tokenizer"},
    "cli": {"include", "common", "cli"},
    "bench": set(),
    "fuzz": {"include", "common", "kernels", "runtime", "tokenizer", "cli"},
}
_C_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def _c_includes() -> dict[Path, list[str]]:
    return {p: _C_INCLUDE.findall(p.read_text()) for p in sorted(CSRC.rglob("*.[ch]"))}


def test_c_includes_run_one_way():
    where: dict[str, list[Path]] = {}
    for h in CSRC.rglob("*.h"):
        where.setdefault(h.name, []).append(h)
    assert not {n: ps for n, ps in where.items() if len(ps) > 1}, "a header name must say one header"
    assert set(C_INCLUDE_RULES) == {d.name for d in CSRC.iterdir() if d.is_dir()}, "a csrc folder without a rule"
    bad = []
    for p, names in _c_includes().items():
        folder = p.relative_to(CSRC).parts[0]
        for n in names:
            if n not in where:
                bad.append(f"{p.relative_to(ROOT)} includes {n}, which is no header of csrc/")
            elif where[n][0].parent.name not in C_INCLUDE_RULES[folder]:
                bad.append(f"{p.relative_to(ROOT)} ({folder}/) includes {where[n][0].relative_to(ROOT)}")
    assert not bad, "includes against the direction of C_INCLUDE_RULES:\n" + "\n".join(bad)


def test_the_cli_is_a_leaf_util_and_main_alone():
    # cli/util.h includes no other CLI header; bringup_run.c holds main and nothing includes a .c
    # file; the CLI's headers include each other without a cycle
    inc = {p: names for p, names in _c_includes().items() if p.parent == CSRC / "cli"}
    assert [n for n in inc[CSRC / "cli" / "util.h"] if (CSRC / "cli" / n).is_file()] == []
    assert not [(p.name, n) for p, names in _c_includes().items() for n in names if n.endswith(".c")]
    mains = [p.name for p in (CSRC / "cli").glob("*.c") if re.search(r"^int main\(", p.read_text(), re.M)]
    assert mains == ["bringup_run.c"]
    graph = {p.name: [n for n in names if (CSRC / "cli" / n).is_file()] for p, names in inc.items() if p.suffix == ".h"}
    seen: dict[str, int] = {}

    def visit(h: str, path: tuple[str, ...]) -> None:
        assert h not in path, f"include cycle: {' -> '.join((*path, h))}"
        if seen.get(h) == 1:
            return
        for n in graph[h]:
            visit(n, (*path, h))
        seen[h] = 1

    for h in graph:
        visit(h, ())


def test_the_generated_code_sees_the_model_abi_not_the_host_api():
    # model.c includes bu_model_abi.h (which builds on the public bu_runtime.h), never the reverse
    tmpl = (PKG / "codegen" / "templates" / "model.c.j2").read_text()
    assert _C_INCLUDE.findall(tmpl) == ["bu_kernels.h", "bu_model_abi.h", "model.h"]
    assert "bu_model_abi.h" not in _C_INCLUDE.findall((CSRC / "include" / "bu_runtime.h").read_text())
