"""Names of the project's own modules and files written in its code, data and docs, and the ones
that do not exist (a stale name sends a reader, or a regenerate command, to nothing).

A dotted name ``bringup.a.b.c`` names the longest prefix that is a module or package; the next
part, if any, must be defined at the top level of that module (def, class, assignment or import).
A path ``bringup/...``, ``csrc/...``, ``docs/....md`` (and the other top-level folders) must exist;
a path with a wildcard (``*``) must match a file; one with a placeholder (``{model}``, ``<m>``,
``X``) is a pattern, not a name, and is left alone. EXEMPT lists the few names that must stay as
they are, each with its reason; an exemption that matches nothing any more is itself reported."""
from __future__ import annotations

import ast
import functools
import re
import subprocess
from pathlib import Path

from bringup.core.paths import ROOT

#: the files read are git's (tracked, or new and not ignored), minus the fuzz corpora (bytes, not
#: text) and this file (its examples and exemptions)
SKIP = ("tests/fuzz/corpus/", "tests/helpers/names.py")
DOTTED = re.compile(r"(?<![\w./-])(?:bringup|tests)(?:\.[a-z_][a-z0-9_]*)+(?![\w-])")
TOPS = ("bringup", "csrc", "docs", "config", "circuits", "kernel_maps", "tensor_maps", "rules", "scripts",
        "tests", "reports", "profiles", "envs")
PATH = re.compile(r"(?<![\w./-])(?:%s)/[\w./*-]*[\w*]" % "|".join(TOPS))
#: a path holding (or followed by) one of these is a pattern (a placeholder for a model, a stage...)
PATTERN_MARKS = ("{", "<", "$", "...", "[")
#: a path part that is one capital letter is a placeholder (`rules/X.smk`, `bringup/X/`)
PLACEHOLDER = re.compile(r"(^|/)[A-Z](/|\.|$)")

#: (file, name) -> why the name stays although it names nothing here
EXEMPT = {
    ("bringup/plan/memory/calibration.py", "bringup.runtime_calibration"): "a document kind, not a module",
    ("config/schemas/memory_model.schema.json", "bringup.runtime_calibration"): "a document kind, not a module",
    ("docs/memory_model.md", "bringup.runtime_calibration"): "a document kind, not a module",
    ("docs/architecture.md", "reports/ir_report.html"): "the stage's output under results/<model>/",
    ("docs/hostile_input.md", "reports/ir_report.html"): "the stage's output under results/<model>/",
    ("docs/bringing-up-a-family.md", "circuits/bert.json"): "the file the guide has you write",
    ("tests/test_tokenizer.py", "tests/test-tokenizer-0.cpp"): "llama.cpp's file, not ours",
    ("tests/helpers/review.py", "config/prompts/review.json"): "written into the test's clone",
    ("tests/test_review.py", "config/prompts/review.json"): "written into the test's clone",
    ("tests/helpers/review.py", "config/parity_profiles_review"): "written into the test's clone",
    ("tests/helpers/review.py", "config/parity_profiles_review/default.json"): "written into the test's clone",
    ("tests/test_code_inputs.py", "bringup/formats/gguf_view.py"): "written into the test's scratch tree",
    ("tests/test_code_inputs.py", "bringup/formats/unused.py"): "written into the test's scratch tree",
    ("tests/test_code_inputs.py", "bringup/parity/templates/page.j2"): "written into the test's scratch tree",
}


def tracked_text_files() -> list[Path]:
    """The text (UTF-8) files of the checkout, tracked or new and not ignored, outside SKIP."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, check=True).stdout
    files = []
    for rel in out.decode().split("\0"):
        p = ROOT / rel
        if not rel or rel.startswith(SKIP) or not p.is_file():
            continue
        try:
            p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        files.append(p)
    return files


@functools.cache
def _top_names(module: Path) -> frozenset[str]:
    """Names bound at the top level of a module (or a package's __init__)."""
    tree = ast.parse(module.read_text())
    names = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
    return frozenset(names)


def dotted_exists(name: str) -> bool:
    """Whether ``bringup.a.b[.attr...]`` names a module, or a name defined in one."""
    parts = name.split(".")
    base, i = ROOT, 0
    while i < len(parts) and ((base / parts[i]).is_dir() or (base / f"{parts[i]}.py").is_file()):
        if (base / f"{parts[i]}.py").is_file():
            base, i = base / f"{parts[i]}.py", i + 1
            break
        base, i = base / parts[i], i + 1
    if i == 0:
        return False
    if i == len(parts):
        return True
    module = base if base.suffix == ".py" else base / "__init__.py"
    return module.is_file() and parts[i] in _top_names(module)


def path_exists(name: str) -> bool:
    """Whether a path relative to the project root exists (or a wildcard matches a file)."""
    name = name.rstrip(".")
    if "*" in name:
        return any(ROOT.glob(name))
    return (ROOT / name).exists()


def _is_pattern(line: str, m: re.Match) -> bool:
    near = m.group(0) + line[m.end():m.end() + 2]
    return any(c in near for c in PATTERN_MARKS) or bool(PLACEHOLDER.search(m.group(0))) or '"$id"' in line


def stale_names() -> list[str]:
    """``file:line: name`` for every module or file name that names nothing (and ``EXEMPT: ...``
    for an exemption that is no longer needed)."""
    bad, used = [], set()
    for p in tracked_text_files():
        rel = p.relative_to(ROOT).as_posix()
        for lineno, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            names = [m.group(0) for m in DOTTED.finditer(line) if not dotted_exists(m.group(0))]
            names += [m.group(0) for m in PATH.finditer(line)
                      if not _is_pattern(line, m) and not path_exists(m.group(0))]
            for name in names:
                if (rel, name) in EXEMPT:
                    used.add((rel, name))
                else:
                    bad.append(f"{rel}:{lineno}: {name}")
    bad += [f"EXEMPT: {rel}: {name} names something now (or is gone): drop the exemption"
            for rel, name in sorted(EXEMPT.keys() - used)]
    return bad
