"""summary.md and summary.html from a regression summary (bringup.regression.summary).

The tables are pandas DataFrames: the markdown is their ``to_markdown`` (tabulate), the HTML a
jinja2 template over the same rows with autoescape (model names and error text are data).
"""
from __future__ import annotations

import math
from pathlib import Path

import jinja2
import pandas as pd

from bringup.core import canonjson
from bringup.formats import bench_summary
from bringup.core.atomic import write_text

TEMPLATES = Path(__file__).parent / "templates"


def _num(v, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return f"{v:.{digits}g}" if isinstance(v, float) else str(v)


def _signed(v) -> str:
    return "" if v is None else f"{v:+.3g}"


def models_table(summary: dict) -> pd.DataFrame:
    """One row per model: status, failed gates, speed ratios ours/llama.cpp, parity profile, and
    the change from the previous night."""
    rows = []
    for m in summary["models"]:
        ch, ratio = m["change"], m["speed_ratio"] or {}
        profile = m["parity_profile"] or ""
        if m["profile_is_default"]:
            profile += " (default)"
        rows.append({
            "model": m["model"], "verdict": m["status"].upper(),
            "failed gates": ", ".join(m["failed_gates"]) or (m["error"] or ""),
            "prefill x": _num(ratio.get("prefill"), 3), "decode x": _num(ratio.get("decode"), 3),
            "speed measured": bench_summary.one_line(m.get("bench")) if m["status"] in ("pass", "fail") else "",
            "code": canonjson.sha256(m["code"])[:12] if m.get("code") else "",
            "parity profile": profile,
            "previous": "" if ch is None else ch["previous_status"].upper()
                        + (" (flipped)" if ch["verdict_flipped"] else ""),
        })
    return pd.DataFrame(rows, columns=["model", "verdict", "failed gates", "prefill x", "decode x", "speed measured",
                                       "code", "parity profile", "previous"])


def gates_table(summary: dict) -> pd.DataFrame:
    """One row per (model, gate): measured value, comparison and threshold, verdict, and the
    change from the previous night (delta = current - previous)."""
    rows = []
    for m in summary["models"]:
        changes = (m["change"] or {}).get("gates", {})
        for gid, g in m["gates"].items():
            ch = changes.get(gid) or {}
            rows.append({"model": m["model"], "gate": gid, "measured": _num(g["measured"]),
                         "requirement": f"{g['cmp']} {_num(g['threshold'])}",
                         "passed": "yes" if g["passed"] else "NO",
                         "delta": _signed(ch.get("delta")),
                         "flipped": "yes" if ch.get("verdict_flipped") else ""})
    return pd.DataFrame(rows, columns=["model", "gate", "measured", "requirement", "passed", "delta",
                                       "flipped"])


def _heading(summary: dict) -> dict:
    run, prev = summary["run"], summary["previous"]
    commit = run["commit"]["sha"][:12] + (" (dirty)" if run["commit"]["dirty"] else "")
    return {"verdict": summary["verdict"].upper(), "exit_code": summary["exit_code"],
            "timestamp": run["timestamp"], "commit": commit,
            "previous": f"{prev['timestamp']} ({prev['commit']['sha'][:12]})" if prev else "none"}


def render(summary: dict, out_dir: Path) -> None:
    """Write ``out_dir``/summary.md and summary.html (atomically)."""
    head, models, gates = _heading(summary), models_table(summary), gates_table(summary)
    md = (f"# Regression: {head['verdict']} (exit {head['exit_code']})\n\n"
          f"Run {head['timestamp']}, commit {head['commit']}; previous night: {head['previous']}.\n\n"
          f"## Models\n\n{models.to_markdown(index=False)}\n\n"
          f"## Gates\n\n{gates.to_markdown(index=False) if len(gates) else '(no certification)'}\n")
    write_text(out_dir / "summary.md", md)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    html = env.get_template("summary.html.j2").render(
        head=head, tables=[("Models", models), ("Gates", gates)])
    write_text(out_dir / "summary.html", html)
