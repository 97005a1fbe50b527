"""Parity: our native program against the llama.cpp oracle, on the same GGUF and the same token ids.

Teacher-forced metrics (:mod:`bringup.parity.metrics`) compare the logits at every position of
every prompt of a prompt set (``config/prompts/*.json``); free-running greedy generation compares
continuations token by token. Gates come from a parity profile
(``config/parity_profiles/{model}.json``). Output: ``parity.json`` (schema ``parity``) and a
per-position KL plot next to it. docs/parity.md has the whole procedure.
"""
from __future__ import annotations

import argparse
import io
import sys
import tempfile
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from bringup.core import atomic, canonjson
from bringup.core.cli import main
from bringup.core.errors import BringupError, GateError
from bringup.core.hashing import sha256_file
from bringup.core.native import NativeProgram
from bringup.core.paths import ROOT, rel
from bringup.core.schemas import validate
from bringup.formats.chat import render_chat_format, render_template
from bringup.ir.circuits import choose_chat_format, for_architecture
from bringup.parity.metrics import greedy_compare, pooled_summary, position_metrics, summarize
from bringup.parity.oracles import LlamaCppOracle, NumpyReference
from bringup.parity.xray import activation_contract, dump_from_cli, xray_against_reference


class Program(Protocol):
    """What parity needs from a program under test (ours) or an oracle."""

    def logits_all(self, tokens: Sequence[int]) -> np.ndarray: ...

    def greedy(self, tokens: Sequence[int], n: int) -> list[int]: ...


# --------------------------------------------------------------------------------------------
# gates
# --------------------------------------------------------------------------------------------

def evaluate_gates(profile: dict, overall: dict[str, float]) -> list[dict[str, Any]]:
    """Each profile gate with its measured value, pass/fail and distance to its target.

    Raises BringupError if a gate names a metric that was not measured (never a silent pass).
    """
    out = []
    for g in profile["gates"]:
        if g["metric"] not in overall:
            raise BringupError(f"gate {g['id']}: metric {g['metric']!r} was not measured")
        v = float(overall[g["metric"]])
        ok = v >= g["threshold"] if g["cmp"] == ">=" else v <= g["threshold"]
        r = {"id": g["id"], "metric": g["metric"], "cmp": g["cmp"], "threshold": g["threshold"],
             "measured": v, "passed": bool(ok), "description": g.get("description", ""),
             "reason": g["reason"]}
        if "target" in g:
            t = g["target"]
            r["target"] = t
            r["target_met"] = bool(v >= t if g["cmp"] == ">=" else v <= t)
            # how far from the target, in the metric's units (positive = still short of it)
            r["target_gap"] = (t - v) if g["cmp"] == ">=" else (v - t)
        out.append(r)
    return out


# --------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------

def load_input(path: Path, schema: str, what: str) -> tuple[dict, str]:
    """A JSON input of the run (profile, prompt set), schema-validated, and the SHA-256 (hex) of
    its bytes for ``parity.json`` -> ``inputs``. Raises BringupError if it is missing, not JSON
    or not valid."""
    obj = canonjson.read(path, what)
    validate(obj, schema, str(path))
    return obj, sha256_file(path)


def _chat_renderer(oracle, architecture: str):
    """How chat prompts become text: the GGUF's own chat template (jinja2 sandbox; its text holds
    any BOS), or, when the GGUF has none, the circuit's chat format for that case
    (``bringup.ir.circuits.choose_chat_format``; BOS added by the tokenizer if the GGUF asks).
    Returns (render(messages) -> str, add_special, description)."""
    tmpl = oracle.meta("tokenizer.chat_template")
    if tmpl is not None:
        sp = oracle.special_tokens()
        text = lambda t: oracle.token_text(t) if t >= 0 else ""  # noqa: E731
        bos, eos = text(sp["bos"]), text(sp["eos"])
        return ((lambda msgs: render_template(tmpl, msgs, True, bos, eos)), False,
                "GGUF tokenizer.chat_template (jinja2 sandbox)")
    fmt, why = choose_chat_format(for_architecture(architecture), None)
    return (lambda msgs: render_chat_format(fmt["render"], msgs, True)), oracle.add_bos(), \
        f"circuit chat format {fmt['name']!r}: {why}"


def tokenize_prompts(prompt_set: dict, oracle) -> tuple[list[dict], str | None]:
    """Token ids for every prompt, by llama.cpp's tokenizer (the ids both programs are fed), and
    how chat prompts were rendered (None if the set has none). Plain text gets BOS if the GGUF
    asks for it; chat text is rendered by :func:`_chat_renderer`."""
    renderer = None
    out = []
    for p in prompt_set["prompts"]:
        if "messages" in p:
            if renderer is None:
                renderer = _chat_renderer(oracle, oracle.meta("general.architecture") or "")
            text = renderer[0](p["messages"])
            toks = oracle.tokenize(text, add_special=renderer[1], parse_special=True)
        else:
            text = p["text"]
            toks = oracle.tokenize(text, add_special=oracle.add_bos(), parse_special=False)
        if len(toks) < 2:
            raise BringupError(f"prompt {p['id']}: {len(toks)} tokens; need at least 2")
        out.append({"id": p["id"], "kind": p["kind"], "text": text, "tokens": toks})
    return out, (renderer[2] if renderer else None)


def bump_identity(weights: Path) -> dict[str, str]:
    """The BUMP's own hashes from its fixed header (docs/bump_format.md: bytes 64-96 the payload
    SHA-256, 96-128 the metadata+table SHA-256), as hex. Raises BringupError for a file that does
    not start with a BUMP header."""
    with open(weights, "rb") as fh:
        head = fh.read(128)
    if len(head) < 128 or head[:4] != b"BUMP":
        raise BringupError(f"{weights}: not a BUMP file")
    return {"payload_sha256": head[64:96].hex(), "header_sha256": head[96:128].hex()}


# --------------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------------

def run_parity(*, model: str, oracle, ours: Program, prompts: list[dict], profile: dict,
               oracle_info: dict, program_info: dict, inputs: dict) -> tuple[dict, dict]:
    """Teacher-forced and greedy parity over tokenized ``prompts`` ([{id, kind, text, tokens}]):
    ``oracle`` and ``ours`` are :class:`Program` s; ``profile`` a parity profile (its ``top_k``,
    ``greedy``, ``min_prompts``/``min_positions`` and gates); the ``*_info`` and ``inputs`` dicts
    go into the document as they are.

    Returns (parity document (schema ``parity``), :func:`position_metrics` arrays by prompt id for
    plotting). Raises BringupError if the prompt set is smaller than the profile demands, or from
    the metrics and gates.
    """
    k = profile["top_k"]
    gmax, gmin = profile["greedy"]["max_tokens"], profile["greedy"]["min_prefix"]
    n_pos = sum(len(p["tokens"]) for p in prompts)
    if len(prompts) < profile["min_prompts"] or n_pos < profile["min_positions"]:
        raise BringupError(f"prompt set too small for profile {model}: {len(prompts)} prompts / {n_pos} "
                           f"positions; the profile needs {profile['min_prompts']} / {profile['min_positions']}")
    per_prompt, arrays, pooled = [], {}, []
    for p in prompts:
        a = oracle.logits_all(p["tokens"])
        b = ours.logits_all(p["tokens"])
        pm = position_metrics(a, b, k)
        arrays[p["id"]] = pm
        pooled.append(pm)
        g = greedy_compare(oracle.greedy(p["tokens"], gmax), ours.greedy(p["tokens"], gmax), gmax)
        per_prompt.append({"id": p["id"], "kind": p["kind"], "n_tokens": len(p["tokens"]),
                           "tokens": p["tokens"], "teacher_forced": summarize(pm),
                           "first_generated_top1_match": bool(pm["top1_match"][-1]),
                           "kl_per_position": [float(x) for x in pm["kl"]],
                           "greedy": g})
    overall = pooled_summary(pooled)
    overall["n_prompts"] = len(prompts)
    overall["first_generated_top1_fraction"] = float(np.mean([q["first_generated_top1_match"] for q in per_prompt]))
    overall["greedy_prompts_meeting_min_prefix"] = int(sum(q["greedy"]["effective_prefix"] >= gmin for q in per_prompt))
    overall["greedy_prefix_mean"] = float(np.mean([q["greedy"]["effective_prefix"] for q in per_prompt]))
    gates = evaluate_gates(profile, overall)
    doc = {"schema_version": 1, "model": model, "inputs": inputs, "oracle": oracle_info,
           "program": program_info,
           "settings": {"top_k": k, "greedy_max_tokens": gmax, "greedy_min_prefix": gmin},
           "prompts": per_prompt, "overall": overall, "gates": gates,
           "verdict": "pass" if all(g["passed"] for g in gates) else "fail"}
    return doc, arrays


def plot_kl(arrays: dict[str, dict], path: Path) -> None:
    """Per-position KL(oracle‖ours) in nats per prompt (``arrays``: prompt id -> its
    :func:`position_metrics`), log scale, prompts side by side, top-1 disagreements marked: a
    1000x400 PNG written atomically to ``path``, byte-identical for the same arrays."""
    # imported here, not at the top: the backend must be chosen before pyplot is first imported,
    # and choosing it is a process-wide side effect that importing parity should not have
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(10, 4), dpi=100)
    x0 = 0
    for pid, pm in arrays.items():
        kl = np.maximum(pm["kl"], 1e-12)
        xs = np.arange(x0, x0 + kl.size)
        ax.plot(xs, kl, lw=0.8, label=pid)
        miss = ~pm["top1_match"]
        ax.scatter(xs[miss], kl[miss], marker="x", color="black", s=12, zorder=3)
        ax.axvline(x0, color="0.85", lw=0.5)
        x0 += kl.size
    ax.set_yscale("log")
    ax.set_xlabel("position (prompts concatenated)")
    ax.set_ylabel("KL(llama.cpp || ours), nats")
    ax.set_title("Teacher-forced KL per position; x = top-1 disagreement")
    ax.legend(fontsize=6, ncol=4, loc="upper right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})  # no version stamp: same data, same bytes
    plt.close(fig)
    atomic.write_bytes(path, buf.getvalue())


def reference_check(doc: dict, reference, ours: Program, n_positions: int, k: int) -> dict:
    """Ours against ``reference`` (a float64 NumpyReference, or a GGUF path to build one: no
    activation quantization) on the first ``n_positions`` of every prompt.

    Returns {"status": "ran", "overall": summary, "prompts": {id: summary}, ...}, or
    {"status": "skipped", "reason"} when ``n_positions`` is 0.
    """
    if n_positions <= 0:
        return {"status": "skipped", "reason": "--reference-positions 0"}
    ref = reference if isinstance(reference, NumpyReference) else NumpyReference(reference)
    per, pooled = {}, []
    for p in doc["prompts"]:
        toks = p["tokens"][:n_positions]
        pm = position_metrics(ref.logits_all(toks), ours.logits_all(toks), k)
        per[p["id"]] = summarize(pm)
        pooled.append(pm)
    return {"status": "ran", "reference": ref.info(), "positions_per_prompt": n_positions,
            "overall": pooled_summary(pooled), "prompts": per}


def run_xray_for(doc: dict, gguf: Path, program: NativeProgram, n_tokens: int, rel_tol: float,
                 ir_prefill: Path) -> dict:
    """X-ray of ``program`` (its ``--dump-hidden``) against the numpy reference of ``gguf``, on the
    prompt of ``doc`` with the worst mean KL (its first ``n_tokens`` positions), per-op relative
    error tolerance ``rel_tol``.

    ``ir_prefill``: the program's prefill IR; its linear activation contract
    (``bringup.parity.xray.activation_contract``) makes the per-op reference round activations as the program does.

    A CLI that cannot dump hidden states gives ``{"status": "unavailable", "error": ...}`` in the
    result (recorded, never hidden); other errors propagate.
    """
    worst = max(doc["prompts"], key=lambda p: p["teacher_forced"]["kl_mean"])
    tokens = worst["tokens"][:n_tokens]
    with tempfile.TemporaryDirectory(prefix="bringup-xray-") as d:
        try:
            ours = dump_from_cli(program, tokens, Path(d))
        except BringupError as e:
            return {"status": "unavailable", "prompt": worst["id"], "error": str(e)[:2000]}
    activations = activation_contract(canonjson.read(ir_prefill, "prefill IR"))
    res = xray_against_reference(NumpyReference(gguf), tokens, ours, rel_tol, activations)
    return {"status": "ran", "prompt": worst["id"], **res}


def cli_main(argv: Sequence[str] | None = None) -> int:
    """``bringup parity``: write parity.json (+ parity_kl.png) for one model.

    Exit 0 when parity ran (the verdict is in the file; certify turns a failed gate into exit 6),
    or 6 with ``--strict`` when a gate fails. Errors raise BringupError (exit code per kind).
    """
    ap = argparse.ArgumentParser(prog="bringup parity", description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--gguf", required=True, type=Path)
    ap.add_argument("--cli", required=True, type=Path, help="results/{model}/build/bringup-run")
    ap.add_argument("--lib", required=True, type=Path, help="results/{model}/build/libmodel.so")
    ap.add_argument("--weights", required=True, type=Path, help="results/{model}/convert/weights.bump")
    ap.add_argument("--profile", type=Path, help="default: config/parity_profiles/{model}.json")
    ap.add_argument("--prompts", type=Path, help="default: the profile's prompt_set")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", required=True, type=Path, help="parity.json path; the plot goes next to it")
    ap.add_argument("--strict", action="store_true", help="exit 6 when a gate fails")
    ap.add_argument("--ir", type=Path, help="results/{model}/ir/ir_prefill.json: the program's numerics, for X-ray")
    ap.add_argument("--xray", choices=("on-fail", "always", "never"), default="on-fail",
                    help="run X-ray (needs bringup-run --dump-hidden) when a gate fails, always, or never")
    ap.add_argument("--xray-tokens", type=int, default=32, help="positions X-ray dumps (memory: ~T x 1 MB)")
    ap.add_argument("--reference-positions", type=int, default=32,
                    help="also compare ours with the float64 numpy reference on the first N positions of "
                         "each prompt (0: skip, recorded as skipped). Separates a bug (ours far from the "
                         "reference) from a contract difference (ours = reference, llama.cpp elsewhere)")
    a = ap.parse_args(argv)

    profile_path = a.profile or ROOT / "config" / "parity_profiles" / f"{a.model}.json"
    profile, profile_sha = load_input(profile_path, "parity_profile", "parity profile")
    prompts_path = a.prompts or ROOT / profile["prompt_set"]
    prompt_set, prompts_sha = load_input(prompts_path, "prompt_set", "prompt set")
    gguf_sha = sha256_file(a.gguf)
    with LlamaCppOracle(a.gguf, n_ctx=4096, n_threads=a.threads) as oracle:
        prompts, chat_source = tokenize_prompts(prompt_set, oracle)
        need = max(len(p["tokens"]) for p in prompts) + profile["greedy"]["max_tokens"]
        if need > oracle.n_ctx:
            raise BringupError(f"longest prompt + greedy tokens = {need} positions > oracle context {oracle.n_ctx}")
        ours = NativeProgram(a.cli, a.lib, a.weights, oracle.n_vocab, a.threads)
        inputs = {"gguf": {"path": rel(a.gguf), "sha256": gguf_sha},
                  "profile": {"path": rel(profile_path), "sha256": profile_sha},
                  "prompt_set": {"path": rel(prompts_path), "sha256": prompts_sha, "name": prompt_set["name"]},
                  "chat_rendering": chat_source}
        program_info = {"cli_sha256": sha256_file(a.cli), "lib_sha256": sha256_file(a.lib),
                        "weights": bump_identity(a.weights), "threads": a.threads}
        doc, arrays = run_parity(model=a.model, oracle=oracle, ours=ours, prompts=prompts, profile=profile,
                                 oracle_info=oracle.info(), program_info=program_info, inputs=inputs)
    doc["reference_check"] = reference_check(doc, a.gguf, ours, a.reference_positions, profile["top_k"])
    if a.xray == "always" or (a.xray == "on-fail" and doc["verdict"] == "fail"):
        if a.ir is None:
            raise BringupError("X-ray needs --ir (the program's ir_prefill.json) for its activation contract; "
                               "or pass --xray never")
        doc["xray"] = run_xray_for(doc, a.gguf, ours, a.xray_tokens, profile["xray"]["rel_tol"], a.ir)
        print(doc["xray"].get("summary") or f"x-ray unavailable: {doc['xray'].get('error')}")
    plot = a.out.parent / "parity_kl.png"
    doc["plots"] = [plot.name]
    validate(doc, "parity", "parity.json")
    plot_kl(arrays, plot)
    canonjson.write(a.out, doc)
    failed = [g["id"] for g in doc["gates"] if not g["passed"]]
    print(f"parity {a.model}: {doc['verdict']} " + " ".join(
        f"{g['id']}={g['measured']:.4g}{'' if g['passed'] else '(FAIL)'}" for g in doc["gates"]))
    if failed and a.strict:
        raise GateError(f"parity gates failed: {', '.join(failed)}")
    return 0


if __name__ == "__main__":  # pragma: no cover - the same as `bringup parity`
    sys.exit(main(["parity", *sys.argv[1:]]))
