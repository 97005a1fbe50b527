"""The code a stage runs, found statically: so that code is an input of the job that runs it.

A stage is one or more ``bringup`` commands (``STAGES``); its code is the command modules
(``bringup.core.cli.COMMANDS``) and every module of the ``bringup`` package they import, followed
transitively through ``import``/``from`` statements anywhere in a module (also inside functions:
a lazy import is still code the job may run), read with :mod:`ast`, never executed. To that come
the data the modules name: every ``templates/*.j2`` beside an imported module, the schemas they
validate against (``validate(x, "name")`` and ``"name.schema.json"`` literals), the data folders
they import from ``bringup.core.paths`` (circuits, kernel maps, tensor maps: every file, as the
modules list them) and, of ``reports/``, the files a module names by a string literal (the IR
report's template, script and style are plan's; the certificate's templates are certify's alone). The C sources a build
compiles are named by ``bringup.build.sources.build_inputs`` (per IR), not here.

``code_files(stage)`` is what the rules declare (``rules/common.smk``: ``code_inputs``), so editing a
module reruns exactly the stages that import it; ``code_record(stage)`` is its content hash
(one SHA-256 over the sorted (path, sha256) list), which artifacts record.
"""
from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

from bringup.core import canonjson
from bringup.core.cli import COMMANDS
from bringup.core.errors import BringupError
from bringup.core.hashing import sha256_file
from bringup.core.paths import ROOT

#: Workflow stage (rule family) -> the bringup commands its jobs run.
STAGES: dict[str, tuple[str, ...]] = {
    "fetch": ("fetch",), "convert": ("convert",), "ir": ("ir",), "plan": ("plan",), "codegen": ("codegen",),
    "build": ("build",), "parity": ("parity",), "certify": ("certify",), "export": ("export",),
    "bench": ("bench",), "bench_build": ("ir", "plan", "codegen", "build"), "regression": ("regression",),
}
#: The glue every job runs: the rule's script calls bringup.core.smk, which calls the CLI.
GLUE: tuple[str, ...] = ("bringup.core.smk", "bringup.core.cli")
#: Names of bringup.core.paths that are data folders a module reads: (folder, glob).
DATA_DIRS: dict[str, str] = {"CIRCUITS": "*.json", "KERNEL_MAPS": "*.json", "TENSOR_MAPS": "*.json"}
#: Names of bringup.core.paths whose files a module opens by name: only the named ones are its code.
NAMED_DIRS: dict[str, str] = {"REPORTS": "reports"}
#: A string literal that can name a file of such a folder ("ir_report.js"; no glob character).
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")


def _module_file(name: str, root: Path) -> Path | None:
    """The file of module ``name`` (``bringup.X.Y``) under ``root``: ``X/Y.py`` or ``X/Y/__init__.py``."""
    base = root.joinpath(*name.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def _imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Module names of the bringup package that ``tree`` (module ``module``) imports: for
    ``from a import b`` both ``a`` and ``a.b`` (b may be a module); relative imports resolved."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                parts = parts if is_package else parts[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return {n for n in names if n == "bringup" or n.startswith("bringup.")}


def _with_parents(name: str) -> list[str]:
    """``bringup.A.B`` -> [bringup, bringup.A, bringup.A.B]: importing a module runs its packages."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _data_of(tree: ast.AST) -> set[str]:
    """Schemas and data globs ``tree`` names (see the module docstring), as root-relative globs."""
    out: set[str] = set()
    literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                and _FILE_NAME.fullmatch(n.value)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "validate" \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            out.add(f"config/schemas/{node.args[1].value}.schema.json")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(".schema.json") \
                and "/" not in node.value.replace("config/schemas/", ""):
            out.add("config/schemas/" + node.value.rsplit("/", 1)[-1])
        elif isinstance(node, ast.ImportFrom) and node.module == "bringup.core.paths":
            out.update(f"{a.name.lower()}/{DATA_DIRS[a.name]}" for a in node.names if a.name in DATA_DIRS)
            out.update(f"{NAMED_DIRS[a.name]}/{lit}" for a in node.names if a.name in NAMED_DIRS for lit in literals)
    return out


@lru_cache(maxsize=None)
def _closure(entries: tuple[str, ...], root: Path) -> tuple[str, ...]:
    """Root-relative paths of the modules reachable from ``entries`` and of the data they name."""
    pkg_root = root
    seen: set[str] = set()
    todo = [p for e in entries for p in _with_parents(e)]
    files: set[Path] = set()
    data: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = _module_file(name, pkg_root)
        if path is None:
            continue                    # `from bringup.X import name`: a name, not a module
        files.add(path)
        tree = ast.parse(path.read_bytes(), str(path))
        data |= _data_of(tree)
        for dep in _imported(tree, name, path.name == "__init__.py"):
            todo.extend(p for p in _with_parents(dep) if p not in seen)
    templates = {t for f in files for t in (f.parent / "templates").glob("*.j2")}
    globbed = {p for g in data for p in root.glob(g) if p.is_file()}
    return tuple(sorted(str(p.relative_to(root)) for p in files | templates | globbed))


def code_files(stage: str, root: Path = ROOT) -> list[str]:
    """The code of workflow stage ``stage`` (a key of STAGES): root-relative paths of the bringup
    modules its commands import (transitively), their templates, schemas and data folders, sorted.
    Raises BringupError for an unknown stage."""
    if stage not in STAGES:
        raise BringupError(f"unknown stage {stage!r} for code inputs; stages: {', '.join(STAGES)}")
    entries = tuple(sorted({*GLUE, *(COMMANDS[c][0] for c in STAGES[stage])}))
    return list(_closure(entries, Path(root).resolve()))


def code_record(stage: str, root: Path = ROOT) -> dict:
    """``{"sha256": hex, "files": n}`` of ``stage``'s code: sha256 of the canonical JSON of the
    sorted [[path, sha256 of its bytes], ...] list of :func:`code_files` (paths root-relative)."""
    root = Path(root).resolve()
    listing = [[p, sha256_file(root / p, "code file")] for p in code_files(stage, root)]
    return {"sha256": canonjson.sha256(listing), "files": len(listing)}
