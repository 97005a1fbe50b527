"""Code is an input: each stage's jobs depend on the bringup modules they import (found statically,
bringup.core.codedeps), their templates, schemas and data; editing one reruns exactly the jobs
that run it, checked with `snakemake -n` in a scratch copy of the workflow."""
from __future__ import annotations

import json

import pytest

from bringup.core import codedeps
from bringup.core.errors import BringupError
from tests.helpers.workflow import _jobs, edit, scratch_workflow


def _write(root, rel: str, text: str = "") -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def test_the_closure_follows_imports_of_the_bringup_package_only(tmp_path, monkeypatch):
    """A package tree of its own: relative, lazy and ``from pkg import module`` imports are followed,
    third-party ones and unimported modules are not; templates, validated schemas and data folders
    named through bringup.core.paths come with the modules that use them."""
    monkeypatch.setattr(codedeps, "STAGES", {"parity": ("parity",)})
    monkeypatch.setattr(codedeps, "GLUE", ("bringup.core.smk",))
    for rel in ("bringup/__init__.py", "bringup/core/__init__.py", "bringup/parity/__init__.py",
                "bringup/formats/__init__.py", "bringup/formats/gguf_view.py", "bringup/formats/unused.py",
                "bringup/bench/__init__.py", "bringup/bench/cli.py", "bringup/core/paths.py"):
        _write(tmp_path, rel)
    _write(tmp_path, "bringup/core/smk.py", "import numpy\nfrom bringup.core import paths\n")
    _write(tmp_path, "bringup/parity/run.py", "from . import metrics\nfrom bringup.core.paths import CIRCUITS\n"
           "def f():\n    from bringup.formats import gguf_view\n    validate(doc, 'parity', 'x')\n")
    _write(tmp_path, "bringup/parity/metrics.py", "import json\n")
    _write(tmp_path, "bringup/parity/templates/page.j2")
    _write(tmp_path, "config/schemas/parity.schema.json", "{}")
    _write(tmp_path, "config/schemas/bench.schema.json", "{}")
    _write(tmp_path, "circuits/llama.json", "{}")
    codedeps._closure.cache_clear()
    got = set(codedeps.code_files("parity", tmp_path))
    assert got == {"bringup/__init__.py", "bringup/core/__init__.py", "bringup/core/smk.py", "bringup/core/paths.py",
                   "bringup/parity/__init__.py", "bringup/parity/run.py", "bringup/parity/metrics.py",
                   "bringup/parity/templates/page.j2", "bringup/formats/__init__.py",
                   "bringup/formats/gguf_view.py", "config/schemas/parity.schema.json", "circuits/llama.json"}, got
    before = codedeps.code_record("parity", tmp_path)
    assert before["files"] == len(got) and len(before["sha256"]) == 64
    codedeps._closure.cache_clear()
    _write(tmp_path, "bringup/bench/cli.py", "x = 1\n")         # not imported: the same hash
    assert codedeps.code_record("parity", tmp_path) == before
    _write(tmp_path, "bringup/parity/metrics.py", "import json  # a comment\n")
    assert codedeps.code_record("parity", tmp_path)["sha256"] != before["sha256"]


def test_the_stages_code_in_this_checkout():
    codedeps._closure.cache_clear()
    parity, certify = set(codedeps.code_files("parity")), set(codedeps.code_files("certify"))
    assert {"bringup/parity/metrics.py", "bringup/parity/oracles/llama_cpp.py", "bringup/core/smk.py",
            "config/schemas/parity.schema.json"} <= parity
    assert "bringup/ir/lower.py" in codedeps.code_files("ir")
    assert {"bringup/codegen/emit.py", "bringup/codegen/templates/model.c.j2"} <= set(codedeps.code_files("codegen"))
    assert {"reports/certification.md.j2", "config/schemas/certification.schema.json"} <= certify
    # the bench's runner is no certification's code
    assert not {"bringup/bench/cli.py", "bringup/bench/rounds.py"} & (parity | certify)
    with pytest.raises(BringupError, match="unknown stage"):
        codedeps.code_files("nope")


# --- the workflow, in a scratch copy ---------------------------------------------------------

#: What `snakemake -n certify` plans after appending a comment to a file (the issue's table):
#: the rules of smollm2's jobs. convert_model runs ir.lower too (it checks that the GGUF fits the
#: circuit by lowering both phases), so a change there reruns the conversion as well.
DOWNSTREAM_OF_IR = {"ir_model", "plan_model", "plan_memory", "codegen_model", "build_model", "plan_calibrate",
                    "plan_memory_calibrated", "parity_model", "certify_model", "certify_verdict"}
TABLE = {
    "bringup/ir/lower.py": DOWNSTREAM_OF_IR | {"convert_model"},
    "bringup/parity/metrics.py": {"parity_model", "certify_model", "certify_verdict"},
    "bringup/convert/importer.py": DOWNSTREAM_OF_IR | {"convert_model"},
    "bringup/codegen/emit.py": {"codegen_model", "build_model", "plan_calibrate", "plan_memory_calibrated",
                                "parity_model", "certify_model", "certify_verdict"},
    "bringup/bench/rounds.py": set(),
    "bringup/regression/render.py": set(),
}


@pytest.mark.slow
def test_editing_a_module_reruns_exactly_the_jobs_that_run_it(tmp_path):
    """Each edit on a fresh scratch copy: one `snakemake -n --forceall` and one `-n` per row."""
    providers = sorted({m["id"] for m in (json.loads(p.read_text()) for p in (codedeps.ROOT / "kernel_maps").glob(
        "*.json")) if m["id"].startswith(("rmsnorm.", "linear.f32.scalar"))})
    wf = scratch_workflow(tmp_path, {"smollm2": providers}, target="certify")
    for i, (rel, expected) in enumerate(TABLE.items()):
        edit(wf / rel)
        jobs = {r for r, m in _jobs(wf, ("smollm2",), "certify") if m == "smollm2"}
        assert jobs == expected, (rel, jobs ^ expected)
        (wf / rel).write_text((wf / rel).read_text().removesuffix("\n# edited\n"))
        for p in (wf / "results").rglob("*"):       # outputs newer than the edit again
            if p.is_file():
                p.touch()
