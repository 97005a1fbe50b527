"""The certification page's parity plot, inline: per-position KL(llama.cpp ‖ ours) as an SVG drawn
from parity.json (the same data as parity's ``parity_kl.png``), so the page shows it without a
second file, at any width, with each point's value on hover.

Safety: the SVG is built here from numbers and the prompts' ids only; every id is XML-escaped, so
a hostile prompt id stays text. The same parity.json gives the same bytes.
"""
from __future__ import annotations

import math
from typing import Any
from xml.sax.saxutils import escape

#: The plot's drawing box (SVG user units; the page scales it to its width).
W, H = 1000, 300
LEFT, RIGHT, TOP, BOTTOM = 62, 10, 26, 52
#: KL below this (nats) is drawn at it: log scale, and a KL of 0 (identical logits) is possible.
FLOOR = 1e-12
#: Line colours, one per prompt in turn (readable on white, distinct in print).
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")


def _decades(lo: float, hi: float) -> tuple[int, int]:
    """The whole powers of ten around [lo, hi] (at least one decade apart)."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    return a, max(b, a + 1)


def kl_svg(parity: dict[str, Any]) -> str:
    """An ``<svg>`` element (text) of every prompt's ``kl_per_position`` in ``parity`` (a parity.json
    document), prompts side by side on a shared log-scale y axis in nats, each prompt's mean in its
    ``<title>``. Returns "" when no prompt has a position."""
    prompts = [(str(p["id"]), [max(float(k), FLOOR) for k in p["kl_per_position"]]) for p in parity["prompts"]]
    n = sum(len(k) for _, k in prompts)
    if n == 0:
        return ""
    lo, hi = _decades(min(min(k) for _, k in prompts if k), max(max(k) for _, k in prompts if k))
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM
    x = lambda i: LEFT + pw * (i + 0.5) / n    # noqa: E731
    y = lambda v: TOP + ph * (hi - math.log10(v)) / (hi - lo)    # noqa: E731
    out = [f'<svg class="plot" viewBox="0 0 {W} {H}" role="img" xmlns="http://www.w3.org/2000/svg" '
           f'aria-label="teacher-forced KL per position, log scale">',
           f'<text x="{LEFT}" y="16" font-size="13">Teacher-forced KL(llama.cpp ‖ ours) per position, nats '
           f'(log scale; prompts side by side)</text>']
    for d in range(lo, hi + 1):
        yy = y(10.0 ** d)
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#ddd"/>'
                   f'<text x="{LEFT - 6}" y="{yy + 4:.1f}" font-size="11" text-anchor="end">1e{d}</text>')
    x0 = 0
    for j, (pid, kl) in enumerate(prompts):
        colour = COLOURS[j % len(COLOURS)]
        pts = " ".join(f"{x(x0 + i):.1f},{y(v):.1f}" for i, v in enumerate(kl))
        mean = sum(kl) / len(kl) if kl else 0.0
        label = escape(pid)
        out.append(f'<g><title>{label}: {len(kl)} positions, mean KL {mean:.3g} nats, max {max(kl, default=0):.3g}'
                   f'</title><polyline fill="none" stroke="{colour}" stroke-width="1.2" points="{pts}"/></g>')
        if x0:
            out.append(f'<line x1="{x(x0) - pw / n / 2:.1f}" x2="{x(x0) - pw / n / 2:.1f}" y1="{TOP}" '
                       f'y2="{TOP + ph}" stroke="#bbb" stroke-dasharray="3 3"/>')
        # labels on two staggered rows: a short prompt's label does not overlap its neighbours'
        out.append(f'<text x="{x(x0 + len(kl) / 2):.1f}" y="{H - BOTTOM + 14 + 12 * (j % 2)}" font-size="11" text-anchor="middle" '
                   f'fill="{colour}">{label}</text>')
        x0 += len(kl)
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>'
               f'<text x="{LEFT + pw / 2}" y="{H - 6}" font-size="12" text-anchor="middle">position '
               f'(prompts concatenated, {n} in all)</text></svg>')
    return "".join(out)


def used_share(gate: dict[str, Any]) -> float | None:
    """How much of what a numeric gate allows the measured value uses, in [0, inf): for a
    ``<=`` gate measured / threshold (a KL at 0.58 of its limit); for a ``>=`` gate on a fraction
    (threshold in [0, 1)) the disagreement measured over the disagreement allowed, (1 - measured)
    / (1 - threshold). None for the yes/no requirements and whatever has no such reading (a
    threshold of 0 or 1, a value that is not a number)."""
    m, t, cmp = gate.get("measured"), gate.get("threshold"), gate.get("cmp")
    if gate.get("kind") == "requirement" or isinstance(m, bool) or isinstance(t, bool):
        return None
    if not isinstance(m, (int, float)) or not isinstance(t, (int, float)):
        return None
    if cmp == "<=" and t > 0:
        return max(float(m), 0.0) / float(t)
    if cmp == ">=" and 0 <= t < 1 and m <= 1:
        return (1.0 - float(m)) / (1.0 - float(t))
    return None


def tightest(gates: list[dict[str, Any]]) -> tuple[float, str] | None:
    """(share, gate id) of the gate whose measured value uses the most of what it allows
    (used_share), or None when no gate has such a reading."""
    shares = [(u, str(g["id"])) for g in gates if (u := used_share(g)) is not None]
    return max(shares, key=lambda s: s[0]) if shares else None
