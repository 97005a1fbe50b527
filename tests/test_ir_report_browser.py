"""The IR report in a real headless browser (Debian's chromium; `bash bootstrap.sh --test` installs
it): every view renders, a search finds an op, and a screenshot is kept as a test artifact under
results/test_artifacts/."""
from __future__ import annotations

import re

from bringup.core.paths import ROOT
from tests.helpers.browser import run_chromium

ARTIFACTS = ROOT / "results" / "test_artifacts"


def _run(chromium: str, tmp_path, *args: str) -> str:
    return run_chromium(chromium, tmp_path / "profile", *args)


def _dom(chromium, tmp_path, report, fragment: str) -> str:
    return _run(chromium, tmp_path, "--dump-dom", f"{report.as_uri()}#{fragment}")


def test_views_render_and_search_finds_an_op(smollm2_build, browser_chromium, tmp_path):
    chromium = browser_chromium
    report = smollm2_build["root"] / "reports" / "ir_report.html"
    dom = _dom(chromium, tmp_path, report, "view=dataflow&phase=decode&q=layer.3.attn_q")
    assert 'data-ready="1"' in dom
    assert re.findall(r'<tr class="op[^"]*" data-i="\d+" data-id="([^"]+)"', dom) == ["layer.3.attn_q"]
    assert "1 of 453 ops shown" in dom
    # the click-free detail panel shows provider, contract and the rejected candidates
    assert "numerics contract" in dom and "rejected candidates" in dom and "linear.q4_1." in dom
    checks = {"memory": ['id="timeline"', 'class="buf s"', "this phase's own scale"],
              "weights": ["by format", "Q4_1", "layer.0.wq"],
              "kv": ["layer.0.k_cache", "bytes per position"],
              "providers": ["chosen providers", "rejected candidates, once per op kind"]}
    for view, needles in checks.items():
        dom = _dom(chromium, tmp_path, report, f"view={view}&phase=decode")
        assert f'data-view="{view}"' in dom and 'data-ready="1"' in dom, view
        for n in needles:
            assert n in dom, (view, n)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for view in ("dataflow", "memory"):
        shot = ARTIFACTS / f"ir_report_smollm2_{view}.png"
        _run(chromium, tmp_path, f"--screenshot={shot}",
             f"{report.as_uri()}#view={view}&phase=decode&q={'attn_q' if view == 'dataflow' else ''}")
        assert shot.stat().st_size > 10_000
