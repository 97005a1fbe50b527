"""The IR report and the certification page in a real headless browser (Debian's chromium,
`bash bootstrap.sh --test`), from the certified smollm2 in results/: the dataflow graph, the memory
timeline's layer marks and range, what each provider runs on this host, the verdict and the inline
parity plot; at 1400 px and at a phone's 390 px, where no number may break across lines.
Screenshots are kept under results/test_artifacts/ (pages_*.png)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bringup.certify import report as certify
from bringup.core.paths import ROOT
from tests.helpers.browser import run_chromium

pytestmark = pytest.mark.slow   # the certified smollm2 (`snakemake certify` in CI)

RES = ROOT / "results" / "smollm2"
ARTIFACTS = ROOT / "results" / "test_artifacts"
WIDTHS = {"desktop": 1400, "phone": 390}
# Injected into a copy of a page: counts the numbers and short values (td.num, td.nb) whose text takes more than one
# line (a number broken mid-number) and says so on <body>, for --dump-dom to read.
MEASURE = ("<script>addEventListener('load', () => { const bad = [];"
           " for (const td of document.querySelectorAll('td.num, td.nb')) { const tops = [];"
           " const w = document.createTreeWalker(td, NodeFilter.SHOW_TEXT); let t;"
           " while ((t = w.nextNode())) { const r = document.createRange(); r.selectNodeContents(t);"
           " for (const x of r.getClientRects()) if (x.width > 0) tops.push(x.top); }"
           " if (tops.length && Math.max(...tops) - Math.min(...tops) > 4) bad.push(td.textContent.trim()); }"
           " document.body.dataset.broken = bad.length; document.body.dataset.brokenText = bad.join(' | '); });</script>")


# Injected into a copy of the IR report: clicks the view's first "zoom in" button and records what
# changed on <body> (the graph's viewBox, or the timeline's status line).
CLICK_ZOOM = ("<script>addEventListener('load', () => { const g = document.getElementById('graph');"
              " const read = () => g ? g.getAttribute('viewBox') : document.getElementById('status').textContent;"
              " const a = read(); const b = [...document.querySelectorAll('#view button')].find((x) => x.textContent === 'zoom in');"
              " b.click(); document.body.dataset.zoom = a + ' -> ' + read(); });</script>")


@pytest.fixture(scope="module")
def pages_certified() -> Path:
    """results/smollm2 with a passing certification (made by the workflow in CI, else skipped
    with the reason, as test_export's fixture does)."""
    if os.environ.get("CI"):
        r = subprocess.run([str(Path(sys.executable).parent / "snakemake"), "certify", "--config", "model=smollm2"],
                           capture_output=True, text=True, cwd=ROOT, timeout=5400)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    if not (RES / "certify" / "PASSED").is_file():
        pytest.skip("results/smollm2 has no passing certification: run `snakemake certify --config model=smollm2`")
    return RES


def _chromium(exe: str, tmp_path: Path, width: int, *args: str, height: int = 1000) -> str:
    return run_chromium(exe, tmp_path / "profile", *args, width=width, height=height)


def _shot(exe: str, tmp_path: Path, page: Path, fragment: str, name: str, width: int, height: int = 1000) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / f"pages_{name}_{width}.png"
    _chromium(exe, tmp_path, width, f"--screenshot={shot}", f"{page.as_uri()}{fragment}", height=height)
    assert shot.stat().st_size > 10_000


def test_ir_report_graph_timeline_and_providers(pages_certified, browser_chromium, tmp_path):
    page = tmp_path / "ir_report.html"
    r = subprocess.run([sys.executable, "-m", "bringup", "plan", "arena", "--ir-dir", pages_certified / "ir",
                        "--out", tmp_path / "memory_plan.json", "--report", page, "--model", "smollm2",
                        "--build", pages_certified / "build"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "<title>IR report: smollm2 (llama)</title>" in page.read_text()
    dom = _chromium(browser_chromium, tmp_path, 1400, "--dump-dom", f"{page.as_uri()}#view=graph&phase=decode&layer=3")
    assert 'data-ready="1"' in dom and "layer 3: 15 ops" in dom
    assert len(re.findall(r'<g class="node op[ "]', dom)) == 15 and dom.count('<g class="node kvcache"') == 2
    assert "layer.3.k_cache (KV)" not in dom and "k_cache (KV)" in dom and "zoom in" in dom and 'id="graph"' in dom
    assert dom.count('class="edge read') >= 15 and dom.count('class="edge kv"') == 2
    n_layers = json.loads((pages_certified / "convert" / "config.json").read_text())["hparams"]["n_layer"]
    dom = _chromium(browser_chromium, tmp_path, 1400, "--dump-dom", f"{page.as_uri()}#view=memory&phase=decode")
    assert dom.count('class="layer-mark"') == n_layers and ">L0<" in dom
    dom = _chromium(browser_chromium, tmp_path, 1400, "--dump-dom", f"{page.as_uri()}#view=memory&phase=decode&ops=16-31")
    assert "in ops 16..31," in dom and dom.count('class="layer-mark"') == 2    # layers 1 and 2 begin in that range
    dom = _chromium(browser_chromium, tmp_path, 1400, "--dump-dom", f"{page.as_uri()}#view=providers&phase=decode")
    assert "portable scalar" not in dom and "runtime ISA dispatch of the built program" in dom
    assert re.search(r"<td>linear\.q4_1\.fast</td>|<code>linear\.q4_1\.fast</code>", dom)
    assert "its one C version (no ISA levels)" in dom and re.search(r"decode</td><td>[12]</td><td>avx(2|512)</td>", dom)   # phase, threads, level
    # zoom: the graph's buttons change its viewBox; the timeline's redraw a narrower range of ops
    clicks = tmp_path / "clicks.html"
    clicks.write_text(page.read_text().replace("</body>", CLICK_ZOOM + "</body>"))
    dom = _chromium(browser_chromium, tmp_path, 1400, "--dump-dom", f"{clicks.as_uri()}#view=graph&phase=decode&layer=3")
    before, after = re.search(r'data-zoom="([^"]*) -&gt; ([^"]*)"', dom).groups()   # ">" escaped in the DOM dump
    assert before.split()[2:] == ["760.0", "790.0"] and float(after.split()[2]) < 760.0, (before, after)
    dom = _chromium(browser_chromium, tmp_path, 1400, "--dump-dom", f"{clicks.as_uri()}#view=memory&phase=decode")
    assert re.search(r'data-zoom="[^"]*in ops 0\.\.452,[^"]* -&gt; [^"]*in ops 1\d\d\.\.3\d\d,', dom), re.search(r'data-zoom="[^"]*"', dom)
    # at a phone's width no number takes two lines (the summary's sizes, the providers' op counts)
    measured = tmp_path / "measured.html"
    measured.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    dom = _chromium(browser_chromium, tmp_path, WIDTHS["phone"], "--dump-dom", f"{measured.as_uri()}#view=providers&phase=decode")
    assert 'data-broken="0"' in dom, re.search(r'data-broken-text="[^"]*"', dom)
    for width in WIDTHS.values():
        _shot(browser_chromium, tmp_path, page, "#view=graph&phase=decode&layer=3", "ir_graph", width)
        _shot(browser_chromium, tmp_path, page, "#view=memory&phase=decode", "ir_memory", width)
        _shot(browser_chromium, tmp_path, page, "#view=providers&phase=decode", "ir_providers", width)


def test_certification_page_verdict_plot_and_unbroken_numbers(pages_certified, browser_chromium, tmp_path):
    cert = json.loads((pages_certified / "certify" / "certification.json").read_text())
    parity = json.loads((pages_certified / "parity" / "parity.json").read_text())
    certify.render(cert, tmp_path, parity)
    html = (tmp_path / "certification.html").read_text()
    measured = tmp_path / "measured.html"
    measured.write_text(html.replace("</body>", MEASURE + "</body>"))
    for name, width in WIDTHS.items():
        dom = _chromium(browser_chromium, tmp_path, width, "--dump-dom", measured.as_uri())
        assert 'data-broken="0"' in dom, (name, re.search(r'data-broken-text="[^"]*"', dom))
        assert '<div class="verdict pass"><b class="big">PASS</b>' in dom and dom.count("<polyline") == len(parity["prompts"])
        # the whole page down to the parity plot (a headless screenshot does not scroll to a fragment)
        _shot(browser_chromium, tmp_path, tmp_path / "certification.html", "", "certification", width,
              height=3000 if width > 800 else 9000)
