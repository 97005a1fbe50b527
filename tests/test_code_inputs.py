"""Code is an input: each stage's jobs depend on the bringup modules they import (found statically,
bringup.core.codedeps), their templates, schemas and data; editing one reruns exactly the jobs
that run it, checked with `snakemake -n` in a scratch copy of the workflow."""
from __future__ import annotations

import json
import os
import time

import pytest

from bringup.core import canonjson, codedeps
from bringup.core.hashing import sha256_file
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
    _write(tmp_path, "bringup/parity/cli.py", "from bringup.parity import run\n")   # the command's module
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
                   "bringup/parity/__init__.py", "bringup/parity/cli.py", "bringup/parity/run.py",
                   "bringup/parity/metrics.py",
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
    "bringup/bench/cli.py": set(),                   # the bench's runner: no certification
    # bench.json's reader is certify's code (the speed section cites the bench through it)
    "bringup/formats/bench_summary.py": {"certify_model", "certify_verdict"},
    "reports/certification.md.j2": {"certify_model", "certify_verdict"},
    "reports/ir_report.js": {"plan_model", "plan_memory", "codegen_model", "build_model", "plan_calibrate",
                             "plan_memory_calibrated", "parity_model", "certify_model", "certify_verdict"},
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
        now = time.time()          # outputs newer than the edit again, all at one time: touched
        for p in (wf / "results").rglob("*"):       # one by one, a later input would outdate an output
            if p.is_file():
                os.utime(p, (now, now))
        time.sleep(0.1)            # the next edit is later than them (file times use a coarse clock)


# --- every artifact names the code that produced it ------------------------------------------

class _Files(dict):
    """What a job's smk.input / smk.output offers: names, items, attributes and the flat list."""

    def __getattr__(self, name):
        return self[name]

    def __iter__(self):
        return iter([f for v in self.values() for f in ([v] if isinstance(v, str) else v)])

    def __getitem__(self, k):
        return list(self)[k] if isinstance(k, int) else dict.__getitem__(self, k)


def _smk(tmp_path, inputs: dict, outputs: dict, rule="ir_model"):
    from types import SimpleNamespace
    return SimpleNamespace(rule=rule, input=_Files(inputs), output=_Files(outputs), params=_Files(threads=2),
                           wildcards=_Files(model="m"), log=[str(tmp_path / "job.log")], threads=2)


def test_a_job_records_its_stage_code_and_outputs_beside_them(tmp_path):
    from bringup.core import smk as glue
    from bringup.core.schemas import validate
    res = tmp_path / "results" / "m"
    (res / "ir").mkdir(parents=True)
    (res / "ir" / "ir_prefill.json").write_text("{}")
    job = _smk(tmp_path, {}, {"prefill": str(res / "ir" / "ir_prefill.json"), "code": str(res / "code" / "ir_model.json")})
    rec = glue.record_code(job, "ir")
    on_disk = canonjson.read(res / "code" / "ir_model.json", "code record")
    validate(on_disk, "code_record")
    assert on_disk == rec and rec["rule"] == "ir_model" and rec["stage"] == "ir"
    assert rec["code"] == codedeps.code_record("ir")
    assert rec["outputs"] == {"prefill": sha256_file(res / "ir" / "ir_prefill.json")}


def test_a_skipped_input_is_left_out_of_the_content_key(tmp_path):
    """The bench's key leaves out build/provenance.json (a C comment rewrites it, not the library)."""
    from bringup.core import smk as glue
    (tmp_path / "lib").write_text("lib")
    (tmp_path / "prov").write_text("v1")
    out = tmp_path / "r" / "m" / "bench" / "bench.json"
    calls = []

    def run():
        calls.append(1)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(f"bench {len(calls)}")
        return 0
    job = _smk(tmp_path, {"lib": str(tmp_path / "lib"), "build_provenance": str(tmp_path / "prov")},
               {"json": str(out)}, rule="bench_model")
    assert glue.run_reused(job, run, skip=("build_provenance",), extra={"threads": 2}) == 0
    (tmp_path / "prov").write_text("v2")          # rewritten: still the same key
    assert glue.run_reused(job, run, skip=("build_provenance",), extra={"threads": 2}) == 0
    assert len(calls) == 1 and (tmp_path / "job.log").read_text().startswith("reused: inputs identical to ")
    glue.run_reused(job, run, skip=("build_provenance",), extra={"threads": 1})   # other threads: a new key
    glue.run_reused(job, run, extra={"threads": 2})                              # provenance in the key
    assert len(calls) == 3


def test_the_certificate_names_the_code_each_job_recorded(tmp_path):
    from bringup.certify import report
    from bringup.core.errors import BringupError
    res = tmp_path / "results" / "m"
    rec = {"schema_version": 1, "rule": "codegen_model", "stage": "codegen", "code": codedeps.code_record("codegen"),
           "outputs": {"c": "0" * 64}}
    canonjson.write(res / "code" / "codegen_model.json", rec)
    canonjson.write(res / "code" / "build_model.json", {**rec, "rule": "build_model", "stage": "build",
                                                        "code": {"sha256": "f" * 64, "files": 3}})
    sec = report.code_section({"settings": {}}, res)
    assert sec["stages"]["codegen"]["recorded"] == {"codegen_model": codedeps.code_record("codegen")["sha256"]}
    assert sec["stages"]["build"]["recorded"] == {"build_model": "f" * 64}
    assert sec["records_match"] is False and sec["parity_matches"] is None and sec["bench"] is None
    (res / "code" / "build_model.json").unlink()
    assert report.code_section({"settings": {}}, res)["records_match"] is True
    canonjson.write(res / "code" / "parity_model.json", rec)      # a record under another rule's name
    with pytest.raises(BringupError, match="records rule 'codegen_model', not 'parity_model'"):
        report.code_section({"settings": {}}, res)
