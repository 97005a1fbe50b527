"""The bench's headline, for the reports that cite it: certification's speed section and the
regression summary read ``results/{model}/bench/bench.json`` through :func:`headline_of` when it
exists (the bench is not part of certify's DAG: it wants a quiet machine, so it runs on its own).

Headline: ``{"path", "sha256", "measured_at", "threads", "ratios": {test: ours / faster llama.cpp
(median)}, "best_is": {test: which build was faster}, "tok_per_s": {test: ours' median},
"decode_share_of_dram": {tg test: ours' effective bandwidth / DRAM bandwidth}, "caveats",
"lib_sha256": the libmodel.so it timed, "load_average_before", "load_average_after", "cpu_count"}``
at the largest thread count the bench measured. A report cites a bench only for the library it
certifies (:func:`for_library`): a speed figure never stands without the build it timed, the
build it was compared with (``best_is``), the thread count, the load and the date.

A format reader (here, not in ``bringup/bench/``): it is the code of certify and the regression
that read bench.json (bringup.core.codedeps), so a change to the bench's runner reruns no
certification, and a change to this reader reruns the certificates that cite a bench through it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from bringup.core import canonjson
from bringup.core.hashing import sha256_file
from bringup.core.paths import rel
from bringup.core.schemas import validate


def headline(doc: dict[str, Any]) -> dict[str, Any]:
    """The headline of a bench.json document (see the module docstring)."""
    threads = max(doc["settings"]["threads"])
    best = [r for r in doc["ratios"]
            if r["threads"] == threads and r["engine"] == "ours" and r["vs"] == "llama_cpp_best"]
    ours = {r["test"]: r["tok_per_s"]["median"] for r in doc["results"]
            if r["threads"] == threads and r["engine"] == "ours"}
    share = {e["test"]: e["share_of_dram"] for e in doc["effective_bandwidth"]
             if e["threads"] == threads and e["engine"] == "ours"}
    lib = next((e.get("lib_sha256") for e in doc["engines"] if e["id"] == "ours"), None)
    host = doc["host"]
    return {"measured_at": doc["measured_at"], "threads": threads,
            "ratios": {r["test"]: r["median"] for r in best}, "best_is": {r["test"]: r["best_is"] for r in best},
            "tok_per_s": ours, "decode_share_of_dram": share, "caveats": list(doc["caveats"]),
            "lib_sha256": lib if isinstance(lib, str) else None,
            "load_average_before": host.get("load_average_before"), "load_average_after": host.get("load_average_after"),
            "cpu_count": host.get("cpu_count")}


def headline_of(path: Path) -> dict[str, Any] | None:
    """The headline of the bench.json at ``path`` with its path and sha256, or None when there is
    no file. Raises BringupError when the file exists but is not a valid bench.json."""
    path = Path(path)
    if not path.exists():
        return None
    doc = canonjson.read(path, "bench.json")
    validate(doc, "bench", str(path))
    return {"path": rel(path), "sha256": sha256_file(path), **headline(doc)}


def for_library(path: Path, lib_sha256: str) -> tuple[dict[str, Any] | None, str | None]:
    """(headline, None) of the bench.json at ``path`` when it timed the library whose sha256 is
    ``lib_sha256``; else (None, why not: no bench.json, or it timed another library). Raises
    BringupError when the file exists but is not a valid bench.json."""
    h = headline_of(path)
    if h is None:
        return None, f"not benched: no {rel(path)} (`snakemake bench`, docs/bench.md)"
    if h["lib_sha256"] != lib_sha256:
        return None, (f"not benched: {rel(path)} ({h['measured_at']}) timed another libmodel.so "
                      f"(sha256 {str(h['lib_sha256'])[:12]}, this one {lib_sha256[:12]}); rerun `snakemake bench`")
    return h, None


def _load(h: dict[str, Any]) -> str:
    before, after = h.get("load_average_before"), h.get("load_average_after")
    if not before or not after:
        return "load not recorded"
    return f"load {before[0]:g} before, {after[0]:g} after on {h.get('cpu_count') or '?'} CPUs"


def one_line(h: dict[str, Any] | None, why: str | None = None) -> str:
    """``pp512 0.31x (vs llama_cpp_native), tg128 0.29x (vs llama_cpp_native); bench 2026-12-01T10:00:00Z,
    2 threads, load 0.1 before, 0.2 after on 2 CPUs`` or ``why`` (default "not benched") without one."""
    if not h:
        return why or "not benched"
    parts = ", ".join(f"{t} {v:.2f}x (vs {h['best_is'].get(t, '?')})" for t, v in h["ratios"].items())
    return f"{parts}; bench {h['measured_at']}, {h['threads']} threads, {_load(h)}"


def prefill_decode(h: dict[str, Any] | None) -> dict[str, float] | None:
    """``{"prefill": ratio of the pp test, "decode": ratio of the tg test}`` when the headline has
    exactly one of each, else None (what the regression's history compares night to night)."""
    if not h:
        return None
    pp = [v for t, v in h["ratios"].items() if t.startswith("pp")]
    tg = [v for t, v in h["ratios"].items() if t.startswith("tg")]
    return {"prefill": pp[0], "decode": tg[0]} if len(pp) == 1 and len(tg) == 1 else None
