"""bench.json (schema ``config/schemas/bench.schema.json``) and its two renderings: bench.md (the
tables) and bench.png (the plot). The renderings read only bench.json, so ``bringup bench render``
redraws them from a saved run.

Figures (docs/bench.md): per (threads, test, engine) the median, min and max tokens/s over the
rounds; ours over each llama.cpp build and over the faster one; for every tg test, the bytes a
decode step reads (bringup.bench.traffic) times the median tokens/s = the effective bandwidth, as a
share of the host's DRAM read bandwidth at the same thread count (best pass of the probe).
"""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Sequence

from bringup.bench import traffic
from bringup.bench.rounds import LLAMA_ENGINES, is_ours, parse_test
from bringup.core import atomic

LABELS = {"ours": "ours", "llama_cpp_portable": "llama.cpp (portable)", "llama_cpp_native": "llama.cpp (native)",
          "llama_cpp_best": "faster llama.cpp"}
#: bytes per element of the KV cache each llama.cpp build keeps (llama-bench's default: F16)
LLAMA_KV_BYTES = 2
_DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2}


def _kv_bytes(ir_decode: dict[str, Any]) -> int:
    """Bytes per KV-cache element of a decode IR (4 unless every state has one known dtype)."""
    state_dtypes = {s["dtype"] for s in ir_decode.get("state", [])}
    return _DTYPE_BYTES.get(next(iter(state_dtypes)), 4) if len(state_dtypes) == 1 else 4


def effective_bandwidth(rows: Sequence[dict[str, Any]], ir_decode: dict[str, Any],
                        bandwidth: Sequence[dict[str, Any]],
                        engine_irs: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """For every tg row: ``{"threads", "test", "engine", "bytes_per_token": {"weights", "kv",
    "total"}, "gb_per_s", "dram_gb_per_s", "share_of_dram"}``. Ours decodes its first step at
    position max(depth, 1) (its prompt holds at least one token), llama.cpp at ``depth``; llama.cpp's
    KV part is rescaled to its F16 cache. ``engine_irs``: the decode IR of another build of ours
    (engine id -> IR; ``ir_decode`` for the others). ``share_of_dram`` is None without a probe at
    that count."""
    dram = {b["threads"]: b["best_gb_per_s"] for b in bandwidth}
    ours_kv = _kv_bytes(ir_decode)
    out = []
    for r in rows:
        t = parse_test(r["test"])
        if t.kind != "tg":
            continue
        ours = is_ours(r["engine"])
        b = traffic.decode_bytes((engine_irs or {}).get(r["engine"], ir_decode), max(t.depth, 1) if ours else t.depth,
                                 t.n, 1.0 if ours else LLAMA_KV_BYTES / ours_kv)
        gbps = b["total"] * r["tok_per_s"]["median"] / 1e9
        d = dram.get(r["threads"])
        out.append({"threads": r["threads"], "test": r["test"], "engine": r["engine"], "bytes_per_token": b,
                    "gb_per_s": gbps, "dram_gb_per_s": d, "share_of_dram": gbps / d if d else None})
    return out


def label(engine: str) -> str:
    """The engine's name in tables and plots: ``ours_avx2`` -> ``ours (avx2)``, ``ours_q8act`` ->
    ``ours (q8act)`` (the engines list says which is a forced level and which another build)."""
    return LABELS.get(engine) or f"ours ({engine[5:]})"


def engines_of(doc: dict[str, Any]) -> list[str]:
    """The engines of a bench.json in table order: ours, ours at forced ISA levels, llama.cpp builds."""
    have = {r["engine"] for r in doc["results"]}
    return ["ours"] * ("ours" in have) + sorted(e for e in have if e.startswith("ours_")) + \
        [e for e in LLAMA_ENGINES if e in have]


def _cell(v: dict[str, float] | None, digits: int = 1) -> str:
    if v is None:
        return "n/a"
    return f"{v['median']:.{digits}f} ({v['min']:.{digits}f}–{v['max']:.{digits}f})"


def _rounds_text(settings: dict[str, Any]) -> str:
    """'N interleaved rounds', with the rule and each thread count's count when rounds_rule is there"""
    rule = settings.get("rounds_rule")
    if not rule:
        return f"{settings['rounds']} interleaved rounds"
    per = ", ".join(f"{p['threads']} thread(s): {p['rounds']} (spread error {p['spread_error']:.3f}"
                    f"{'' if p['settled'] else ', not settled'})" for p in rule["per_threads"])
    return f"interleaved rounds: {per}; rule: {rule['rule']} ({rule['min']}, {rule['spread_target']}, {rule['max']})"


def render_md(doc: dict[str, Any]) -> str:
    """bench.md: the settings and host, the speed table per thread count (median (min–max)
    tokens/s and ratios), the bandwidth table and the caveats."""
    host = doc["host"]
    lines = [f"# Bench: {doc['model']}", "",
             f"Tests {', '.join(doc['settings']['tests'])}; {_rounds_text(doc['settings'])}; "
             f"threads {', '.join(map(str, doc['settings']['threads']))}; measured {doc['measured_at']}.",
             f"Host: {host['lscpu'].get('Model name') or host['cpu'].get('model_name') or 'unknown CPU'}, "
             f"{host['cpu_count']} CPUs, flags {' '.join(host['cpu']['flags']) or 'n/a'}; "
             f"load average before {host['load_average_before']}, after {host['load_average_after']}.", ""]
    for c in doc["caveats"]:
        lines.append(f"> **Caveat:** {c}")
    engines = engines_of(doc)
    ours = [e for e in engines if is_ours(e)]
    vs = [e for e in engines if not is_ours(e)] + ["llama_cpp_best"]
    rows = {(r["threads"], r["test"], r["engine"]): r["tok_per_s"] for r in doc["results"]}
    rat = {(r["threads"], r["test"], r["engine"], r["vs"]): r for r in doc["ratios"]}
    for th in doc["settings"]["threads"]:
        lines += ["", f"## {th} thread{'s' if th > 1 else ''}: tokens/s, median (min–max)", "",
                  "| test | " + " | ".join(label(e) for e in engines)
                  + " | " + " | ".join(f"{label(o)} / {label(v)}" for o in ours for v in vs) + " |",
                  "|---" * (1 + len(engines) + len(ours) * len(vs)) + "|"]
        for test in doc["settings"]["tests"]:
            cells = [_cell(rows.get((th, test, e))) for e in engines]
            ratio_cells = [_cell(rat.get((th, test, o, v)), 2) for o in ours for v in vs]
            lines.append(f"| {test} | " + " | ".join(cells + ratio_cells) + " |")
    lines += startup_lines(doc)
    lines += ["", "## Decode bandwidth", "",
              "Bytes a decode step reads (weights + KV cache at the test's positions; a lower bound) x median "
              "tokens/s, against the host's DRAM read bandwidth (best pass of the probe) at the same threads.", "",
              "| threads | test | engine | MB/token (weights + KV) | GB/s | DRAM GB/s | share |", "|---|---|---|---|---|---|---|"]
    for e in doc["effective_bandwidth"]:
        b = e["bytes_per_token"]
        share = "n/a" if e["share_of_dram"] is None else f"{100 * e['share_of_dram']:.1f}%"
        dram = "n/a" if e["dram_gb_per_s"] is None else f"{e['dram_gb_per_s']:.2f}"
        lines.append(f"| {e['threads']} | {e['test']} | {label(e['engine'])} | {b['total'] / 1e6:.1f} "
                     f"({b['weights'] / 1e6:.1f} + {b['kv'] / 1e6:.1f}) | {e['gb_per_s']:.2f} | {dram} | {share} |")
    lines += ["", "## DRAM read bandwidth (bu_bandwidth)", "", "| threads | best GB/s | median GB/s | buffer MiB | passes |",
              "|---|---|---|---|---|"]
    for b in doc["bandwidth"]:
        lines.append(f"| {b['threads']} | {b['best_gb_per_s']:.2f} | {b['median_gb_per_s']:.2f} | "
                     f"{b['bytes'] / 2**20:.0f} | {b['repeats']} |")
    lines += ["", "## Engines", ""]
    for e in doc["engines"]:
        lines.append(f"- **{label(e['id'])}**: {e['description']}")
    checked = [e for e in doc["engines"] if "parity" in e]
    if checked:
        lines += ["", "## Parity of the other builds", "",
                  "Each other build against the float64 reference and llama.cpp (`bringup parity`, its "
                  "parity.json); a build with quantized activations by the profile's quantized_activations "
                  "gates (docs/parity.md).", ""]
    for e in checked:
        par = e["parity"]
        head = f"- **{label(e['id'])}**: {par['verdict']}"
        if "gates" not in par:
            lines.append(f"{head}: {par['reason']}")
            continue
        lines.append(f"{head} ({par['path']}; {par['gate_set']})")
        for g in par["gates"]:
            lines.append(f"  - {g['id']} ({g['kind']}): {_num(g['measured'])} {g['cmp']} {_num(g['threshold'])}"
                         f"{'' if g['passed'] else ' FAIL'}")
    return "\n".join(lines) + "\n"


def startup_lines(doc: dict[str, Any]) -> list[str]:
    """The start-up section of bench.md: per engine, median (min-max) of its runs' load_ms (every
    process loads the model once); [] when no sample carries it (older bench.json)."""
    by: dict[str, list[float]] = {}
    for s in doc["samples"]:
        if "load_ms" in s:
            by.setdefault(s["engine"], []).append(s["load_ms"])
    if not by:
        return []
    lines = ["", "## Start-up", "",
             "Each run is a fresh process that loads the model. Ours: open, SHA-256 check of the whole weights "
             "file, tokenizer and context (`bringup-run --timing`, load_ms); llama.cpp: model load and context "
             "creation, which checks no hash (mmap).", "",
             "| engine | runs | load ms, median (min–max) |", "|---|---|---|"]
    for eng in [e for e in engines_of(doc) if e in by]:
        v = sorted(by[eng])
        lines.append(f"| {label(eng)} | {len(v)} | {statistics.median(v):.1f} ({v[0]:.1f}–{v[-1]:.1f}) |")
    return lines


def _num(v: float | None) -> str:
    return "not measured" if v is None else f"{v:.4g}"


def render_png(doc: dict[str, Any], path: Path) -> None:
    """bench.png: per thread count, grouped bars of median tokens/s per test and engine with
    min–max whiskers (log scale: pp and tg differ by an order of magnitude); beside them ours'
    decode bandwidth share of DRAM. Written atomically."""
    import matplotlib  # noqa: PLC0415  (lazy: plotting is only needed here)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    threads, tests = doc["settings"]["threads"], doc["settings"]["tests"]
    engines = engines_of(doc)
    rows = {(r["threads"], r["test"], r["engine"]): r["tok_per_s"] for r in doc["results"]}
    fig, axes = plt.subplots(1, len(threads) + 1, figsize=(4.5 * (len(threads) + 1), 4.2), squeeze=False)
    width = 0.8 / max(len(engines), 1)
    for ax, th in zip(axes[0], threads):
        for i, e in enumerate(engines):
            vals = [rows.get((th, t, e)) for t in tests]
            xs = [j + (i - (len(engines) - 1) / 2) * width for j in range(len(tests))]
            med = [v["median"] if v else 0 for v in vals]
            err = [[v["median"] - v["min"] if v else 0 for v in vals], [v["max"] - v["median"] if v else 0 for v in vals]]
            ax.bar(xs, med, width, yerr=err, capsize=3, label=label(e))
        ax.set_xticks(range(len(tests)), tests)
        ax.set_yscale("log")
        ax.set_ylabel("tokens/s (median, min–max)")
        ax.set_title(f"{doc['model']}, {th} thread{'s' if th > 1 else ''}")
        ax.legend(fontsize=7)
    ax = axes[0][-1]
    ours = [e for e in doc["effective_bandwidth"] if is_ours(e["engine"]) and e["share_of_dram"] is not None]
    ax.bar(range(len(ours)), [100 * e["share_of_dram"] for e in ours], color="tab:blue")
    ax.set_xticks(range(len(ours)), [f"{e['test']}\nt={e['threads']}" + ("" if e["engine"] == "ours" else f"\n{label(e['engine'])}")
                                     for e in ours], fontsize=7)
    ax.set_ylabel("% of DRAM read bandwidth")
    ax.set_title("ours: decode effective bandwidth")
    fig.suptitle(f"bench {doc['model']} (load average {doc['host']['load_average_before']})", fontsize=9)
    fig.tight_layout()
    with atomic.atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110)
    plt.close(fig)


def write_renderings(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    """bench.md and bench.png of ``doc`` in ``out_dir``; returns their paths."""
    md, png = Path(out_dir) / "bench.md", Path(out_dir) / "bench.png"
    atomic.write_text(md, render_md(doc))
    render_png(doc, png)
    return [md, png]
