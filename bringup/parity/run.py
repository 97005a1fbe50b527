"""Parity: our native program against the float64 reference and the llama.cpp oracle, on the same
GGUF and the same token ids.

Teacher-forced metrics (:mod:`bringup.parity.metrics`) compare the logits at every position of
every prompt of a prompt set (``config/prompts/*.json``); greedy generation compares
continuations token by token. Gates (:mod:`bringup.parity.gates`) come from a parity profile
(``config/parity_profiles/{model}.json``, else ``default.json``): exact gates against the
reference run with our program's activation numerics, and statistical gates against llama.cpp,
calibrated on the floor measured in the same run (llama.cpp F16 against F32 KV cache; the
reference under llama.cpp's activation quantization against the reference under ours).
Output: ``parity.json`` (schema ``parity``) and its per-position KL plot, one folder written as a set.
docs/parity.md has the whole procedure.
"""
from __future__ import annotations

import io
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from bringup.convert.importer import MOE_HPARAM_KEYS
from bringup.core import atomic, canonjson
from bringup.core.atomic import atomic_dir
from bringup.core.cli import main
from bringup.core.errors import BringupError
from bringup.core.inputs import open_regular
from bringup.core.native import NativeProgram
from bringup.core.progress import Progress
from bringup.formats.chat import render_chat_format, render_template
from bringup.ir.circuits import choose_chat_format, for_architecture
from bringup.parity.gates import FLOOR_PARTS, evaluate_gates
from bringup.parity.metrics import (comparison_overall, greedy_by_teacher_forcing, greedy_compare,
                                    pooled_summary, position_metrics, summarize)
from bringup.parity.oracles import NumpyReference
from bringup.parity.reference_checks import entropies, entropy_summary
from bringup.parity.xray import activation_contract, dump_from_cli, kv_cache_dtype, xray_against_reference


class Program(Protocol):
    """What parity needs from a program under test (ours) or an oracle."""

    def logits_all(self, tokens: Sequence[int]) -> np.ndarray: ...

    def greedy(self, tokens: Sequence[int], n: int) -> list[int]: ...


# --------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------

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
    # the circuit variant as convert chooses it: by the expert keys the GGUF has (config hparams)
    hparams = {k: oracle.meta(f"{architecture}.{key}") for k, key in MOE_HPARAM_KEYS.items()}
    fmt, why = choose_chat_format(for_architecture(architecture, hparams=hparams), None)
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
    with open_regular(weights, "weights") as fh:   # a FIFO would block the read
        head = fh.read(128)
    if len(head) < 128 or head[:4] != b"BUMP":
        raise BringupError(f"{weights}: not a BUMP file")
    return {"payload_sha256": head[64:96].hex(), "header_sha256": head[96:128].hex()}


# --------------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------------

#: The files of one parity run (``--out-dir``): they appear together or not at all.
PARITY, PLOT = "parity.json", "parity_kl.png"
#: What each part of the floor compares (docs/parity.md, "Gates").
FLOOR_PAIRS = {
    "llama_cpp_kv_cache": "llama.cpp's default (F16 KV cache) against llama.cpp with an F32 KV cache",
    "reference_activations": "the float64 reference under llama.cpp's activation quantization (ggml-q8) "
                             "against the reference under our program's activation numerics",
}

#: Passed as ``reference_llama_act`` when our program's activation numerics are llama.cpp's
#: (``NumpyReference.activation_dtypes`` equal for both, op by op): the reference under ggml-q8 is
#: then the very computation of the reference under ours, so its logits are reused, not recomputed.
SAME_AS_REFERENCE = "same-as-reference"
#: Recorded in that case in ``floor.parts.reference_activations.identical``.
IDENTICAL_NUMERICS = ("our program's activation dtype equals llama.cpp's (ggml-q8) for every linear op, so the "
                      "reference under ggml-q8 is the same computation as the reference under ours: its logits "
                      "were reused, not recomputed (this part of the floor is 0 by construction)")

#: How the reference's greedy continuation is found (metrics.greedy_by_teacher_forcing).
REFERENCE_GREEDY_METHOD = ("teacher forcing along our continuation: the reference runs once over prompt + our tokens; "
                           "its greedy continuation equals ours while its argmax after each prefix is our next token, "
                           "and its token where they part is recorded")


def run_parity(*, model: str, oracle, ours: Program, prompts: list[dict], profile: dict,
               oracle_info: dict, program_info: dict, inputs: dict, reference=None,
               reference_llama_act=None, oracle_kv_f32=None, eog: Sequence[int] = ()) -> tuple[dict, dict]:
    """Teacher-forced and greedy parity over tokenized ``prompts`` ([{id, kind, text, tokens}]), and
    the gates of ``profile`` (its ``top_k``, ``greedy``, ``min_prompts``/``min_positions``, gates).

    Programs (:class:`Program`): ``ours``; ``oracle`` (llama.cpp, default settings); ``reference``
    (float64 reference under our activation numerics, logits only: its greedy continuation is found
    by teacher forcing, :func:`bringup.parity.metrics.greedy_by_teacher_forcing`, stopping after a
    token in ``eog``); the floor's second programs ``oracle_kv_f32`` (llama.cpp, F32 KV cache) and
    ``reference_llama_act`` (the reference under llama.cpp's activation quantization), logits only,
    or :data:`SAME_AS_REFERENCE` when that is provably the ``reference`` computation (its logits are reused).
    A program passed as None is recorded as skipped and the gates that need it fail as not measured.
    The ``*_info`` and ``inputs`` dicts go into the document as they are. The profile's gates are
    evaluated (for a quantized-activation program, those of :func:`bringup.parity.gates.select_gates`);
    those against X-ray (``reference_ops``) fail as not measured until :func:`apply_gates` runs
    again with it.

    Returns (parity document (schema ``parity``), :func:`position_metrics` arrays by prompt id for
    plotting, ours against llama.cpp). Raises BringupError if the prompt set is smaller than the
    profile demands, or from the metrics and gates.
    """
    k = profile["top_k"]
    gmax, gmin = profile["greedy"]["max_tokens"], profile["greedy"]["min_prefix"]
    _check_prompt_set(model, prompts, profile)
    n_programs = 2 + (oracle_kv_f32 is not None) + (reference is not None) + (
        reference_llama_act not in (None, SAME_AS_REFERENCE))
    runs = _Runs(ours, oracle, reference, reference_llama_act, oracle_kv_f32, k, gmax, eog,
                 Progress("parity", "prompt x program", len(prompts) * n_programs, unit="run"))
    per_prompt = [_run_prompt(runs, p) for p in prompts]
    runs.prog.close()
    doc = {"schema_version": 1, "model": model, "inputs": inputs, "oracle": oracle_info,
           "program": program_info,
           "settings": {"top_k": k, "greedy_max_tokens": gmax, "greedy_min_prefix": gmin},
           "prompts": per_prompt, "overall": comparison_overall(runs.pms["llama.cpp"], runs.greedy["llama.cpp"], gmin),
           "reference": _reference_doc(runs, gmin), "floor": _floor_doc(runs.pms, reference_llama_act)}
    apply_gates(doc, profile)
    return doc, runs.arrays


def _check_prompt_set(model: str, prompts: list[dict], profile: dict) -> None:
    """Raise BringupError when ``prompts`` has fewer prompts or token positions than the parity
    profile of ``model`` demands (its ``min_prompts``, ``min_positions``)."""
    n_pos = sum(len(p["tokens"]) for p in prompts)
    if len(prompts) < profile["min_prompts"] or n_pos < profile["min_positions"]:
        raise BringupError(f"prompt set too small for profile {model}: {len(prompts)} prompts / {n_pos} "
                           f"positions; the profile needs {profile['min_prompts']} / {profile['min_positions']}")


@dataclass
class _Runs:
    """One parity run: its programs (as :func:`run_parity` takes them), settings (``k`` the top-k,
    ``gmax`` the greedy tokens, ``eog``), progress line, and what the prompts measured so far:
    position metrics (:func:`position_metrics`) per comparison and floor part (``pms``), greedy
    comparisons per program, the reference's next-token entropies and vocabulary size, and per
    prompt id the arrays of ours against llama.cpp (for the plot)."""
    ours: Program
    oracle: Program
    reference: Program | None
    reference_llama_act: Program | str | None
    oracle_kv_f32: Program | None
    k: int
    gmax: int
    eog: Sequence[int]
    prog: Progress
    pms: dict[str, list] = field(default_factory=lambda: {
        "llama.cpp": [], "reference": [], "llama_cpp_kv_cache": [], "reference_activations": []})
    greedy: dict[str, list] = field(default_factory=lambda: {"llama.cpp": [], "reference": []})
    entropy: list[np.ndarray] = field(default_factory=list)   # the reference's, at each prompt position
    vocab: int = 0
    arrays: dict[str, dict] = field(default_factory=dict)


def _run_prompt(runs: _Runs, p: dict) -> dict:
    """Prompt ``p`` ({id, kind, tokens}) on every program, in this order: ours and llama.cpp
    (teacher-forced logits, then the greedy continuation), llama.cpp with an F32 KV cache (a floor
    part), the reference (:func:`_run_reference`). Pools its metrics in ``runs``; returns its entry
    of parity.json's ``prompts``."""
    toks, T = list(p["tokens"]), len(p["tokens"])
    where = f"prompt {p['id']} ({T} tokens)"
    b = runs.ours.logits_all(toks)
    ours_g = runs.ours.greedy(toks, runs.gmax)
    runs.prog.step(f"{where}: ours")
    a = runs.oracle.logits_all(toks)
    oracle_g = runs.oracle.greedy(toks, runs.gmax)
    runs.prog.step(f"{where}: llama.cpp")
    pm = runs.arrays[p["id"]] = position_metrics(a, b, runs.k)
    g = greedy_compare(oracle_g, ours_g, runs.gmax)
    entry = {"id": p["id"], "kind": p["kind"], "n_tokens": T, "tokens": toks, "teacher_forced": summarize(pm),
             "first_generated_top1_match": bool(pm["top1_match"][-1]),
             "kl_per_position": [float(x) for x in pm["kl"]], "greedy": g}
    runs.pms["llama.cpp"].append(pm)
    runs.greedy["llama.cpp"].append(g)
    floor_here: dict[str, dict] = {}
    if runs.oracle_kv_f32 is not None:
        floor_here["llama_cpp_kv_cache"] = position_metrics(a, runs.oracle_kv_f32.logits_all(toks), runs.k)
        runs.prog.step(f"{where}: llama.cpp F32 KV cache")
    if runs.reference is not None:
        entry["reference"] = _run_reference(runs, toks, b, ours_g, floor_here, where)
    for part, fpm in floor_here.items():
        runs.pms[part].append(fpm)
    if floor_here:
        entry["floor"] = {part: summarize(fpm) for part, fpm in floor_here.items()}
    return entry


def _run_reference(runs: _Runs, toks: list[int], b: np.ndarray, ours_g: list[int], floor_here: dict[str, dict],
                   where: str) -> dict:
    """The float64 reference on one prompt (token ids ``toks``; our logits ``b``, [T, vocab]; our
    greedy continuation ``ours_g``): one run over prompt + ``ours_g``, compared teacher-forced with
    ours and greedy by teacher forcing; its entropies go to ``runs``, and the floor's
    ``reference_activations`` part to ``floor_here`` (the reference under ggml-q8 against it, or
    the reference against itself for :data:`SAME_AS_REFERENCE`). Returns the prompt entry's
    ``reference``. The [T + len(ours_g), vocab] logits are freed on return, before the next prompt."""
    T = len(toks)
    r = runs.reference.logits_all(toks + list(ours_g))
    runs.prog.step(f"{where}: float64 reference")
    pm_r = position_metrics(r[:T], b, runs.k)
    runs.entropy.append(entropies(r[:T]))
    runs.vocab = r.shape[1]
    g_r = greedy_compare(greedy_by_teacher_forcing(r, T, ours_g, runs.gmax, runs.eog), ours_g, runs.gmax)
    runs.pms["reference"].append(pm_r)
    runs.greedy["reference"].append(g_r)
    if runs.reference_llama_act == SAME_AS_REFERENCE:
        floor_here["reference_activations"] = position_metrics(r[:T], r[:T], runs.k)
    elif runs.reference_llama_act is not None:
        floor_here["reference_activations"] = position_metrics(runs.reference_llama_act.logits_all(toks), r[:T], runs.k)
        runs.prog.step(f"{where}: float64 reference under ggml-q8")
    return {"teacher_forced": summarize(pm_r), "first_generated_top1_match": bool(pm_r["top1_match"][-1]),
            "greedy": g_r}


def _reference_doc(runs: _Runs, gmin: int) -> dict[str, Any]:
    """parity.json's ``reference``: skipped when no reference ran, else its comparison with ours
    pooled over the prompts (greedy prefixes from ``gmin`` tokens), how its greedy continuation
    was found and the distribution of its next-token entropy."""
    if runs.reference is None:
        return {"status": "skipped", "reason": "no reference in this run"}
    return {"status": "ran", "greedy_method": REFERENCE_GREEDY_METHOD,
            "overall": comparison_overall(runs.pms["reference"], runs.greedy["reference"], gmin),
            "distribution": entropy_summary(runs.entropy, runs.vocab)}


def _floor_doc(pms: dict[str, list], reference_llama_act) -> dict[str, Any]:
    """parity.json's ``floor`` (before the gates add theirs): each floor part measured, pooled over
    the prompts with what it compares; "ran" only when every part of ``FLOOR_PARTS`` was measured.
    A reference-activations part reused from the reference (:data:`SAME_AS_REFERENCE`) says so."""
    floor_doc: dict[str, Any] = {"status": "skipped", "reason": "a floor part was not measured in this run",
                                 "parts": {}}
    parts = {part: pooled_summary(pms[part]) for part in FLOOR_PARTS if pms[part]}
    for part, summ in parts.items():
        floor_doc["parts"][part] = {"pair": FLOOR_PAIRS[part], "overall": summ}
    if parts.get("reference_activations") and reference_llama_act == SAME_AS_REFERENCE:
        floor_doc["parts"]["reference_activations"]["identical"] = IDENTICAL_NUMERICS
    if len(parts) == len(FLOOR_PARTS):
        floor_doc = {"status": "ran", "parts": floor_doc["parts"]}
    return floor_doc


def xray_measured(xray: dict | None) -> dict[str, float] | None:
    """The ``reference_ops`` comparison of an X-ray result (:func:`run_xray_for`) for the gates:
    ``ops_beyond_rel_tol`` = checkpoints whose per-op relative error exceeds its ``rel_tol`` or is
    not finite, plus reference checkpoints the program did not dump (unverified is not passed).
    None when X-ray did not run or compared no op (the gate then fails as not measured)."""
    if not xray or xray.get("status") != "ran" or not xray.get("checkpoints"):
        return None
    tol = xray["rel_tol"]
    beyond = sum(1 for r in xray["checkpoints"] if r["rel_err"] is None or r["rel_err"] > tol)
    return {"ops_beyond_rel_tol": float(beyond + len(xray.get("missing") or []))}


def apply_gates(doc: dict, profile: dict) -> None:
    """(Re)evaluate the profile's gates on what ``doc`` measured: its llama.cpp and
    reference comparisons, its floor parts and its X-ray (``doc["xray"]``, if any); set
    ``doc["gates"]``, the floor of each statistical gate and the verdict."""
    floors = None
    if doc["floor"]["status"] == "ran":
        parts = {part: doc["floor"]["parts"][part]["overall"] for part in FLOOR_PARTS}
        floors = {m: {part: parts[part][m] for part in FLOOR_PARTS} for m in parts[FLOOR_PARTS[0]]
                  if m != "n_positions"}
    measured = {"llama.cpp": doc["overall"], "reference": doc["reference"].get("overall"),
                "reference_distribution": doc["reference"].get("distribution"),
                "reference_ops": xray_measured(doc.get("xray"))}
    doc["gates"] = evaluate_gates(profile, measured, floors)
    if floors is not None:
        # the floor each statistical gate compared to, by metric (gates.floor_of)
        doc["floor"]["floor"] = {g["metric"]: g["floor"] for g in doc["gates"] if g["kind"] == "statistical"}
    doc["verdict"] = "pass" if all(g["passed"] for g in doc["gates"]) else "fail"


def write_outputs(out_dir: Path, doc: dict, arrays: dict[str, dict]) -> None:
    """Write ``parity.json`` and its plot into ``out_dir`` as one set (``atomic_dir``): a failed or
    interrupted write leaves the previous parity.json with its own plot. Raises BringupError (exit 2)
    when ``out_dir`` is not a folder or holds other files."""
    with atomic_dir(out_dir, (PARITY, PLOT), "parity output folder") as tmp:
        plot_kl(arrays, tmp / PLOT)
        canonjson.write(tmp / PARITY, doc)


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


def run_xray_for(doc: dict, gguf: Path, program: NativeProgram, n_tokens: int, rel_tol: float,
                 ir_prefill: Path, reference: NumpyReference | None = None) -> dict:
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
    ir = canonjson.read(ir_prefill, "prefill IR")
    res = xray_against_reference(reference or NumpyReference(gguf), tokens, ours, rel_tol, activation_contract(ir),
                                 kv_cache_dtype(ir))
    return {"status": "ran", "prompt": worst["id"], **res}


def contract_summary(contract: dict[str, str]) -> dict[str, Any]:
    """A program's activation contract (linear op id -> dtype) as counts per dtype."""
    counts: dict[str, int] = {}
    for dt in contract.values():
        counts[dt] = counts.get(dt, 0) + 1
    return {"source": "the program's IR providers' quant.activation", "ops_per_dtype": dict(sorted(counts.items()))}



if __name__ == "__main__":  # pragma: no cover - the same as `bringup parity`
    sys.exit(main(["parity", *sys.argv[1:]]))
