"""Only what changed reruns: a build names exactly the kernel sources its IR's providers use.

bringup.build.sources.build_inputs against the kernel maps, and, in a scratch copy of the workflow
(never the project's csrc/ or results/), `snakemake -n` after editing one kernel source: the builds
whose IR uses a provider from that file rerun, with their parity and certification, and nothing else.
"""
from __future__ import annotations

import json
import os
import time

import pytest

from bringup.build import sources
from bringup.core.errors import BringupError
from bringup.core.paths import KERNEL_MAPS, ROOT
from tests.helpers.workflow import _ir, _jobs, scratch_workflow



def _maps() -> dict[str, dict]:
    return {m["id"]: m for m in (json.loads(p.read_text()) for p in sorted(KERNEL_MAPS.glob("*.json")))}


def _c_files(m: dict) -> set[str]:
    srcs = [*m["impl"]["sources"], *(s for v in m.get("variants", []) for s in v["sources"])]
    return {s for s in srcs if s.endswith(".c")}


def _pick():
    """(kernel file F, a provider using F, a provider not using F): F is a kernel file that some,
    but not all, providers use; the second provider shares no C file with the first."""
    maps = _maps()
    for f in ("csrc/kernels/bu_linear_q8act.c", "csrc/kernels/bu_rope.c"):
        users = sorted(i for i, m in maps.items() if f in _c_files(m))
        others = sorted(i for i, m in maps.items() if f not in _c_files(m) and not (_c_files(m) & _c_files(maps[users[0]])))
        if users and others:
            return f, users[0], others[0]
    pytest.skip("no kernel file used by some providers only")


def test_build_inputs_name_the_providers_kernel_files_and_nothing_else(tmp_path):
    f, user, other = _pick()
    _ir(tmp_path / "a.json", [user, other])
    _ir(tmp_path / "b.json", [other])
    a, b = sources.build_inputs([tmp_path / "a.json"], ROOT), sources.build_inputs([tmp_path / "b.json"], ROOT)
    assert f in a and f not in b
    maps = _maps()
    kernels_b = {x for x in b if x.startswith("csrc/kernels/") and x.endswith(".c")}
    assert kernels_b == _c_files(maps[other]) | {f"csrc/{k}" for k in sources.ALWAYS_LINKED}
    # the CLI, runtime, tokenizer and every header of the include folders are inputs of every build
    for x in ("csrc/cli/bringup_run.c", "csrc/runtime/bu_runtime.c", "csrc/include/bu_kernels.h"):
        assert x in a and x in b
    # bringup build compiles exactly these C files (plus model.c)
    lib_b = sources.library_sources(sources.ir_providers([tmp_path / "b.json"]))
    assert {f"csrc/{x}" for x in lib_b} | {f"csrc/{x}" for x in sources.CLI} == {x for x in b if x.endswith(".c")}


def test_a_provider_without_a_map_is_an_error(tmp_path):
    _ir(tmp_path / "ir.json", ["no.such.provider"])
    with pytest.raises(BringupError, match="no.such.provider.*no kernel map"):
        sources.build_inputs([tmp_path / "ir.json"], ROOT)


@pytest.mark.slow
def test_editing_one_kernel_source_reruns_only_the_builds_that_use_it(tmp_path):
    f, user, other = _pick()
    models = ("smollm2", "gemma3")   # smollm2's IR uses a provider from f, gemma3's does not
    wf = scratch_workflow(tmp_path, {models[0]: [user, other], models[1]: [other]})
    assert (wf / f"results/{models[0]}/build/libmodel.so").exists()
    old = time.time() - 3600

    # edit f: smollm2's build reruns, and what measures that binary (the calibrated memory model,
    # parity) and certifies it; nothing of gemma3
    src = wf / f
    src.write_text(src.read_text() + "\n/* edited */\n")
    jobs = _jobs(wf, models)
    assert {r for r, m in jobs if m == models[0]} == {"build_model", "plan_calibrate", "plan_memory_calibrated",
                                                      "parity_model", "certify_model"}, jobs
    assert not [j for j in jobs if j[1] == models[1]], jobs

    # a file both use (the runtime) reruns both builds
    os.utime(src, (old, old))
    src.write_text(src.read_text())          # content as edited, but old again
    os.utime(src, (old, old))
    rt = wf / "csrc/runtime/bu_runtime.c"
    rt.write_text(rt.read_text() + "\n/* edited */\n")
    jobs = _jobs(wf, models)
    assert {("build_model", m) for m in models} <= jobs, jobs
