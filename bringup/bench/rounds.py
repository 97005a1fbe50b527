"""The measurements of a bench: llama-bench's tests, run on each engine in interleaved rounds.

A test is ``pp<N>`` (prompt processing: N prompt tokens in one call, tokens/s of the prefill),
``tg<N>`` (N one-token decode steps, tokens/s of the decode) or ``tg<N>@d<D>`` (the same after a
context of D tokens, which is filled untimed). The token ids are random (fixed seed; the first is
BOS when the model adds one), the same ids for every engine, as llama-bench uses random ids.

Engines: ``ours`` (``bringup-run --json --timing``: its own prompt-eval and decode clocks, which
exclude sampling and loading; ``ours_<level>`` the same binary with its kernels' ISA level forced
through ``BU_ISA``), and llama.cpp through ``bringup.bench.llama_runner`` in a fresh
process per test, once with the portable library llama-cpp-python ships (``llama_cpp_portable``)
and once with the native build (``llama_cpp_native``, when given).

Rounds interleave: round r runs every test on every engine, the engines' order rotated by r, so a
slow spell of the host (other jobs, frequency changes) falls on all engines alike. Each (threads,
test, engine) cell keeps every round's tokens/s; :func:`summarize` gives median, min and max.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from bringup.core.errors import BringupError
from bringup.core.progress import Progress
from bringup.core.native import NativeProgram, run_command, stderr_tail, tokens_arg

ENGINES = ("ours", "llama_cpp_portable", "llama_cpp_native")
LLAMA_ENGINES = ENGINES[1:]


def is_ours(engine: str) -> bool:
    """``ours`` (the ISA level the program picks), ``ours_<level>`` (forced through ``BU_ISA``) or
    ``ours_<build>`` (another build of ours, ``bringup bench run --ours-build``)."""
    return engine == "ours" or engine.startswith("ours_")
LLAMA_TIMEOUT_S = 1800
_TEST = re.compile(r"^(pp|tg)(\d+)(?:@d(\d+))?$")


@dataclass(frozen=True)
class Test:
    """One llama-bench test: ``kind`` "pp" or "tg", ``n`` tokens timed, ``depth`` context before."""
    kind: str
    n: int
    depth: int = 0

    @property
    def name(self) -> str:
        return f"{self.kind}{self.n}" + (f"@d{self.depth}" if self.depth else "")


def parse_test(text: str) -> Test:
    """``pp512`` / ``tg128`` / ``tg128@d1024`` -> Test. Raises BringupError on any other form."""
    m = _TEST.match(text.strip())
    if not m or int(m[2]) < 1:
        raise BringupError(f"bench test {text!r}: expected pp<N>, tg<N> or tg<N>@d<D> with N >= 1")
    return Test(m[1], int(m[2]), int(m[3] or 0))


def test_tokens(n_vocab: int, test: Test, seed: int, bos: int | None) -> tuple[list[int], list[int]]:
    """(prompt ids, context ids) of ``test``: a pp test's prompt has ``n`` ids, a tg test's none
    (it starts from the last context id, or BOS / a random id at depth 0); the context has
    ``depth`` ids. Random in [0, n_vocab) from ``seed``; the first id of the sequence is ``bos``."""
    rng = np.random.default_rng(seed)
    ids = [int(t) for t in rng.integers(0, n_vocab, size=test.depth + (test.n if test.kind == "pp" else 0))]
    if ids and bos is not None:
        ids[0] = bos
    return ids[test.depth:], ids[:test.depth]


def run_ours(prog: NativeProgram, test: Test, prompt: Sequence[int], depth: Sequence[int],
             start: int) -> dict[str, Any]:
    """One test of our CLI: ``{"ms", "tokens", "tok_per_s"}`` from its --timing clocks. A pp test
    prefills ``depth + prompt`` and cannot time the prompt apart, so pp tests take no depth.
    ``start``: the first token of a tg test without context. Raises BringupError when the CLI
    fails or times a different number of tokens than asked."""
    if test.kind == "pp":
        if depth:
            raise BringupError("bench: a pp test with a context depth is not measurable on our CLI "
                               "(its prompt eval covers the whole prompt)")
        r = prog.run_json(["--prompt-tokens", tokens_arg(prompt), "--max-tokens", "1", "--temperature", "0",
                           "--timing", "--no-stop"])
        t, ms_key, n_key = r.get("timing") or {}, "prompt_eval_ms", "prompt_tokens"
    else:
        r = prog.run_json(["--prompt-tokens", tokens_arg(list(depth) or [start]), "--max-tokens", str(test.n + 1),
                           "--temperature", "0", "--timing", "--no-stop"])
        t, ms_key, n_key = r.get("timing") or {}, "decode_ms", "decode_runs"
    if ms_key not in t or n_key not in t:
        raise BringupError(f"bringup-run --timing output lacks {ms_key}/{n_key} (has {sorted(t)})")
    want = len(prompt) if test.kind == "pp" else test.n
    if int(t[n_key]) != want or not t[ms_key] > 0:
        raise BringupError(f"bench {test.name}: our CLI timed {t[n_key]} tokens in {t[ms_key]} ms; expected {want}")
    # the kernels' ISA level the program chose (its --json "isa"), and per class of linear call the
    # level it measured faster and why ("isa_dispatch", docs/kernels.md); absent from older builds
    # start-up: the program's own load clock (open, weights SHA-256 check, tokenizer, context: --timing load_ms)
    return {"ms": float(t[ms_key]), "tokens": want, "tok_per_s": want / (float(t[ms_key]) / 1e3), "isa": r.get("isa"),
            "isa_dispatch": r.get("isa_dispatch"), "load_ms": float(t["load_ms"]) if "load_ms" in t else None}


def run_llama(gguf: Path, threads: int, test: Test, prompt: Sequence[int], depth: Sequence[int],
              lib_dir: str | None, start: int) -> dict[str, Any]:
    """One test of llama.cpp in a fresh process (bringup.bench.llama_runner): the portable build
    (``lib_dir`` None) or the build in ``lib_dir``; a tg test feeds ``start`` first. Returns the runner's JSON object. Raises
    BringupError when it fails (its stderr quoted)."""
    env = {k: v for k, v in os.environ.items() if k != "LLAMA_CPP_LIB_PATH"}
    if lib_dir:
        env["LLAMA_CPP_LIB_PATH"] = str(lib_dir)
    argv = [sys.executable, "-m", "bringup.bench.llama_runner", "--gguf", str(gguf), "--threads", str(threads)]
    argv += ["--prompt", tokens_arg(prompt)] if test.kind == "pp" else ["--n-gen", str(test.n), "--start", str(start)]
    if depth:
        argv += ["--depth", tokens_arg(depth)]
    p = run_command(argv, timeout_s=LLAMA_TIMEOUT_S, what="llama.cpp bench runner", env=env)
    if p.returncode != 0:
        raise BringupError(f"llama.cpp ({'native' if lib_dir else 'portable'}) {test.name} failed "
                           f"(exit {p.returncode}): {stderr_tail(p.stderr)}")
    return json.loads(p.stdout)


#: The rounds rule: at least ``rounds`` (``--rounds``), then one more while the worst cell's spread
#: error (:func:`spread_error`) exceeds this, up to ``max_rounds`` (``--max-rounds``).
SPREAD_TARGET = 0.05
ROUNDS_RULE = ("at least --rounds interleaved rounds, then one more while any cell's (max - min) / median / "
               "sqrt(rounds) exceeds --spread-target, up to --max-rounds")


def spread_error(samples: Sequence[dict[str, Any]]) -> float:
    """The worst (test, engine) cell's (max - min) / median / sqrt(n) of tokens/s over its n rounds:
    the range shrinks the median's uncertainty by about sqrt(n), so this is a rough bound on the
    median's relative error; 0 without samples."""
    worst = 0.0
    for r in summarize(samples):
        v = r["tok_per_s"]
        worst = max(worst, (v["max"] - v["min"]) / v["median"] / r["rounds"] ** 0.5 if v["median"] > 0 else 0.0)
    return worst


def _one_round(engines, tests, names, threads, r, rounds_txt, tokens, prog, samples, last) -> None:
    """Round ``r`` at ``threads``: every test on every engine, the engines rotated by ``r``."""
    order = names[r % len(names):] + names[:r % len(names)]
    for test in tests:
        prompt, depth = tokens(test)
        for i, eng in enumerate(order):
            out = engines[eng](threads, test, prompt, depth)
            last[eng] = out
            samples.append({"threads": threads, "round": r, "test": test.name, "engine": eng, "ms": out["ms"],
                            "tokens": out["tokens"], "tok_per_s": out["tok_per_s"], "order": i}
                           | ({"load_ms": out["load_ms"]} if out.get("load_ms") is not None else {}))
            if prog is not None:
                prog.step(f"t={threads} round {r + 1}/{rounds_txt} {test.name} {eng}")


def run_rounds(engines: dict[str, Callable[[int, Test, list[int], list[int]], dict]], tests: Sequence[Test],
               thread_counts: Sequence[int], rounds: int, tokens: Callable[[Test], tuple[list[int], list[int]]],
               progress: bool = True, max_rounds: int | None = None, target: float = SPREAD_TARGET,
               ) -> tuple[list[dict[str, Any]], dict[str, dict], list[dict[str, Any]]]:
    """Run every (threads, round, test, engine) once, engines rotated per round. ``engines`` maps
    an engine id to ``fn(threads, test, prompt, depth) -> {"ms", "tokens", "tok_per_s", ...}``.
    Per thread count: ``rounds`` rounds, then more (up to ``max_rounds``, default ``rounds``) while
    :func:`spread_error` of that thread count's samples exceeds ``target`` (ROUNDS_RULE).

    Returns (samples, last, per_threads): one sample ``{"threads", "round", "test", "engine", "ms",
    "tokens", "tok_per_s", "order"}`` per run, each engine's last full answer (its provenance
    fields), and per thread count ``{"threads", "rounds", "spread_error", "settled"}``.
    Progress goes to stderr (bringup.core.progress: a bar on a terminal, else a line per run, over
    the minimum runs), and one line per finished round; progress=False: the round lines only."""
    names = list(engines)
    cap = max(rounds, max_rounds or rounds)
    total = len(thread_counts) * rounds * len(tests) * len(names)
    samples: list[dict[str, Any]] = []
    last: dict[str, dict] = {}
    per_threads: list[dict[str, Any]] = []
    rounds_txt = str(rounds) if cap == rounds else f"{rounds}-{cap}"
    # a bar on a terminal, else a line per run (and on the terminal Snakemake runs in: progress.echo_to)
    prog = Progress("bench", "run", total, unit="run") if progress else None
    with prog if prog is not None else contextlib.nullcontext():
        for threads in thread_counts:
            for r in range(cap):
                _one_round(engines, tests, names, threads, r, rounds_txt, tokens, prog, samples, last)
                mine = [s for s in samples if s["threads"] == threads]
                err = spread_error(mine)
                done = [s for s in mine if s["round"] == r]
                line = "; ".join(f"{t.name} " + " ".join(f"{s['engine']}={s['tok_per_s']:.1f}"
                                                         for s in done if s["test"] == t.name) for t in tests)
                msg = f"threads {threads} round {r + 1}/{rounds_txt}: {line} tok/s (spread error {err:.3f})"
                if prog is not None:
                    prog.write(msg)
                else:
                    print(msg, file=sys.stderr, flush=True)
                if r + 1 >= rounds and (err <= target or r + 1 == cap):
                    per_threads.append({"threads": threads, "rounds": r + 1, "spread_error": round(err, 4),
                                        "settled": err <= target})
                    break
    return samples, last, per_threads


def summarize(samples: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (threads, test, engine): ``{"threads", "test", "engine", "rounds",
    "tok_per_s": {"median", "min", "max", "samples"}}``, in first-seen order."""
    cells: dict[tuple, list[float]] = {}
    for s in samples:
        cells.setdefault((s["threads"], s["test"], s["engine"]), []).append(float(s["tok_per_s"]))
    return [{"threads": th, "test": te, "engine": en, "rounds": len(v),
             "tok_per_s": {"median": statistics.median(v), "min": min(v), "max": max(v), "samples": v}}
            for (th, te, en), v in cells.items()]


def ratios(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each of our engines over each llama.cpp build (median over median; min/max: ours' min over
    their max and ours' max over their min, the extremes the rounds allow), and over the faster
    build (``vs`` = "llama_cpp_best", ``best_is`` naming it)."""
    by = {(r["threads"], r["test"], r["engine"]): r["tok_per_s"] for r in rows}
    out = []
    for (th, te, en), ours in by.items():
        if not is_ours(en):
            continue
        theirs = {e: by[(th, te, e)] for e in LLAMA_ENGINES if (th, te, e) in by}
        if not theirs:
            continue
        fastest = max(theirs, key=lambda e: theirs[e]["median"])
        for vs in [*theirs, "llama_cpp_best"]:
            t = theirs[fastest if vs == "llama_cpp_best" else vs]
            out.append({"threads": th, "test": te, "engine": en, "vs": vs,
                        **({"best_is": fastest} if vs == "llama_cpp_best" else {}),
                        "median": ours["median"] / t["median"], "min": ours["min"] / t["max"],
                        "max": ours["max"] / t["min"]})
    return out
