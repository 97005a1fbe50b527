"""The bench's headline, for the reports that cite it: certification's speed section and the
regression summary read ``results/{model}/bench/bench.json`` through :func:`headline_of` when it
exists (the bench is not part of certify's DAG: it wants a quiet machine, so it runs on its own).

Headline: ``{"path", "sha256", "measured_at", "threads", "ratios": {test: ours / faster llama.cpp
(median)}, "best_is": {test: which build was faster}, "tok_per_s": {test: ours' median},
"decode_share_of_dram": {tg test: ours' effective bandwidth / DRAM bandwidth}, "caveats"}`` at the
largest thread count the bench measured.
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
    return {"measured_at": doc["measured_at"], "threads": threads,
            "ratios": {r["test"]: r["median"] for r in best}, "best_is": {r["test"]: r["best_is"] for r in best},
            "tok_per_s": ours, "decode_share_of_dram": share, "caveats": list(doc["caveats"])}


def headline_of(path: Path) -> dict[str, Any] | None:
    """The headline of the bench.json at ``path`` with its path and sha256, or None when there is
    no file. Raises BringupError when the file exists but is not a valid bench.json."""
    path = Path(path)
    if not path.exists():
        return None
    doc = canonjson.read(path, "bench.json")
    validate(doc, "bench", str(path))
    return {"path": rel(path), "sha256": sha256_file(path), **headline(doc)}


def one_line(h: dict[str, Any] | None) -> str:
    """``pp512 0.31x, tg128 0.29x (2 threads, ours / faster llama.cpp)`` or "" without a bench."""
    if not h:
        return ""
    parts = ", ".join(f"{t} {v:.2f}x" for t, v in h["ratios"].items())
    return f"{parts} ({h['threads']} threads, ours / faster llama.cpp)"
