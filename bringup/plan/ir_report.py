"""The HTML IR report: ops in order with provider and why, buffers with lifetimes, a memory
timeline per phase (matplotlib SVG, embedded as a data URI), copy count. Template: ``reports/ir_report.html.j2``.

Every string from the model (its name, tensor names) reaches HTML through jinja2 autoescaping or
pandas' escaping ``to_html``; nothing is spliced in raw. The SVG is rendered with a fixed hash salt
and no date so the same plan gives the same bytes.
"""
from __future__ import annotations

import base64
import io
from pathlib import Path

import jinja2
import pandas as pd

from bringup.core.atomic import write_text
from bringup.core.paths import REPORTS


def timeline_svg(phase_plan: dict, arena: int, title: str) -> str:
    """SVG (text) of one phase: each buffer a rectangle, x = op indices first..last, y = its byte
    range; plus the arena line. Deterministic bytes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    with matplotlib.rc_context({"svg.hashsalt": "bringup-ir-report", "svg.fonttype": "none"}):
        fig, ax = plt.subplots(figsize=(11, 4.5))
        try:
            n_ops = phase_plan["n_ops"]
            for b in phase_plan["buffers"]:
                scratch = ".scratch." in b["id"]
                ax.add_patch(Rectangle((b["first"] - 0.45, b["offset"] / 1024), b["last"] - b["first"] + 0.9,
                                       b["size"] / 1024, facecolor="#d98c3a" if scratch else "#4a78b5",
                                       edgecolor="black", linewidth=0.2, alpha=0.85))
            ax.axhline(arena / 1024, color="red", linewidth=0.8, linestyle="--", label=f"arena {arena} B")
            ax.axhline(phase_plan["lower_bound_bytes"] / 1024, color="green", linewidth=0.8, linestyle=":",
                       label=f"lower bound {phase_plan['lower_bound_bytes']} B")
            ax.set_xlim(-1, n_ops)
            ax.set_ylim(0, max(arena, 1) / 1024 * 1.05)
            ax.set_xlabel("op index")
            ax.set_ylabel("arena offset (KiB)")
            ax.set_title(title)
            ax.legend(loc="upper right", fontsize=8)
            buf = io.StringIO()
            fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight")
        finally:
            plt.close(fig)
    return buf.getvalue()


def _ops_table(ir: dict) -> str:
    rows = []
    for op in ir["ops"]:
        rejected = [c for c in op["selection"]["candidates"] if not c["accepted"]]
        why = op["selection"]["rule"]
        if rejected:
            why += f"; rejected {len(rejected)}: " + "; ".join(
                f"{c['id']} ({c['reasons'][0]}{' ...' if len(c['reasons']) > 1 else ''})" for c in rejected[:3])
            if len(rejected) > 3:
                why += f"; ... {len(rejected) - 3} more"
        rows.append({"#": op["index"], "id": op["id"], "op": op["op"] + (f" ({op['variant']})" if op["variant"] else ""),
                     "provider": op["provider"], "why": why,
                     "reads": ", ".join(f"{p}={t}" for p, t in sorted({**op["inputs"], **op["weights"]}.items())),
                     "writes": ", ".join(f"{p}={t}" for p, t in sorted(op["outputs"].items())),
                     "state": ", ".join(sorted(op["state"].values())),
                     "dims": ", ".join(f"{k}={v}" for k, v in sorted(op["dims"].items())),
                     "params": ", ".join(f"{k}={v:.9g}" for k, v in sorted(op["params"].items()))})
    return pd.DataFrame(rows).to_html(index=False, escape=True, border=0, classes="t")


def _buffers_table(phase_plan: dict) -> str:
    rows = [{"buffer": b["id"], "offset": b["offset"], "size": b["size"], "first op": b["first"],
             "last op": b["last"], "tensors": ", ".join(b["tensors"])} for b in phase_plan["buffers"]]
    return pd.DataFrame(rows).to_html(index=False, escape=True, border=0, classes="t")


def render(irs: dict[str, dict], plan: dict, model_name: str = "") -> str:
    """The report's HTML text for both phases' IR and the memory plan."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(REPORTS)), autoescape=True,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    tpl = env.get_template("ir_report.html.j2")
    phases = []
    for p in ("prefill", "decode"):
        ir, ph = irs[p], plan["phases"][p]
        phases.append({
            "name": p, "n_ops": len(ir["ops"]), "n_tokens": ir["dims"]["n_tokens"], "logits": ir["logits"],
            "plan": ph,
            "timeline_src": "data:image/svg+xml;base64," + base64.b64encode(
                timeline_svg(ph, plan["arena"]["bytes"], f"{p}: arena buffers over op index").encode()).decode("ascii"),
            "ops_table": _ops_table(ir), "buffers_table": _buffers_table(ph),
        })
    ir0 = irs["prefill"]
    return tpl.render(model_name=model_name, architecture=ir0["architecture"], circuit=ir0["circuit"],
                      values=sorted((k, ir0["dims"][k], ir0["values_source"].get(k, "")) for k in ir0["dims"]),
                      weights=ir0["weights"], state=plan["state"], arena=plan["arena"], phases=phases,
                      target=ir0["target"])


def write(path: str | Path, irs: dict[str, dict], plan: dict, model_name: str = "") -> None:
    """Render and write the report atomically to ``path``."""
    write_text(path, render(irs, plan, model_name))
